//! The four clouds of `tests/providers/fake_cloud.py` (Gemini, Vertex AI, Bedrock, Azure OpenAI,
//! with Google's and Entra ID's token endpoints), in front of a [`FakeProvider`] on Anthropic's
//! wire: each cloud's request is translated to the fake's, and its answer back, so the fake's
//! brains answer through every cloud. Its wire formats are proved against each cloud's official
//! SDK by `tests/providers/oracle.py` (run by `tests/tests/providers.rs`).

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context as _, Result};

use crate::fake_provider::{FakeProvider, Wire};

pub const GEMINI_KEY: &str = "AIza-test-gemini-7c1e";
pub const AWS_ACCESS_KEY_ID: &str = "AKIATESTBAAAHT000001";
pub const AWS_SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYTESTKEY01";
pub const AWS_REGION: &str = "us-east-1";
pub const VERTEX_PROJECT: &str = "baaaht-test";
pub const VERTEX_REGION: &str = "us-east5";
pub const AZURE_KEY: &str = "azure-test-key-5d2b";
pub const AZURE_DEPLOYMENT: &str = "gpt4o-family";

/// The folder of the fake and its oracle.
pub fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers")
}

/// A running fake cloud; stopped when dropped.
pub struct FakeCloud {
    child: Child,
    pub address: SocketAddr,
    /// Holds the service account's key file.
    dir: tempfile::TempDir,
}

impl FakeCloud {
    /// Starts the fake in front of `upstream`; Google's tokens live `token_lifetime` seconds.
    pub fn start(upstream: &FakeProvider, token_lifetime: u64) -> Result<FakeCloud> {
        let dir = tempfile::tempdir()?;
        let key_file = dir.path().join("service-account.json");
        let mut child = Command::new("python3")
            .arg(folder().join("fake_cloud.py"))
            .args(["--upstream", &upstream.api_base(Wire::Anthropic), "--port", "0"])
            .args(["--gemini-key", GEMINI_KEY])
            .args(["--aws-access-key-id", AWS_ACCESS_KEY_ID, "--aws-secret-access-key", AWS_SECRET_ACCESS_KEY])
            .args(["--aws-region", AWS_REGION])
            .args(["--vertex-project", VERTEX_PROJECT, "--vertex-region", VERTEX_REGION])
            .arg("--service-account-file")
            .arg(&key_file)
            .args(["--token-lifetime", &token_lifetime.to_string()])
            .args(["--azure-key", AZURE_KEY, "--azure-deployments", AZURE_DEPLOYMENT])
            .args(["--azure-tenant", "t", "--azure-client-id", "c", "--azure-client-secret", "s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("python3 tests/providers/fake_cloud.py (scripts/test installs botocore and cryptography)")?;
        let stdout = child.stdout.take().context("the fake's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(address) = line.trim().strip_prefix("listening ") else {
            // silent-ok: it said nothing usable; the error says what it said.
            let _ = child.kill();
            bail!("fake_cloud.py did not start: it printed {line:?}");
        };
        let address: SocketAddr = address.parse().context("the fake's address")?;
        // The key file names the fake's token endpoint, so it is written once the port is known.
        let made = Command::new("python3")
            .arg(folder().join("make_service_account.py"))
            .arg("--out")
            .arg(&key_file)
            .args(["--token-uri", &format!("http://{address}/token")])
            .output()?;
        if !made.status.success() {
            bail!("make_service_account.py failed: {}", String::from_utf8_lossy(&made.stderr));
        }
        Ok(FakeCloud { child, address, dir })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The service account's JSON key file.
    pub fn key_file(&self) -> PathBuf {
        self.dir.path().join("service-account.json")
    }

    /// providers.yaml's entries for the four clouds, reached here (keys from the environment
    /// as [`FakeCloud::env`] names them).
    pub fn providers_yaml(&self) -> String {
        let base = self.base();
        format!(
            "  google:\n    api_key: ${{TEST_GEMINI_KEY}}\n    api_base: {base}\n\
             \x20 azure:\n    api_key: ${{TEST_AZURE_KEY}}\n    api_base: {base}\n\
             \x20 bedrock:\n    region: {AWS_REGION}\n    api_base: {base}\n    access_key_id: ${{TEST_AWS_ID}}\n    secret_access_key: ${{TEST_AWS_SECRET}}\n\
             \x20 vertex:\n    project: {VERTEX_PROJECT}\n    region: {VERTEX_REGION}\n    api_base: {base}\n    credentials_file: {}\n",
            self.key_file().display()
        )
    }

    /// The environment [`FakeCloud::providers_yaml`] takes its keys from.
    pub fn env() -> Vec<(String, String)> {
        [
            ("TEST_GEMINI_KEY", GEMINI_KEY),
            ("TEST_AZURE_KEY", AZURE_KEY),
            ("TEST_AWS_ID", AWS_ACCESS_KEY_ID),
            ("TEST_AWS_SECRET", AWS_SECRET_ACCESS_KEY),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
    }

    /// What the fake recorded of `provider`'s requests (`gemini`, `vertex`, `vertex-anthropic`,
    /// `bedrock`, `azure`, `google-token`, `entra-token`).
    pub fn requests(&self, provider: &str) -> Result<Vec<serde_json::Value>> {
        let answer = self.get(&format!("/_fake/requests?provider={provider}"))?;
        Ok(answer.as_array().cloned().unwrap_or_default())
    }

    /// The fake's counts: `tokens_issued` per issuer, `requests` per provider.
    pub fn stats(&self) -> Result<serde_json::Value> {
        self.get("/_fake/stats")
    }

    fn get(&self, path: &str) -> Result<serde_json::Value> {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(self.address)?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.address)?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let body = text.split_once("\r\n\r\n").map(|(_, body)| body).context("an HTTP answer")?;
        serde_json::from_str(body).with_context(|| format!("{path} answered {body:?}"))
    }
}

impl Drop for FakeCloud {
    fn drop(&mut self) {
        // silent-ok: it may have stopped already.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
