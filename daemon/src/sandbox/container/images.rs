//! The base image every agent and tool container starts from (`container-images/base/`).
//!
//! `baaahtd images build` builds it when it is missing: from `debian:bookworm-slim` when a
//! registry answers, otherwise from `debootstrap --variant=minbase` (Debian's package mirror
//! only), imported into the engine and finished with the same Dockerfile, offline.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bollard::query_parameters::{BuildImageOptions, CreateImageOptions};
use tokio_stream::StreamExt;

use super::docker::DockerRuntime;
use super::{ContainerRuntime, RuntimeError};

/// The Dockerfile, embedded so the daemon can build without the source tree.
pub const BASE_DOCKERFILE: &str = include_str!("../../../../container-images/base/Dockerfile");
/// Packages beyond debootstrap's minbase (which already has bash, coreutils, findutils, grep
/// and util-linux); the Dockerfile installs the same list from a registry base.
pub const BASE_PACKAGES: &[&str] = &["ca-certificates", "curl", "git", "python3", "python3-pip", "procps"];
pub const REGISTRY_BASE: &str = "debian:bookworm-slim";
/// The debootstrapped root filesystem, imported as an image (named for the package list it has).
pub const ROOTFS_IMAGE: &str = "baaaht/rootfs:bookworm-2";
/// The base image's `baaaht.image.version` label: raised when the package list changes, so an
/// image built before is built again (2: curl and pip, for commands that reach the network).
pub const IMAGE_VERSION: &str = "2";

