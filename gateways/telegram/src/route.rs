//! Which conversation a Telegram update belongs to: a private chat is the sender's own; in a
//! group, a message that mentions the bot (`@name`) or replies to one of its messages is the
//! group's (its mention taken out of the text). Everything else — other bots, edits, joins,
//! messages not for the bot — is ignored. A press of an inline button is an [`Update::Press`].

use serde_json::Value;

/// Who the bot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bot {
    pub id: i64,
    pub username: String,
}

/// A file in a message: Telegram's id for it, and what the message says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    pub file_id: String,
    pub name: String,
    pub mime_type: String,
    pub size: u64,
    /// The sender's own voice note.
    pub voice: bool,
}

/// A message for the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub chat: i64,
    pub message: i64,
    /// The sender's Telegram user id, and their name.
    pub user: i64,
    pub name: String,
    /// A group's (the group's context), or a private chat's (the sender's own).
    pub group: bool,
    pub text: String,
    pub files: Vec<Shared>,
}

/// A press of an inline button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    pub id: String,
    pub user: i64,
    pub name: String,
    pub data: String,
    pub chat: i64,
    pub message: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    Message(Route),
    Press(Press),
    /// Someone left a group chat (or was removed from it): `user` of `chat`.
    Left {
        chat: i64,
        user: i64,
    },
}

fn name_of(from: &Value) -> String {
    let first = from["first_name"].as_str().unwrap_or_default();
    let last = from["last_name"].as_str().unwrap_or_default();
    let name = format!("{first} {last}").trim().to_string();
    if name.is_empty() {
        from["username"].as_str().unwrap_or("someone").to_string()
    } else {
        name
    }
}

