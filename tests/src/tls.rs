//! A test certificate authority and a server certificate from it (for 127.0.0.1 and
//! localhost), made with Debian's openssl, for the real servers the tests start with TLS (the
//! mail servers, Synapse).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};

/// Makes `ca.pem` (with `ca.key`), and `server.pem` and `server.key` signed by it, in `dir`
/// (made when missing); `name` names the authority.
pub fn test_authority(dir: &Path, name: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    let subject = format!("/CN={name}");
    run(Command::new("openssl")
        .current_dir(dir)
        .args(["req", "-x509"])
        .args(ec)
        .args(["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", &subject]))?;
    run(Command::new("openssl").current_dir(dir).args(["req"]).args(ec).args([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]))?;
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n")?;
    run(Command::new("openssl").current_dir(dir).args([
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]))
}

/// Runs `command`; its error output when it fails.
pub fn run(command: &mut Command) -> Result<()> {
    let output = command.output().with_context(|| format!("run {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(())
}
