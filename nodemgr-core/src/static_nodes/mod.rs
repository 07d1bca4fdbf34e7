//! Static nodes: what Cluster API Provider Static does for Deckhouse (docs/deckhouse.md §2, the CAPS
//! StaticMachine state diagram), with Deckhouse's names. Decides which
//! StaticInstance a Static or CloudStatic group bootstraps, adopts or cleans up, and when.
//!
//! # Phases
//! `status.currentStatus.phase` of a StaticInstance moves
//! `Pending → Bootstrapping → Running → Cleaning → Pending`, the instance being reusable;
//! `Error` holds an instance whose last operation failed or whose credentials or address need a
//! fix, with the reason in its `Ready` condition ([`ErrorReason`], [`CONDITION_TYPE`]).
//!
//! # Binding
//! nodemgr has no StaticMachine objects: an instance taken by a group has `status.machineRef`
//! pointing at the NodeGroup ([`machine_ref_for`], [`bound_group`]). An unbound instance belongs
//! to no group.
//!
//! # Using it
//! [`StaticNodes::step`] takes a [`StaticSnapshot`] (groups, instances, credentials, nodes)
//! and `now`, and returns a [`StaticPlan`] of [`StaticCommand`]s to apply in order. The executor
//! persists each command's status change first, then runs the SSH operation of a
//! [`StaticCommand::Bootstrap`] or [`StaticCommand::Cleanup`] and reports its end with
//! [`StaticNodes::handle_finished`]; [`StaticNodes::next_deadline`] says when to reconcile again
//! if nothing else happens (a timeout or the end of a backoff). `StaticNodes` keeps only what
//! the API does not hold (operations in flight, failure counts); it is sans-I/O and
//! deterministic: the same snapshots, outcomes and times give the same commands.
//!
//! # Rules
//! - **Counting.** A group *occupies* its bound instances that are `Bootstrapping`, `Running`
//!   or in a bootstrap `Error` (they will be retried), unless they are being cleaned up. A plan
//!   brings the occupied count to `staticInstances.count` (default 0).
//! - **Which instance is bootstrapped.** Unbound `Pending` instances that match the group's
//!   `labelSelector` (empty: any), are not being deleted, have valid credentials and address,
//!   and were not taken by an earlier group of the same plan (groups go in name order). Among
//!   them, instances that can be adopted come first, then by name. An instance annotated with
//!   [`keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE`] is adopted when a Node has its address (or its
//!   name) and carries no other group's label; it is never bootstrapped, and without such a Node
//!   it waits.
//! - **Which instance is cleaned up** when a group occupies more than `count`: bound instances
//!   in a bootstrap `Error` first, then `Running` ones whose Node is missing or not Ready, then
//!   the newest `Running` ones (Node creation time, then name, descending). An instance that is
//!   `Bootstrapping` is never interrupted: it is cleaned after it ends, if still in excess.
//! - **Deletion.** A deleted instance that was never bound (or was released) loses its finalizer
//!   ([`keys::FINALIZER_STATIC_INSTANCE`]) at once; a bound one is cleaned up first and released
//!   with its finalizer removed. Every instance gets the finalizer before it is bootstrapped.
//! - **Completion.** A bootstrap is complete when the executor reported the script's success
//!   and a Node with the instance's address (or name) carries
//!   [`keys::ANNOTATION_CONFIGURATION_CHECKSUM`] (the bootstrap script sets it last).
//! - **Time.** A bootstrap not complete [`StaticConfig::bootstrap_timeout`] after it started, or
//!   a cleanup not reported within [`StaticConfig::cleanup_timeout`], is an `Error`
//!   (`BootstrapTimedOut`, `CleanupTimedOut`). A failed or timed-out operation is retried after
//!   an exponential backoff from [`StaticConfig::retry_initial`] up to
//!   [`StaticConfig::retry_max`]; wrong credentials are not retried at all until they change.
//! - **Refused before starting.** A bootstrap that failed before anything ran on the machine
//!   ([`Cause::before_start`]: unreachable, key refused, host key changed, sudo refused,
//!   another operation on the same machine still running)
//!   returns the instance to `Pending`, unbound, with the reason in its `Ready` condition
//!   ([`StaticCommand::ReturnToPending`]); the group may take another free instance meanwhile,
//!   and this one is not taken again before its backoff ends.
//! - **Credentials.** An instance whose SSHCredentials are missing or invalid, or whose address
//!   is not an IPv4 address, goes to `Error` with a reason naming what to fix; it returns to
//!   `Pending` (or its operation resumes) once fixed.
//! - **A removed group.** Instances bound to a group that no longer exists, or no longer has
//!   `staticInstances`, are cleaned up. The selector is checked only when an instance is taken:
//!   relabelling a Running instance does not clean it up (Deckhouse's selector is immutable).
//!
//! # Guarantees (property tests in `tests/static_nodes.rs`)
//! - After a plan, no group has more `Running` instances than its count, and a plan that
//!   bootstraps or adopts into a group leaves at most `count` instances `Bootstrapping` or
//!   `Running` in it.
//! - A cleanup names only an instance bound to that group.
//! - An instance with the skip-bootstrap annotation is never bootstrapped.
//! - No instance is bootstrapped or cleaned while an operation on it is in flight.
//! - Every deleted instance that was ever bound passes through `Cleaning` before its finalizer
//!   is removed.

mod choose;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::model::{
    LabelSelector, Node, NodeGroup, NodeType, ObjectReference, SshCredentials, StaticInstance,
    StaticInstancePhase, Timestamp, keys,
};
use crate::ports::RemoteShellError;
use crate::validate::{validate_ssh_credentials, validate_static_instance};

