use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;

fn source_config_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config")
}

fn load_texts(files: &[(&str, &str)], env: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let paths =
        ConfigPaths { config_file: None, config_dir: dir.path().to_path_buf(), data_dir: dir.path().join("data") };
    load(&paths, env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

#[test]
fn defaults_are_valid_without_any_file() {
    let loaded = load_texts(&[], &[]).expect("defaults load");
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.providers, ProvidersConfig::default());
    assert_eq!(loaded.sources.config, Source::BuiltIn);
    assert_eq!(loaded.config.container.resource_limits.memory, ByteSize(512 << 20));
    assert_eq!(loaded.config.tools.web_proxy.max_content_size, ByteSize(1_000_000));
    // Defaults survive a round trip through their own serialization.
    let yaml = serde_yaml::to_string(&loaded.config).expect("serialize");
    let back: Config = serde_yaml::from_str(&yaml).expect("reparse");
    assert_eq!(back, loaded.config);
}

#[test]
fn every_example_file_under_config_parses() {
    let dir = source_config_dir();
    let paths =
        ConfigPaths { config_file: None, config_dir: dir.clone(), data_dir: PathBuf::from("/nonexistent/baaaht") };
    let loaded = load(&paths, std::iter::empty()).expect("the shipped examples load");
    assert_eq!(loaded.sources.config, Source::File(dir.join(CONFIG_FILE)));
    assert_eq!(loaded.sources.providers, Source::File(dir.join(PROVIDERS_FILE)));
    assert_eq!(loaded.sources.allowlist, Source::File(dir.join(ALLOWLIST_FILE)));
    // The example spells out the defaults: it must not drift from them.
    assert_eq!(loaded.config, Config::default(), "config/config.yaml no longer matches the built-in defaults");
    assert!(loaded.providers.providers.custom.iter().any(|c| c.name == "llama-server" && c.api_key.is_none()));
}

#[test]
fn parse_errors_name_file_line_column_and_a_suggestion() {
    // (file, text, expected "line:column", words the message must contain)
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("config.yaml", "system:\n  nmae: x\n", "2:3", &["unknown field `nmae`", "did you mean `name`?"]),
        ("config.yaml", "contianer:\n  runtime: docker\n", "1:1", &["did you mean `container`?"]),
        (
            "config.yaml",
            "container:\n  runtime: dokcer\n",
            "2:12",
            &["unknown variant `dokcer`", "did you mean `docker`?"],
        ),
        ("config.yaml", "tools:\n  default_timeout: soon\n", "2:20", &["invalid type", "u64"]),
        (
            "config.yaml",
            "container:\n  default_timeout: 300\n",
            "2:3",
            &["unknown field `default_timeout`", "a turn's limit is agents.ROLE.timeout"],
        ),
        (
            "config.yaml",
            "channels:\n  slack:\n    workspaces: []\n",
            "1:1",
            &["unknown field `channels`", "baaahtd gateways add slack NAME --team ID -- --keyword WORD"],
        ),
        (
            "config.yaml",
            "orchestrator:\n  poll_intervals:\n    messages: 2000\n",
            "3:5",
            &["set that instead, and remove poll_intervals.messages"],
        ),
        ("config.yaml", "skills:\n  auto_discover: false\n", "2:3", &["skills: auto_discover: false is not offered"]),
        (
            "config.yaml",
            "sessions:\n  archival:\n    archive_storage: s3\n",
            "3:5",
            &["sessions.archival: archive_storage `s3`: only `local` is offered"],
        ),
        (
            "config.yaml",
            "security:\n  redact:\n    extra_patterns:\n      - {name: badge, regex: 'EMP-(\\d{6}'}\n",
            "4:9",
            &["regex `EMP-(\\d{6}` does not compile"],
        ),
        ("config.yaml", "security:\n  taint:\n    memory_write: forget\n", "3:19", &["unknown variant `forget`"]),
        ("config.yaml", "container:\n  resource_limits:\n    memory: 12x\n", "3:5", &["invalid size `12x`"]),
        ("config.yaml", "container:\n  max_concurrent: lots\n", "2:3", &["invalid container count `lots`", "or auto"]),
        ("config.yaml", "metrics:\n  listen: 0.0.0.0:9479\n", "2:3", &["not a loopback address"]),
        ("config.yaml", "agents:\n  worker:\n    model: gpt-4o\n", "3:5", &["provider/model"]),
        (
            "config.yaml",
            "agents:\n  default_model: openai/o1-mini\n",
            "2:3",
            &["model `openai/o1-mini` cannot call tools, which every agent needs: pick one that can, e.g. openai/gpt-4.1-mini"],
        ),
        ("config.yaml", "agents:\n  coder:\n    thinking_budget: 20000\n", "3:5", &["fewer than its max_output_tokens (8192)"]),
        ("config.yaml", "system: [unclosed\n", "1:9", &["invalid type: sequence"]),
        ("config.yaml", "system:\n  name: \"unclosed\n", "3:1", &["while scanning a quoted scalar"]),
        ("providers.yaml", "providers:\n  antropic:\n    api_key: x\n", "2:3", &["did you mean `anthropic`?"]),
        (
            "providers.yaml",
            "providers:\n  anthropic: {}\nfallback_chains:\n  anthropic: [openroute]\n",
            "4:3",
            &["`openroute` is not configured", "configured providers: anthropic"],
        ),
        (
            "providers.yaml",
            "providers:\n  anthropic: {}\nfallback_chains:\n  anthropic: [grok/llama-3.3-70b]\n",
            "4:3",
            &["`grok` is not configured"],
        ),
        (
            "providers.yaml",
            "providers:\n  openai:\n    api_key: x\n    region: us-east-1\n",
            "4:5",
            &["providers.openai.region: only bedrock and vertex take `region`"],
        ),
        (
            "providers.yaml",
            "providers:\n  vertex:\n    project: p\n    region: evil.example/\n",
            "4:5",
            &["providers.vertex.region `evil.example/` is not a name"],
        ),
        (
            "providers.yaml",
            "providers:\n  bedrock:\n    region: us-east-1\n    access_key_id: a\n    secret_access_key: b\n    profile: work\n",
            "6:5",
            &["give access_key_id and secret_access_key, or profile/credentials_file, not both"],
        ),
        (
            "providers.yaml",
            "providers:\n  bedrock:\n    region: us-east-1\n    api_key: x\n",
            "4:5",
            &["providers.bedrock.api_key: only the providers that sign in with a key"],
        ),
        (
            "providers.yaml",
            "providers:\n  anthropic: {}\nmodels:\n  sonnet: [anthropic/claude-sonnet-4, bedrock/anthropic.claude-sonnet-4]\n",
            "4:3",
            &["names provider `bedrock`, which is not configured"],
        ),
        (
            "providers.yaml",
            "providers:\n  azure:\n    api_base: https://r.openai.azure.com\n    api_key: k\n    api_version: 2024-10-21&x=1#\n",
            "5:5",
            &["providers.azure.api_version `2024-10-21&x=1#` is not a name"],
        ),
        (
            "providers.yaml",
            "providers:\n  azure:\n    api_base: https://r.openai.azure.com\n    entra:\n      tenant_id: t\n      \
             client_id: c\n      client_secret: s\n      authority: http://login.example\n",
            "4:5",
            &["providers.azure.entra.authority: its token endpoint `http://login.example` is not an https:// address"],
        ),
        ("providers.yaml", "providers:\n  anthropic:\n    timeout: 0\n", "3:5", &["providers.anthropic.timeout is 0"]),
        ("providers.yaml", "providers:\n  anthropic:\n    max_output_tokens: 0\n", "3:5", &["max_output_tokens is 0"]),
        (
            "providers.yaml",
            "providers:\n  google:\n    api_key: k\n    openai_compatible: false\n",
            "4:5",
            &["providers.google.openai_compatible: false changes nothing"],
        ),
        (
            "providers.yaml",
            "providers:\n  bedrock:\n    region: us-east-1\n    secret_access_key: b\n    profile: work\n",
            "4:5",
            &["providers.bedrock needs both access_key_id and secret_access_key"],
        ),
        (
            "providers.yaml",
            "providers:\n  vertex:\n    project: p\n    region: r\n    credentials_file: /tmp\n",
            "5:5",
            &["providers.vertex.credentials_file /tmp is not a regular file"],
        ),
        (
            "providers.yaml",
            "providers:\n  anthropic: {}\nmodels:\n  sonnet: [anthropic/..]\n",
            "4:3",
            &["models.sonnet: `anthropic/..` is not provider/model"],
        ),
        // A cloud without what it cannot go without, told at its provider's line.
        ("providers.yaml", "providers:\n  bedrock:\n    profile: work\n", "2:3", &["providers.bedrock.region is not set"]),
        (
            "providers.yaml",
            "providers:\n  vertex:\n    project: p\n    region: r\n",
            "2:3",
            &["providers.vertex has no credentials: set `credentials_file:`"],
        ),
        ("providers.yaml", "providers:\n  azure:\n    api_key: k\n", "2:3", &["providers.azure.api_base is not set"]),
        (
            "providers.yaml",
            "providers:\n  azure:\n    api_base: https://r.openai.azure.com\n",
            "2:3",
            &["providers.azure has no credentials: set `api_key:"],
        ),
        ("mount-allowlist.json", "{\n  \"allowedMount\": []\n}\n", "2:16", &["did you mean `allowedMounts`?"]),
        ("config.yaml", "tools:\n  blocked_patterns: ['(unclosed']\n", "2:3", &["not a valid regular expression"]),
    ];
    for (file, text, position, words) in cases {
        let error = load_texts(&[(file, text)], &[]).expect_err(text);
        let shown = error.to_string();
        assert!(shown.contains(&format!("{file}:{position}: ")), "{text:?} gave {shown}");
        for word in *words {
            assert!(shown.contains(word), "{text:?} gave {shown}, missing {word}");
        }
    }
}

