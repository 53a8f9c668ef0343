//! Installing skills from git repositories on the real daemon with a real engine: a good skill
//! installs into the user's skills and is visible to them only; a bad SKILL.md, a script that
//! does not parse (checked in a tool container) and a symlink are refused with the reason.

use std::path::Path;
use std::process::Command;

use baaaht_tests::{bin, DaemonOptions, TestDaemon};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.org", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A git repository holding `files`.
fn repository(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("folders");
        std::fs::write(path, text).expect("write");
    }
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "skill"]);
    dir
}

fn baaaht(daemon: &TestDaemon, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(bin("baaaht")).args(args).env("BAAAHT_SOCKET", daemon.socket()).output().expect("runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const GOOD: &str = "---\nname: weather-report\ndescription: Reports the weather from the forecast service.\nlicense: MIT\n---\nRun scripts/forecast.sh.\n";

#[test]
fn a_skill_from_a_local_git_repository_installs_and_bad_ones_are_refused_with_the_reason() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let good = repository(&[
        ("skills/weather-report/SKILL.md", GOOD),
        ("skills/weather-report/scripts/forecast.sh", "#!/bin/sh\necho sunny\n"),
    ]);
    let source = good.path().display().to_string();
    let (ok, out, err) =
        baaaht(&daemon, &["skills", "install", &source, "--path", "skills/weather-report", "--user", "alice"]);
    assert!(ok, "{out}{err}\n{}", daemon.log_text());
    assert!(out.starts_with("installed weather-report into users/alice/skills/weather-report (commit "), "{out}");
    let installed = daemon.data_dir.join("users/alice/skills/weather-report");
    assert_eq!(std::fs::read_to_string(installed.join("SKILL.md")).expect("installed"), GOOD);
    assert!(installed.join("scripts/forecast.sh").is_file());
    assert!(!installed.join(".git").exists());
    let record = std::fs::read_to_string(daemon.data_dir.join("data/state/skill-installs.json")).expect("recorded");
    assert!(record.contains("\"name\": \"weather-report\"") && record.contains(&source), "{record}");
    assert!(daemon.log_text().contains("skill installed"), "the install is logged");

    let (_, alices, _) = baaaht(&daemon, &["skills", "list", "--user", "alice"]);
    assert!(alices.contains("weather-report (user): Reports the weather"), "{alices}");
    assert!(alices.contains("code-review (system)"), "{alices}");
    let (_, bobs, _) = baaaht(&daemon, &["skills", "list", "--user", "bob"]);
    assert!(!bobs.contains("weather-report"), "another user does not see it: {bobs}");
    let (ok, shown, _) =
        baaaht(&daemon, &["skills", "show", "weather-report", "scripts/forecast.sh", "--user", "alice"]);
    assert!(ok && shown == "#!/bin/sh\necho sunny\n", "{shown}");

    // Installed already: refused unless replaced.
    let (ok, _, err) =
        baaaht(&daemon, &["skills", "install", &source, "--path", "skills/weather-report", "--user", "alice"]);
    assert!(!ok && err.contains("is installed already") && err.contains("--replace"), "{err}");
    let (ok, _, err) = baaaht(
        &daemon,
        &["skills", "install", &source, "--path", "skills/weather-report", "--user", "alice", "--replace"],
    );
    assert!(ok, "{err}");

    // A bad SKILL.md: the reason, with its line.
    let bad = repository(&[("SKILL.md", "---\nname: Weather_Report\ndescription: x\n---\n")]);
    let (ok, _, err) = baaaht(&daemon, &["skills", "install", &bad.path().display().to_string(), "--user", "alice"]);
    assert!(!ok, "refused");
    assert!(err.contains("the skill is refused: SKILL.md:2: name `Weather_Report` may use only lowercase"), "{err}");
    let unknown = repository(&[("SKILL.md", "---\nname: helper\ndescription: Helps.\nauthor: me\n---\n")]);
    let (ok, _, err) =
        baaaht(&daemon, &["skills", "install", &unknown.path().display().to_string(), "--user", "alice"]);
    assert!(!ok && err.contains("unknown field `author`"), "{err}");

    // A script that does not parse, found by the check in a tool container.
    let broken = repository(&[
        ("SKILL.md", "---\nname: broken\ndescription: Does not parse.\n---\n"),
        ("scripts/run.sh", "if then fi (\n"),
    ]);
    let (ok, _, err) = baaaht(&daemon, &["skills", "install", &broken.path().display().to_string(), "--user", "alice"]);
    assert!(!ok && err.contains("did not pass the check in a tool container") && err.contains("run.sh"), "{err}");
    assert!(!daemon.data_dir.join("users/alice/skills/broken").exists());

    // No SKILL.md where it was pointed, and a source that is not a repository.
    let (ok, _, err) = baaaht(&daemon, &["skills", "install", &source, "--user", "alice"]);
    assert!(!ok && err.contains("there is no SKILL.md in the repository's root"), "{err}");
    let (ok, _, err) = baaaht(&daemon, &["skills", "install", "--user", "alice", "--", "--upload-pack=id"]);
    assert!(!ok && err.contains("is not a git URL"), "{err}");
}

const WITH_PACKAGES: &str = "---\nname: json-tools\ndescription: Queries JSON files with jq.\naddons:\n  packages:\n    - name: jq\n      source: apt\n      verify: \"jq --version\"\n---\nUse jq.\n";

#[test]
fn a_skill_with_packages_gets_a_layer_its_contexts_tool_containers_run_on() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let repo = repository(&[("SKILL.md", WITH_PACKAGES)]);
    // The self-test containers' context, so that a lingering coder can try the tool container.
    let (ok, out, err) =
        baaaht(&daemon, &["skills", "install", &repo.path().display().to_string(), "--user", "baaaht-self-test"]);
    assert!(ok, "{out}{err}\n{}", daemon.log_text());
    let record = std::fs::read_to_string(daemon.data_dir.join("data/state/skill-installs.json")).expect("recorded");
    assert!(record.contains("json-tools"), "{record}");
    let images = baaaht_tests::docker(&["images", "--format", "{{.Repository}}:{{.Tag}}", "baaaht/skill-layer"])
        .expect("images");
    assert!(images.lines().any(|line| line.starts_with("baaaht/skill-layer:")), "no layer image: {images}");

    let rt = baaaht_tests::runtime();
    let coder = daemon.lingering_agent("coder", Some("layer-session"), &[]).expect("coder");
    rt.block_on(async {
        let mut agent = baaaht_proto::client::connect(&coder.socket, coder.options()).await.expect("connect");
        let request = baaaht_proto::v1::ToolRequest {
            tool: "exec".into(),
            params_json: serde_json::json!({"command": "echo '{\"tea\": \"jasmine\"}' | jq -r .tea"}).to_string(),
            ..Default::default()
        };
        let ran = agent.agents.request_tool_execution(request).await.expect("exec").into_inner();
        assert_eq!(ran.content, "exit code 0\n--- stdout ---\njasmine\n", "{ran:?}");
    });
    drop(coder);
    let tool =
        daemon.recorded_containers().into_iter().find(|name| name.starts_with("baaaht-tool-")).expect("tool container");
    let image = baaaht_tests::docker(&["inspect", "--format", "{{.Config.Image}}", &tool]).expect("inspect");
    assert!(image.trim().starts_with("baaaht/skill-layer:"), "{image}");

    // A package from apk cannot be had on the Debian base: refused with what to do.
    let apk = repository(&[(
        "SKILL.md",
        "---\nname: alpine-only\ndescription: Needs apk.\naddons:\n  packages:\n    - name: gh\n      source: apk\n---\n",
    )]);
    let (ok, _, err) = baaaht(&daemon, &["skills", "install", &apk.path().display().to_string(), "--user", "alice"]);
    assert!(!ok && err.contains("use `source: apt`"), "{err}");
}