/// The condition type holding an instance's error reason (`status: "False"`, `severity: Error`,
/// `reason`: [`ErrorReason::as_str`]).
pub const CONDITION_TYPE: &str = "Ready";

/// Timeouts and backoff of static node operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticConfig {
    /// How long a bootstrap may take until the Node reports its checksum (default 20 min).
    pub bootstrap_timeout: Duration,
    /// How long a cleanup may take (default 10 min).
    pub cleanup_timeout: Duration,
    /// Wait before the first retry of a failed operation (default 10 s).
    pub retry_initial: Duration,
    /// Longest wait between retries (default 5 min).
    pub retry_max: Duration,
}

impl Default for StaticConfig {
    fn default() -> Self {
        Self {
            bootstrap_timeout: Duration::from_secs(20 * 60),
            cleanup_timeout: Duration::from_secs(10 * 60),
            retry_initial: Duration::from_secs(10),
            retry_max: Duration::from_secs(5 * 60),
        }
    }
}

impl StaticConfig {
    /// The wait before retry number `failures` (1 = after the first failure): doubling from
    /// `retry_initial`, capped at `retry_max`.
    pub fn backoff(&self, failures: u32) -> Duration {
        crate::backoff::Backoff::new(self.retry_initial, self.retry_max).after_failures(failures)
    }
}

/// An SSH operation on an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Run the group's bootstrap script.
    Bootstrap,
    /// Run the cleanup script.
    Cleanup,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bootstrap => "Bootstrap",
            Self::Cleanup => "Cleanup",
        })
    }
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The script or the SSH connection failed.
    Failed,
    /// The operation did not finish in time.
    TimedOut,
    /// The referenced SSHCredentials does not exist.
    CredentialsMissing,
    /// The SSHCredentials is invalid.
    CredentialsInvalid,
    /// `spec.address` is missing or not an IPv4 address.
    AddressInvalid,
    /// The machine cannot be reached (no route, refused, connect timeout).
    Unreachable,
    /// The machine did not accept the SSHCredentials' key.
    AuthFailed,
    /// The machine presented a different host key than the one pinned.
    HostKeyChanged,
    /// sudo refused the SSHCredentials' password.
    SudoFailed,
    /// Another bootstrap or cleanup of the same machine was still running.
    HostBusy,
}

impl Cause {
    const ALL: [Cause; 10] = [
        Self::Failed,
        Self::TimedOut,
        Self::CredentialsMissing,
        Self::CredentialsInvalid,
        Self::AddressInvalid,
        Self::Unreachable,
        Self::AuthFailed,
        Self::HostKeyChanged,
        Self::SudoFailed,
        Self::HostBusy,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "Failed",
            Self::TimedOut => "TimedOut",
            Self::CredentialsMissing => "CredentialsMissing",
            Self::CredentialsInvalid => "CredentialsInvalid",
            Self::AddressInvalid => "AddressInvalid",
            Self::Unreachable => "Unreachable",
            Self::AuthFailed => "AuthFailed",
            Self::HostKeyChanged => "HostKeyChanged",
            Self::SudoFailed => "SudoFailed",
            Self::HostBusy => "HostBusy",
        }
    }

    /// Whether an operation that failed so never started on the machine (nothing there
    /// changed): a bootstrap failing so leaves the instance `Pending`, unbound.
    pub fn before_start(self) -> bool {
        matches!(
            self,
            Self::Unreachable
                | Self::AuthFailed
                | Self::HostKeyChanged
                | Self::SudoFailed
                | Self::HostBusy
        )
    }

    /// Whether the cause is fixed by editing objects (no backoff: checked every reconcile).
    pub fn is_configuration(self) -> bool {
        matches!(
            self,
            Self::CredentialsMissing | Self::CredentialsInvalid | Self::AddressInvalid
        )
    }
}

/// How an SSH operation failed, as the executor reports it to
/// [`StaticNodes::handle_finished`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure ([`Cause::Failed`] when nothing more precise is known).
    pub cause: Cause,
    /// What happened, for people.
    pub message: String,
}

impl Failure {
    /// A failure of the given cause.
    pub fn new(cause: Cause, message: impl Into<String>) -> Self {
        Self {
            cause,
            message: message.into(),
        }
    }

    /// The failure of a remote shell run.
    pub fn of_remote(error: &RemoteShellError) -> Self {
        let cause = match error {
            RemoteShellError::Unreachable { .. }
            | RemoteShellError::Refused { .. }
            | RemoteShellError::Timeout {
                stage: "connect", ..
            } => Cause::Unreachable,
            RemoteShellError::AuthFailed { .. } => Cause::AuthFailed,
            RemoteShellError::HostKeyMismatch { .. } => Cause::HostKeyChanged,
            RemoteShellError::SudoFailed { .. } => Cause::SudoFailed,
            RemoteShellError::Busy { .. } => Cause::HostBusy,
            RemoteShellError::Timeout { .. }
            | RemoteShellError::CommandFailed { .. }
            | RemoteShellError::Other { .. } => Cause::Failed,
        };
        Self::new(cause, error.to_string())
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Self::new(Cause::Failed, message)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self::new(Cause::Failed, message)
    }
}

/// Why an instance is in `Error`: the operation it was in (or about to start) and the cause.
/// Written as the `Ready` condition's reason, e.g. `BootstrapFailed`, `CleanupTimedOut`,
/// `BootstrapCredentialsMissing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorReason {
    /// The operation.
    pub operation: Operation,
    /// The cause.
    pub cause: Cause,
}

impl ErrorReason {
    /// The reason string.
    pub fn as_str(&self) -> String {
        format!("{}{}", self.operation, self.cause.as_str())
    }

