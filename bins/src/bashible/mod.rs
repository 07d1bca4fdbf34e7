//! `bashible`: the node agent. PLACEHOLDER DOC
pub mod bundle_source;
pub mod layout;
pub mod lock;
pub mod node_api;
pub mod secret;
pub mod state_files;
pub mod step_runner;
