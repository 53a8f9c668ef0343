//! The workers and their supervision: the agent pool and its peers, tool calls and tool
//! containers, MCP servers, skills, the file-based IPC folders, container health, and the
//! gateways the daemon runs. It imports people/ and below.

pub mod agents;
pub mod gateways;
pub mod health;
pub mod ipc;
pub mod mcp;
pub mod peers;
pub mod skills;
pub mod slots;
pub mod tools;
