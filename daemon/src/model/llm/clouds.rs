//! The cloud accounts of `providers.yaml` as the gateway takes them: Bedrock's AWS keys (from the
//! secrets store, or a profile of an AWS credentials file), Vertex AI's service account key (a
//! secret, or a JSON key file), Azure's Entra ID app; each with where its models are. Read here,
//! in the daemon, and handed to the gateway with its configuration, as keys are.

use std::path::{Path, PathBuf};

use baaaht_llm::provider::Wire;
use zeroize::Zeroizing;

use crate::base::config::{expand_home, ProviderEntry};

/// A cloud account resolved: where its models are and its secrets (wiped when dropped).
#[derive(Default)]
pub(super) struct Account {
    pub(super) region: String,
    pub(super) project: String,
    pub(super) api_version: String,
    pub(super) aws_access_key_id: String,
    pub(super) aws_secret_access_key: Zeroizing<String>,
    pub(super) aws_session_token: Zeroizing<String>,
    pub(super) service_account_json: Zeroizing<String>,
    pub(super) entra_authority: String,
    pub(super) entra_tenant: String,
    pub(super) entra_client_id: String,
    pub(super) entra_client_secret: Zeroizing<String>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account").field("region", &self.region).field("project", &self.project).finish_non_exhaustive()
    }
}

/// A value of `providers.yaml` with its `${NAME}`s resolved, or why it cannot be.
pub(super) type Resolve<'a> = dyn Fn(&str) -> Result<String, String> + 'a;

/// What a cloud account needs besides an address: `(account, api_base, token_url)`, the
/// address filled in where it follows from the region, and the URL its tokens come from (a host
/// the gateway must reach too) — or why the provider cannot be used, as a sentence.
pub(super) fn account(
    name: &str,
    wire: Wire,
    entry: &ProviderEntry,
    resolve: &Resolve<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Account, Option<String>, Option<String>), String> {
    fn given(value: &Option<String>) -> Option<&str> {
        value.as_deref().map(str::trim).filter(|value| !value.is_empty())
    }
    let home = env("HOME");
    if let Some((_, missing)) = entry.missing(name, wire) {
        return Err(missing);
    }
    let needed = |value: &Option<String>| given(value).unwrap_or_default().to_string();
    let mut account = Account::default();
    match wire {
        Wire::Bedrock => {
            account.region = needed(&entry.region);
            let keys = match (&entry.access_key_id, &entry.secret_access_key) {
                (Some(id), Some(secret)) => AwsKeys {
                    access_key_id: resolve(id)?,
                    secret_access_key: Zeroizing::new(resolve(secret)?),
                    session_token: entry.session_token.as_deref().map(resolve).transpose()?.map(Zeroizing::new),
                },
                (Some(_), None) | (None, Some(_)) => {
                    return Err(format!(
                        "providers.{name} needs both access_key_id and secret_access_key (or neither, to read \
                         a profile of the AWS credentials file)"
                    ))
                }
                (None, None) => profile_keys(entry, env)?,
            };
            account.aws_access_key_id = keys.access_key_id;
            account.aws_secret_access_key = keys.secret_access_key;
            account.aws_session_token = keys.session_token.unwrap_or_default();
            let base = given(&entry.api_base)
                .map_or_else(|| baaaht_llm::bedrock::default_base(&account.region), str::to_string);
            Ok((account, Some(base), None))
        }
        Wire::Vertex => {
            account.project = needed(&entry.project);
            account.region = needed(&entry.region);
            let key = match (&entry.service_account, given(&entry.credentials_file)) {
                (Some(secret), None) => Zeroizing::new(resolve(secret)?),
                (None, Some(file)) => {
                    let path = expand_home(file, home.as_deref());
                    read_key_file(&path).map_err(|error| {
                        format!("providers.{name}.credentials_file {} cannot be read: {error}", path.display())
                    })?
                }
                (Some(_), Some(_)) => {
                    return Err(format!("providers.{name}: give service_account or credentials_file, not both"))
                }
                // Told by `missing` above.
                (None, None) => return Err(format!("providers.{name} has no credentials")),
            };
            // Checked here, so that a wrong file is told at start, not at the first question.
            let source = baaaht_llm::provider::tokens::TokenSource::service_account(&key)
                .map_err(|error| format!("providers.{name}: {error}"))?;
            let token_url = source.token_url().to_string();
            account.service_account_json = key;
            let base = given(&entry.api_base)
                .map_or_else(|| baaaht_llm::provider::prepare::vertex_base(&account.region), str::to_string);
            Ok((account, Some(base), Some(token_url)))
        }
        Wire::Azure => {
            account.api_version = given(&entry.api_version).unwrap_or_default().to_string();
            let mut token_url = None;
            match (&entry.entra, &entry.api_key) {
                (Some(_), Some(_)) => return Err(format!("providers.{name}: give api_key or entra, not both")),
                (Some(app), None) => {
                    account.entra_tenant = app.tenant_id.clone();
                    account.entra_client_id = app.client_id.clone();
                    account.entra_client_secret = Zeroizing::new(resolve(&app.client_secret)?);
                    account.entra_authority = app
                        .authority
                        .clone()
                        .unwrap_or_else(|| baaaht_llm::provider::tokens::ENTRA_AUTHORITY.to_string());
                    let url = format!(
                        "{}/{}/oauth2/v2.0/token",
                        account.entra_authority.trim_end_matches('/'),
                        app.tenant_id
                    );
                    baaaht_llm::provider::tokens::token_endpoint(&url)
                        .map_err(|why| format!("providers.{name}.entra.authority: its {why}"))?;
                    token_url = Some(url);
                }
                (None, Some(_)) => {}
                // Told by `missing` above.
                (None, None) => return Err(format!("providers.{name} has no credentials")),
            }
            Ok((account, None, token_url))
        }
        _ => Ok((account, None, None)),
    }
}