    /// Reads a reason string back.
    pub fn parse(text: &str) -> Option<Self> {
        let (operation, rest) = if let Some(rest) = text.strip_prefix("Bootstrap") {
            (Operation::Bootstrap, rest)
        } else {
            (Operation::Cleanup, text.strip_prefix("Cleanup")?)
        };
        let cause = Cause::ALL.into_iter().find(|c| c.as_str() == rest)?;
        Some(Self { operation, cause })
    }

    /// The error reason recorded on an instance (its `Ready` condition), if any.
    pub fn of(instance: &StaticInstance) -> Option<Self> {
        instance
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_TYPE && c.status == "False")
            .and_then(|c| c.reason.as_deref())
            .and_then(Self::parse)
    }
}

impl fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// Why an instance is cleaned up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CleanupReason {
    /// The group has more instances than `staticInstances.count`.
    ScaledDown,
    /// The StaticInstance is being deleted.
    Deleted,
    /// The instance's group no longer exists or no longer takes StaticInstances.
    GroupGone,
}

impl fmt::Display for CleanupReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ScaledDown => "the group has more instances than staticInstances.count",
            Self::Deleted => "the StaticInstance is being deleted",
            Self::GroupGone => "its NodeGroup is gone or no longer takes StaticInstances",
        })
    }
}

/// A decision for the executor. Apply in the plan's order; each command's doc says what to
/// persist and what to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticCommand {
    /// Add [`keys::FINALIZER_STATIC_INSTANCE`] to the instance.
    AddFinalizer {
        /// The StaticInstance.
        instance: String,
    },
    /// Set phase `Bootstrapping` and `machineRef` to the group ([`machine_ref_for`]), then run
    /// the group's bootstrap script on `address` with `credentials`; report the end with
    /// [`StaticNodes::handle_finished`].
    Bootstrap {
        /// The StaticInstance.
        instance: String,
        /// The NodeGroup it joins.
        group: String,
        /// `spec.address`.
        address: String,
        /// Name of the SSHCredentials.
        credentials: String,
        /// 1 for the first try, then counting retries.
        attempt: u32,
    },
    /// Set phase `Running`, `nodeRef` to the node, the `Ready` condition to `True`: the
    /// bootstrap completed.
    MarkRunning {
        /// The StaticInstance.
        instance: String,
        /// Its group.
        group: String,
        /// The Node it became.
        node: String,
    },
    /// Adopt an already joined node without bootstrapping: set phase `Running`, `machineRef`
    /// to the group, `nodeRef` to the node, and remove the skip-bootstrap annotation.
    Adopt {
        /// The StaticInstance.
        instance: String,
        /// The NodeGroup it joins.
        group: String,
        /// The existing Node.
        node: String,
    },
    /// Set phase `Cleaning`, then run the cleanup over SSH (the installed
    /// [`keys::CLEANUP_SCRIPT_PATH`] with [`keys::CLEANUP_SCRIPT_CONFIRMATION`]) and delete
    /// `node` if given; report the end with [`StaticNodes::handle_finished`].
    Cleanup {
        /// The StaticInstance.
        instance: String,
        /// The group it leaves.
        group: String,
        /// The Node to delete afterwards, if one is known.
        node: Option<String>,
        /// `spec.address`.
        address: String,
        /// Name of the SSHCredentials.
        credentials: String,
        /// Why.
        reason: CleanupReason,
        /// 1 for the first try, then counting retries.
        attempt: u32,
    },
    /// The cleanup finished: set phase `Pending`, clear `machineRef`, `nodeRef` and the
    /// `Ready` condition; remove the finalizer when `remove_finalizer`.
    Release {
        /// The StaticInstance.
        instance: String,
        /// Remove [`keys::FINALIZER_STATIC_INSTANCE`] (the instance is being deleted).
        remove_finalizer: bool,
    },
    /// The instance is deleted and holds nothing to clean: remove the finalizer.
    RemoveFinalizer {
        /// The StaticInstance.
        instance: String,
    },
    /// Set phase `Error` and the `Ready` condition `False` with `reason` and `message`; keep
    /// `machineRef`. The executor stops any operation still running on the instance.
    MarkError {
        /// The StaticInstance.
        instance: String,
        /// Why.
        reason: ErrorReason,
        /// What happened and what to fix.
        message: String,
    },
    /// The bootstrap could not start (the machine was not reached or refused the
    /// credentials; nothing on it changed): set phase `Pending`, clear `machineRef` and
    /// `nodeRef`, and set the `Ready` condition `False` with `reason` and `message`. The
    /// instance is not taken again before its backoff ends.
    ReturnToPending {
        /// The StaticInstance.
        instance: String,
        /// Why.
        reason: ErrorReason,
        /// What happened and what to fix.
        message: String,
    },
    /// The configuration problem of an unbound instance is fixed: set phase `Pending` and
    /// clear the `Ready` condition.
    MarkPending {
        /// The StaticInstance.
        instance: String,
    },
}

impl StaticCommand {
    /// The instance the command is about.
    pub fn instance(&self) -> &str {
        match self {
            Self::AddFinalizer { instance }
            | Self::Bootstrap { instance, .. }
            | Self::MarkRunning { instance, .. }
            | Self::Adopt { instance, .. }
            | Self::Cleanup { instance, .. }
            | Self::Release { instance, .. }
            | Self::RemoveFinalizer { instance }
            | Self::MarkError { instance, .. }
            | Self::ReturnToPending { instance, .. }
            | Self::MarkPending { instance } => instance,
        }
    }
}

