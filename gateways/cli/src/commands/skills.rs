//! `baaaht skills`.

use baaaht_proto::v1;

use crate::args::{SkillAnswer, SkillsCommand};
use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn skills(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: SkillsCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let env = |key: &str| std::env::var(key).ok();
    match command {
        SkillsCommand::List { user, group } => {
            let context = crate::chat::context(user, group, env);
            let manifest = client
                .skills
                .get_skill_manifest(v1::SkillManifestRequest { context: Some(context) })
                .await
                .map_err(status)?
                .into_inner();
            for skill in &manifest.skills {
                let always = if skill.always_loaded { ", always loaded" } else { "" };
                println!("{}", clean(&format!("{} ({}{always}): {}", skill.name, skill.scope, skill.description)));
            }
        }
        SkillsCommand::Show { name, file, user, group } => {
            let context = crate::chat::context(user, group, env);
            let request =
                v1::SkillContentRequest { context: Some(context), skill: name, path: file.unwrap_or_default() };
            print!("{}", clean(&client.skills.get_skill_content(request).await.map_err(status)?.into_inner().content));
        }
        SkillsCommand::Install { source, local, path, git_ref, replace, user, group } => {
            let context = crate::chat::context(user, group, env);
            // The daemon reads the folder: a relative one means the caller's working folder.
            let local_folder = match local {
                Some(folder) => std::path::absolute(&folder)
                    .map_err(|error| CliError::Usage(format!("--local {}: {error}", folder.display())))?
                    .to_string_lossy()
                    .into_owned(),
                None => String::new(),
            };
            let source = source.unwrap_or_default();
            let request =
                v1::InstallSkillRequest { context: Some(context), source, path, git_ref, replace, local_folder };
            let installed = client.skills.install_skill(request).await.map_err(status)?.into_inner();
            let commit: String = installed.commit.chars().take(12).collect();
            let line = format!(
                "installed {} into {} (commit {commit}): {}",
                installed.name, installed.installed_to, installed.description
            );
            println!("{}", clean(&line));
            if !installed.findings.is_empty() {
                println!("its scan found what malicious skills do; read it before you use the skill:");
                for finding in &installed.findings {
                    println!("  {}", clean(finding));
                }
            }
        }
        SkillsCommand::Answer { id, decision } => {
            let answer = v1::ApprovalAnswer { id: id.clone(), decision: decision.decision().into() };
            client.sessions.answer_approval(answer).await.map_err(status)?;
            match decision {
                SkillAnswer::Install => println!("{}: install approved", clean(&id)),
                SkillAnswer::Decline => println!("{}: declined, nothing of the skill is installed", clean(&id)),
            }
        }
    }
    Ok(())
}
