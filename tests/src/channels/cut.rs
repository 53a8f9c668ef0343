//! A relay on loopback in front of a real server that a case can cut, as a network does: while
//! cut, every connection through it is closed and a new one is closed as soon as it is taken.
//! How a channel whose service is a real server (a mail server) loses it for the health case.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A relay from a port of its own to `127.0.0.1:{target}`; stopped on drop.
pub struct Cut {
    pub port: u16,
    offline: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    relay: tokio::task::JoinHandle<()>,
}

impl Cut {
    pub async fn start(target: u16) -> std::io::Result<Cut> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let (offline, open) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(vec![])));
        let relay = tokio::spawn({
            let (offline, open) = (offline.clone(), open.clone());
            async move {
                while let Ok((mut near, _)) = listener.accept().await {
                    if offline.load(Ordering::SeqCst) {
                        continue;
                    }
                    let carried = tokio::spawn(async move {
                        if let Ok(mut far) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
                            // silent-ok: either side hanging up ends the relay, as a network would.
                            let _ = tokio::io::copy_bidirectional(&mut near, &mut far).await;
                        }
                    });
                    open.lock().unwrap_or_else(PoisonError::into_inner).push(carried.abort_handle());
                }
            }
        });
        Ok(Cut { port, offline, open, relay })
    }

    /// Cuts the relay (every connection closed, new ones closed at once) or, with `false`,
    /// mends it.
    pub fn set_offline(&self, offline: bool) {
        self.offline.store(offline, Ordering::SeqCst);
        if offline {
            for carried in self.open.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                carried.abort();
            }
        }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        self.set_offline(true);
        self.relay.abort();
    }
}
