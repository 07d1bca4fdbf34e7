//! The cloud port: create, delete, list and look up the machines of CloudEphemeral groups.
//! `nodemgr-cloud` implements it over the EC2 API, `nodemgr-sim` in memory; the machine
//! controller ([`crate::machines`]) decides what to call.
//!
//! # Contract
//! - Methods are `async` (`async-trait`, `Send` futures) and take `&self`.
//! - **Creation is idempotent.** [`CreateInstance::client_token`] identifies the request:
//!   creating again with the same token returns the machine the first call created (or is
//!   creating) and never a second one, so a retry after a timeout is always safe. The token is
//!   derived from the machine name ([`client_token`]): one name, one machine.
//! - **Deletion is idempotent.** Deleting a machine that is already gone, or going, is `Ok`.
//! - Listing returns every machine of a group that is not terminated, across all pages.
//! - Errors are [`CloudError`]; [`CloudError::is_retryable`] says whether the same call may
//!   succeed later.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::Cause;
use crate::model::Timestamp;

/// Tag naming the NodeGroup of a machine.
pub const TAG_GROUP: &str = "node.deckhouse.io/group";
/// Tag naming the zone of a machine.
pub const TAG_ZONE: &str = "node.deckhouse.io/zone";
/// Tag naming the machine (also its Instance and Node name).
pub const TAG_MACHINE: &str = "Name";

/// What a machine of a group is made of (the provider's instance class, reduced to what
/// creating a machine needs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceClass {
    /// Instance type (`m5.large`).
    pub instance_type: String,
    /// Image (`ami-…`).
    pub image_id: String,
    /// Subnet per zone.
    pub subnets: BTreeMap<String, String>,
    /// Security groups.
    pub security_groups: Vec<String>,
    /// Root disk size in GiB (provider default when `None`).
    pub root_disk_gib: Option<u32>,
    /// Extra tags on every machine.
    pub tags: BTreeMap<String, String>,
}

/// A request to create one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateInstance {
    /// NodeGroup.
    pub group: String,
    /// Zone.
    pub zone: String,
    /// Machine name (`<group>-<hash>-<suffix>`), the Node's name once it joins.
    pub machine: String,
    /// What to create.
    pub class: InstanceClass,
    /// The bootstrap script the machine runs at first boot.
    pub user_data: String,
    /// Idempotency token ([`client_token`] of the machine name).
    pub client_token: String,
}

/// A machine's state as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InstanceState {
    /// Being created.
    Pending,
    /// Running.
    Running,
    /// Being stopped.
    Stopping,
    /// Stopped.
    Stopped,
    /// Being terminated.
    ShuttingDown,
    /// Gone.
    Terminated,
    /// Anything else the provider says.
    Other(String),
}