/// What `update` is for the bot, if anything.
pub fn route(update: &Value, bot: &Bot) -> Option<Update> {
    if let Some(query) = update.get("callback_query") {
        let from = &query["from"];
        return Some(Update::Press(Press {
            id: query["id"].as_str()?.to_string(),
            user: from["id"].as_i64()?,
            name: name_of(from),
            data: query["data"].as_str().unwrap_or_default().to_string(),
            chat: query["message"]["chat"]["id"].as_i64().unwrap_or_default(),
            message: query["message"]["message_id"].as_i64().unwrap_or_default(),
        }));
    }
    // New messages only: an edit is not asked again.
    let message = update.get("message")?;
    // A group's membership follows who is in its chat.
    if let Some(left) = message.get("left_chat_member") {
        return Some(Update::Left { chat: message["chat"]["id"].as_i64()?, user: left["id"].as_i64()? });
    }
    let from = &message["from"];
    if from["is_bot"] == true {
        return None;
    }
    let chat = &message["chat"];
    let group = match chat["type"].as_str()? {
        "private" => false,
        "group" | "supergroup" => true,
        _ => return None,
    };
    // A photo's or a document's words are its caption.
    let words = |key: &str| message[key].as_str().filter(|text| !text.trim().is_empty());
    let mut text = words("text").or(words("caption")).unwrap_or_default().to_string();
    let mut files = vec![];
    if let Some(sizes) = message["photo"].as_array() {
        // The largest size of the photo.
        if let Some(photo) =
            sizes.iter().max_by_key(|size| size["width"].as_u64().unwrap_or(0) * size["height"].as_u64().unwrap_or(0))
        {
            files.push(Shared {
                file_id: photo["file_id"].as_str()?.to_string(),
                name: format!("photo-{}.jpg", message["message_id"].as_i64().unwrap_or_default()),
                mime_type: "image/jpeg".into(),
                size: photo["file_size"].as_u64().unwrap_or(0),
                voice: false,
            });
        }
    }
    if let Some(document) = message.get("document") {
        files.push(Shared {
            file_id: document["file_id"].as_str()?.to_string(),
            name: document["file_name"].as_str().unwrap_or("file").to_string(),
            mime_type: document["mime_type"].as_str().unwrap_or("application/octet-stream").to_string(),
            size: document["file_size"].as_u64().unwrap_or(0),
            voice: false,
        });
    }
    // A voice note recorded in the chat is the sender's words; one forwarded is someone else's,
    // shared as a file.
    if let Some(voice) = message.get("voice") {
        let forwarded = message.get("forward_origin").is_some() || message.get("forward_from").is_some();
        files.push(Shared {
            file_id: voice["file_id"].as_str()?.to_string(),
            name: format!("voice-{}.ogg", message["message_id"].as_i64().unwrap_or_default()),
            mime_type: voice["mime_type"].as_str().unwrap_or("audio/ogg").to_string(),
            size: voice["file_size"].as_u64().unwrap_or(0),
            voice: !forwarded,
        });
    }
    if group {
        let mention = format!("@{}", bot.username);
        let mentioned = !bot.username.is_empty() && text.to_lowercase().contains(&mention.to_lowercase());
        let replied = message["reply_to_message"]["from"]["id"].as_i64() == Some(bot.id);
        if !mentioned && !replied {
            return None;
        }
        if mentioned {
            let at = text.to_lowercase().find(&mention.to_lowercase()).unwrap_or_default();
            text.replace_range(at..at + mention.len(), "");
            text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        }
    }
    if text.trim().is_empty() && files.is_empty() {
        return None;
    }
    Some(Update::Message(Route {
        chat: chat["id"].as_i64()?,
        message: message["message_id"].as_i64()?,
        user: from["id"].as_i64()?,
        name: name_of(from),
        group,
        text,
        files,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bot() -> Bot {
        Bot { id: 99, username: "baaaht_bot".into() }
    }

    fn message(chat: Value, text: &str) -> Value {
        json!({"update_id": 1, "message": {"message_id": 5, "from": {"id": 7, "is_bot": false, "first_name": "Ada", "last_name": "L"},
            "chat": chat, "date": 0, "text": text}})
    }

    #[test]
    fn a_private_chat_is_the_senders_own_and_a_group_needs_a_mention_or_a_reply() {
        let private = json!({"id": 7, "type": "private"});
        let Some(Update::Message(dm)) = route(&message(private, "hello"), &bot()) else { panic!("a DM") };
        assert_eq!((dm.chat, dm.user, dm.group, dm.text.as_str(), dm.name.as_str()), (7, 7, false, "hello", "Ada L"));
        let group = json!({"id": -100, "type": "supergroup", "title": "Family"});
        assert_eq!(route(&message(group.clone(), "just chatting"), &bot()), None);
        let Some(Update::Message(asked)) = route(&message(group.clone(), "@Baaaht_Bot what is on today?"), &bot())
        else {
            panic!("a mention")
        };
        assert_eq!((asked.group, asked.text.as_str()), (true, "what is on today?"));
        let mut reply = message(group, "and tomorrow?");
        reply["message"]["reply_to_message"] = json!({"message_id": 4, "from": {"id": 99, "is_bot": true}});
        assert!(matches!(route(&reply, &bot()), Some(Update::Message(Route { group: true, .. }))));
    }

    #[test]
    fn bots_edits_and_empty_messages_are_ignored_and_files_are_taken() {
        let private = json!({"id": 7, "type": "private"});
        let mut from_bot = message(private.clone(), "hi");
        from_bot["message"]["from"]["is_bot"] = json!(true);
        assert_eq!(route(&from_bot, &bot()), None);
        let edited = json!({"update_id": 2, "edited_message": {"message_id": 5, "chat": private, "text": "x"}});
        assert_eq!(route(&edited, &bot()), None);
        let mut photo = message(json!({"id": 7, "type": "private"}), "");
        photo["message"]["photo"] = json!([{"file_id": "small", "width": 90, "height": 90, "file_size": 10},
            {"file_id": "big", "width": 800, "height": 600, "file_size": 5000}]);
        photo["message"]["caption"] = json!("what is this?");
        let Some(Update::Message(shared)) = route(&photo, &bot()) else { panic!("a photo") };
        assert_eq!((shared.files[0].file_id.as_str(), shared.text.as_str()), ("big", "what is this?"));
        let left = json!({"update_id": 4, "message": {"message_id": 6, "from": {"id": 1, "is_bot": false, "first_name": "Admin"},
            "chat": {"id": -100, "type": "supergroup"}, "date": 0, "left_chat_member": {"id": 7, "is_bot": false, "first_name": "Ada"}}});
        assert_eq!(route(&left, &bot()), Some(Update::Left { chat: -100, user: 7 }));
        let press = json!({"update_id": 3, "callback_query": {"id": "q1", "from": {"id": 7, "first_name": "Ada"},
            "data": "a:once:a-1", "message": {"message_id": 9, "chat": {"id": 7}}}});
        assert!(matches!(route(&press, &bot()), Some(Update::Press(Press { user: 7, message: 9, .. }))));
    }
}
