//! `baaaht memory`: what a context remembers, whose words each entry is, and the entries that
//! wait in quarantine for review (DESIGN.md §10.3).

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use baaaht_proto::v1;

use crate::args::{MemoryCommand, MemoryScope};
use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn memory(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: MemoryCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let whose = |scope: MemoryScope| {
        let env = |key: &str| std::env::var(key).ok();
        Some(crate::chat::context(scope.user, scope.group, env))
    };
    match command {
        MemoryCommand::List { query, tag, scope } => {
            let query = v1::MemoryQuery {
                context: whose(scope),
                query: query.unwrap_or_default(),
                tag: tag.unwrap_or_default(),
                limit: 200,
                ..v1::MemoryQuery::default()
            };
            let found = client.memory.search_memory(query).await.map_err(status)?.into_inner();
            if found.entries.is_empty() {
                println!("Nothing is remembered yet.");
            }
            for entry in &found.entries {
                print!("{}", entry_text(entry));
            }
            Ok(())
        }
        MemoryCommand::Search { query, tag, since, until, limit, scope } => {
            let query = v1::MemoryQuery {
                context: whose(scope),
                query,
                tag: tag.unwrap_or_default(),
                limit,
                since: since.unwrap_or_default(),
                until: until.unwrap_or_default(),
                ..v1::MemoryQuery::default()
            };
            let found = client.memory.search_memory(query).await.map_err(status)?.into_inner();
            if found.entries.is_empty() {
                println!("Nothing remembered matches.");
            }
            for entry in &found.entries {
                print!("{}", entry_text(entry));
            }
            Ok(())
        }
        MemoryCommand::Show { key, scope } => {
            let query =
                v1::MemoryQuery { context: whose(scope), key: key.clone(), limit: 1, ..v1::MemoryQuery::default() };
            let found = client.memory.search_memory(query).await.map_err(status)?.into_inner();
            let Some(entry) = found.entries.first() else {
                return Err(CliError::Usage(format!(
                    "nothing is remembered under `{}`: `baaaht memory list` shows the keys",
                    clean(&key)
                )));
            };
            print!("{}", entry_text(entry));
            if !entry.tags.is_empty() {
                println!("  tags: {}", clean(&entry.tags.join(", ")));
            }
            if entry.importance > 0.0 {
                println!("  importance: {}", entry.importance);
            }
            println!("  first kept: {}", clean(&entry.created_at));
            let told = entry.sources.len();
            println!("  told {} time{}:", told, if told == 1 { "" } else { "s" });
            for source in &entry.sources {
                println!("    {}", clean(source));
            }
            Ok(())
        }
        MemoryCommand::Forget { key, scope } => {
            let request = v1::MemoryKey { context: whose(scope), key, quarantined: false };
            let ack = client.memory.delete_memory(request).await.map_err(status)?.into_inner();
            println!("{}", clean(&ack.message));
            Ok(())
        }
        MemoryCommand::Review { confirm, drop, scope } => {
            let context = whose(scope);
            if let Some(key) = confirm {
                let request = v1::MemoryKey { context, key, quarantined: true };
                let ack = client.memory.confirm_memory(request).await.map_err(status)?.into_inner();
                println!("{}", clean(&ack.message));
                return Ok(());
            }
            if let Some(key) = drop {
                let request = v1::MemoryKey { context, key, quarantined: true };
                let ack = client.memory.delete_memory(request).await.map_err(status)?.into_inner();
                println!("{}", clean(&ack.message));
                return Ok(());
            }
            let query = v1::MemoryQuery {
                context: context.clone(),
                limit: 200,
                quarantined: true,
                ..v1::MemoryQuery::default()
            };
            let waiting = client.memory.search_memory(query).await.map_err(status)?.into_inner().entries;
            if waiting.is_empty() {
                println!("Nothing waits for review.");
                return Ok(());
            }
            println!(
                "{} entr{} written while reading content from outside; none is used until you confirm it.\n",
                waiting.len(),
                if waiting.len() == 1 { "y was" } else { "ies were" }
            );
            let asking = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
            for entry in &waiting {
                print!("{}", entry_text(entry));
                if !asking {
                    continue;
                }
                let key = entry.key.clone();
                match ask("  [c]onfirm, [d]rop or [s]kip? ") {
                    Some('c') => {
                        let request = v1::MemoryKey { context: context.clone(), key, quarantined: true };
                        let ack = client.memory.confirm_memory(request).await.map_err(status)?.into_inner();
                        println!("  {}\n", clean(&ack.message));
                    }
                    Some('d') => {
                        let request = v1::MemoryKey { context: context.clone(), key, quarantined: true };
                        let ack = client.memory.delete_memory(request).await.map_err(status)?.into_inner();
                        println!("  {}\n", clean(&ack.message));
                    }
                    _ => println!("  left for later\n"),
                }
            }
            if !asking {
                println!("Confirm one: baaaht memory review --confirm KEY; drop one: baaaht memory review --drop KEY");
            }
            Ok(())
        }
    }
}

/// The first letter answered on the terminal.
fn ask(question: &str) -> Option<char> {
    print!("{question}");
    // silent-ok: a prompt that cannot be flushed is still answered.
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).ok()?;
    line.trim().chars().next().map(|letter| letter.to_ascii_lowercase())
}

/// One entry: its key, whose words it is, and its text.
pub(crate) fn entry_text(entry: &v1::MemoryRecord) -> String {
    let origin = match (entry.origin.as_str(), entry.came_from.as_str()) {
        ("untrusted", "") => "from content read from outside".to_string(),
        ("untrusted", from) => format!("from content read from outside: {}", clean(from)),
        ("inferred", _) => "inferred by an agent from your messages".to_string(),
        ("user", _) => "your own words".to_string(),
        _ => "written before origins were kept".to_string(),
    };
    let confirmed = if entry.confirmed_by.is_empty() {
        String::new()
    } else {
        format!("; confirmed by {}", clean(&entry.confirmed_by))
    };
    let text: String = entry.content.lines().map(|line| format!("    {}\n", clean(line))).collect();
    format!("{} ({origin}{confirmed}, {})\n{text}", clean(&entry.key), clean(&entry.updated_at))
}
