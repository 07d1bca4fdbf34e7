//! The node agent's state machine ([`Agent`]): from what it observed and what its state files
//! say, the next thing to do.
//!
//! The machine keeps little memory of its own: the bundle and the Node it last observed (and
//! whether they are fresh enough to act on), the request it waits for and its timer. Everything that must survive a restart is in the
//! state files, which it updates through actions. After every input it re-derives the next
//! request from that knowledge ([`Agent::decide`]), so an input that arrives in any order (a
//! conflict, a new bundle, a restart) leads to the same decision as a fresh start would.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::model::{Timestamp, keys};
use crate::ports::{Cause, ErrorChain};

use super::action::{AgentAction, AgentEvent, NodePatch};
use super::input::{AgentInput, BundleSteps, DesiredBundle, PatchOutcome, StepOutcome};
use super::lean::{LeanAction, PatchRequest, StoredBundle};
use super::state::{Progress, StateFiles};

/// How many bytes of a failed step's standard error its Event carries (Deckhouse: 500).
pub const STDERR_TAIL_BYTES: usize = 500;
/// Reason of the Event a failed step emits.
pub const REASON_STEP_FAILED: &str = "BashibleStepFailed";
/// Reason of the Event a refused bundle emits (its checksum does not match its steps).
pub const REASON_BUNDLE_REJECTED: &str = "BashibleBundleRejected";

/// Settings of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// The agent's Node (and host) name.
    pub node: String,
    /// Pause between the runs of a failing step. Default 10 s (Deckhouse).
    pub step_retry: Duration,
    /// How often the agent re-reads its Node while waiting for `approved` or
    /// `disruption-approved`. Default 10 s.
    pub poll_interval: Duration,
    /// First pause after a failed request (bundle fetch, Node read or patch); it doubles with
    /// every failure in a row up to `error_backoff_max`. Default 5 s.
    pub error_backoff: Duration,
    /// Longest pause after failed requests. Default 5 min.
    pub error_backoff_max: Duration,
    /// Time from a finished pass (up to date) to the next one; `None`: the next pass starts
    /// only when the driver calls [`Agent::handle_wake`] (a simulator that wakes it on changes, or a
    /// one-shot run). Default `None`; Deckhouse's timer is one minute.
    pub pass_interval: Option<Duration>,
    /// Hash every fetched bundle's steps, even when they are those of the bundle verified
    /// last or their hash was computed already ([`super::BundleSteps`]). Default `false`: a
    /// fetched bundle equal to the last verified one (same checksum, same steps in the same
    /// order) is not verified again, and steps shared with an earlier fetch (by this agent or
    /// another) are not hashed again. For the properties comparing the two
    /// (`nodemgr-core/tests/agent.rs`).
    pub verify_every_fetch: bool,
}

impl AgentConfig {
    /// The defaults for the node `node`.
    pub fn new(node: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            step_retry: Duration::from_secs(10),
            poll_interval: Duration::from_secs(10),
            error_backoff: Duration::from_secs(5),
            error_backoff_max: Duration::from_secs(300),
            pass_interval: None,
            verify_every_fetch: false,
        }
    }
}

/// Why an agent's request failed or a bundle was refused (the last one is kept,
/// [`Agent::last_error`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The bundle could not be fetched; the driver's error is the source.
    #[error("failed to fetch the bundle: {0}")]
    Fetch(#[source] Cause),
    /// The bundle's steps do not hash to its checksum (or are malformed): nothing of it runs.
    #[error("refused the bundle {checksum}: {reason}")]
    BundleRejected {
        /// The published checksum.
        checksum: String,
        /// What is wrong.
        reason: String,
    },
    /// The Node could not be read.
    #[error("failed to read Node {node}: {source}")]
    ReadNode {
        /// The node.
        node: String,
        /// The API's error.
        #[source]
        source: Cause,
    },
    /// The Node does not exist (deleted under the agent, or not registered yet).
    #[error("Node {0} does not exist; waiting for it to be registered again")]
    NodeGone(String),
    /// A patch of the Node failed for another reason than a conflict.
    #[error("failed to patch Node {node}: {source}")]
    Patch {
        /// The node.
        node: String,
        /// The API's error.
        #[source]
        source: Cause,
    },
}

/// Where the agent is, for logs, metrics and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentStatus {
    /// Fetching the bundle to start a pass.
    Starting,
    /// The node runs `checksum` and its Node says so; the pass is complete.
    UpToDate {
        /// The applied checksum.
        checksum: String,
    },
    /// `waiting-for-approval` is set; waiting for `approved`.
    WaitingForApproval {
        /// The bundle to apply.
        checksum: String,
    },
    /// The disruption request is set; waiting for `disruption-approved` to run `step`.
    WaitingForDisruptionApproval {
        /// The bundle being applied.
        checksum: String,
        /// The disruptive step.
        step: String,
    },
    /// Applying the bundle (running or about to run `step`).
    Applying {
        /// The bundle being applied.
        checksum: String,
        /// The current step.
        step: String,
    },
    /// `step` failed `failures` times in a row; it runs again after the retry pause.
    RetryingStep {
        /// The bundle being applied.
        checksum: String,
        /// The failing step.
        step: String,
        /// Failures in a row.
        failures: u32,
    },
    /// Every step succeeded; writing the checksum onto the Node and into the state.
    Reporting {
        /// The applied checksum.
        checksum: String,
    },
    /// A request failed; retrying after a backoff.
    Backoff {
        /// What failed.
        error: AgentError,
    },
}

/// A verified bundle: checksum matches, steps sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verified {
    pub(super) checksum: String,
    pub(super) steps: BundleSteps,
    pub(super) rolling_update: bool,
    /// The steps came sorted by name: `steps` is the list exactly as fetched, so a later
    /// fetch with the same checksum and equal `steps` is the same bundle and hashes the same
    /// (the checksum depends on the order, [`configuration_checksum`]).
    fetched_sorted: bool,
}

/// The request the agent waits an answer for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Awaiting {
    Bundle,
    Node,
    Patch(OwnPatch),
    /// The run of the step at this index of the bundle (the step is named by the bundle, not
    /// by a copy of its name).
    Step(Arc<Verified>, usize),
}

impl Awaiting {
    /// The name of the step whose run is awaited, when that is what is awaited.
    fn step_name(&self) -> Option<&str> {
        match self {
            Self::Step(bundle, index) => bundle.steps.get(*index).map(|s| s.name.as_str()),
            _ => None,
        }
    }

    /// The request that asks for this answer, as the agent queues it.
    #[inline]
    fn request(&self) -> Queued {
        match self {
            Self::Bundle => Queued::Fetch,
            Self::Node => Queued::Read,
            Self::Patch(patch) => Queued::Patch(patch.clone()),
            Self::Step(..) => Queued::Ready(AgentAction::RunStep {
                name: self.step_name().unwrap_or_default().to_owned(),
            }),
        }
    }
}

/// One of the patches the agent makes of its Node, as it remembers it while the patch is
/// under way: what the patch sets and removes follows from it ([`OwnPatch::node_patch`] makes
/// the request), so the agent keeps no copy of the request's strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum OwnPatch {
    /// Sets `waiting-for-approval` (the configuration checksum stays: the node still runs
    /// the bundle it reports until the first step of the new one is about to run).
    AskApproval,
    /// Removes the configuration checksum: the first step of another bundle is about to run,
    /// and from then on the node no longer runs the bundle it reported.
    Unreport,
    /// Sets the disruption annotation `key` (`disruption-required` or `rolling-update`).
    AskDisruption(Watched),
    /// Sets the configuration checksum to the bundle's.
    Report(Arc<Verified>),
}

impl OwnPatch {
    /// The annotations the patch changes, in the order the API applies them (removals first,
    /// then the set keys in key order, as [`NodePatch::apply_to`]): key → the new value
    /// (`None`: removed).
    pub(super) fn changes(&self) -> impl Iterator<Item = (Watched, Option<&str>)> {
        let change = match self {
            Self::AskApproval => (Watched::WaitingForApproval, Some("")),
            Self::Unreport => (Watched::Checksum, None),
            Self::AskDisruption(key) => (*key, Some("")),
            Self::Report(bundle) => (Watched::Checksum, Some(bundle.checksum.as_str())),
        };
        std::iter::once(change)
    }

    /// The request for a Node read at `resource_version`.
    pub(super) fn node_patch(&self, resource_version: &str) -> NodePatch {
        let mut patch = NodePatch {
            resource_version: resource_version.to_owned(),
            set: BTreeMap::new(),
            remove: Vec::new(),
        };
        for (key, value) in self.changes() {
            match value {
                Some(value) => {
                    patch.set.insert(key.key().to_owned(), value.to_owned());
                }
                None => patch.remove.push(key.key().to_owned()),
            }
        }
        patch
    }
}

/// The annotations of its Node the agent reads (and the ones it writes are among them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watched {
    /// `node.deckhouse.io/configuration-checksum`.
    Checksum,
    /// `update.node.deckhouse.io/waiting-for-approval`.
    WaitingForApproval,
    /// `update.node.deckhouse.io/approved`.
    Approved,
    /// `update.node.deckhouse.io/disruption-required`.
    DisruptionRequired,
    /// `update.node.deckhouse.io/disruption-approved`.
    DisruptionApproved,
    /// `update.node.deckhouse.io/rolling-update`.
    RollingUpdate,
}

impl Watched {
    /// Every watched annotation.
    #[cfg(test)]
    const ALL: [Self; 6] = [
        Self::Checksum,
        Self::WaitingForApproval,
        Self::Approved,
        Self::DisruptionRequired,
        Self::DisruptionApproved,
        Self::RollingUpdate,
    ];