impl InstanceState {
    /// The state from the provider's name (`pending`, `running`, `shutting-down`, …).
    pub fn parse(name: &str) -> Self {
        match name {
            "pending" => Self::Pending,
            "running" => Self::Running,
            "stopping" => Self::Stopping,
            "stopped" => Self::Stopped,
            "shutting-down" => Self::ShuttingDown,
            "terminated" => Self::Terminated,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the machine exists (is not going or gone).
    pub fn exists(&self) -> bool {
        !matches!(self, Self::ShuttingDown | Self::Terminated)
    }
}

/// A machine as the provider knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudInstance {
    /// The provider ID a Node of this machine carries in `spec.providerID`.
    pub provider_id: String,
    /// The provider's instance ID.
    pub instance_id: String,
    /// NodeGroup (from its tag).
    pub group: String,
    /// Zone.
    pub zone: String,
    /// Machine name (from its tag).
    pub machine: String,
    /// State.
    pub state: InstanceState,
    /// When it was launched.
    pub launched: Option<Timestamp>,
}

/// What went wrong talking to the cloud.
///
/// The kind decides what the caller does ([`CloudError::is_retryable`]); the message is the
/// API's; `source` is the adapter's own error when there is one (the HTTP client's, the
/// signer's), so logs can print the whole chain ([`super::ErrorChain`]). Build one with the
/// constructors ([`CloudError::unavailable`], …) and [`CloudError::with_source`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// The provider throttles us (`RequestLimitExceeded`): retry later.
    #[error("throttled by the cloud API: {message}")]
    Throttled {
        /// The API's code and message.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// The API cannot be reached or answered 5xx.
    #[error("cloud API unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The adapter's error (the connection's, the timeout's).
        #[source]
        source: Option<Cause>,
    },
    /// The machine does not exist.
    #[error("no such machine: {message}")]
    NotFound {
        /// The API's code and message.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// The credentials are wrong or lack a permission.
    #[error(
        "cloud API refused the credentials: {code}: {message}; check the access key and its permissions"
    )]
    AuthFailed {
        /// The API's error code.
        code: String,
        /// The API's message.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// No capacity for the instance type in the zone.
    #[error("no capacity: {message}; try another instance type or zone")]
    InsufficientCapacity {
        /// The API's code and message.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// The request is wrong (bad image, subnet, parameter).
    #[error("cloud API rejected the request: {code}: {message}")]
    InvalidRequest {
        /// The API's error code.
        code: String,
        /// The API's message.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// Anything else.
    #[error("cloud API error: {message}")]
    Other {
        /// What failed.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
}

impl CloudError {
    /// [`CloudError::Throttled`] without a cause.
    pub fn throttled(message: impl Into<String>) -> Self {
        Self::Throttled {
            message: message.into(),
            source: None,
        }
    }

    /// [`CloudError::Unavailable`] without a cause.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// [`CloudError::NotFound`] without a cause.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound {
            message: message.into(),
            source: None,
        }
    }

    /// [`CloudError::AuthFailed`] without a cause.
    pub fn auth_failed(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::AuthFailed {
            code: code.into(),
            message: message.into(),
            source: None,
        }
    }

    /// [`CloudError::InsufficientCapacity`] without a cause.
    pub fn insufficient_capacity(message: impl Into<String>) -> Self {
        Self::InsufficientCapacity {
            message: message.into(),
            source: None,
        }
    }

    /// [`CloudError::InvalidRequest`] without a cause.
    pub fn invalid_request(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            code: code.into(),
            message: message.into(),
            source: None,
        }
    }

    /// [`CloudError::Other`] without a cause.
    pub fn other(message: impl Into<String>) -> Self {
        Self::Other {
            message: message.into(),
            source: None,
        }
    }

    /// The same error caused by `error` (its [`std::error::Error::source`]).
    #[must_use]
    pub fn with_source(self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.with_cause(Cause::new(error))
    }

    /// The same error caused by `cause`.
    #[must_use]
    pub fn with_cause(mut self, cause: Cause) -> Self {
        match &mut self {
            Self::Throttled { source, .. }
            | Self::Unavailable { source, .. }
            | Self::NotFound { source, .. }
            | Self::AuthFailed { source, .. }
            | Self::InsufficientCapacity { source, .. }
            | Self::InvalidRequest { source, .. }
            | Self::Other { source, .. } => *source = Some(cause),
        }
        self
    }

    /// The API's message (or what failed), without the kind's prefix and the code.
    pub fn message(&self) -> &str {
        match self {
            Self::Throttled { message, .. }
            | Self::Unavailable { message, .. }
            | Self::NotFound { message, .. }
            | Self::AuthFailed { message, .. }
            | Self::InsufficientCapacity { message, .. }
            | Self::InvalidRequest { message, .. }
            | Self::Other { message, .. } => message,
        }
    }

    /// The adapter's error, when it kept one.
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            Self::Throttled { source, .. }
            | Self::Unavailable { source, .. }
            | Self::NotFound { source, .. }
            | Self::AuthFailed { source, .. }
            | Self::InsufficientCapacity { source, .. }
            | Self::InvalidRequest { source, .. }
            | Self::Other { source, .. } => source.as_ref(),
        }
    }

    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Throttled { .. } | Self::Unavailable { .. } | Self::InsufficientCapacity { .. }
        )
    }
}