impl fmt::Display for StaticCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AddFinalizer { instance } => write!(f, "add the finalizer to {instance}"),
            Self::Bootstrap {
                instance,
                group,
                address,
                attempt,
                ..
            } => write!(
                f,
                "bootstrap {instance} ({address}) into group {group} (attempt {attempt})"
            ),
            Self::MarkRunning { instance, node, .. } => {
                write!(f, "mark {instance} Running as node {node}")
            }
            Self::Adopt {
                instance,
                group,
                node,
            } => write!(
                f,
                "adopt node {node} as {instance} of group {group} without bootstrapping"
            ),
            Self::Cleanup {
                instance,
                group,
                reason,
                attempt,
                ..
            } => write!(
                f,
                "clean up {instance} of group {group}: {reason} (attempt {attempt})"
            ),
            Self::Release {
                instance,
                remove_finalizer,
            } => {
                write!(f, "release {instance} back to Pending")?;
                if *remove_finalizer {
                    f.write_str(" and remove its finalizer")?;
                }
                Ok(())
            }
            Self::RemoveFinalizer { instance } => {
                write!(f, "remove the finalizer of deleted {instance}")
            }
            Self::MarkError {
                instance,
                reason,
                message,
            } => write!(f, "mark {instance} Error ({reason}): {message}"),
            Self::ReturnToPending {
                instance,
                reason,
                message,
            } => write!(f, "return {instance} to Pending ({reason}): {message}"),
            Self::MarkPending { instance } => write!(f, "mark {instance} Pending again"),
        }
    }
}

/// Everything a reconcile looks at.
#[derive(Debug, Clone, Copy)]
pub struct StaticSnapshot<'a> {
    /// Every NodeGroup (those of type Static or CloudStatic with `staticInstances` take
    /// instances).
    pub groups: &'a [NodeGroup],
    /// Every StaticInstance.
    pub instances: &'a [StaticInstance],
    /// Every SSHCredentials.
    pub credentials: &'a [SshCredentials],
    /// Every Node.
    pub nodes: &'a [Node],
}

/// The answer of a reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticPlan {
    /// Commands, in the order to apply them.
    pub commands: Vec<StaticCommand>,
    /// Why instances that could move do not, for people (`worker: waiting for a Node with
    /// address 10.0.0.5 to adopt si-3`).
    pub waiting: Vec<String>,
}

/// The `machineRef` of an instance bound to `group`.
pub fn machine_ref_for(group: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("deckhouse.io/v1".into()),
        kind: Some("NodeGroup".into()),
        name: group.to_owned(),
        namespace: None,
        uid: None,
    }
}

/// The group an instance is bound to (its `machineRef` names a NodeGroup).
pub fn bound_group(instance: &StaticInstance) -> Option<&str> {
    let r = instance.status.as_ref()?.machine_ref.as_ref()?;
    (r.kind.as_deref() == Some("NodeGroup") && !r.name.is_empty()).then_some(r.name.as_str())
}

/// The phase of an instance; a new instance without status is `Pending`.
pub fn phase_of(instance: &StaticInstance) -> StaticInstancePhase {
    instance
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.phase.clone())
        .unwrap_or(StaticInstancePhase::Pending)
}

/// Whether a group takes StaticInstances: type Static or CloudStatic with `staticInstances`.
fn takes_instances(group: &NodeGroup) -> bool {
    matches!(
        group.spec.node_type,
        Some(NodeType::Static | NodeType::CloudStatic)
    ) && group.spec.static_instances.is_some()
}

fn group_count(group: &NodeGroup) -> usize {
    let count = group
        .spec
        .static_instances
        .as_ref()
        .and_then(|s| s.count)
        .unwrap_or(0);
    usize::try_from(count).unwrap_or(0)
}

/// An SSH operation nodemgr started and has not yet accounted for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    operation: Operation,
    group: String,
    started: Timestamp,
    attempt: u32,
    /// Reported by the executor: `Ok` or the failure message.
    outcome: Option<Result<(), Failure>>,
}

/// Failures of an instance's operation so far, and when it may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    operation: Operation,
    failures: u32,
    not_before: Timestamp,
}

/// The static node controller's memory: operations in flight and failure counts. Everything
/// else is read from the snapshot each time. Losing it (a restart) is safe: an instance found
/// `Bootstrapping` or `Cleaning` without a known operation gets it again (the scripts are
/// idempotent), and failure counts start over.
#[derive(Debug, Clone, Default)]
pub struct StaticNodes {
    config: StaticConfig,
    in_flight: BTreeMap<String, InFlight>,
    backoff: BTreeMap<String, Backoff>,
}

/// What one reconcile knows about one instance.
#[derive(Debug, Clone)]
struct View<'a> {
    instance: &'a StaticInstance,
    name: &'a str,
    phase: StaticInstancePhase,
    group: Option<String>,
    deleted: bool,
    has_finalizer: bool,
    adopt: bool,
    address: &'a str,
    credentials: &'a str,
    /// Why the instance cannot be reached, if it cannot.
    problem: Option<(Cause, String)>,
    error: Option<ErrorReason>,
    /// The Node with the instance's address or name.
    node: Option<&'a Node>,
}

impl View<'_> {
    fn node_done(&self) -> Option<&str> {
        self.node
            .filter(|n| {
                n.annotations
                    .get(keys::ANNOTATION_CONFIGURATION_CHECKSUM)
                    .is_some_and(|c| !c.is_empty())
            })
            .map(|n| n.name.as_str())
    }
}

fn find_node<'a>(instance: &StaticInstance, nodes: &'a [Node]) -> Option<&'a Node> {
    let by_ref = instance
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .map(|r| r.name.as_str());
    let name = instance.metadata.name.as_deref().unwrap_or_default();
    let address = instance.spec.address.as_deref().unwrap_or_default();
    nodes
        .iter()
        .find(|n| Some(n.name.as_str()) == by_ref)
        .or_else(|| {
            nodes
                .iter()
                .find(|n| !address.is_empty() && n.addresses.iter().any(|a| a == address))
        })
        .or_else(|| nodes.iter().find(|n| n.name == name))
}