    /// The annotation's key.
    pub(super) fn key(self) -> &'static str {
        match self {
            Self::Checksum => keys::ANNOTATION_CONFIGURATION_CHECKSUM,
            Self::WaitingForApproval => keys::ANNOTATION_WAITING_FOR_APPROVAL,
            Self::Approved => keys::ANNOTATION_APPROVED,
            Self::DisruptionRequired => keys::ANNOTATION_DISRUPTION_REQUIRED,
            Self::DisruptionApproved => keys::ANNOTATION_DISRUPTION_APPROVED,
            Self::RollingUpdate => keys::ANNOTATION_ROLLING_UPDATE,
        }
    }

    /// The watched annotation with the key `key`, if it is one.
    fn of(key: &str) -> Option<Self> {
        Some(match key {
            keys::ANNOTATION_CONFIGURATION_CHECKSUM => Self::Checksum,
            keys::ANNOTATION_WAITING_FOR_APPROVAL => Self::WaitingForApproval,
            keys::ANNOTATION_APPROVED => Self::Approved,
            keys::ANNOTATION_DISRUPTION_REQUIRED => Self::DisruptionRequired,
            keys::ANNOTATION_DISRUPTION_APPROVED => Self::DisruptionApproved,
            keys::ANNOTATION_ROLLING_UPDATE => Self::RollingUpdate,
            _ => return None,
        })
    }

    /// Its bit in [`KnownNode::present`].
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The agent's Node as far as the agent reads it: its resourceVersion and the watched
/// annotations ([`Watched`]), as last read with the agent's own accepted patches applied. The
/// read's annotations are not kept: the driver's copy of the Node shares them, and the
/// agent's next patch of that copy would have to copy them while the agent still held them.
#[derive(Debug, Clone, Default)]
struct KnownNode {
    /// `metadata.resourceVersion` (the precondition of the next patch).
    resource_version: String,
    /// Which watched annotations the Node has (one bit each, [`Watched::bit`]).
    present: u8,
    /// The value of the checksum annotation when it is present (its buffer kept between
    /// reads).
    checksum: String,
}

impl KnownNode {
    /// Replaces what the agent knows with a read of the Node (`resource_version`,
    /// `annotations`), keeping the buffers.
    fn read(&mut self, resource_version: &str, annotations: &BTreeMap<String, String>) {
        self.resource_version.clear();
        self.resource_version.push_str(resource_version);
        self.present = 0;
        for (key, value) in annotations {
            if let Some(watched) = Watched::of(key) {
                self.set(watched, Some(value));
            }
        }
    }

    /// The annotation `key` is now `value` (`None`: removed).
    fn set(&mut self, key: Watched, value: Option<&str>) {
        match value {
            Some(value) => {
                self.present |= key.bit();
                if key == Watched::Checksum {
                    self.checksum.clear();
                    self.checksum.push_str(value);
                }
            }
            None => self.present &= !key.bit(),
        }
    }

    fn has(&self, key: Watched) -> bool {
        self.present & key.bit() != 0
    }

    /// The checksum annotation.
    fn checksum(&self) -> Option<&str> {
        self.has(Watched::Checksum)
            .then_some(self.checksum.as_str())
    }
}

/// An action waiting to be drained. Those built from the agent's own state are kept as a
/// reference to it until drained ([`Agent::poll_action`] builds them then,
/// [`Agent::poll_lean_action`] lends them): the progress record and the Node as the agent knows
/// it are not copied for an action whose driver does not need the copy. Before either changes
/// while such an action waits, the action is built from it as it was ([`Agent::pin_queue`]), so
/// that every action carries what it carried when decided.
#[derive(Debug, Clone)]
enum Queued {
    /// The action, built.
    Ready(AgentAction),
    /// [`AgentAction::FetchBundle`].
    Fetch,
    /// [`AgentAction::ReadNode`].
    Read,
    /// [`AgentAction::PatchNode`] of this patch at the known Node's resourceVersion.
    Patch(OwnPatch),
    /// [`AgentAction::StoreBundle`] of this bundle.
    Store(Arc<Verified>),
    /// [`AgentAction::WriteProgress`] of the current progress record.
    Progress,
}

/// The agent's timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sleep {
    /// `None`: until [`Agent::handle_wake`].
    until: Option<Timestamp>,
}

/// The node half of the update protocol as a sans-I/O state machine; see the module
/// documentation of [`crate::agent`] for the protocol and the driver's contract.
#[derive(Debug, Clone)]
pub struct Agent {
    config: AgentConfig,
    files: StateFiles,
    bundle: Option<Arc<Verified>>,
    bundle_fresh: bool,
    /// The bundle this agent stored in `bundle_steps/` (compared by checksum).
    stored: Option<Arc<Verified>>,
    node: Option<KnownNode>,
    node_fresh: bool,
    awaiting: Option<Awaiting>,
    /// The request for `awaiting` is still to be drained, after everything in `queue`
    /// ([`Agent::request`]). It is kept out of the queue while nothing follows it: it is
    /// handed out from `awaiting` itself.
    request_pending: bool,
    sleep: Option<Sleep>,
    queue: VecDeque<Queued>,
    errors_in_row: u32,
    step_failures: u32,
    last_error: Option<AgentError>,
    status: AgentStatus,
    /// Builds every action when it is queued, as the agent did before it lent them
    /// ([`Queued`]): the reference the lent actions are compared with in the unit tests.
    #[cfg(test)]
    eager: bool,
}

impl Agent {
    /// An agent starting from the state files `files` at `now`: its first action fetches the
    /// bundle. Rebuilding an agent from the files on disk at any moment (a restart, a reboot)
    /// is always safe.
    pub fn new(config: AgentConfig, files: StateFiles, now: Timestamp) -> Self {
        let mut agent = Self {
            config,
            files,
            bundle: None,
            bundle_fresh: false,
            stored: None,
            node: None,
            node_fresh: false,
            awaiting: None,
            request_pending: false,
            sleep: None,
            queue: VecDeque::new(),
            errors_in_row: 0,
            step_failures: 0,
            last_error: None,
            status: AgentStatus::Starting,
            #[cfg(test)]
            eager: false,
        };
        agent.decide(now);
        agent
    }

