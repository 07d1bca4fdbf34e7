//! nodemgr's cloud adapter: the core's cloud port ([`nodemgr_core::ports::CloudApi`]) over the
//! EC2 Query API (version 2016-11-15), for CloudEphemeral groups on AWS and EC2-compatible
//! endpoints.
//!
//! - [`Ec2Client`] signs requests with SigV4 (`aws-sigv4`), sends them with reqwest (rustls
//!   with ring), retries throttling, 5xx and connection errors with jittered backoff
//!   ([`retry`]), maps the API's other errors to typed [`CloudError`]s carrying its code and
//!   message, follows every page of a listing and counts its calls ([`ApiCalls`]).
//! - [`Ec2Config`] comes from explicit values, the AWS tools' environment variables, or the
//!   cloud provider Secret ([`config::CLOUD_PROVIDER_SECRET`]).
//! - Machines carry the tags `node.deckhouse.io/group`, `node.deckhouse.io/zone` and `Name`;
//!   provider IDs are `aws:///<zone>/<instance-id>`.
//!
//! [`CloudError`]: nodemgr_core::ports::CloudError

pub mod client;
pub mod config;
pub mod query;
pub mod response;
pub mod retry;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::{ApiCalls, Ec2Client};
pub use config::{ConfigError, Credentials, Ec2Config};
pub use query::Filter;
pub use response::Ec2Instance;
pub use retry::Backoff;