/// Whether the instance can be reached: valid address and existing, valid credentials.
fn reachability(
    instance: &StaticInstance,
    credentials: &BTreeMap<&str, &SshCredentials>,
) -> Option<(Cause, String)> {
    let name = instance.metadata.name.as_deref().unwrap_or_default();
    let instance_errors: Vec<String> = validate_static_instance(instance)
        .into_iter()
        .filter(|e| e.path.starts_with("spec."))
        .map(|e| e.to_string())
        .collect();
    if let Some(first) = instance_errors
        .iter()
        .find(|e| e.starts_with("spec.address"))
    {
        return Some((
            Cause::AddressInvalid,
            format!("StaticInstance {name}: {first}"),
        ));
    }
    if !instance_errors.is_empty() {
        return Some((
            Cause::CredentialsMissing,
            format!(
                "StaticInstance {name}: {}; set spec.credentialsRef to an SSHCredentials",
                instance_errors.join("; ")
            ),
        ));
    }
    let reference = instance
        .spec
        .credentials_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .unwrap_or_default();
    let Some(creds) = credentials.get(reference) else {
        return Some((
            Cause::CredentialsMissing,
            format!(
                "SSHCredentials {reference:?} referenced by spec.credentialsRef of \
                 StaticInstance {name} does not exist; create it or fix the reference"
            ),
        ));
    };
    let errors = validate_ssh_credentials(creds);
    if !errors.is_empty() {
        let listed: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Some((
            Cause::CredentialsInvalid,
            format!(
                "SSHCredentials {reference} used by StaticInstance {name} is invalid: {}",
                listed.join("; ")
            ),
        ));
    }
    None
}

impl StaticNodes {
    /// A controller with default timeouts and backoff.
    pub fn new() -> Self {
        Self::default()
    }