/// Creates and deletes machines.
#[async_trait]
pub trait CloudApi: Send + Sync {
    /// Creates a machine, or returns the one an earlier call with the same client token
    /// created.
    ///
    /// # Errors
    /// [`CloudError`].
    async fn create_instance(&self, request: &CreateInstance) -> Result<CloudInstance, CloudError>;

    /// Deletes a machine by provider ID; `Ok` when it is already gone.
    ///
    /// # Errors
    /// [`CloudError`] (never `NotFound`).
    async fn delete_instance(&self, provider_id: &str) -> Result<(), CloudError>;

    /// Every machine of `group` that is not terminated.
    ///
    /// # Errors
    /// [`CloudError`].
    async fn list_group_instances(&self, group: &str) -> Result<Vec<CloudInstance>, CloudError>;

    /// The machine with this provider ID, `None` when the provider does not know it (or it is
    /// terminated).
    ///
    /// # Errors
    /// [`CloudError`].
    async fn get_instance(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudError>;
}

/// The idempotency token of a machine: `nodemgr-` and 40 hex digits of the SHA-256 of its
/// name (EC2 accepts up to 64 ASCII characters).
pub fn client_token(machine: &str) -> String {
    let digest = Sha256::digest(machine.as_bytes());
    let hex: String = digest.iter().take(20).map(|b| format!("{b:02x}")).collect();
    format!("nodemgr-{hex}")
}

/// An AWS provider ID: `aws:///<zone>/<instance-id>`, as the AWS cloud provider writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsProviderId {
    /// Availability zone.
    pub zone: String,
    /// Instance ID.
    pub instance_id: String,
}

impl AwsProviderId {
    /// Reads `aws:///<zone>/<id>` (also `aws://<zone>/<id>`).
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix("aws://")?;
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let (zone, id) = rest.split_once('/')?;
        (!zone.is_empty() && !id.is_empty() && !id.contains('/')).then(|| Self {
            zone: zone.to_owned(),
            instance_id: id.to_owned(),
        })
    }
}

impl fmt::Display for AwsProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "aws:///{}/{}", self.zone, self.instance_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let id = AwsProviderId::parse("aws:///eu-west-1a/i-0123").unwrap();
        assert_eq!(id.zone, "eu-west-1a");
        assert_eq!(id.instance_id, "i-0123");
        assert_eq!(id.to_string(), "aws:///eu-west-1a/i-0123");
        assert_eq!(
            AwsProviderId::parse("aws://eu-west-1a/i-1")
                .unwrap()
                .instance_id,
            "i-1"
        );
        for bad in [
            "gce:///z/i",
            "aws:///",
            "aws:///zone",
            "aws:///z/i/x",
            "aws:////i",
        ] {
            assert_eq!(AwsProviderId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn client_tokens_are_stable_per_name_and_fit_ec2() {
        let a = client_token("worker-abc12-x7k2p");
        assert_eq!(a, client_token("worker-abc12-x7k2p"));
        assert_ne!(a, client_token("worker-abc12-x7k2q"));
        assert!(a.len() <= 64 && a.is_ascii());
    }

    #[test]
    fn states_parse_and_tell_existence() {
        assert_eq!(InstanceState::parse("running"), InstanceState::Running);
        assert!(InstanceState::parse("pending").exists());
        assert!(!InstanceState::parse("shutting-down").exists());
        assert!(!InstanceState::parse("terminated").exists());
        assert_eq!(
            InstanceState::parse("weird"),
            InstanceState::Other("weird".into())
        );
        assert!(CloudError::throttled("x").is_retryable());
        assert!(!CloudError::not_found("x").is_retryable());
    }
}