/// An image on `base` with Debian's `packages` (space-separated) and the label `what`: its tag
/// (`baaaht/{what}:` and a hash of the Dockerfile) and Dockerfile; built once, when first needed.
pub fn layer(base: &str, packages: &str, what: &str) -> (String, String) {
    use sha2::Digest as _;
    let dockerfile = format!(
        "FROM {base}\nUSER root\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
         --no-install-recommends {packages} \\\n    && rm -rf /var/lib/apt/lists/*\n\
         USER 1000\nLABEL baaaht.image=\"{what}\"\n"
    );
    let hash = sha2::Sha256::digest(dockerfile.as_bytes());
    let hex: String = hash.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    (format!("baaaht/{what}:{hex}"), dockerfile)
}

const PULL_TIMEOUT: Duration = Duration::from_secs(120);
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseSource {
    AlreadyPresent,
    Registry,
    Debootstrap,
}

#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub image: String,
    pub source: BaseSource,
    pub elapsed: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(
        "no registry answered ({registry_error}) and debootstrap is not installed: \
         install it (apt-get install debootstrap) and run `baaahtd images build` again"
    )]
    NoDebootstrap { registry_error: String },
    #[error(
        "no registry answered ({registry_error}) and debootstrap needs root: run `baaahtd images build` as root once"
    )]
    NotRoot { registry_error: String },
    #[error("debootstrap failed ({status}): {tail}")]
    Debootstrap { status: String, tail: String },
    #[error("cannot run {program}")]
    Spawn {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("building {image} failed: {message}")]
    Build { image: String, message: String },
    #[error("building {image} took more than {} s", BUILD_TIMEOUT.as_secs())]
    BuildTimeout { image: String },
    /// The registry's base could not be pulled (debootstrap is tried next).
    #[error(transparent)]
    Pull(Box<bollard::errors::Error>),
    #[error("no answer within {} s", PULL_TIMEOUT.as_secs())]
    PullTimeout,
}

/// Builds `image` unless it exists.
pub async fn ensure_base(
    runtime: &DockerRuntime,
    image: &str,
    work_dir: &Path,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<BuiltImage, ImageError> {
    let started = Instant::now();
    match runtime.image_version(image).await? {
        Some(version) if version == IMAGE_VERSION => {
            return Ok(BuiltImage {
                image: image.into(),
                source: BaseSource::AlreadyPresent,
                elapsed: started.elapsed(),
            });
        }
        Some(version) => progress(&format!("{image} is version {version}; building version {IMAGE_VERSION}")),
        None => {}
    }
    let source = match pull(runtime, REGISTRY_BASE).await {
        Ok(()) => {
            progress(&format!("pulled {REGISTRY_BASE}; building {image}"));
            build(runtime, image, REGISTRY_BASE, true, progress).await?;
            BaseSource::Registry
        }
        Err(registry_error) => {
            progress(&format!("cannot pull {REGISTRY_BASE} ({registry_error}); building from debootstrap"));
            if !runtime.image_exists(ROOTFS_IMAGE).await? {
                debootstrap_and_import(runtime, work_dir, &registry_error.to_string(), progress).await?;
            }
            // Podman qualifies the imported name with docker.io/ and would resolve a short name
            // in FROM against registries: name the local image fully there.
            let base = match runtime.engine().kind {
                super::EngineKind::Podman => format!("docker.io/{ROOTFS_IMAGE}"),
                super::EngineKind::Docker => ROOTFS_IMAGE.to_string(),
            };
            build(runtime, image, &base, false, progress).await?;
            BaseSource::Debootstrap
        }
    };
    Ok(BuiltImage { image: image.into(), source, elapsed: started.elapsed() })
}

async fn pull(runtime: &DockerRuntime, reference: &str) -> Result<(), ImageError> {
    let options = CreateImageOptions { from_image: Some(reference.to_string()), ..Default::default() };
    let mut stream = runtime.docker().create_image(Some(options), None, None);
    let drain = async {
        while let Some(item) = stream.next().await {
            item.map_err(|error| ImageError::Pull(Box::new(error)))?;
        }
        Ok::<(), ImageError>(())
    };
    match tokio::time::timeout(PULL_TIMEOUT, drain).await {
        Ok(result) => result,
        Err(_) => Err(ImageError::PullTimeout),
    }
}

async fn debootstrap_and_import(
    runtime: &DockerRuntime,
    work_dir: &Path,
    registry_error: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), ImageError> {
    if which("debootstrap").is_none() {
        return Err(ImageError::NoDebootstrap { registry_error: registry_error.into() });
    }
    if crate::base::datadir::current_uid() != 0 {
        return Err(ImageError::NotRoot { registry_error: registry_error.into() });
    }
    let rootfs = work_dir.join(format!("rootfs-{}", std::process::id()));
    progress(&format!("debootstrap --variant=minbase bookworm {} (about a minute)", rootfs.display()));
    let include = format!("--include={}", BASE_PACKAGES.join(","));
    let output = tokio::process::Command::new("debootstrap")
        .args(["--variant=minbase", &include, "bookworm"])
        .arg(&rootfs)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| ImageError::Spawn { program: "debootstrap", source })?;
    if !output.status.success() {
        let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        // silent-ok: a partial rootfs is useless; the debootstrap error is what we report.
        let _ = tokio::fs::remove_dir_all(&rootfs).await;
        return Err(ImageError::Debootstrap {
            status: output.status.to_string(),
            tail: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
        });
    }
    progress(&format!("importing the root filesystem as {ROOTFS_IMAGE}"));
    let result = import(runtime, &rootfs).await;
    if let Err(error) = tokio::fs::remove_dir_all(&rootfs).await {
        tracing::warn!(path = %rootfs.display(), %error, "cannot remove the debootstrap folder");
    }
    result
}

/// `tar -C rootfs -c . | docker import - ROOTFS_IMAGE`, through the Engine API.
async fn import(runtime: &DockerRuntime, rootfs: &Path) -> Result<(), ImageError> {
    let mut tar = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(rootfs)
        .args(["--numeric-owner", "-c", "."])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|source| ImageError::Spawn { program: "tar", source })?;
    let stdout = tar
        .stdout
        .take()
        .ok_or(ImageError::Build { image: ROOTFS_IMAGE.into(), message: "tar has no stdout".into() })?;
    let body = bollard::body_try_stream(tokio_util::io::ReaderStream::new(stdout));
    // The tag goes inside `repo` (the API allows it): Podman ignores a separate `tag`.
    let options =
        CreateImageOptions { from_src: Some("-".into()), repo: Some(ROOTFS_IMAGE.into()), ..Default::default() };
    let mut stream = runtime.docker().create_image(Some(options), Some(body), None);
    while let Some(item) = stream.next().await {
        item.map_err(|error| ImageError::Build { image: ROOTFS_IMAGE.into(), message: error.to_string() })?;
    }
    let status = tar.wait().await.map_err(|source| ImageError::Spawn { program: "tar", source })?;
    if !status.success() {
        return Err(ImageError::Build { image: ROOTFS_IMAGE.into(), message: format!("tar exited with {status}") });
    }
    Ok(())
}

async fn build(
    runtime: &DockerRuntime,
    image: &str,
    base: &str,
    install_packages: bool,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), ImageError> {
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(image.into()),
        rm: true,
        forcerm: true,
        buildargs: Some(
            [("BASE", base), ("INSTALL_PACKAGES", if install_packages { "1" } else { "0" })]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        // Offline builds need no network at all; say so to the engine.
        networkmode: (!install_packages).then(|| "none".to_string()),
        ..Default::default()
    };
    let context = super::docker::single_file_tar("Dockerfile", BASE_DOCKERFILE.as_bytes());
    let mut stream = runtime.docker().build_image(options, None, Some(bollard::body_full(context.into())));
    let drain = async {
        while let Some(item) = stream.next().await {
            let info = item.map_err(|error| ImageError::Build { image: image.into(), message: error.to_string() })?;
            if let Some(detail) = info.error_detail {
                return Err(ImageError::Build { image: image.into(), message: detail.message.unwrap_or_default() });
            }
            if let Some(line) = info.stream.as_deref().map(str::trim).filter(|line| line.starts_with("Step ")) {
                progress(line);
            }
        }
        Ok(())
    };
    tokio::time::timeout(BUILD_TIMEOUT, drain)
        .await
        .map_err(|_elapsed| ImageError::BuildTimeout { image: image.into() })?
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].into_iter().map(std::path::PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockerfile_installs_the_same_packages_as_debootstrap() {
        let install_line =
            BASE_DOCKERFILE.lines().find(|line| line.contains("apt-get install")).expect("an install line");
        for package in BASE_PACKAGES {
            assert!(install_line.split_whitespace().any(|word| word.trim_end_matches(';') == *package), "{package}");
        }
        assert!(BASE_DOCKERFILE.contains("ARG BASE=debian:bookworm-slim"));
        assert!(BASE_DOCKERFILE.contains(&format!("baaaht.image.version=\"{IMAGE_VERSION}\"")));
        assert!(BASE_DOCKERFILE.contains("useradd --uid 1000"));
    }

    #[test]
    fn tar_of_one_file_is_well_formed() {
        let archive = super::super::docker::single_file_tar("Dockerfile", b"FROM scratch\n");
        assert_eq!(archive.len(), 512 + 512 + 1024);
        assert_eq!(&archive[0..10], b"Dockerfile");
        assert_eq!(&archive[257..262], b"ustar");
        assert_eq!(&archive[512..525], b"FROM scratch\n");
        // The checksum counts the checksum field as spaces.
        let mut header = archive[..512].to_vec();
        let stored = u32::from_str_radix(std::str::from_utf8(&header[148..154]).expect("ascii"), 8).expect("octal");
        header[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, header.iter().map(|b| u32::from(*b)).sum::<u32>());
    }
}