    /// A controller with the given timeouts and backoff.
    pub fn with_config(config: StaticConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The timeouts and backoff in use.
    pub fn config(&self) -> &StaticConfig {
        &self.config
    }

    /// The executor reports the end of an operation it started for a
    /// [`StaticCommand::Bootstrap`] or [`StaticCommand::Cleanup`]: `Ok(())`, or the failure
    /// (shown to people in the instance's condition; a bootstrap failing
    /// [before it started](Cause::before_start) returns the instance to `Pending`). A report for an operation nodemgr no
    /// longer waits for (it timed out, or another operation started since) is ignored.
    pub fn handle_finished(
        &mut self,
        instance: &str,
        operation: Operation,
        outcome: Result<(), Failure>,
    ) {
        if let Some(flight) = self.in_flight.get_mut(instance)
            && flight.operation == operation
            && flight.outcome.is_none()
        {
            flight.outcome = Some(outcome);
        }
    }

    /// Whether an operation on `instance` is in flight (started and not yet accounted for).
    pub fn in_flight(&self, instance: &str) -> Option<Operation> {
        self.in_flight.get(instance).map(|f| f.operation)
    }

    /// The earliest time a reconcile would decide something new without any other change: an
    /// operation's timeout or the end of a backoff.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let timeouts = self.in_flight.values().map(|f| {
            f.started
                + match f.operation {
                    Operation::Bootstrap => self.config.bootstrap_timeout,
                    Operation::Cleanup => self.config.cleanup_timeout,
                }
        });
        let retries = self.backoff.values().map(|b| b.not_before);
        timeouts.chain(retries).min()
    }

    fn timeout(&self, operation: Operation) -> Duration {
        match operation {
            Operation::Bootstrap => self.config.bootstrap_timeout,
            Operation::Cleanup => self.config.cleanup_timeout,
        }
    }

    fn fail(&mut self, instance: &str, operation: Operation, now: Timestamp) {
        let failures = self
            .backoff
            .get(instance)
            .filter(|b| b.operation == operation)
            .map_or(1, |b| b.failures.saturating_add(1));
        self.backoff.insert(
            instance.to_owned(),
            Backoff {
                operation,
                failures,
                not_before: now + self.config.backoff(failures),
            },
        );
    }

    fn may_retry(&self, instance: &str, operation: Operation, now: Timestamp) -> bool {
        self.backoff
            .get(instance)
            .is_none_or(|b| b.operation != operation || b.not_before <= now)
    }

    fn attempt(&self, instance: &str, operation: Operation) -> u32 {
        self.backoff
            .get(instance)
            .filter(|b| b.operation == operation)
            .map_or(1, |b| b.failures.saturating_add(1))
    }

    fn start(&mut self, view: &View<'_>, group: &str, operation: Operation, now: Timestamp) -> u32 {
        let attempt = self.attempt(view.name, operation);
        self.in_flight.insert(
            view.name.to_owned(),
            InFlight {
                operation,
                group: group.to_owned(),
                started: now,
                attempt,
                outcome: None,
            },
        );
        attempt
    }

    /// Decides what happens next to every StaticInstance. See the module docs for the rules.
    #[must_use = "the plan's commands must be applied"]
    pub fn step(&mut self, snapshot: &StaticSnapshot<'_>, now: Timestamp) -> StaticPlan {
        let mut plan = StaticPlan::default();
        let credentials: BTreeMap<&str, &SshCredentials> = snapshot
            .credentials
            .iter()
            .filter_map(|c| c.metadata.name.as_deref().map(|n| (n, c)))
            .collect();
        let groups: BTreeMap<&str, &NodeGroup> = snapshot
            .groups
            .iter()
            .filter(|g| takes_instances(g))
            .map(|g| (g.name(), g))
            .collect();

        // Forget what concerns instances that no longer exist.
        let names: BTreeSet<&str> = snapshot
            .instances
            .iter()
            .filter_map(|i| i.metadata.name.as_deref())
            .collect();
        self.in_flight.retain(|k, _| names.contains(k.as_str()));
        self.backoff.retain(|k, _| names.contains(k.as_str()));

        let mut views: Vec<View<'_>> = snapshot
            .instances
            .iter()
            .filter_map(|instance| {
                let name = instance.metadata.name.as_deref()?;
                let meta = &instance.metadata;
                Some(View {
                    instance,
                    name,
                    phase: phase_of(instance),
                    group: bound_group(instance).map(str::to_owned),
                    deleted: meta.deletion_timestamp.is_some(),
                    has_finalizer: meta
                        .finalizers
                        .iter()
                        .any(|f| f == keys::FINALIZER_STATIC_INSTANCE),
                    adopt: meta
                        .annotations
                        .contains_key(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE),
                    address: instance.spec.address.as_deref().unwrap_or_default(),
                    credentials: instance
                        .spec
                        .credentials_ref
                        .as_ref()
                        .map(|r| r.name.as_str())
                        .unwrap_or_default(),
                    problem: reachability(instance, &credentials),
                    error: ErrorReason::of(instance),
                    node: find_node(instance, snapshot.nodes),
                })
            })
            .collect();
        views.sort_by(|a, b| a.name.cmp(b.name));

        // An operation nodemgr started is the truth about an instance even before the executor
        // has written the phase back.
        for view in &mut views {
            if let Some(flight) = self.in_flight.get(view.name) {
                view.group = Some(flight.group.clone());
                if flight.outcome.is_none() {
                    view.phase = match flight.operation {
                        Operation::Bootstrap => StaticInstancePhase::Bootstrapping,
                        Operation::Cleanup => StaticInstancePhase::Cleaning,
                    };
                }
            }
        }

        // Pass 1: each instance on its own (finalizers, operations in flight, errors).
        for view in &mut views {
            self.reconcile_instance(view, &groups, now, &mut plan);
        }

        // Pass 2: each group keeps its count.
        let mut taken: BTreeSet<String> = BTreeSet::new();
        for (name, group) in &groups {
            self.reconcile_group(name, group, &mut views, &mut taken, now, &mut plan);
        }
        plan
    }

    /// Sets `view.phase` to what it is once the plan is applied.
    // The cleanup-error arm must not fall through to the next arms while it backs off, so its
    // retry condition stays inside the arm.
    #[allow(clippy::collapsible_match)]
    fn reconcile_instance(
        &mut self,
        view: &mut View<'_>,
        groups: &BTreeMap<&str, &NodeGroup>,
        now: Timestamp,
        plan: &mut StaticPlan,
    ) {
        let name = view.name.to_owned();
        if !view.deleted && !view.has_finalizer {
            plan.commands.push(StaticCommand::AddFinalizer {
                instance: name.clone(),
            });
            view.has_finalizer = true;
        }

        // Outcomes and timeouts of operations in flight.
        if let Some(flight) = self.in_flight.get(&name).cloned() {
            let timed_out = now.saturating_since(flight.started) >= self.timeout(flight.operation);
            match (&flight.outcome, flight.operation) {
                (Some(Ok(())), Operation::Cleanup) => {
                    self.in_flight.remove(&name);
                    self.backoff.remove(&name);
                    plan.commands.push(StaticCommand::Release {
                        instance: name.clone(),
                        remove_finalizer: view.deleted,
                    });
                    view.phase = StaticInstancePhase::Pending;
                    view.group = None;
                    view.error = None;
                    if view.deleted {
                        view.has_finalizer = false;
                    }
                    return;
                }
                (Some(Err(failure)), Operation::Bootstrap) if failure.cause.before_start() => {
                    // Nothing ran on the machine: give the instance back, with the reason,
                    // and do not take it again before the backoff ends.
                    self.in_flight.remove(&name);
                    self.fail(&name, Operation::Bootstrap, now);
                    let reason = ErrorReason {
                        operation: Operation::Bootstrap,
                        cause: failure.cause,
                    };
                    plan.commands.push(StaticCommand::ReturnToPending {
                        instance: name.clone(),
                        reason,
                        message: format!("Bootstrap could not start: {}", failure.message),
                    });
                    view.phase = StaticInstancePhase::Pending;
                    view.group = None;
                    view.error = Some(reason);
                }
                (Some(Err(failure)), operation) => {
                    self.in_flight.remove(&name);
                    self.fail(&name, operation, now);
                    let reason = ErrorReason {
                        operation,
                        cause: failure.cause,
                    };
                    plan.commands.push(StaticCommand::MarkError {
                        instance: name.clone(),
                        reason,
                        message: format!("{operation} failed: {}", failure.message),
                    });
                    view.phase = StaticInstancePhase::Error;
                    view.error = Some(reason);
                }
                (outcome, Operation::Bootstrap) => {
                    // Success needs both: the script ended well (so nothing runs on the
                    // machine any more) and the Node reports a checksum (a stale Node of an
                    // earlier life alone proves nothing).
                    if let (Some(Ok(())), Some(node)) = (outcome, view.node_done()) {
                        self.in_flight.remove(&name);
                        self.backoff.remove(&name);
                        plan.commands.push(StaticCommand::MarkRunning {
                            instance: name.clone(),
                            group: flight.group.clone(),
                            node: node.to_owned(),
                        });
                        view.phase = StaticInstancePhase::Running;
                        view.error = None;
                    } else if timed_out {
                        self.in_flight.remove(&name);
                        self.fail(&name, Operation::Bootstrap, now);
                        let reason = ErrorReason {
                            operation: Operation::Bootstrap,
                            cause: Cause::TimedOut,
                        };
                        let what = if outcome.is_some() {
                            "the bootstrap script ended but no Node with the instance's address \
                             reported a configuration checksum"
                        } else {
                            "the bootstrap did not finish"
                        };
                        plan.commands.push(StaticCommand::MarkError {
                            instance: name.clone(),
                            reason,
                            message: format!(
                                "{what} within {} s; check the node's bashible log",
                                self.config.bootstrap_timeout.as_secs()
                            ),
                        });
                        view.phase = StaticInstancePhase::Error;
                        view.error = Some(reason);
                    } else {
                        view.phase = StaticInstancePhase::Bootstrapping;
                        return;
                    }
                }
                (_, Operation::Cleanup) => {
                    if timed_out {
                        self.in_flight.remove(&name);
                        self.fail(&name, Operation::Cleanup, now);
                        let reason = ErrorReason {
                            operation: Operation::Cleanup,
                            cause: Cause::TimedOut,
                        };
                        plan.commands.push(StaticCommand::MarkError {
                            instance: name.clone(),
                            reason,
                            message: format!(
                                "the cleanup did not finish within {} s",
                                self.config.cleanup_timeout.as_secs()
                            ),
                        });
                        view.phase = StaticInstancePhase::Error;
                        view.error = Some(reason);
                    } else {
                        view.phase = StaticInstancePhase::Cleaning;
                        return;
                    }
                }
            }
        }

        let group_alive = view
            .group
            .as_deref()
            .is_some_and(|g| groups.contains_key(g));
        match (&view.phase, view.group.clone()) {
            // Unbound: nothing to clean.
            (StaticInstancePhase::Pending | StaticInstancePhase::Error, None)
            | (StaticInstancePhase::Unknown(_), None) => {
                if view.deleted {
                    if view.has_finalizer {
                        plan.commands.push(StaticCommand::RemoveFinalizer {
                            instance: name.clone(),
                        });
                        view.has_finalizer = false;
                    }
                    return;
                }
                match (&view.problem, view.phase == StaticInstancePhase::Error) {
                    (Some((cause, message)), _) => {
                        let reason = ErrorReason {
                            operation: Operation::Bootstrap,
                            cause: *cause,
                        };
                        self.mark_error(view, reason, message.clone(), plan);
                    }
                    (None, true) => {
                        plan.commands.push(StaticCommand::MarkPending {
                            instance: name.clone(),
                        });
                        view.phase = StaticInstancePhase::Pending;
                        view.error = None;
                    }
                    (None, false) => {}
                }
            }
            // Found mid-operation without a record (a restart): the operation runs again
            // below, in the group pass for a bootstrap, here for a cleanup.
            (StaticInstancePhase::Bootstrapping, Some(group)) => {
                if view.deleted || !group_alive {
                    // Nothing runs on it (no operation is in flight): clean it up.
                    self.start_cleanup(view, &group, cleanup_reason(view, group_alive), now, plan);
                } else if let Some(node) = view.node_done() {
                    plan.commands.push(StaticCommand::MarkRunning {
                        instance: name.clone(),
                        group: view.group.clone().unwrap_or_default(),
                        node: node.to_owned(),
                    });
                    view.phase = StaticInstancePhase::Running;
                    view.error = None;
                }
            }
            (StaticInstancePhase::Cleaning, Some(group)) => {
                self.start_cleanup(view, &group, cleanup_reason(view, group_alive), now, plan);
            }
            (StaticInstancePhase::Error, Some(group))
                if view
                    .error
                    .is_some_and(|e| e.operation == Operation::Cleanup) =>
            {
                if self.may_retry(&name, Operation::Cleanup, now) {
                    self.start_cleanup(view, &group, cleanup_reason(view, group_alive), now, plan);
                }
            }
            (StaticInstancePhase::Running | StaticInstancePhase::Error, Some(group))
                if view.deleted || !group_alive =>
            {
                self.start_cleanup(view, &group, cleanup_reason(view, group_alive), now, plan);
            }
            // Bound and Running or in a bootstrap Error: the group pass decides.
            _ => {}
        }
    }

    fn mark_error(
        &self,
        view: &mut View<'_>,
        reason: ErrorReason,
        message: String,
        plan: &mut StaticPlan,
    ) {
        if !(view.phase == StaticInstancePhase::Error && view.error == Some(reason)) {
            plan.commands.push(StaticCommand::MarkError {
                instance: view.name.to_owned(),
                reason,
                message,
            });
        }
        view.phase = StaticInstancePhase::Error;
        view.error = Some(reason);
    }

    /// Starts (or restarts) a cleanup, or records why it cannot start.
    fn start_cleanup(
        &mut self,
        view: &mut View<'_>,
        group: &str,
        reason: CleanupReason,
        now: Timestamp,
        plan: &mut StaticPlan,
    ) {
        if let Some((cause, message)) = view.problem.clone() {
            let reason = ErrorReason {
                operation: Operation::Cleanup,
                cause,
            };
            self.mark_error(view, reason, message, plan);
            return;
        }
        let attempt = self.start(view, group, Operation::Cleanup, now);
        plan.commands.push(StaticCommand::Cleanup {
            instance: view.name.to_owned(),
            group: group.to_owned(),
            node: view.node.map(|n| n.name.clone()),
            address: view.address.to_owned(),
            credentials: view.credentials.to_owned(),
            reason,
            attempt,
        });
        view.phase = StaticInstancePhase::Cleaning;
    }

    fn start_bootstrap(
        &mut self,
        view: &mut View<'_>,
        group: &str,
        now: Timestamp,
        plan: &mut StaticPlan,
    ) {
        let attempt = self.start(view, group, Operation::Bootstrap, now);
        plan.commands.push(StaticCommand::Bootstrap {
            instance: view.name.to_owned(),
            group: group.to_owned(),
            address: view.address.to_owned(),
            credentials: view.credentials.to_owned(),
            attempt,
        });
        view.phase = StaticInstancePhase::Bootstrapping;
        view.group = Some(group.to_owned());
        view.error = None;
    }

    fn reconcile_group(
        &mut self,
        name: &str,
        group: &NodeGroup,
        views: &mut [View<'_>],
        taken: &mut BTreeSet<String>,
        now: Timestamp,
        plan: &mut StaticPlan,
    ) {
        let count = group_count(group);
        let occupies = |v: &View<'_>| {
            v.group.as_deref() == Some(name)
                && match v.phase {
                    StaticInstancePhase::Bootstrapping | StaticInstancePhase::Running => true,
                    StaticInstancePhase::Error => {
                        v.error.is_none_or(|e| e.operation == Operation::Bootstrap)
                    }
                    _ => false,
                }
        };
        let occupied: Vec<usize> = (0..views.len()).filter(|&i| occupies(&views[i])).collect();

        // Too many: clean up the excess, never one mid-bootstrap.
        if occupied.len() > count {
            let excess = occupied.len() - count;
            let victims = choose::cleanup_order(views, &occupied);
            for index in victims.into_iter().take(excess) {
                let view = &mut views[index];
                self.start_cleanup(view, name, CleanupReason::ScaledDown, now, plan);
            }
        }

        // Bound instances in a bootstrap Error within the count: retry after the backoff.
        for index in occupied.iter().copied() {
            let view = &mut views[index];
            if view.phase == StaticInstancePhase::Bootstrapping
                && !self.in_flight.contains_key(view.name)
            {
                // Found Bootstrapping without a record (a restart): bootstrap again.
                if let Some((cause, message)) = view.problem.clone() {
                    let reason = ErrorReason {
                        operation: Operation::Bootstrap,
                        cause,
                    };
                    self.mark_error(view, reason, message, plan);
                } else {
                    self.start_bootstrap(view, name, now, plan);
                }
                continue;
            }
            if view.phase != StaticInstancePhase::Error || view.group.as_deref() != Some(name) {
                continue;
            }
            if let Some((cause, message)) = view.problem.clone() {
                let reason = ErrorReason {
                    operation: Operation::Bootstrap,
                    cause,
                };
                self.mark_error(view, reason, message, plan);
                continue;
            }
            if view.adopt {
                // Never bootstrap an instance meant for adoption.
                continue;
            }
            if self.may_retry(view.name, Operation::Bootstrap, now) {
                self.start_bootstrap(view, name, now, plan);
            } else if let Some(b) = self.backoff.get(view.name) {
                plan.waiting.push(format!(
                    "{name}: {} is retried at {} (failure {})",
                    view.name, b.not_before, b.failures
                ));
            }
        }

        // Too few: take free instances.
        let occupied_now = views.iter().filter(|v| occupies(v)).count();
        if occupied_now >= count {
            return;
        }
        let mut wanted = count - occupied_now;
        let selector: LabelSelector = group
            .spec
            .static_instances
            .as_ref()
            .and_then(|s| s.label_selector.clone())
            .unwrap_or_default();
        let mut candidates: Vec<(bool, usize)> = Vec::new();
        for (index, view) in views.iter().enumerate() {
            let free = view.group.is_none()
                && view.phase == StaticInstancePhase::Pending
                && !view.deleted
                && view.problem.is_none()
                && !taken.contains(view.name)
                && !self.in_flight.contains_key(view.name)
                && selector.matches(&view.instance.metadata.labels);
            if !free {
                continue;
            }
            if !self.may_retry(view.name, Operation::Bootstrap, now) {
                if let Some(b) = self.backoff.get(view.name) {
                    plan.waiting.push(format!(
                        "{name}: {} is taken again at {} (failure {})",
                        view.name, b.not_before, b.failures
                    ));
                }
                continue;
            }
            if view.adopt {
                match view.node {
                    Some(node) if node.group().is_none_or(|g| g == name) => {
                        candidates.push((true, index));
                    }
                    Some(node) => plan.waiting.push(format!(
                        "{name}: {} asks to be adopted but Node {} belongs to group {}",
                        view.name,
                        node.name,
                        node.group().unwrap_or_default()
                    )),
                    None => plan.waiting.push(format!(
                        "{name}: waiting for a Node with address {} (or name {}) to adopt {}",
                        view.address, view.name, view.name
                    )),
                }
            } else {
                candidates.push((false, index));
            }
        }
        // Adoptable first, then by name (views are sorted by name).
        candidates.sort_by_key(|(adoptable, index)| (!adoptable, *index));
        for (adoptable, index) in candidates {
            if wanted == 0 {
                break;
            }
            let view = &mut views[index];
            taken.insert(view.name.to_owned());
            if adoptable {
                let node = view.node.map(|n| n.name.clone()).unwrap_or_default();
                plan.commands.push(StaticCommand::Adopt {
                    instance: view.name.to_owned(),
                    group: name.to_owned(),
                    node,
                });
                view.phase = StaticInstancePhase::Running;
                view.group = Some(name.to_owned());
                view.adopt = false;
            } else {
                self.start_bootstrap(view, name, now, plan);
            }
            wanted -= 1;
        }
        if wanted > 0 {
            plan.waiting.push(format!(
                "{name}: {wanted} more instance(s) wanted but no free Pending StaticInstance \
                 matches the labelSelector"
            ));
        }
    }
}

fn cleanup_reason(view: &View<'_>, group_alive: bool) -> CleanupReason {
    if view.deleted {
        CleanupReason::Deleted
    } else if !group_alive {
        CleanupReason::GroupGone
    } else {
        CleanupReason::ScaledDown
    }
}

#[cfg(test)]
mod tests;