/// The most a key or credentials file may hold: a service account's key is 2–3 KiB.
const MAX_KEY_FILE: u64 = 1 << 20;

/// The text of a key or credentials file: a regular file (not a device or a pipe, which could
/// be read forever) of [`MAX_KEY_FILE`] at most.
fn read_key_file(path: &Path) -> std::io::Result<Zeroizing<String>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file"));
    }
    if metadata.len() > MAX_KEY_FILE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("it holds {} bytes, more than a key file's {MAX_KEY_FILE}", metadata.len()),
        ));
    }
    let mut text = Zeroizing::new(String::new());
    file.take(MAX_KEY_FILE).read_to_string(&mut text)?;
    Ok(text)
}

/// An AWS key pair.
struct AwsKeys {
    access_key_id: String,
    secret_access_key: Zeroizing<String>,
    session_token: Option<Zeroizing<String>>,
}

/// The keys of `profile` in an AWS credentials file: `credentials_file`, else
/// `$AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`.
fn profile_keys(entry: &ProviderEntry, env: &dyn Fn(&str) -> Option<String>) -> Result<AwsKeys, String> {
    let profile = entry.profile.as_deref().unwrap_or("default");
    let path = match entry.credentials_file.as_deref() {
        Some(file) => expand_home(file, env("HOME").as_deref()),
        None => match env("AWS_SHARED_CREDENTIALS_FILE") {
            Some(file) => PathBuf::from(file),
            None => expand_home("~/.aws/credentials", env("HOME").as_deref()),
        },
    };
    let text = read_key_file(&path).map_err(|error| {
        format!(
            "providers.bedrock has no access_key_id and the AWS credentials file {} cannot be read ({error}): \
             set access_key_id and secret_access_key (e.g. `${{AWS_ACCESS_KEY_ID}}`), or credentials_file",
            path.display()
        )
    })?;
    let section = ini_section(&text, profile).ok_or_else(|| {
        format!(
            "the AWS credentials file {} has no profile [{profile}]: name one it has in providers.bedrock.profile",
            path.display()
        )
    })?;
    let find = |key: &str| section.iter().find(|(name, _)| *name == key).map(|(_, value)| value.to_string());
    let missing = |key: &str| format!("profile [{profile}] of {} has no {key}", path.display());
    Ok(AwsKeys {
        access_key_id: find("aws_access_key_id").ok_or_else(|| missing("aws_access_key_id"))?,
        secret_access_key: Zeroizing::new(
            find("aws_secret_access_key").ok_or_else(|| missing("aws_secret_access_key"))?,
        ),
        session_token: find("aws_session_token").map(Zeroizing::new),
    })
}

