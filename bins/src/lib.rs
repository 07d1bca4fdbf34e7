//! The library half of nodemgr's reference binaries: what the `nodemgr` CLI and the servers
//! share ([`inputs`]), and the servers themselves ([`bashible_apiserver`]) so that the binaries
//! stay thin and tests can reach the pieces.

pub mod bashible_apiserver;
pub mod early_oom;
pub mod fencing_agent;
pub mod inputs;
pub mod node_manager;
