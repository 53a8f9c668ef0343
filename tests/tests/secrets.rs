//! `baaahtd secrets` on the real binary: values from standard input only, names-only listing,
//! a wrong passphrase refused with the file untouched, and concurrent writers losing nothing.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use baaaht_tests::bin;

struct Store {
    temp: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::write(temp.path().join("passphrase"), "correct horse battery staple\n").expect("passphrase");
        std::fs::write(temp.path().join("wrong"), "not the passphrase\n").expect("wrong passphrase");
        Store { temp }
    }

    fn command(&self, passphrase: &str, args: &[&str]) -> Command {
        let mut command = Command::new(bin("baaahtd"));
        command
            .arg("secrets")
            .args(args)
            .env_clear()
            .env("BAAAHT_DATA", self.temp.path().join("d"))
            .env("BAAAHT_PASSPHRASE_FILE", self.temp.path().join(passphrase))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    fn set(&self, passphrase: &str, name: &str, value: &str) -> Output {
        let mut child = self.command(passphrase, &["set", name]).spawn().expect("spawn");
        child.stdin.take().expect("stdin").write_all(value.as_bytes()).expect("write value");
        child.wait_with_output().expect("wait")
    }

    fn list(&self) -> Vec<String> {
        let output = self.command("passphrase", &["list"]).output().expect("list");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect()
    }

    fn file(&self) -> std::path::PathBuf {
        self.temp.path().join("d/config/secrets.enc")
    }
}

#[test]
fn set_list_rm_and_a_wrong_passphrase() {
    let store = Store::new();
    let output = store.set("passphrase", "ANTHROPIC_API_KEY", "sk-ant-test-value\n");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(store.set("passphrase", "BRAVE_API_KEY", "brave-value").status.success());
    assert_eq!(store.list(), ["ANTHROPIC_API_KEY", "BRAVE_API_KEY"]);
    let on_disk = std::fs::read(store.file()).expect("file");
    assert!(!on_disk.windows(17).any(|w| w == b"sk-ant-test-value"), "plaintext on disk");

    // A wrong passphrase: refused, named, file untouched.
    let output = store.set("wrong", "OTHER", "x");
    assert_eq!(output.status.code(), Some(77));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("wrong passphrase, or the file was modified; it is left untouched"), "{stderr}");
    assert_eq!(std::fs::read(store.file()).expect("file"), on_disk);

    // A flipped byte is detected.
    let mut tampered = on_disk.clone();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0x80;
    std::fs::write(store.file(), &tampered).expect("tamper");
    let output = store.command("passphrase", &["list"]).output().expect("list");
    assert_eq!(output.status.code(), Some(77));
    assert_eq!(std::fs::read(store.file()).expect("file"), tampered, "a tampered file is never rewritten");
    std::fs::write(store.file(), &on_disk).expect("restore");

    let output = store.command("passphrase", &["rm", "BRAVE_API_KEY"]).output().expect("rm");
    assert!(output.status.success());
    assert_eq!(store.list(), ["ANTHROPIC_API_KEY"]);
    let output = store.command("passphrase", &["rm", "BRAVE_API_KEY"]).output().expect("rm again");
    assert_eq!(output.status.code(), Some(65));

    // Values never come from the command line.
    let output = store.command("passphrase", &["set", "KEY", "on-the-command-line"]).output().expect("argv");
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn without_a_passphrase_source_or_terminal_it_says_what_to_do() {
    let store = Store::new();
    let output = Command::new(bin("baaahtd"))
        .args(["secrets", "set", "KEY"])
        .env_clear()
        .env("BAAAHT_DATA", store.temp.path().join("d"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&output.stderr).contains("set BAAAHT_PASSPHRASE_FILE"));
}

#[test]
fn concurrent_sets_from_two_processes_lose_neither_value() {
    let store = Store::new();
    assert!(store.set("passphrase", "FIRST", "1").status.success());
    for round in 0..3 {
        let spawn = |name: String| {
            let mut child = store.command("passphrase", &["set", &name]).spawn().expect("spawn");
            child.stdin.take().expect("stdin").write_all(format!("value-{name}").as_bytes()).expect("write");
            child
        };
        let a = spawn(format!("A{round}"));
        let b = spawn(format!("B{round}"));
        for child in [a, b] {
            let output = child.wait_with_output().expect("wait");
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        }
    }
    assert_eq!(store.list(), ["A0", "A1", "A2", "B0", "B1", "B2", "FIRST"]);
}