/// The `key = value` lines of section `[name]` of an INI text (the AWS credentials file's
/// format: three keys read, so a parser of its own rather than the AWS SDK's config loader).
fn ini_section<'a>(text: &'a str, name: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let mut found = None;
    let mut current: Option<&str> = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            current = Some(header.trim());
            if current == Some(name) {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if current == Some(name) {
            if let Some((key, value)) = line.split_once('=') {
                found.get_or_insert_with(Vec::new).push((key.trim(), value.trim()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_secrets(text: &str) -> Result<String, String> {
        Ok(text.to_string())
    }

    #[test]
    fn a_profile_of_the_aws_credentials_file_gives_bedrocks_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s1\n\n\
             [work]\n# a comment\naws_access_key_id=AKIAWORK\naws_secret_access_key=s2\naws_session_token = t2\n",
        )
        .expect("write");
        let entry = ProviderEntry {
            region: Some("eu-west-1".into()),
            profile: Some("work".into()),
            credentials_file: Some(file.display().to_string()),
            ..ProviderEntry::default()
        };
        let (keys, base, token_url) =
            account("bedrock", Wire::Bedrock, &entry, &no_secrets, &|_| None).expect("usable");
        assert_eq!(
            (keys.aws_access_key_id.as_str(), keys.aws_secret_access_key.as_str(), keys.aws_session_token.as_str()),
            ("AKIAWORK", "s2", "t2")
        );
        assert_eq!(base.as_deref(), Some("https://bedrock-runtime.eu-west-1.amazonaws.com"));
        assert_eq!(token_url, None);
        let other = ProviderEntry { profile: Some("home".into()), ..entry.clone() };
        let error = account("bedrock", Wire::Bedrock, &other, &no_secrets, &|_| None).expect_err("no such profile");
        assert!(error.contains("has no profile [home]"), "{error}");
        let no_region = ProviderEntry { region: None, ..entry };
        let error = account("bedrock", Wire::Bedrock, &no_region, &no_secrets, &|_| None).expect_err("no region");
        assert!(error.starts_with("providers.bedrock.region is not set: write the AWS region"), "{error}");
    }

    #[test]
    fn vertex_and_azure_say_what_they_miss() {
        let entry =
            ProviderEntry { project: Some("p".into()), region: Some("us-central1".into()), ..ProviderEntry::default() };
        let error = account("vertex", Wire::Vertex, &entry, &no_secrets, &|_| None).expect_err("no key");
        assert!(error.contains("set `credentials_file:` to a service account's JSON key file"), "{error}");
        let missing_file = ProviderEntry { credentials_file: Some("/nonexistent/sa.json".into()), ..entry };
        let error = account("vertex", Wire::Vertex, &missing_file, &no_secrets, &|_| None).expect_err("no file");
        assert!(error.starts_with("providers.vertex.credentials_file /nonexistent/sa.json cannot be read"), "{error}");
        // A device or a pipe is not read forever.
        let device = ProviderEntry { credentials_file: Some("/dev/zero".into()), ..missing_file };
        let error = account("vertex", Wire::Vertex, &device, &no_secrets, &|_| None).expect_err("a device");
        assert!(error.ends_with("/dev/zero cannot be read: it is not a regular file"), "{error}");
        let azure = ProviderEntry { api_key: Some("k".into()), ..ProviderEntry::default() };
        let error = account("azure", Wire::Azure, &azure, &no_secrets, &|_| None).expect_err("no endpoint");
        assert!(error.contains("write the resource's endpoint"), "{error}");
        // An app's secret is never sent in the clear.
        let entra = ProviderEntry {
            api_base: Some("https://res.openai.azure.com".into()),
            entra: Some(crate::base::config::EntraApp {
                tenant_id: "t".into(),
                client_id: "c".into(),
                client_secret: "s".into(),
                authority: Some("http://login.example".into()),
            }),
            ..ProviderEntry::default()
        };
        let error = account("azure", Wire::Azure, &entra, &no_secrets, &|_| None).expect_err("in the clear");
        assert!(error.starts_with("providers.azure.entra.authority: its token endpoint"), "{error}");
        assert!(error.contains("not an https:// address"), "{error}");
    }
}
