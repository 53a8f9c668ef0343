//! Where untrusted code runs: the container engines and the manager of every container, the
//! hardening policy each gets, the workspaces and shared folders it may see, and the sockets
//! through which a container (or a gateway) reaches the daemon. It imports guard/ and base/.

pub mod container;
pub mod policy;
pub mod shared_dirs;
pub mod sockets;
pub mod workspace;
