//! How baaaht runs `git` on a repository nobody vetted (a skill's): the one set of rules for
//! the daemon's host clone of a folder and the skill fetch's clone in its container. No hooks,
//! no configuration but ours (as `GIT_CONFIG_*`, never on a command line other users of a host
//! could read), symlinks checked out as plain files, no credential helper, no prompt, one
//! protocol allowed, and none of the caller's environment but where trusted certificates are.

/// Variables of the caller's environment `git` keeps: where the trusted certificates are.
pub const KEEPS: &[&str] = &["SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH"];

/// Settings every run has, before the caller's own.
pub const FIXED: &[(&str, &str)] = &[
    ("core.symlinks", "false"),
    ("core.hooksPath", "/dev/null"),
    ("credential.helper", ""),
    ("http.followRedirects", "initial"),
];

/// `git args` in `dir` under the rules above, with `settings` too and only `protocol` allowed;
/// `home` is its HOME (a folder of its own). stdin is closed and the child is killed when the
/// command is dropped.
pub fn command(
    args: &[&str],
    dir: &std::path::Path,
    home: &std::path::Path,
    protocol: &str,
    settings: &[(&str, &str)],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("git");
    command.env_clear();
    for name in KEEPS {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let all: Vec<&(&str, &str)> = FIXED.iter().chain(settings).collect();
    for (index, (key, value)) in all.iter().enumerate() {
        command.env(format!("GIT_CONFIG_KEY_{index}"), key).env(format!("GIT_CONFIG_VALUE_{index}"), value);
    }
    command
        .env("GIT_CONFIG_COUNT", all.len().to_string())
        .env("GIT_ALLOW_PROTOCOL", protocol)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("HOME", home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}