#[test]
fn a_skills_env_reaches_only_the_commands_that_run_its_scripts() {
    let skill = "---\nname: weather\ndescription: Reads the forecast.\naddons:\n  env:\n    - WEATHER_KEY\n---\n";
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("WEATHER_KEY".into(), "wk-5f1c9a".into())],
        files: vec![
            ("users/baaaht-self-test/skills/weather/SKILL.md".into(), skill.into()),
            ("users/baaaht-self-test/skills/weather/scripts/show.sh".into(), "echo \"key=[$WEATHER_KEY]\"\n".into()),
        ],
        ..DaemonOptions::default()
    })
    .expect("daemon starts");
    let rt = baaaht_tests::runtime();
    let coder = daemon.lingering_agent("coder", Some("env-session"), &[]).expect("coder");
    rt.block_on(async {
        let agent = baaaht_proto::client::connect(&coder.socket, coder.options()).await.expect("connect");
        let exec = |command: &str| {
            let request = baaaht_proto::v1::ToolRequest {
                tool: "exec".into(),
                params_json: serde_json::json!({ "command": command }).to_string(),
                ..Default::default()
            };
            let mut agent = agent.clone();
            async move { agent.agents.request_tool_execution(request).await.expect("exec").into_inner().content }
        };
        assert!(
            exec("sh /skills/weather/scripts/show.sh").await.contains("key=[wk-5f1c9a]"),
            "the skill's script gets it"
        );
        assert!(exec("echo \"key=[$WEATHER_KEY]\"").await.contains("key=[]"), "another command does not");
        let both = exec("sh /skills/weather/scripts/show.sh; ls /skills/code-review/scripts 2>/dev/null").await;
        assert!(both.contains("key=[]"), "a command naming two skills' scripts gets neither's: {both}");
    });
    let tool =
        daemon.recorded_containers().into_iter().find(|name| name.starts_with("baaaht-tool-")).expect("tool container");
    let config = baaaht_tests::docker(&["inspect", &tool]).expect("inspect");
    assert!(!config.contains("wk-5f1c9a"), "the value is not in the container's configuration");
    let agent_config = baaaht_tests::docker(&["inspect", &coder.name]).expect("inspect");
    assert!(!agent_config.contains("wk-5f1c9a"), "nor in the agent's");
    drop(coder);
}