#[test]
fn semantic_errors_point_at_the_key() {
    let providers = "providers:\n  ollama:\n    api_base: http://localhost:11434\n";
    let error = load_texts(&[("providers.yaml", providers)], &[]).expect_err("assistant uses anthropic");
    let shown = error.to_string();
    assert!(shown.contains("agents.assistant.model"), "{shown}");
    assert!(shown.contains("pick a model of: ollama"), "{shown}");

    let config = "agents:\n  assistant:\n    model: ollama/llama3.1\n  worker:\n    model: ollama/llama3.1\n  researcher:\n    model: ollama/llama3.1\n  coder:\n    model: ollama/llama3.1\n  memory:\n    model: ollama/llama3.1\n  heartbeat:\n    model: nope/x\n";
    let error = load_texts(&[("providers.yaml", providers), ("config.yaml", config)], &[]).expect_err("heartbeat");
    assert!(error.to_string().contains("config.yaml:13:5: agents.heartbeat.model"), "{error}");
}

#[test]
fn empty_and_comment_only_files_mean_defaults() {
    let loaded = load_texts(&[("config.yaml", "# nothing yet\n\n"), ("providers.yaml", "")], &[]).expect("load");
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn env_overrides() {
    // (variables, check on the effective config)
    type Check = fn(&Config) -> bool;
    let cases: &[(&[(&str, &str)], Check)] = &[
        (&[("BAAAHT__AGENTS__ASSISTANT__MODEL", "openai/gpt-4o")], |c| {
            c.agents.settings(crate::base::auth::Role::Assistant).model.0 == "openai/gpt-4o"
        }),
        (&[("BAAAHT__TOOLS__DEFAULT_TIMEOUT", "30")], |c| c.tools.default_timeout == 30),
        (&[("BAAAHT__CONTAINER__RUNTIME", "docker")], |c| c.container.runtime == RuntimeChoice::Docker),
        (&[("BAAAHT__SYSTEM__ADMIN_USERS", r#"["billm","alice"]"#)], |c| c.system.admin_users == ["billm", "alice"]),
        (&[("BAAAHT__SYSTEM__NAME", "true")], |c| c.system.name == "true"),
        (&[("BAAAHT__METRICS__ENABLED", "false")], |c| !c.metrics.enabled),
        (&[("BAAAHT__CONTAINER__RESOURCE_LIMITS__MEMORY", "2g")], |c| {
            c.container.resource_limits.memory == ByteSize(2 << 30)
        }),
        (&[("BAAAHT__CONTAINER__ROLE_LIMITS__CODER__MEMORY", "2g")], |c| {
            c.container.role_limits.get(&crate::base::auth::Role::Coder).and_then(|l| l.memory)
                == Some(ByteSize(2 << 30))
        }),
        (&[("BAAAHT__CONTAINER__MAX_CONCURRENT", "60")], |c| c.container.max_concurrent == ContainerCap::Fixed(60)),
        (&[("BAAAHT__CONTAINER__MAX_CONCURRENT", "auto")], |c| c.container.max_concurrent == ContainerCap::Auto),
        (&[("BAAAHT__AGENTS__CODER__TEMPERATURE", "0.2")], |c| c.agents.coder.temperature == Some(Temperature(0.2))),
        (&[("BAAAHT_DATA", "/elsewhere"), ("OTHER", "x")], |c| *c == Config::default()),
    ];
    for (variables, check) in cases {
        let loaded = load_texts(&[], variables).unwrap_or_else(|error| panic!("{variables:?}: {error}"));
        assert!(check(&loaded.config), "{variables:?}");
        let expected: Vec<String> =
            variables.iter().filter(|(k, _)| k.starts_with("BAAAHT__")).map(|(k, _)| k.to_string()).collect();
        assert_eq!(loaded.sources.env_overrides, expected);
    }
}

#[test]
fn env_override_errors_name_the_variable() {
    let cases: &[(&str, &str, &str)] = &[
        ("BAAAHT__TOOLS__DEFAULT_TIMEOUT", "lots", "invalid type"),
        ("BAAAHT__CHANNELS__WEB__PORT", "3000", "register each with `baaahtd gateways add`"),
        ("BAAAHT__SYSTEM__NMAE", "x", "did you mean `name`?"),
        ("BAAAHT__SYTEM__NAME", "x", "did you mean `system`?"),
        ("BAAAHT__SYSTEM__ADMIN_USERS", "billm", "expected a JSON array"),
        ("BAAAHT__CONTAINER__RUNTIME", "apple-containers", "unknown variant"),
        ("BAAAHT__SYSTEM__NAME__X", "1", "is a value, not a section"),
        ("BAAAHT__METRICS__LISTEN", "0.0.0.0:1", "not a loopback address"),
    ];
    for (variable, value, words) in cases {
        let error = load_texts(&[], &[(variable, value)]).expect_err(variable);
        let shown = error.to_string();
        assert!(shown.starts_with(&format!("environment variable {variable}: ")), "{shown}");
        assert!(shown.contains(words), "{variable}={value} gave {shown}");
    }
}

#[test]
fn env_overrides_apply_on_top_of_the_file() {
    let loaded = load_texts(
        &[("config.yaml", "system:\n  name: home\n  log_level: debug\n")],
        &[("BAAAHT__SYSTEM__LOG_LEVEL", "warn")],
    )
    .expect("load");
    assert_eq!(loaded.config.system.name, "home");
    assert_eq!(loaded.config.system.log_level, LogLevel::Warn);
}

#[test]
fn an_explicit_config_file_must_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = ConfigPaths {
        config_file: Some(dir.path().join("missing.yaml")),
        config_dir: dir.path().into(),
        data_dir: dir.path().join("data"),
    };
    let error = load(&paths, std::iter::empty()).expect_err("missing");
    assert!(error.to_string().contains("missing.yaml"), "{error}");
}

#[test]
fn built_in_blocked_patterns_cannot_be_removed() {
    let loaded = load_texts(&[("mount-allowlist.json", r#"{"blockedPatterns": ["secrets"]}"#)], &[]).expect("load");
    let patterns = &loaded.allowlist.blocked_patterns;
    assert!(patterns.contains(&"secrets".to_string()));
    for built_in in BUILT_IN_BLOCKED_PATTERNS {
        assert!(patterns.contains(&built_in.to_string()), "{built_in} missing");
    }
    let error = load_texts(
        &[("mount-allowlist.json", r#"{"allowedMounts": [{"hostPath": "/a/../b", "containerPath": "/project/b"}]}"#)],
        &[],
    )
    .expect_err("traversal");
    assert!(error.to_string().contains("allowedMounts[0]"), "{error}");
}

#[test]
fn effective_yaml_redacts_secrets_but_not_references() {
    let providers = "providers:\n  anthropic:\n    api_key: sk-ant-very-secret\n    default: true\n  openai:\n    api_key: ${OPENAI_API_KEY}\n";
    let config = "tools:\n  web_proxy:\n    search:\n      brave_api_key: hunter2\n";
    let loaded = load_texts(&[("providers.yaml", providers), ("config.yaml", config)], &[]).expect("load");
    let shown = effective_yaml(&loaded).expect("yaml");
    assert!(!shown.contains("sk-ant-very-secret"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("${OPENAI_API_KEY}"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    let _: BTreeMap<String, serde_yaml::Value> =
        serde_yaml::from_str(shown.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n").as_str())
            .expect("the printed config is YAML");
}

#[test]
fn what_would_open_the_sandbox_is_refused_with_its_reason() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "container:\n  resource_limits:\n    memory: 0\n",
            "container.resource_limits.memory: 0 would let no container run",
            "3:5",
        ),
        ("container:\n  resource_limits:\n    pids: 0\n", "container.resource_limits.pids: 0", "3:5"),
        ("container:\n  role_limits:\n    coder:\n      disk: 0\n", "container.role_limits.coder.disk: 0", "4:7"),
        (
            "container:\n  isolation:\n    llm_gateway: gvisor\n",
            "container.isolation.llm_gateway: gvisor is not offered for gateways",
            "3:5",
        ),
        (
            "container:\n  isolation:\n    coder: kata\n",
            "unknown variant `kata`, expected one of `auto`, `runc`, `gvisor`",
            "3:12",
        ),
        ("container:\n  max_concurrent: 0\n", "container.max_concurrent: 0 would let no container run", "2:3"),
        (
            "container:\n  pools:\n    mcp: {floor: 1, ceiling: 1}\n",
            "container.pools.mcp: only agents and tool containers are pooled",
            "3:5",
        ),
        (
            "container:\n  pools:\n    coder: {floor: 3, ceiling: 1}\n",
            "container.pools.coder: the floor (3) is above the ceiling (1)",
            "3:5",
        ),
        ("budgets:\n  soft_percent: 0\n", "budgets.soft_percent: 0 is not a share of 1 to 100", "2:3"),
        (
            "budgets:\n  overrides:\n    alice: {monthly_cost: 5}\n",
            "`alice` names no context: write user:ID or group:ID",
            "2:3",
        ),
        ("budgets:\n  user:\n    monthly_cost: -1\n", "budgets.user: a cost limit cannot be negative", "2:3"),
        (
            "secrets:\n  user_usable: [GITHUB_TOKEN, ANTHROPIC_API_KEY]\n",
            "secrets.user_usable[1]: `ANTHROPIC_API_KEY` is an LLM provider's key",
            "2:3",
        ),
        ("secrets:\n  user_usable: [\"a b\"]\n", "secrets.user_usable[0]: `a b` is not a secret name", "2:3"),
    ];
    for (config, says, at) in cases {
        let error = load_texts(&[("config.yaml", config)], &[]).expect_err(config).to_string();
        assert!(error.contains(says) && error.contains(&format!("config.yaml:{at}:")), "{config}: {error}");
    }
}

#[test]
fn allowlist_mounts_of_the_engine_root_runtime_or_data_dir_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("sessions")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("project")).expect("mkdir");
    let host = |path: &std::path::Path| path.display().to_string();
    let cases: Vec<(String, &str)> = vec![
        ("/var/run/docker.sock".into(), "container engine's socket /var/run/docker.sock"),
        ("/var/run".into(), "holds the container engine's socket"),
        ("/".into(), "the whole filesystem"),
        ("/run/baaaht".into(), "the daemon's runtime folder"),
        (host(dir.path()), "the data dir"),
        (host(&data), "the data dir"),
        (host(&data.join("sessions")), "the data dir"),
    ];
    for (host_path, says) in cases {
        let allowlist =
            format!(r#"{{"allowedMounts": [{{"hostPath": "{host_path}", "containerPath": "/project/x"}}]}}"#);
        std::fs::write(dir.path().join(ALLOWLIST_FILE), &allowlist).expect("write");
        let paths = ConfigPaths { config_file: None, config_dir: dir.path().to_path_buf(), data_dir: data.clone() };
        let error = load(&paths, std::iter::empty()).expect_err(&host_path).to_string();
        assert!(error.contains("can never be mounted") && error.contains(says), "{host_path}: {error}");
    }
    let fine = format!(
        r#"{{"allowedMounts": [{{"hostPath": "{}", "containerPath": "/project/x"}}]}}"#,
        host(&dir.path().join("project"))
    );
    std::fs::write(dir.path().join(ALLOWLIST_FILE), fine).expect("write");
    let paths = ConfigPaths { config_file: None, config_dir: dir.path().to_path_buf(), data_dir: data };
    load(&paths, std::iter::empty()).expect("a project folder is fine");
}

#[test]
fn one_default_model_serves_every_role_that_names_none() {
    use crate::base::auth::Role;
    let providers = "providers:\n  openai:\n    api_key: ${OPENAI_API_KEY}\n    default: true\n";
    let config = "agents:\n  default_model: openai/gpt-4o-mini\n  coder:\n    model: openai/gpt-4o\n";
    let loaded = load_texts(&[("providers.yaml", providers), ("config.yaml", config)], &[]).expect("loads");
    let agents = &loaded.config.agents;
    for (role, expected, source) in [
        (Role::Assistant, "openai/gpt-4o-mini", ModelSource::Default),
        (Role::Memory, "openai/gpt-4o-mini", ModelSource::Default),
        (Role::Coder, "openai/gpt-4o", ModelSource::Own),
    ] {
        let settings = agents.settings(role);
        assert_eq!((settings.model.0.as_str(), settings.source), (expected, source), "{role}");
    }
    let shown = effective_yaml(&loaded).expect("yaml");
    assert!(shown.contains("# effective models: assistant openai/gpt-4o-mini (agents.default_model),"), "{shown}");
    assert!(shown.contains("coder openai/gpt-4o (its own)"), "{shown}");
    // Without it, the built-in defaults need Anthropic: the error says what to do.
    let error = load_texts(&[("providers.yaml", providers)], &[]).expect_err("anthropic is not configured");
    assert!(error.to_string().contains("set agents.default_model"), "{error}");
}

/// The specification's own providers.yaml (§16.2), word for word: Gemini as `google`, and a
/// fallback chain through `bedrock`, which it does not configure (skipped until it is).
#[test]
fn the_specifications_providers_yaml_loads() {
    let loaded =
        load_texts(&[("providers.yaml", include_str!("spec-providers.yaml"))], &[]).expect("the spec's example loads");
    let providers = &loaded.providers.providers;
    assert!(providers.google.as_ref().is_some_and(|google| google.api_key.as_deref() == Some("${GOOGLE_API_KEY}")));
    assert_eq!(loaded.providers.fallback_chains["anthropic"], ["openrouter", "bedrock"]);
}

#[test]
fn the_container_cap_auto_follows_the_hosts_memory() {
    const GIB: u64 = 1 << 30;
    let each = 512 << 20;
    assert_eq!(ContainerCap::Auto.resolve(Some(24 * GIB), each), 44);
    assert_eq!(ContainerCap::Auto.resolve(Some(4 * GIB), each), 4);
    assert_eq!(ContainerCap::Auto.resolve(Some(GIB), each), AUTO_CAP_FLOOR, "a small host still runs a few");
    assert_eq!(ContainerCap::Auto.resolve(Some(1024 * GIB), each), AUTO_CAP_CEILING);
    assert_eq!(ContainerCap::Auto.resolve(Some(24 * GIB), 2 * GIB), 11, "larger containers, fewer");
    assert_eq!(ContainerCap::Auto.resolve(None, each), 10, "the specification's example where memory is unknown");
    assert_eq!(ContainerCap::Fixed(7).resolve(Some(24 * GIB), each), 7, "a number is kept as written");
    assert!(Config::default().container.cap() >= AUTO_CAP_FLOOR);
}

#[test]
fn config_check_tells_a_key_file_that_is_not_there_at_its_line_as_its_runner_sees_the_disk() {
    let text = "providers:\n  anthropic:\n    api_key: k\n  vertex:\n    project: p\n    region: r\n    credentials_file: ~/keys/sa.json\n";
    // Loading does not look: the daemon may run as another user, and tells the file itself.
    let loaded = load_texts(&[("providers.yaml", text)], &[]).expect("loads");
    let home = tempfile::tempdir().expect("home");
    let error = check_key_files(&loaded, home.path().to_str()).expect_err("no such file").to_string();
    assert!(error.contains("providers.yaml:7:5: "), "{error}");
    assert!(error.contains(&format!("{}/keys/sa.json does not exist", home.path().display())), "{error}");
    std::fs::create_dir_all(home.path().join("keys")).expect("keys");
    std::fs::write(home.path().join("keys/sa.json"), "{}").expect("key");
    check_key_files(&loaded, home.path().to_str()).expect("there now");
    // Only Bedrock and Vertex AI take one: elsewhere the setting itself is refused at load.
    let openai =
        load_texts(&[("providers.yaml", "providers:\n  openai:\n    api_key: k\n    credentials_file: /nope\n")], &[]);
    let refused = openai.expect_err("foreign").to_string();
    assert!(refused.contains("only bedrock and vertex take `credentials_file`"), "{refused}");
}