    /// The next action to carry out, or `None` when the agent waits for an answer or its
    /// timer. Call it after [`Agent::new`] and after every `handle_*` until it returns
    /// `None`.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<AgentAction> {
        self.poll_lean_action().map(LeanAction::into_action)
    }

    /// The next action as [`Agent::poll_action`] returns it, but what the agent holds is lent
    /// rather than copied: a Node patch as the changes it makes
    /// ([`LeanAction::PatchNode`]), the steps to store and the progress record to write as
    /// references. For a driver that reads the state files back from [`Agent::files`] or
    /// applies the patch itself; [`LeanAction::into_action`] is the action
    /// [`Agent::poll_action`] would have returned.
    #[must_use]
    pub fn poll_lean_action(&mut self) -> Option<LeanAction<'_>> {
        let entry = match self.queue.pop_front() {
            Some(entry) => entry,
            None => self.take_pending_request()?,
        };
        Some(match entry {
            Queued::Ready(action) => LeanAction::Action(action),
            Queued::Fetch => LeanAction::FetchBundle,
            Queued::Read => LeanAction::ReadNode,
            Queued::Patch(patch) => LeanAction::PatchNode(PatchRequest::new(
                self.node.as_ref().map_or("", |n| &n.resource_version),
                patch,
            )),
            Queued::Store(bundle) => LeanAction::StoreBundle(StoredBundle(bundle)),
            Queued::Progress => match &self.files.progress {
                Some(progress) => LeanAction::WriteProgress(progress),
                None => LeanAction::Action(AgentAction::WriteProgress(Progress::default())),
            },
        })
    }

    /// The request for the awaited answer, as it would be queued, when it is still to be
    /// drained ([`Agent::request`]); it is drained by this.
    #[inline]
    fn take_pending_request(&mut self) -> Option<Queued> {
        if !self.request_pending {
            return None;
        }
        self.request_pending = false;
        self.awaiting.as_ref().map(Awaiting::request)
    }

    /// Queues the request still to be drained, if any ([`Agent::request`]): something is
    /// about to be queued after it, or the request it asks for is about to be answered or
    /// replaced while still undrained.
    #[inline]
    fn queue_pending_request(&mut self) {
        if self.request_pending {
            self.queue_request();
        }
    }

    /// [`Agent::queue_pending_request`] of a pending request.
    #[inline(never)]
    fn queue_request(&mut self) {
        if let Some(entry) = self.take_pending_request() {
            self.queue.push_back(entry);
        }
    }

    /// The awaited answer's request, taken for its answer: a request still undrained is
    /// queued first (it is still handed out, as an answer that came before it was drained
    /// leaves it).
    fn take_awaiting(&mut self) -> Option<Awaiting> {
        self.queue_pending_request();
        self.awaiting.take()
    }

    /// Builds the queued actions that refer to the progress record or the known Node from
    /// them as they are now: one of them is about to change ([`Queued`]).
    #[inline]
    fn pin_queue(&mut self) {
        // Most changes come with nothing queued (the driver drained it before answering).
        if self.request_pending || !self.queue.is_empty() {
            self.queue_pending_request();
            self.pin_waiting();
        }
    }

    /// [`Agent::pin_queue`] of a queue that holds something.
    #[inline(never)]
    fn pin_waiting(&mut self) {
        // Built in place: the queue is not moved out (the Node and the files are other
        // fields), and a queue with nothing lent is only looked through.
        for entry in &mut self.queue {
            if matches!(entry, Queued::Patch(_) | Queued::Progress) {
                let lent = std::mem::replace(entry, Queued::Progress);
                *entry = Queued::Ready(built(lent, self.node.as_ref(), &self.files));
            }
        }
    }

    /// The action `entry` stands for, built from the agent's state as it is now.
    #[cfg(test)]
    fn build(&self, entry: Queued) -> AgentAction {
        built(entry, self.node.as_ref(), &self.files)
    }

    /// Queues `entry` (built at once in the unit tests' eager mode) after whatever was
    /// decided before it.
    fn enqueue(&mut self, entry: Queued) {
        self.queue_pending_request();
        #[cfg(test)]
        let entry = if self.eager {
            Queued::Ready(self.build(entry))
        } else {
            entry
        };
        self.queue.push_back(entry);
    }

    /// The progress record, to change ([`Agent::pin_queue`] first).
    fn progress_mut(&mut self) -> &mut Option<Progress> {
        self.pin_queue();
        &mut self.files.progress
    }

    /// The known Node, to change ([`Agent::pin_queue`] first).
    fn node_mut(&mut self) -> &mut KnownNode {
        self.pin_queue();
        self.node.get_or_insert_with(KnownNode::default)
    }

    /// Queues the write of the progress record as it is now.
    fn write_progress(&mut self) {
        self.enqueue(Queued::Progress);
    }

    /// When the agent wants [`Agent::handle_timeout`] called; `None` while it waits for an
    /// answer, or when it is up to date without a pass interval (it then waits for
    /// [`Agent::handle_wake`]).
    #[must_use]
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.sleep.and_then(|s| s.until)
    }

    /// The timer fired. Before [`Agent::next_deadline`]'s deadline (or without a timer) this is a
    /// no-op.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if let Some(Sleep { until: Some(until) }) = self.sleep
            && now >= until
        {
            self.end_sleep(now);
        }
    }

    /// Something the agent may be waiting for changed (a new bundle was published, the Node's
    /// annotations changed, the pass timer of a one-shot driver fired): if it sleeps, it starts
    /// over now (re-fetching the bundle, re-reading the Node). While a request is outstanding,
    /// and during the pause between the runs of a failing step, this is a no-op.
    pub fn handle_wake(&mut self, now: Timestamp) {
        if self.sleep.is_some() && !matches!(self.status, AgentStatus::RetryingStep { .. }) {
            self.end_sleep(now);
        }
    }

    /// Hands in the answer to the outstanding request. An input that answers no outstanding
    /// request (a stray or repeated answer) is ignored.
    pub fn handle_input(&mut self, input: AgentInput, now: Timestamp) {
        let awaiting = self.take_awaiting();
        match (awaiting, input) {
            (Some(Awaiting::Bundle), AgentInput::Bundle(result)) => self.on_bundle(result, now),
            (Some(Awaiting::Node), AgentInput::Node(Ok(Some(view)))) => {
                self.on_node_read(&view.resource_version, &view.annotations, now);
            }
            (Some(Awaiting::Node), AgentInput::Node(Ok(None))) => {
                self.fail(AgentError::NodeGone(self.config.node.clone()), now);
            }
            (Some(Awaiting::Node), AgentInput::Node(Err(source))) => {
                let node = self.config.node.clone();
                self.fail(AgentError::ReadNode { node, source }, now);
            }
            (
                Some(Awaiting::Patch(patch)),
                AgentInput::Patched(PatchOutcome::Applied { resource_version }),
            ) => self.on_applied(&patch, &resource_version, now),
            (Some(Awaiting::Patch(_)), AgentInput::Patched(PatchOutcome::Conflict)) => {
                // The Node changed since it was read: read it again and re-decide; the request
                // is made again unless the new state already answers it.
                self.node_fresh = false;
                self.decide(now);
            }
            (Some(Awaiting::Patch(_)), AgentInput::Patched(PatchOutcome::NotFound)) => {
                self.fail(AgentError::NodeGone(self.config.node.clone()), now);
            }
            (Some(Awaiting::Patch(_)), AgentInput::Patched(PatchOutcome::Failed(source))) => {
                let node = self.config.node.clone();
                self.fail(AgentError::Patch { node, source }, now);
            }
            (Some(awaiting @ Awaiting::Step(..)), AgentInput::StepFinished(outcome))
                if awaiting.step_name() == Some(outcome.step.as_str()) =>
            {
                self.on_step(outcome, now);
            }
            (awaiting, input) => {
                tracing::debug!(
                    ?input,
                    "node agent: input answers no outstanding request, ignored"
                );
                self.awaiting = awaiting;
            }
        }
    }

    /// [`Agent::handle_input`] of [`AgentInput::Bundle`] with `Ok` of the bundle `checksum`
    /// of `steps` (`rolling_update` as in [`DesiredBundle`]), for a driver that hands out one
    /// bundle it keeps: nothing is copied unless the bundle must be verified.
    pub fn handle_bundle_fetched(
        &mut self,
        checksum: &str,
        steps: &BundleSteps,
        rolling_update: bool,
        now: Timestamp,
    ) {
        if !matches!(self.awaiting, Some(Awaiting::Bundle)) {
            tracing::debug!("node agent: a bundle answers no outstanding request, ignored");
            return;
        }
        self.take_awaiting();
        let hash_again = self.config.verify_every_fetch;
        let verified = match self.already_verified(checksum, steps, rolling_update) {
            Some(v) => Ok(v),
            None => match steps.verified_as(checksum, rolling_update) {
                // Another agent (or this one, earlier) verified these very steps as this
                // bundle: verifying again would make an equal bundle.
                Some(v) if !hash_again => Ok(v),
                _ => {
                    let desired = DesiredBundle {
                        checksum: checksum.to_owned(),
                        steps: steps.clone(),
                        rolling_update,
                    };
                    let verified = verify(desired, hash_again).map(Arc::new);
                    if let Ok(v) = &verified
                        && !hash_again
                    {
                        steps.remember_verified(v);
                    }
                    verified
                }
            },
        };
        self.on_verified(verified, now);
    }

    /// [`Agent::handle_input`] of [`AgentInput::Node`] with `Ok(Some(NodeView))` of
    /// `resource_version` and `annotations`, for a driver that keeps the Node: nothing of it
    /// is kept but the resourceVersion and the annotations the agent reads.
    pub fn handle_node_read(
        &mut self,
        resource_version: &str,
        annotations: &BTreeMap<String, String>,
        now: Timestamp,
    ) {
        if !matches!(self.awaiting, Some(Awaiting::Node)) {
            tracing::debug!("node agent: a Node answers no outstanding request, ignored");
            return;
        }
        self.take_awaiting();
        self.on_node_read(resource_version, annotations, now);
    }

    /// [`Agent::handle_input`] of [`AgentInput::Patched`] with [`PatchOutcome::Applied`] of
    /// `resource_version`.
    pub fn handle_patch_applied(&mut self, resource_version: &str, now: Timestamp) {
        let Some(Awaiting::Patch(patch)) = self.take_awaiting() else {
            tracing::debug!("node agent: a patch's answer answers no outstanding request, ignored");
            return;
        };
        self.on_applied(&patch, resource_version, now);
    }

    /// Where the agent is.
    pub fn status(&self) -> &AgentStatus {
        &self.status
    }

    /// Whether the pass is complete: the node runs its desired bundle, its Node says so, and
    /// every action has been drained (the state files are written).
    pub fn is_up_to_date(&self) -> bool {
        matches!(self.status, AgentStatus::UpToDate { .. })
            && self.queue.is_empty()
            && !self.request_pending
    }

    /// The last failure, kept until a later one replaces it.
    pub fn last_error(&self) -> Option<&AgentError> {
        self.last_error.as_ref()
    }

    /// The state files as the agent's writes left them.
    pub fn files(&self) -> &StateFiles {
        &self.files
    }

    /// The settings.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    fn end_sleep(&mut self, now: Timestamp) {
        self.sleep = None;
        self.bundle_fresh = false;
        self.node_fresh = false;
        self.decide(now);
    }

    /// Asks for `awaiting`'s answer: its request is drained after everything queued before
    /// it. It is kept out of the queue until something is queued after it (or it is answered
    /// or replaced undrained): a driver that drains it at once finds it in `awaiting`.
    fn request(&mut self, awaiting: Awaiting) {
        self.queue_pending_request();
        self.awaiting = Some(awaiting);
        self.request_pending = true;
        #[cfg(test)]
        if self.eager {
            self.queue_request();
            if let Some(lent) = self.queue.pop_back() {
                let built = Queued::Ready(self.build(lent));
                self.queue.push_back(built);
            }
        }
    }

    fn sleep_for(&mut self, now: Timestamp, d: Duration) {
        self.sleep = Some(Sleep {
            until: Some(now + d),
        });
    }

    fn fail(&mut self, error: AgentError, now: Timestamp) {
        tracing::warn!(node = %self.config.node, error = %ErrorChain(&error), "node agent");
        self.errors_in_row = self.errors_in_row.saturating_add(1);
        let backoff =
            crate::backoff::Backoff::new(self.config.error_backoff, self.config.error_backoff_max)
                .after_failures(self.errors_in_row);
        self.status = AgentStatus::Backoff {
            error: error.clone(),
        };
        self.last_error = Some(error);
        self.node_fresh = false;
        self.sleep_for(now, backoff);
    }

    fn event(&mut self, what: &str, reason: &str, note: String) {
        let name = event_name(&format!("bashible-error-{}-{what}", self.config.node));
        self.queue_pending_request();
        self.queue
            .push_back(Queued::Ready(AgentAction::EmitEvent(AgentEvent {
                name,
                reason: reason.to_owned(),
                note,
            })));
    }

    /// The bundle last verified, when `desired` is that very bundle: the same published
    /// checksum and the same steps in the same order (so its steps hash to its checksum as
    /// they did, and pass the name checks as they did). Its SHA-256 is not computed again: an
    /// agent fetches the same bundle at every poll and before every step. A bundle whose
    /// steps differ in any byte (or only in their order) is verified in full, whatever its
    /// checksum. `None` also when [`AgentConfig::verify_every_fetch`] is set.
    fn already_verified(
        &self,
        checksum: &str,
        steps: &BundleSteps,
        rolling_update: bool,
    ) -> Option<Arc<Verified>> {
        if self.config.verify_every_fetch {
            return None;
        }
        let last = self.bundle.as_ref()?;
        // `==` on the steps is a pointer comparison first: a driver that shares one bundle
        // hands out clones of the same steps.
        if !last.fetched_sorted || last.checksum != checksum || last.steps != *steps {
            return None;
        }
        if last.rolling_update == rolling_update {
            return Some(Arc::clone(last));
        }
        Some(Arc::new(Verified {
            rolling_update,
            ..Verified::clone(last)
        }))
    }

    fn on_bundle(&mut self, result: Result<DesiredBundle, Cause>, now: Timestamp) {
        let desired = match result {
            Ok(b) => b,
            Err(cause) => return self.fail(AgentError::Fetch(cause), now),
        };
        let verified = match self.already_verified(
            &desired.checksum,
            &desired.steps,
            desired.rolling_update,
        ) {
            Some(v) => Ok(v),
            None => verify(desired, self.config.verify_every_fetch).map(Arc::new),
        };
        self.on_verified(verified, now);
    }

    /// A fetched bundle was verified (or refused).
    fn on_verified(&mut self, verified: Result<Arc<Verified>, AgentError>, now: Timestamp) {
        let verified = match verified {
            Ok(v) => v,
            Err(error) => {
                if let AgentError::BundleRejected { reason, .. } = &error {
                    self.event("bundle", REASON_BUNDLE_REJECTED, format!("{error}"));
                    tracing::debug!(%reason, "bundle refused");
                }
                return self.fail(error, now);
            }
        };
        self.errors_in_row = 0;
        let same = self
            .bundle
            .as_ref()
            .is_some_and(|b| Arc::ptr_eq(b, &verified) || b.checksum == verified.checksum);
        if !same {
            if let Some(old) = &self.bundle {
                tracing::info!(
                    node = %self.config.node,
                    old = %old.checksum,
                    new = %verified.checksum,
                    "node agent: the desired bundle changed; starting over with the new one"
                );
            }
            self.step_failures = 0;
        }
        self.bundle = Some(verified);
        self.bundle_fresh = true;
        self.decide(now);
    }

    /// The Node was read.
    fn on_node_read(
        &mut self,
        resource_version: &str,
        annotations: &BTreeMap<String, String>,
        now: Timestamp,
    ) {
        self.errors_in_row = 0;
        self.node_mut().read(resource_version, annotations);
        self.node_fresh = true;
        self.decide(now);
    }

    /// The agent's patch `patch` was applied; the Node is now at `resource_version`.
    fn on_applied(&mut self, patch: &OwnPatch, resource_version: &str, now: Timestamp) {
        self.errors_in_row = 0;
        let node = self.node_mut();
        for (key, value) in patch.changes() {
            node.set(key, value);
        }
        node.resource_version.clear();
        node.resource_version.push_str(resource_version);
        self.node_fresh = true;
        self.decide(now);
    }

    fn on_step(&mut self, outcome: StepOutcome, now: Timestamp) {
        let Some(bundle) = self.bundle.clone() else {
            return self.decide(now);
        };
        if outcome.succeeded() {
            let key = bundle
                .steps
                .iter()
                .find(|s| s.name == outcome.step)
                .and_then(|s| s.disruption_key.as_deref());
            self.step_failures = 0;
            let progress = self.progress_mut().get_or_insert_with(Progress::default);
            let step = outcome.step;
            match key {
                // A recorded key is rewritten in place (the step's name is not copied).
                Some(k) => match progress.applied_keys.get_mut(&step) {
                    Some(recorded) => {
                        recorded.clear();
                        recorded.push_str(k);
                    }
                    None => {
                        progress.applied_keys.insert(step.clone(), k.to_owned());
                    }
                },
                None => {
                    progress.applied_keys.remove(&step);
                }
            }
            if progress.bundle.as_deref() == Some(bundle.checksum.as_str()) {
                progress.done.insert(step);
            }
            self.write_progress();
            // Before the next step: is the bundle still the desired one?
            self.bundle_fresh = false;
            self.node_fresh = false;
            self.decide(now);
        } else {
            self.step_failures = self.step_failures.saturating_add(1);
            let status = outcome
                .exit_code
                .map_or_else(|| "was killed".to_owned(), |c| format!("exited with {c}"));
            let note = format!(
                "step {} {status} (failure {} in a row; retried in {}s): {}",
                outcome.step,
                self.step_failures,
                self.config.step_retry.as_secs(),
                stderr_tail(&outcome.stderr, STDERR_TAIL_BYTES)
            );
            tracing::warn!(node = %self.config.node, "{note}");
            self.event(&outcome.step, REASON_STEP_FAILED, note);
            self.status = AgentStatus::RetryingStep {
                checksum: bundle.checksum.clone(),
                step: outcome.step,
                failures: self.step_failures,
            };
            self.sleep_for(now, self.config.step_retry);
        }
    }

    /// Re-derives the next request (or timer) from what the agent knows. Called after every
    /// input; does nothing while a request is outstanding or the timer runs.
    fn decide(&mut self, now: Timestamp) {
        if self.awaiting.is_some() || self.sleep.is_some() {
            return;
        }
        if !self.bundle_fresh {
            if self.bundle.is_none() {
                self.status = AgentStatus::Starting;
            }
            return self.request(Awaiting::Bundle);
        }
        let Some(bundle) = self.bundle.clone() else {
            return self.request(Awaiting::Bundle);
        };
        if self.files.configuration_checksum.as_deref() == Some(bundle.checksum.as_str()) {
            return self.decide_up_to_date(&bundle, now);
        }
        // Nothing is written about the bundle before its first step is about to run
        // ([`Agent::begin_apply`]): until then the checksum file, the Node's checksum
        // annotation and the progress record still say what the node runs, so that a bundle
        // changed and changed back before it started finds the node up to date.
        let progress = self.files.progress.as_ref();
        let begun = progress.is_some_and(|p| p.bundle.as_deref() == Some(bundle.checksum.as_str()));
        let done = |name: &String| begun && progress.is_some_and(|p| p.done.contains(name));
        let Some((index, step)) = bundle
            .steps
            .iter()
            .enumerate()
            .find(|(_, s)| !done(&s.name))
        else {
            return self.decide_report(&bundle, now);
        };
        // The key the step last succeeded with, looked up when it is needed (a poll that
        // finds no approval does not need it); nothing below changes it before its last use.
        let recorded_key_is = |files: &StateFiles, key: Option<&String>| {
            files
                .progress
                .as_ref()
                .and_then(|p| p.applied_keys.get(&step.name))
                == key
        };
        // Every step is preceded by a fresh read of the Node: the approvals must be on it now
        // (a Node deleted and registered again has lost them).
        if !self.files.first_run {
            let Some(node) = self.fresh_node() else {
                return;
            };
            // The watched annotations' bits, copied: the Node is not borrowed below.
            let present = node.present;
            let has = |key: Watched| present & key.bit() != 0;
            if !has(Watched::Approved) {
                let asked = has(Watched::WaitingForApproval);
                let patch = (!asked).then_some(OwnPatch::AskApproval);
                self.set_waiting_for_approval(&bundle.checksum);
                return match patch {
                    None => self.sleep_for(now, self.config.poll_interval),
                    Some(patch) => self.request(Awaiting::Patch(patch)),
                };
            }
            let disruptive = step
                .disruption_key
                .as_ref()
                .is_some_and(|k| !recorded_key_is(&self.files, Some(k)));
            if disruptive && !has(Watched::DisruptionApproved) {
                let key = if bundle.rolling_update {
                    Watched::RollingUpdate
                } else {
                    Watched::DisruptionRequired
                };
                let patch = (!has(key)).then_some(OwnPatch::AskDisruption(key));
                self.set_waiting_for_disruption_approval(&bundle.checksum, &step.name);
                return match patch {
                    None => self.sleep_for(now, self.config.poll_interval),
                    Some(patch) => self.request(Awaiting::Patch(patch)),
                };
            }
            // The step is about to run: from now on the node no longer runs the bundle its
            // Node reports (if any), so the controller must not see it up to date with it.
            if has(Watched::Checksum) {
                self.set_applying(&bundle.checksum, &step.name);
                return self.request(Awaiting::Patch(OwnPatch::Unreport));
            }
        }
        let key_changes = !recorded_key_is(&self.files, step.disruption_key.as_ref());
        self.begin_apply(&bundle);
        // The step may change what its key stands for: forget the recorded key before it runs,
        // so that a crash between its end and the record of its success leaves "unknown" (a
        // disruption next time), never a key the node no longer runs.
        let recorded = |p: &Progress| p.applied_keys.contains_key(&step.name);
        if key_changes && self.files.progress.as_ref().is_some_and(recorded) {
            if let Some(record) = self.progress_mut() {
                record.applied_keys.remove(&step.name);
            }
            self.write_progress();
        }
        self.set_applying(&bundle.checksum, &step.name);
        self.request(Awaiting::Step(bundle, index));
    }

    /// Takes the status's strings (its checksum and step, empty when it has none) for the
    /// status that replaces it: a change of status refills them rather than allocating new
    /// ones. The status is [`AgentStatus::Starting`] until the caller sets the next one.
    fn status_buffers(&mut self) -> (String, String) {
        match std::mem::replace(&mut self.status, AgentStatus::Starting) {
            AgentStatus::UpToDate { checksum }
            | AgentStatus::WaitingForApproval { checksum }
            | AgentStatus::Reporting { checksum } => (checksum, String::new()),
            AgentStatus::WaitingForDisruptionApproval { checksum, step }
            | AgentStatus::Applying { checksum, step }
            | AgentStatus::RetryingStep { checksum, step, .. } => (checksum, step),
            AgentStatus::Starting | AgentStatus::Backoff { .. } => (String::new(), String::new()),
        }
    }

    /// Sets [`AgentStatus::Applying`] for `checksum` and `step` (unless it is already that:
    /// the step's run follows the removal of the Node's checksum with the same status).
    fn set_applying(&mut self, checksum: &str, step: &str) {
        let same = matches!(
            &self.status,
            AgentStatus::Applying { checksum: c, step: s } if c == checksum && s == step
        );
        if !same {
            let (c, s) = self.status_buffers();
            self.status = AgentStatus::Applying {
                checksum: refilled(c, checksum),
                step: refilled(s, step),
            };
        }
    }

    /// Sets [`AgentStatus::WaitingForApproval`] for `checksum` (unless it is already that:
    /// a waiting agent decides this at every poll).
    fn set_waiting_for_approval(&mut self, checksum: &str) {
        if !matches!(&self.status, AgentStatus::WaitingForApproval { checksum: c } if c == checksum)
        {
            let (c, _) = self.status_buffers();
            self.status = AgentStatus::WaitingForApproval {
                checksum: refilled(c, checksum),
            };
        }
    }

    /// Sets [`AgentStatus::WaitingForDisruptionApproval`] for `checksum` and `step` (unless it
    /// is already that).
    fn set_waiting_for_disruption_approval(&mut self, checksum: &str, step: &str) {
        let same = matches!(
            &self.status,
            AgentStatus::WaitingForDisruptionApproval { checksum: c, step: s }
                if c == checksum && s == step
        );
        if !same {
            let (c, s) = self.status_buffers();
            self.status = AgentStatus::WaitingForDisruptionApproval {
                checksum: refilled(c, checksum),
                step: refilled(s, step),
            };
        }
    }

    /// The Node if it was read since the last pause, else asks to read it (and returns `None`).
    fn fresh_node(&mut self) -> Option<&KnownNode> {
        if self.node_fresh && self.node.is_some() {
            return self.node.as_ref();
        }
        self.request(Awaiting::Node);
        None
    }

    /// A step of `bundle` is about to run (or, for a bundle without steps, it is about to be
    /// reported), and the Node no longer reports another checksum (first run aside): forget
    /// the applied checksum, store the steps (once per bundle and agent process: after a
    /// restart the steps on disk may be those of a bundle whose progress record was never
    /// written) and, unless the progress record is already about this bundle (a resumed
    /// apply), start a fresh record. In this order, so that an agent rebuilt between two of
    /// these writes finds either the old bundle complete (its record, and its checksum unless
    /// already removed, which it then reports again without running anything) or the new one
    /// begun. Until the record is rewritten the old bundle's record stands; the rewrite is
    /// the last write before the step runs.
    fn begin_apply(&mut self, bundle: &Arc<Verified>) {
        if self.files.configuration_checksum.take().is_some() {
            self.queue_pending_request();
            self.queue
                .push_back(Queued::Ready(AgentAction::RemoveChecksumFile));
        }
        let stored = self
            .stored
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, bundle) || s.checksum == bundle.checksum);
        if !stored {
            self.stored = Some(Arc::clone(bundle));
            self.enqueue(Queued::Store(Arc::clone(bundle)));
        }
        let begun = self
            .files
            .progress
            .as_ref()
            .is_some_and(|p| p.bundle.as_deref() == Some(bundle.checksum.as_str()));
        if !begun {
            let progress = self.progress_mut().get_or_insert_with(Progress::default);
            progress.bundle = Some(refilled(
                progress.bundle.take().unwrap_or_default(),
                &bundle.checksum,
            ));
            progress.done.clear();
            self.write_progress();
        }
    }

    /// Every step of the bundle succeeded: annotate the Node, then remove `first_run` and
    /// write the checksum file.
    fn decide_report(&mut self, bundle: &Arc<Verified>, now: Timestamp) {
        // Only a bundle without steps comes here before it began; for the others this stores
        // the steps once per process, as before a step.
        self.begin_apply(bundle);
        // Unless it is already that: a reporting agent decides this at every answer.
        if !matches!(&self.status, AgentStatus::Reporting { checksum } if *checksum == bundle.checksum)
        {
            let (c, _) = self.status_buffers();
            self.status = AgentStatus::Reporting {
                checksum: refilled(c, &bundle.checksum),
            };
        }
        let Some(node) = self.fresh_node() else {
            return;
        };
        if !annotated(node, &bundle.checksum) {
            return self.request(Awaiting::Patch(OwnPatch::Report(Arc::clone(bundle))));
        }
        if self.files.first_run {
            self.files.first_run = false;
            self.queue_pending_request();
            self.queue
                .push_back(Queued::Ready(AgentAction::RemoveFirstRun));
        }
        // Steps no longer in the bundle lose their key: if one comes back, it counts as new.
        let kept = |name: &String| bundle.steps.iter().any(|s| &s.name == name);
        let stale = |p: &Progress| p.applied_keys.keys().any(|name| !kept(name));
        if self.files.progress.as_ref().is_some_and(stale) {
            if let Some(progress) = self.progress_mut() {
                progress.applied_keys.retain(|name, _| kept(name));
            }
            self.write_progress();
        }
        self.files.configuration_checksum = Some(bundle.checksum.clone());
        self.queue_pending_request();
        self.queue
            .push_back(Queued::Ready(AgentAction::WriteChecksumFile(
                bundle.checksum.clone(),
            )));
        tracing::info!(node = %self.config.node, checksum = %bundle.checksum, "node agent: bundle applied");
        self.set_up_to_date(&bundle.checksum);
        self.finish_pass(now);
    }

    /// The checksum file equals the bundle: make sure the Node says so, tidy the state, done.
    fn decide_up_to_date(&mut self, bundle: &Arc<Verified>, now: Timestamp) {
        if self.files.first_run {
            self.files.first_run = false;
            self.queue_pending_request();
            self.queue
                .push_back(Queued::Ready(AgentAction::RemoveFirstRun));
        }
        // A node that applied the bundle before it kept a progress record (bootstrapped by a
        // script): record what it runs, so that the next bundle compares disruption keys.
        let recorded = self
            .files
            .progress
            .as_ref()
            .is_some_and(|p| p.bundle.as_deref() == Some(bundle.checksum.as_str()));
        if !recorded {
            let complete = Progress {
                bundle: Some(bundle.checksum.clone()),
                done: bundle.steps.iter().map(|s| s.name.clone()).collect(),
                applied_keys: bundle
                    .steps
                    .iter()
                    .filter_map(|s| s.disruption_key.clone().map(|k| (s.name.clone(), k)))
                    .collect(),
            };
            *self.progress_mut() = Some(complete);
            self.write_progress();
        }
        let Some(node) = self.fresh_node() else {
            return;
        };
        if !annotated(node, &bundle.checksum) {
            return self.request(Awaiting::Patch(OwnPatch::Report(Arc::clone(bundle))));
        }
        self.set_up_to_date(&bundle.checksum);
        self.finish_pass(now);
    }

    /// Sets [`AgentStatus::UpToDate`] for `checksum` (unless it is already that: a woken
    /// agent that is up to date decides this again).
    fn set_up_to_date(&mut self, checksum: &str) {
        if !matches!(&self.status, AgentStatus::UpToDate { checksum: c } if c == checksum) {
            let (c, _) = self.status_buffers();
            self.status = AgentStatus::UpToDate {
                checksum: refilled(c, checksum),
            };
        }
    }

    fn finish_pass(&mut self, now: Timestamp) {
        self.errors_in_row = 0;
        self.sleep = Some(Sleep {
            until: self.config.pass_interval.map(|d| now + d),
        });
    }
}

