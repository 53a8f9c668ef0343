//! What the first screen and the model picker ask: suggestions drawn from the user's skills
//! and scheduled tasks (`GET /api/home`), and the models a conversation may switch to, each
//! with whether it can be used now (`GET /api/models`). Every call is made as the signed-in
//! user: the daemon decides what they may see.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baaaht_proto::v1;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::{answer, api_error, App, Place, User};

/// Suggestions shown at most.
const SUGGESTIONS: usize = 4;

/// Suggestions for anyone, after the user's own.
const GENERAL: &[(&str, &str)] = &[
    ("Plan my week", "Help me plan my week: ask me what is coming up, then make a short plan."),
    ("Summarise a web page", "Summarise this page for me: "),
    ("Write a small script", "Write a small script that "),
    ("Remind me every morning", "Every weekday at 8:00, remind me to "),
];

/// `GET /api/home?room=`: up to four suggestions (a title and the words put in the composer),
/// the user's skills and scheduled tasks first.
pub async fn home(State(app): State<Arc<App>>, user: User, Query(place): Query<Place>) -> Response {
    let context = match app.context(&user.session, &place).await {
        Ok(context) => context,
        Err(status) => return api_error(&status),
    };
    let mut daemon = app.daemon.clone();
    let mut suggestions: Vec<Value> = vec![];
    let request = v1::SkillManifestRequest { context: Some(context.clone()) };
    // A manifest or task list that cannot be read leaves its suggestions out, not the screen.
    if let Ok(manifest) = daemon.skills.get_skill_manifest(app.as_user(&user.session, request)).await {
        for skill in manifest.into_inner().skills.into_iter().filter(|skill| skill.scope != "system") {
            suggestions.push(json!({
                "title": format!("Use {}", skill.name),
                "detail": first_sentence(&skill.description),
                "prompt": format!("Use the {} skill to ", skill.name),
            }));
        }
    }
    let filter = if context.r#type == v1::ContextType::Group as i32 {
        v1::TaskFilter { group_id: context.id.clone(), ..Default::default() }
    } else {
        v1::TaskFilter { user_id: context.id.clone(), ..Default::default() }
    };
    if let Ok(tasks) = daemon.tasks.list_tasks(app.as_user(&user.session, filter)).await {
        for task in
            tasks.into_inner().tasks.into_iter().filter(|task| task.status == "active" && task.r#type == "scheduled")
        {
            let name =
                if task.description.is_empty() { first_sentence(&task.prompt) } else { task.description.clone() };
            suggestions.push(json!({
                "title": format!("About “{name}”"),
                "detail": "A scheduled task of yours",
                "prompt": format!("What did the scheduled task “{name}” find the last time it ran?"),
            }));
        }
    }
    suggestions.truncate(SUGGESTIONS);
    for (title, prompt) in GENERAL.iter().take(SUGGESTIONS - suggestions.len()) {
        suggestions.push(json!({"title": title, "detail": "", "prompt": prompt}));
    }
    Json(json!({"suggestions": suggestions})).into_response()
}

/// The first sentence of `text`, at most 100 characters.
fn first_sentence(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    let end = line.find(". ").map_or(line.len(), |at| at + 1);
    let sentence = &line[..end];
    if sentence.chars().count() <= 100 {
        return sentence.to_string();
    }
    let cut: String = sentence.chars().take(99).collect();
    format!("{}…", cut.trim_end())
}

#[derive(Debug, Deserialize)]
pub struct ModelsQuery {
    #[serde(default)]
    session: String,
    #[serde(default)]
    room: String,
}

/// `GET /api/models?session=&room=`: the models the conversation (or, without one, the next
/// conversation of the place) may use, the current one named.
pub async fn models(State(app): State<Arc<App>>, user: User, Query(query): Query<ModelsQuery>) -> Response {
    let context = if query.session.is_empty() {
        match app.context(&user.session, &Place { room: query.room }).await {
            Ok(context) => Some(context),
            Err(status) => return api_error(&status),
        }
    } else {
        None
    };
    let request = v1::ModelChoicesRequest { session_id: query.session, context };
    let mut daemon = app.daemon.clone();
    answer(daemon.sessions.list_model_choices(app.as_user(&user.session, request)).await, |choices| {
        let models: Vec<Value> = choices
            .models
            .iter()
            .map(|model| {
                json!({
                    "name": model.name,
                    "provider": model.provider,
                    "available": model.available,
                    "why": model.why,
                    "priced": model.priced,
                    "input_price": model.input_price,
                    "output_price": model.output_price,
                    "configured": model.configured,
                })
            })
            .collect();
        json!({"models": models, "current": choices.current})
    })
}

#[cfg(test)]
mod tests {
    use super::first_sentence;

    #[test]
    fn a_suggestion_takes_the_first_sentence_of_a_description() {
        assert_eq!(first_sentence("Checks the weather. Uses wttr.in.\nMore"), "Checks the weather.");
        assert_eq!(first_sentence(""), "");
        let long = "word ".repeat(40);
        assert!(first_sentence(&long).ends_with('…') && first_sentence(&long).chars().count() <= 100);
    }
}
