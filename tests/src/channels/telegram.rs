//! Telegram in the compliance suite: `baaaht-telegram` against the fake Bot API, the person
//! Ada (Telegram user 42) in her private chat with the bot.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use baaaht_gateway_compliance::channel::File;
use baaaht_gateway_compliance::{Channel, FakeDaemon};
use serde_json::{json, Value};

use crate::fake_telegram::{FakeTelegram, BOT_ID, TOKEN};

/// Ada's Telegram user id, and her private chat's.
const ADA: i64 = 42;

pub struct Telegram {
    fake: FakeTelegram,
    gateway: crate::Running,
}

impl Channel for Telegram {
    /// The update as Telegram delivered it, with its id.
    type Written = Value;

    /// Telegram's longest message, in characters.
    const LIMIT: usize = 4096;
    const NAME: &'static str = "telegram";

    fn secrets() -> HashMap<String, String> {
        HashMap::from([("bot_token".to_string(), TOKEN.to_string())])
    }

    async fn start(daemon: &FakeDaemon, health: &Path) -> Result<Telegram, String> {
        let fake = FakeTelegram::start().await.map_err(|error| format!("the fake Bot API: {error}"))?;
        let api = fake.api_url();
        let gateway = super::start_gateway(daemon, "baaaht-telegram", health, &["--api-url", &api])?;
        let polling = fake.wait_for(Duration::from_secs(60), |fake| !fake.calls_of("getUpdates").is_empty()).await;
        if !polling {
            return Err(format!("the gateway never polled for updates\n{}", gateway.log_text()));
        }
        Ok(Telegram { fake, gateway })
    }

    fn identity(&self) -> String {
        format!("telegram:{BOT_ID}:{ADA}")
    }

    async fn write(&self, text: &str, files: &[File]) -> Value {
        let mut update = self.fake.message(ADA, "private", ADA, "Ada", text);
        // A Telegram message carries one file, its words as the caption.
        assert!(files.len() <= 1, "a Telegram message carries one file");
        if let Some(file) = files.first() {
            let id = format!("doc-{}", update["message"]["message_id"]);
            self.fake.add_file(&id, &format!("documents/{}", file.name), file.bytes.clone());
            let message = &mut update["message"];
            message["document"] = json!({"file_id": id, "file_unique_id": format!("u{id}"), "file_name": file.name,
                "mime_type": file.mime_type, "file_size": file.bytes.len()});
            message["caption"] = json!(text);
            if let Some(fields) = message.as_object_mut() {
                fields.remove("text");
            }
        }
        let id = self.fake.push(update.clone());
        update["update_id"] = json!(id);
        update
    }

    async fn redeliver(&self, written: &Value) {
        self.fake.redeliver(written.clone());
    }

    fn shown(&self) -> Vec<String> {
        self.fake
            .calls_of("sendMessage")
            .into_iter()
            .filter(|call| !call.limited && call.answer["chat"]["id"] == ADA)
            .filter_map(|call| call.answer["message_id"].as_i64())
            .filter_map(|message| self.fake.text_of(ADA, message))
            .collect()
    }

    fn files(&self) -> Vec<File> {
        self.fake
            .sent_files()
            .into_iter()
            .filter(|sent| sent.chat == ADA)
            .map(|sent| File { name: sent.name, mime_type: sent.content_type, bytes: sent.bytes, voice: false })
            .collect()
    }

    async fn answer_approval(&self, decision: &str) -> Result<(), String> {
        self.fake.press(ADA, ADA, "Ada", decision).await.map(drop)
    }

    fn set_offline(&self, offline: bool) {
        self.fake.set_offline(offline);
    }

    async fn wait_for(&self, wait: Duration, check: impl Fn(&Telegram) -> bool + Send + Sync) -> bool {
        self.fake.wait_for(wait, |_| check(self)).await
    }

    fn log(&self) -> String {
        self.gateway.log_text()
    }
}
