//! gVisor as the daemon finds it when it starts sandboxes. A registered `runsc` can stop
//! working while the daemon runs (the engine's data root made untraversable, the program
//! removed by an upgrade): then roles set to `auto` run under runc, said once in the log and in
//! `baaaht doctor`, until a sandbox starts again; roles set to `gvisor` are refused with what to
//! fix. Only starts are watched: a running sandbox is not affected.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::RuntimeError;

/// How long roles set to `auto` stay on runc before a start tries gVisor again.
pub const RETRY: Duration = Duration::from_secs(60);

/// Whether gVisor starts sandboxes, as the last starts found.
#[derive(Debug, Default)]
pub struct Health {
    down: Mutex<Option<Down>>,
}

#[derive(Debug, Clone)]
struct Down {
    cause: String,
    retry_at: Instant,
}

impl Health {
    /// Why gVisor does not start sandboxes now; None while it does (or nobody found out).
    pub fn down(&self) -> Option<String> {
        self.down.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|down| down.cause.clone())
    }

    /// Whether the next start should try gVisor: it works, or its retry is due (then the one
    /// caller that gets `true` tries; the others stay on runc until it reports).
    pub fn try_now(&self) -> bool {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        match down.as_mut() {
            None => true,
            Some(down) if Instant::now() >= down.retry_at => {
                down.retry_at = Instant::now() + RETRY;
                true
            }
            Some(_) => false,
        }
    }

    /// A sandbox did not start, for `cause`. True when gVisor was working until now.
    pub fn failed(&self, cause: &str) -> bool {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        let was_up = down.is_none();
        *down = Some(Down { cause: cause.to_string(), retry_at: Instant::now() + RETRY });
        was_up
    }

    /// A sandbox started. True when gVisor was down until now.
    pub fn worked(&self) -> bool {
        self.down.lock().unwrap_or_else(PoisonError::into_inner).take().is_some()
    }
}

/// Whether `error`, from creating or starting a container under gVisor, is gVisor's: the
/// engine's runtime could not make the sandbox (not a missing image, a full disk, an engine
/// away).
pub fn is_sandbox_failure(error: &RuntimeError) -> bool {
    match error {
        RuntimeError::Engine { message, .. } => {
            let message = message.to_ascii_lowercase();
            ["runsc", "sandbox", "oci runtime", "gofer"].iter().any(|word| message.contains(word))
        }
        _ => false,
    }
}

/// Why a sandbox did not start, as a person can act on it: the runtime's program gone or not
/// executable, else the engine's own words, with a folder on the way to its data root whose
/// mode a sandbox may not pass.
pub fn cause(engine_message: &str, program: Option<&Path>, data_root: Option<&Path>) -> String {
    use std::os::unix::fs::PermissionsExt;
    if let Some(program) = program {
        match std::fs::metadata(program) {
            Err(_) => {
                return format!(
                    "the engine's runsc program {} is missing: reinstall Debian's runsc (apt install runsc) \
                     or remove the runtime from /etc/docker/daemon.json",
                    program.display()
                )
            }
            Ok(meta) if meta.permissions().mode() & 0o111 == 0 => {
                return format!("the engine's runsc program {} is not executable: chmod 755 it", program.display())
            }
            Ok(_) => {}
        }
    }
    let mut said = format!("the engine says: {}", engine_message.trim());
    // A folder's mode is a likely cause, not a certain one: said beside the engine's words.
    if let Some(closed) = data_root.and_then(|root| untraversable(root).into_iter().next()) {
        said.push_str("; ");
        said.push_str(&closed);
    }
    said
}

/// The folders on the way to the engine's data root that gVisor's sandbox, which drops its
/// privileges, cannot pass (each as a sentence naming its mode and the fix). The engine makes
/// its data root 0710 and the folders above it 0755: a folder above that others cannot enter,
/// or a data root its group cannot, stops every sandbox.
fn untraversable(root: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = vec![];
    let mut folder = PathBuf::new();
    for part in root.components() {
        folder.push(part);
        let Ok(meta) = std::fs::metadata(&folder) else { continue };
        let mode = meta.permissions().mode() & 0o7777;
        let (needed, wanted) = if folder == root { (0o010, "0710") } else { (0o001, "0755") };
        if mode & needed == 0 {
            found.push(format!(
                "the engine's folder {} is mode {mode:04o} where the engine and Debian make it {wanted}: a sandbox \
                 that cannot pass it does not start (runsc's debug log then says `permission denied` under it); \
                 chmod {wanted} {}",
                folder.display(),
                folder.display()
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_auto_on_runc_until_its_retry_and_a_start_brings_it_back() {
        let health = Health::default();
        assert!(health.try_now() && health.down().is_none());
        assert!(health.failed("the data root"), "newly down");
        assert!(!health.failed("the data root"), "still down");
        assert!(!health.try_now(), "no retry before it is due");
        assert_eq!(health.down().as_deref(), Some("the data root"));
        health.down.lock().expect("lock").as_mut().expect("down").retry_at = Instant::now();
        assert!(health.try_now(), "the retry is due");
        assert!(!health.try_now(), "one caller retries");
        assert!(health.worked() && !health.worked());
        assert!(health.down().is_none());
    }

    #[test]
    fn the_engines_sandbox_errors_are_told_from_others() {
        let engine = |message: &str| RuntimeError::Engine { operation: "start a container", message: message.into() };
        assert!(is_sandbox_failure(&engine(
            "OCI runtime create failed: creating container: cannot create sandbox: cannot read client sync file: \
             waiting for sandbox to start: EOF: unknown"
        )));
        assert!(!is_sandbox_failure(&engine("No such image: baaaht/base:latest")));
        assert!(!is_sandbox_failure(&RuntimeError::Hung { operation: "start a container", seconds: 30 }));
    }

    #[test]
    fn the_cause_names_a_missing_program_then_a_closed_folder_then_the_engines_words() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("docker");
        std::fs::create_dir(&root).expect("root");
        let missing = dir.path().join("runsc");
        assert!(cause("EOF", Some(&missing), Some(&root)).contains("is missing"));
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let said = cause("EOF", None, Some(&root));
        assert!(said.starts_with("the engine says: EOF; ") && said.contains("is mode 0700"), "{said}");
        assert!(said.contains("chmod 0710"), "{said}");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o710)).expect("chmod");
        assert_eq!(cause("EOF ", None, Some(&root)), "the engine says: EOF");
    }
}