/// The action the queued `entry` stands for, built from the known Node `node` and the state
/// files `files` as they are now ([`Queued`]).
fn built(entry: Queued, node: Option<&KnownNode>, files: &StateFiles) -> AgentAction {
    match entry {
        Queued::Ready(action) => action,
        Queued::Fetch => AgentAction::FetchBundle,
        Queued::Read => AgentAction::ReadNode,
        Queued::Patch(patch) => {
            AgentAction::PatchNode(patch.node_patch(node.map_or("", |n| &n.resource_version)))
        }
        Queued::Store(bundle) => AgentAction::StoreBundle {
            checksum: bundle.checksum.clone(),
            steps: bundle.steps.to_vec(),
        },
        Queued::Progress => AgentAction::WriteProgress(files.progress.clone().unwrap_or_default()),
    }
}

/// `buffer` holding `text` (its allocation reused).
fn refilled(mut buffer: String, text: &str) -> String {
    buffer.clear();
    buffer.push_str(text);
    buffer
}

/// Whether the Node carries `checksum` in its checksum annotation.
fn annotated(node: &KnownNode, checksum: &str) -> bool {
    node.checksum() == Some(checksum)
}

/// Checks a fetched bundle: its steps hash to its checksum, names are unique, non-empty and
/// plain file names. Sorts the steps by name. The hash is the one the steps share
/// ([`BundleSteps::computed_checksum`]) unless `hash_again`.
fn verify(bundle: DesiredBundle, hash_again: bool) -> Result<Verified, AgentError> {
    let reject = |reason: String| AgentError::BundleRejected {
        checksum: bundle.checksum.clone(),
        reason,
    };
    let again;
    let computed = if hash_again {
        again = crate::bashible::configuration_checksum(&bundle.steps);
        again.as_str()
    } else {
        bundle.steps.computed_checksum()
    };
    if computed != bundle.checksum {
        return Err(reject(format!(
            "its steps hash to {computed}; the bundle was altered or truncated in transit, or \
             the server renders differently from this agent (check that both run the same \
             nodemgr version)"
        )));
    }
    let fetched_sorted = bundle.steps.is_sorted_by(|a, b| a.name <= b.name);
    let mut steps = bundle.steps;
    if !fetched_sorted {
        steps.make_mut().sort_by(|a, b| a.name.cmp(&b.name));
    }
    for pair in steps.windows(2) {
        if let [a, b] = pair
            && a.name == b.name
        {
            return Err(reject(format!("two steps are named {:?}", a.name)));
        }
    }
    if let Some(bad) = steps.iter().find(|s| {
        s.name.is_empty()
            || s.name.contains('/')
            || s.name.starts_with('.')
            || s.name.contains('\0')
    }) {
        return Err(reject(format!(
            "step name {:?} is not a plain file name",
            bad.name
        )));
    }
    Ok(Verified {
        checksum: bundle.checksum,
        steps,
        rolling_update: bundle.rolling_update,
        fetched_sorted,
    })
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub fn stderr_tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// An object name from `raw`: lowercase letters, digits, `-` and `.`, other characters
/// replaced by `-`, at most 253 characters, starting and ending with a letter or digit.
fn event_name(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::NodeView;
    use crate::bashible::Step;
    use std::time::Duration;

    fn view(rv: &str, annotations: &[(&str, &str)]) -> NodeView {
        NodeView {
            resource_version: rv.into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn applied_agent(bundle: &DesiredBundle) -> Agent {
        let files = StateFiles::applied("old", Default::default(), Default::default());
        let mut agent = Agent::new(AgentConfig::new("n1"), files, Timestamp::EPOCH);
        assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
        agent.handle_input(AgentInput::Bundle(Ok(bundle.clone())), Timestamp::EPOCH);
        agent
    }

    fn drain(agent: &mut Agent) -> Vec<AgentAction> {
        std::iter::from_fn(|| agent.poll_action()).collect()
    }

    /// The agent's own patches written out literally: what each sets and removes.
    fn literal_patch(patch: &OwnPatch, resource_version: &str) -> NodePatch {
        let set = |key: &str, value: &str| -> BTreeMap<String, String> {
            [(key.to_owned(), value.to_owned())].into()
        };
        match patch {
            OwnPatch::AskApproval => NodePatch {
                resource_version: resource_version.to_owned(),
                set: set(keys::ANNOTATION_WAITING_FOR_APPROVAL, ""),
                remove: Vec::new(),
            },
            OwnPatch::Unreport => NodePatch {
                resource_version: resource_version.to_owned(),
                set: BTreeMap::new(),
                remove: vec![keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned()],
            },
            OwnPatch::AskDisruption(key) => NodePatch {
                resource_version: resource_version.to_owned(),
                set: set(key.key(), ""),
                remove: Vec::new(),
            },
            OwnPatch::Report(bundle) => NodePatch {
                resource_version: resource_version.to_owned(),
                set: set(keys::ANNOTATION_CONFIGURATION_CHECKSUM, &bundle.checksum),
                remove: Vec::new(),
            },
        }
    }

    fn own_patch_strategy() -> impl proptest::strategy::Strategy<Value = OwnPatch> {
        use proptest::prelude::*;
        let bundle = |checksum: &str| {
            Arc::new(Verified {
                checksum: checksum.to_owned(),
                steps: BundleSteps::default(),
                rolling_update: false,
                fetched_sorted: true,
            })
        };
        prop_oneof![
            Just(OwnPatch::AskApproval),
            Just(OwnPatch::Unreport),
            Just(OwnPatch::AskDisruption(Watched::DisruptionRequired)),
            Just(OwnPatch::AskDisruption(Watched::RollingUpdate)),
            Just(OwnPatch::Report(bundle("c1"))),
            Just(OwnPatch::Report(bundle("c2"))),
        ]
    }

    proptest::proptest! {
        /// The Node as the agent knows it after a read and its own accepted patches (the
        /// watched annotations taken from the read, the patches applied to them) has the
        /// watched annotations the read's annotations have with every patch applied to them,
        /// as the API applies them; and each patch requested is the one the agent wrote out
        /// literally before. The known Node is read again in between (its buffers reused).
        #[test]
        fn the_known_node_is_the_view_with_the_patches_applied(
            reads in proptest::collection::vec(proptest::collection::btree_map(
                proptest::sample::select(vec![
                    keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                    keys::ANNOTATION_WAITING_FOR_APPROVAL,
                    keys::ANNOTATION_APPROVED,
                    keys::ANNOTATION_DISRUPTION_REQUIRED,
                    keys::ANNOTATION_DISRUPTION_APPROVED,
                    keys::ANNOTATION_ROLLING_UPDATE,
                    keys::ANNOTATION_DRAINING,
                    "node.deckhouse.io/configuration-checksum-other",
                    "other",
                ]),
                proptest::sample::select(vec!["", "c1", "c2", "a-longer-checksum"]),
                0..6,
            ), 1..4),
            patches in proptest::collection::vec(own_patch_strategy(), 0..40),
        ) {
            let mut known = KnownNode::default();
            for (round, base) in reads.iter().enumerate() {
                let base: Vec<(&str, &str)> = base.iter().map(|(k, v)| (*k, *v)).collect();
                let read = view(&round.to_string(), &base);
                let mut plain: BTreeMap<String, String> = read.annotations.clone().into_inner();
                known.read(&read.resource_version, &read.annotations);
                drop(read);
                for patch in &patches {
                    let request = patch.node_patch("1");
                    proptest::prop_assert_eq!(&request, &literal_patch(patch, "1"));
                    request.apply_to(&mut plain);
                    for (key, value) in patch.changes() {
                        known.set(key, value);
                    }
                    for watched in Watched::ALL {
                        proptest::prop_assert_eq!(
                            known.has(watched),
                            plain.contains_key(watched.key()),
                            "{:?}",
                            watched
                        );
                    }
                    proptest::prop_assert_eq!(
                        known.checksum(),
                        plain.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM).map(String::as_str)
                    );
                }
            }
        }
    }

    /// A bundle from a seed: some of four steps, scripts and disruption keys from small sets
    /// (so that keys repeat and change between bundles).
    fn seeded_bundle(seed: u64, rolling: bool) -> DesiredBundle {
        let mut steps = Vec::new();
        let mut s = seed;
        for name in [
            "010_os.sh",
            "020_cri.sh",
            "030_kubelet.sh",
            "090_cleanup.sh",
        ] {
            let bits = s % 8;
            s /= 8;
            if bits == 0 && !steps.is_empty() {
                continue;
            }
            let mut step = Step::new(name, format!("echo {name} v{}", bits % 3));
            if bits >= 4 {
                step = step.with_disruption_key(format!("k{}", bits % 2));
            }
            steps.push(step);
        }
        DesiredBundle::of_steps(steps, rolling)
    }

    /// One move of the lent-versus-built comparison.
    #[derive(Debug, Clone)]
    struct Move {
        /// What happens: the driver carries out an action (most), or the world changes.
        kind: u8,
        /// How a request is answered.
        fault: u8,
        /// The lending agent's action is drained with `poll_lean_action` (else `poll_action`).
        lean_poll: bool,
        /// Its answer goes through the lean input methods (else `handle_input`).
        lean_answer: bool,
    }

    fn a_move() -> impl proptest::strategy::Strategy<Value = Move> {
        use proptest::prelude::*;
        (any::<u8>(), any::<u8>(), any::<bool>(), any::<bool>()).prop_map(
            |(kind, fault, lean_poll, lean_answer)| Move {
                kind,
                fault,
                lean_poll,
                lean_answer,
            },
        )
    }

    /// What the agent shows, compared after every move.
    fn observed(agent: &Agent) -> String {
        format!(
            "{:?} | {:?} | {:?} | {:?} | {}",
            agent.status(),
            agent.next_deadline(),
            agent.last_error(),
            agent.files(),
            agent.is_up_to_date()
        )
    }

    /// Whether `status` names only checksums and steps of `bundles` (a status change refills
    /// the old status's strings, [`Agent::status_buffers`]: nothing of them may be left).
    fn status_names_the_bundles(status: &AgentStatus, bundles: &[DesiredBundle]) -> bool {
        let checksum = |c: &String| bundles.iter().any(|b| &b.checksum == c);
        let step = |s: &String| bundles.iter().any(|b| b.steps.iter().any(|x| &x.name == s));
        match status {
            AgentStatus::Starting | AgentStatus::Backoff { .. } => true,
            AgentStatus::UpToDate { checksum: c }
            | AgentStatus::WaitingForApproval { checksum: c }
            | AgentStatus::Reporting { checksum: c } => checksum(c),
            AgentStatus::WaitingForDisruptionApproval {
                checksum: c,
                step: s,
            }
            | AgentStatus::Applying {
                checksum: c,
                step: s,
            }
            | AgentStatus::RetryingStep {
                checksum: c,
                step: s,
                ..
            } => checksum(c) && step(s),
        }
    }

    /// The lending agent's answer to `action` (`lean`: through the lean input methods).
    fn answer_lending(
        agent: &mut Agent,
        action: &AgentAction,
        input: &AgentInput,
        bundle: &DesiredBundle,
        annotations: &BTreeMap<String, String>,
        lean: bool,
        now: Timestamp,
    ) {
        match (lean, action, input) {
            (true, AgentAction::FetchBundle, AgentInput::Bundle(Ok(_))) => {
                agent.handle_bundle_fetched(
                    &bundle.checksum,
                    &bundle.steps,
                    bundle.rolling_update,
                    now,
                );
            }
            (true, AgentAction::ReadNode, AgentInput::Node(Ok(Some(view)))) => {
                agent.handle_node_read(&view.resource_version, annotations, now);
            }
            (
                true,
                AgentAction::PatchNode(_),
                AgentInput::Patched(PatchOutcome::Applied { resource_version }),
            ) => agent.handle_patch_applied(resource_version, now),
            _ => agent.handle_input(input.clone(), now),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// An agent that lends its actions (built only when drained, from the progress record
        /// and the Node as they were when decided) and takes lean answers decides exactly as
        /// one that builds every action when it queues it and takes every answer as an
        /// [`AgentInput`]: the same actions, statuses, timers, errors and state files at every
        /// move, whatever the schedule (approvals, bundle changes with disruption keys
        /// recorded or not, conflicts, failures, a deleted Node, stray answers), and the
        /// lent patch changes the Node as the built one does.
        #[test]
        fn lent_actions_and_lean_answers_change_nothing(
            seeds in proptest::collection::vec(proptest::prelude::any::<u64>(), 3),
            rolling in proptest::prelude::any::<bool>(),
            initial in 0u8..4,
            recorded in proptest::collection::vec(0u8..3, 4),
            moves in proptest::collection::vec(a_move(), 1..300),
        ) {
            let bundles: Vec<DesiredBundle> =
                seeds.iter().map(|s| seeded_bundle(*s, rolling)).collect();
            let names = ["010_os.sh", "020_cri.sh", "030_kubelet.sh", "090_cleanup.sh"];
            let keys_recorded: BTreeMap<String, String> = names
                .iter()
                .zip(&recorded)
                .filter(|(_, k)| **k > 0)
                .map(|(n, k)| ((*n).to_owned(), format!("k{}", k - 1)))
                .collect();
            let files = match initial {
                0 => StateFiles::first_run(),
                1 => StateFiles::applied("older", Default::default(), keys_recorded),
                2 => StateFiles::applied(&bundles[0].checksum, Default::default(), keys_recorded),
                _ => StateFiles::default(),
            };
            let mut now = Timestamp::from_secs(1_000);
            let mut built = Agent::new(AgentConfig::new("n1"), files.clone(), now);
            built.eager = true;
            let mut lending = Agent::new(AgentConfig::new("n1"), files, now);
            let mut desired = 0usize;
            let mut node: Option<BTreeMap<String, String>> = Some(BTreeMap::new());
            let mut lent_node = node.clone();
            let mut rv = 1u64;
            for m in &moves {
                match m.kind % 16 {
                    0 | 1 => {
                        for map in [&mut node, &mut lent_node].into_iter().flatten() {
                            map.insert(keys::ANNOTATION_APPROVED.to_owned(), String::new());
                            if m.fault % 2 == 0 {
                                map.insert(
                                    keys::ANNOTATION_DISRUPTION_APPROVED.to_owned(),
                                    String::new(),
                                );
                            }
                        }
                        rv += 1;
                    }
                    2 => {
                        for map in [&mut node, &mut lent_node].into_iter().flatten() {
                            map.retain(|k, _| {
                                !k.starts_with("update.node.deckhouse.io/")
                            });
                        }
                        rv += 1;
                    }
                    3 => {
                        desired = usize::from(m.fault) % bundles.len();
                        built.handle_wake(now);
                        lending.handle_wake(now);
                    }
                    4 => {
                        for map in [&mut node, &mut lent_node].into_iter().flatten() {
                            map.insert("other".to_owned(), m.fault.to_string());
                        }
                        rv += 1;
                    }
                    5 => {
                        node = match node {
                            Some(_) => None,
                            None => Some(BTreeMap::new()),
                        };
                        lent_node = node.clone();
                        rv += 1;
                    }
                    6 => {
                        // A stray (or, when awaited, a real) answer: a read of the Node.
                        if let Some(map) = &node {
                            let view = NodeView {
                                resource_version: rv.to_string(),
                                annotations: map.clone().into(),
                            };
                            built.handle_input(AgentInput::Node(Ok(Some(view))), now);
                            lending.handle_node_read(&rv.to_string(), map, now);
                        }
                    }
                    _ => {
                        let expected = built.poll_action();
                        let lent = if m.lean_poll {
                            lending.poll_lean_action().map(|a| {
                                let changes: Option<Vec<(&str, Option<String>)>> = match &a {
                                    LeanAction::PatchNode(p) => Some(
                                        p.changes().map(|(k, v)| (k, v.map(str::to_owned))).collect(),
                                    ),
                                    _ => None,
                                };
                                let sets: Option<Vec<bool>> = match &a {
                                    LeanAction::PatchNode(p) => Some(
                                        Watched::ALL.iter().map(|w| p.sets(w.key())).collect(),
                                    ),
                                    _ => None,
                                };
                                (a.into_action(), changes, sets)
                            })
                        } else {
                            lending.poll_action().map(|a| (a, None, None))
                        };
                        proptest::prop_assert_eq!(
                            expected.as_ref(),
                            lent.as_ref().map(|(a, _, _)| a)
                        );
                        let (Some(action), Some((_, changes, sets))) = (expected, lent) else {
                            match built.next_deadline() {
                                Some(t) => {
                                    now = now.max(t);
                                    built.handle_timeout(now);
                                    lending.handle_timeout(now);
                                }
                                None => {
                                    now = now + Duration::from_secs(60);
                                    built.handle_wake(now);
                                    lending.handle_wake(now);
                                }
                            }
                            continue;
                        };
                        let bundle = &bundles[desired];
                        let input = match &action {
                            AgentAction::FetchBundle if m.fault % 5 == 0 => {
                                Some(AgentInput::Bundle(Err(Cause::msg("refused"))))
                            }
                            AgentAction::FetchBundle => {
                                Some(AgentInput::Bundle(Ok(bundle.clone())))
                            }
                            AgentAction::ReadNode if m.fault % 6 == 0 => {
                                Some(AgentInput::Node(Err(Cause::msg("503"))))
                            }
                            AgentAction::ReadNode => Some(AgentInput::Node(Ok(node.as_ref().map(
                                |map| NodeView {
                                    resource_version: rv.to_string(),
                                    annotations: map.clone().into(),
                                },
                            )))),
                            AgentAction::PatchNode(patch) => Some(AgentInput::Patched(
                                match node.as_mut() {
                                    None => PatchOutcome::NotFound,
                                    Some(_) if m.fault % 6 == 0 => {
                                        PatchOutcome::Failed(Cause::msg("500"))
                                    }
                                    Some(_) if m.fault % 6 == 1
                                        || patch.resource_version != rv.to_string() =>
                                    {
                                        rv += 1;
                                        PatchOutcome::Conflict
                                    }
                                    Some(map) => {
                                        patch.apply_to(map);
                                        if let Some(lent_map) = lent_node.as_mut() {
                                            match &changes {
                                                Some(changes) => {
                                                    for (k, v) in changes {
                                                        match v {
                                                            Some(v) => {
                                                                lent_map.insert((*k).to_owned(), v.clone());
                                                            }
                                                            None => {
                                                                lent_map.remove(*k);
                                                            }
                                                        }
                                                    }
                                                }
                                                None => patch.apply_to(lent_map),
                                            }
                                        }
                                        if let Some(sets) = &sets {
                                            let expected: Vec<bool> = Watched::ALL
                                                .iter()
                                                .map(|w| patch.set.contains_key(w.key()))
                                                .collect();
                                            proptest::prop_assert_eq!(sets, &expected);
                                        }
                                        rv += 1;
                                        PatchOutcome::Applied {
                                            resource_version: rv.to_string(),
                                        }
                                    }
                                },
                            )),
                            AgentAction::RunStep { name } => {
                                Some(AgentInput::StepFinished(StepOutcome {
                                    step: name.clone(),
                                    exit_code: Some(i32::from(m.fault % 4 == 0)),
                                    stderr: String::new(),
                                }))
                            }
                            _ => None,
                        };
                        if let Some(input) = input {
                            built.handle_input(input.clone(), now);
                            let empty = BTreeMap::new();
                            let map = node.as_ref().unwrap_or(&empty);
                            answer_lending(
                                &mut lending,
                                &action,
                                &input,
                                bundle,
                                map,
                                m.lean_answer,
                                now,
                            );
                        }
                    }
                }
                proptest::prop_assert_eq!(&node, &lent_node);
                proptest::prop_assert_eq!(observed(&built), observed(&lending));
                proptest::prop_assert!(
                    status_names_the_bundles(lending.status(), &bundles),
                    "{:?}",
                    lending.status()
                );
            }
        }
    }

    /// What the shared-verification property fetches for code `code`: the two shared bundles
    /// as published, their steps under the other's (or a bogus) checksum or approval mode,
    /// and a reordered copy.
    fn shared_fetch(bundles: &[DesiredBundle; 2], code: u8) -> DesiredBundle {
        let [a, b] = bundles;
        match code % 7 {
            0 => a.clone(),
            1 => b.clone(),
            2 => DesiredBundle {
                checksum: b.checksum.clone(),
                ..a.clone()
            },
            3 => DesiredBundle {
                rolling_update: !a.rolling_update,
                ..a.clone()
            },
            4 => DesiredBundle {
                checksum: "bogus".to_owned(),
                ..b.clone()
            },
            5 => DesiredBundle {
                checksum: a.checksum.clone(),
                ..b.clone()
            },
            _ => {
                let mut steps = a.steps.to_vec();
                steps.reverse();
                DesiredBundle {
                    steps: BundleSteps::new(steps),
                    ..a.clone()
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Agents handed shared steps through the lean answer
        /// ([`Agent::handle_bundle_fetched`]), which take a bundle another agent verified
        /// from those very steps ([`BundleSteps::verified_as`]), decide exactly as agents that
        /// verify every fetch in full, whatever each fetches: the shared bundles, their steps
        /// under another checksum or approval mode, a reordered copy.
        #[test]
        fn a_bundle_verified_by_another_agent_changes_nothing(
            seeds in proptest::collection::vec(proptest::prelude::any::<u64>(), 2),
            rolling in proptest::prelude::any::<bool>(),
            moves in proptest::collection::vec((0usize..3, 0u8..7, 0u8..8), 1..200),
        ) {
            let bundles = [seeded_bundle(seeds[0], rolling), seeded_bundle(seeds[1], !rolling)];
            let mut now = Timestamp::from_secs(1_000);
            let files = StateFiles::applied("older", Default::default(), Default::default());
            let hashing_config = AgentConfig {
                verify_every_fetch: true,
                ..AgentConfig::new("n1")
            };
            let mut pairs: Vec<(Agent, Agent, BTreeMap<String, String>, u64)> = (0..3)
                .map(|_| {
                    (
                        Agent::new(AgentConfig::new("n1"), files.clone(), now),
                        Agent::new(hashing_config.clone(), files.clone(), now),
                        [
                            (keys::ANNOTATION_APPROVED.to_owned(), String::new()),
                            (keys::ANNOTATION_DISRUPTION_APPROVED.to_owned(), String::new()),
                        ]
                        .into(),
                        1,
                    )
                })
                .collect();
            for (at, code, fault) in &moves {
                let (sharing, hashing, annotations, rv) = &mut pairs[*at];
                let action = sharing.poll_action();
                proptest::prop_assert_eq!(&action, &hashing.poll_action());
                match action {
                    None => {
                        now = now + Duration::from_secs(60);
                        sharing.handle_timeout(now);
                        hashing.handle_timeout(now);
                        sharing.handle_wake(now);
                        hashing.handle_wake(now);
                    }
                    Some(AgentAction::FetchBundle) => {
                        let fetched = shared_fetch(&bundles, *code);
                        sharing.handle_bundle_fetched(
                            &fetched.checksum,
                            &fetched.steps,
                            fetched.rolling_update,
                            now,
                        );
                        hashing.handle_input(AgentInput::Bundle(Ok(fetched)), now);
                    }
                    Some(AgentAction::ReadNode) => {
                        sharing.handle_node_read(&rv.to_string(), annotations, now);
                        let view = NodeView {
                            resource_version: rv.to_string(),
                            annotations: annotations.clone().into(),
                        };
                        hashing.handle_input(AgentInput::Node(Ok(Some(view))), now);
                    }
                    Some(AgentAction::PatchNode(patch)) => {
                        patch.apply_to(annotations);
                        *rv += 1;
                        let outcome = PatchOutcome::Applied {
                            resource_version: rv.to_string(),
                        };
                        sharing.handle_input(AgentInput::Patched(outcome.clone()), now);
                        hashing.handle_input(AgentInput::Patched(outcome), now);
                    }
                    Some(AgentAction::RunStep { name }) => {
                        let outcome = StepOutcome {
                            step: name,
                            exit_code: Some(i32::from(*fault == 0)),
                            stderr: String::new(),
                        };
                        sharing.handle_input(AgentInput::StepFinished(outcome.clone()), now);
                        hashing.handle_input(AgentInput::StepFinished(outcome), now);
                    }
                    Some(_) => {}
                }
                proptest::prop_assert_eq!(observed(sharing), observed(hashing));
            }
        }
    }

    #[test]
    fn a_failed_fetch_keeps_the_driver_error_as_its_source() {
        let files = StateFiles::applied("old", Default::default(), Default::default());
        let mut agent = Agent::new(AgentConfig::new("n1"), files, Timestamp::EPOCH);
        assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        agent.handle_input(AgentInput::Bundle(Err(Cause::new(io))), Timestamp::EPOCH);
        let error = agent.last_error().cloned();
        let Some(error @ AgentError::Fetch(_)) = error else {
            panic!("expected a fetch error, got {error:?}");
        };
        // The text is as before; the io error is reachable as the source.
        assert_eq!(error.to_string(), "failed to fetch the bundle: refused");
        let io = std::error::Error::source(&error)
            .and_then(|e| e.downcast_ref::<Cause>())
            .and_then(|c| c.get().downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
    }

    #[test]
    fn asks_for_approval_with_a_guarded_patch_and_retries_after_a_conflict() {
        let bundle = DesiredBundle::of_steps(vec![Step::new("010_a.sh", "true")], false);
        let mut agent = applied_agent(&bundle);
        // Nothing is written before a step of the new bundle is about to run: the node still
        // runs "old".
        let actions = drain(&mut agent);
        assert_eq!(actions, vec![AgentAction::ReadNode]);
        let old = [(keys::ANNOTATION_CONFIGURATION_CHECKSUM, "old")];
        agent.handle_input(
            AgentInput::Node(Ok(Some(view("5", &old)))),
            Timestamp::EPOCH,
        );
        let Some(AgentAction::PatchNode(patch)) = agent.poll_action() else {
            panic!("expected a patch");
        };
        assert_eq!(patch.resource_version, "5");
        assert!(
            patch
                .set
                .contains_key(keys::ANNOTATION_WAITING_FOR_APPROVAL)
        );
        // The checksum annotation stays while the node waits: it still runs "old".
        assert!(patch.remove.is_empty(), "{patch:?}");
        assert_eq!(agent.files().configuration_checksum.as_deref(), Some("old"));
        agent.handle_input(
            AgentInput::Patched(PatchOutcome::Conflict),
            Timestamp::EPOCH,
        );
        assert_eq!(agent.poll_action(), Some(AgentAction::ReadNode));
        agent.handle_input(
            AgentInput::Node(Ok(Some(view("6", &old)))),
            Timestamp::EPOCH,
        );
        let Some(AgentAction::PatchNode(again)) = agent.poll_action() else {
            panic!("expected the patch again");
        };
        assert_eq!(again.resource_version, "6");
        assert_eq!(again.set, patch.set);
    }

    #[test]
    fn the_old_checksum_is_given_up_only_right_before_the_first_step_runs() {
        let bundle = DesiredBundle::of_steps(vec![Step::new("010_a.sh", "true")], false);
        let mut agent = applied_agent(&bundle);
        assert_eq!(drain(&mut agent), vec![AgentAction::ReadNode]);
        let approved = [
            (keys::ANNOTATION_CONFIGURATION_CHECKSUM, "old"),
            (keys::ANNOTATION_APPROVED, ""),
        ];
        agent.handle_input(
            AgentInput::Node(Ok(Some(view("7", &approved)))),
            Timestamp::EPOCH,
        );
        // First the Node stops reporting "old" (guarded by the read)...
        let Some(AgentAction::PatchNode(patch)) = agent.poll_action() else {
            panic!("expected the checksum's removal");
        };
        assert_eq!(patch.resource_version, "7");
        assert!(patch.set.is_empty());
        assert_eq!(
            patch.remove,
            vec![keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned()]
        );
        assert_eq!(agent.poll_action(), None);
        assert_eq!(agent.files().configuration_checksum.as_deref(), Some("old"));
        agent.handle_input(
            AgentInput::Patched(PatchOutcome::Applied {
                resource_version: "8".into(),
            }),
            Timestamp::EPOCH,
        );
        // ... then the state files, then the step, with no request in between.
        let actions = drain(&mut agent);
        assert_eq!(actions[0], AgentAction::RemoveChecksumFile);
        assert!(matches!(actions[1], AgentAction::StoreBundle { .. }));
        assert!(
            matches!(&actions[2], AgentAction::WriteProgress(p) if p.bundle.as_deref() == Some(bundle.checksum.as_str()) && p.done.is_empty())
        );
        assert_eq!(
            actions[3..],
            [AgentAction::RunStep {
                name: "010_a.sh".into()
            }]
        );
    }

    #[test]
    fn a_rolling_update_group_asks_with_rolling_update() {
        let step = Step::new("020_cri.sh", "x").with_disruption_key("cri.type=ContainerdV2");
        let bundle = DesiredBundle::of_steps(vec![step], true);
        let mut agent = applied_agent(&bundle);
        drain(&mut agent);
        agent.handle_input(
            AgentInput::Node(Ok(Some(view("1", &[(keys::ANNOTATION_APPROVED, "")])))),
            Timestamp::EPOCH,
        );
        let Some(AgentAction::PatchNode(patch)) = agent.poll_action() else {
            panic!("expected a disruption request");
        };
        assert!(patch.set.contains_key(keys::ANNOTATION_ROLLING_UPDATE));
        assert!(matches!(
            agent.status(),
            AgentStatus::WaitingForDisruptionApproval { .. }
        ));
    }

    #[test]
    fn a_failing_step_emits_an_event_with_the_stderr_tail_and_retries() {
        let bundle = DesiredBundle::of_steps(vec![Step::new("030_kubelet.sh", "false")], false);
        let mut agent = applied_agent(&bundle);
        drain(&mut agent);
        agent.handle_input(
            AgentInput::Node(Ok(Some(view("1", &[(keys::ANNOTATION_APPROVED, "")])))),
            Timestamp::EPOCH,
        );
        // The state files of the new bundle are written right before its first step.
        assert!(matches!(
            drain(&mut agent).last(),
            Some(AgentAction::RunStep { .. })
        ));
        let stderr = format!("{}END", "é".repeat(400));
        agent.handle_input(
            AgentInput::StepFinished(StepOutcome {
                step: "030_kubelet.sh".into(),
                exit_code: Some(2),
                stderr,
            }),
            Timestamp::EPOCH,
        );
        let Some(AgentAction::EmitEvent(event)) = agent.poll_action() else {
            panic!("expected an event");
        };
        assert_eq!(event.reason, REASON_STEP_FAILED);
        assert_eq!(event.name, "bashible-error-n1-030-kubelet.sh");
        assert!(event.note.ends_with("END") && event.note.contains("exited with 2"));
        assert_eq!(agent.next_deadline(), Some(Timestamp::from_secs(10)));
        agent.handle_timeout(Timestamp::from_secs(9));
        assert_eq!(agent.poll_action(), None);
        agent.handle_timeout(Timestamp::from_secs(10));
        assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
    }

    #[test]
    fn a_bundle_that_does_not_hash_to_its_checksum_is_refused() {
        let mut bundle = DesiredBundle::of_steps(vec![Step::new("010_a.sh", "true")], false);
        bundle.checksum = "0".repeat(64);
        let mut agent = applied_agent(&bundle);
        let actions = drain(&mut agent);
        assert!(matches!(
            actions.as_slice(),
            [AgentAction::EmitEvent(AgentEvent { reason, .. })] if reason == REASON_BUNDLE_REJECTED
        ));
        assert!(matches!(
            agent.last_error(),
            Some(AgentError::BundleRejected { .. })
        ));
        assert_eq!(agent.next_deadline(), Some(Timestamp::from_secs(5)));
        assert_eq!(agent.files().configuration_checksum.as_deref(), Some("old"));
    }

    #[test]
    fn stderr_tail_cuts_at_a_character_boundary() {
        assert_eq!(stderr_tail("abc", 2), "bc");
        assert_eq!(stderr_tail("éé", 3), "é");
        assert_eq!(stderr_tail("", 500), "");
    }
}
