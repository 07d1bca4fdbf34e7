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
use super::input::{AgentInput, BundleSteps, DesiredBundle, NodeView, PatchOutcome, StepOutcome};
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
struct Verified {
    checksum: String,
    steps: BundleSteps,
    rolling_update: bool,
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
    Step(String),
}

/// One of the patches the agent makes of its Node, as it remembers it while the patch is
/// under way: what the patch sets and removes follows from it ([`OwnPatch::node_patch`] makes
/// the request), so the agent keeps no copy of the request's strings.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnPatch {
    /// Sets `waiting-for-approval` (the configuration checksum stays: the node still runs
    /// the bundle it reports until the first step of the new one is about to run).
    AskApproval,
    /// Removes the configuration checksum: the first step of another bundle is about to run,
    /// and from then on the node no longer runs the bundle it reported.
    Unreport,
    /// Sets the disruption annotation `key` (`disruption-required` or `rolling-update`).
    AskDisruption(&'static str),
    /// Sets the configuration checksum to the bundle's.
    Report(Arc<Verified>),
}

impl OwnPatch {
    /// The annotations the patch changes, in the order the API applies them (removals first,
    /// then the set keys in key order, as [`NodePatch::apply_to`]): key → the new value
    /// (`None`: removed).
    fn changes(&self) -> impl Iterator<Item = (&'static str, Option<&str>)> {
        let (first, second) = match self {
            Self::AskApproval => ((keys::ANNOTATION_WAITING_FOR_APPROVAL, Some("")), None),
            Self::Unreport => ((keys::ANNOTATION_CONFIGURATION_CHECKSUM, None), None),
            Self::AskDisruption(key) => ((*key, Some("")), None),
            Self::Report(bundle) => (
                (
                    keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                    Some(bundle.checksum.as_str()),
                ),
                None,
            ),
        };
        std::iter::once(first).chain(second)
    }

    /// The request for a Node read at `resource_version`.
    fn node_patch(&self, resource_version: &str) -> NodePatch {
        let mut patch = NodePatch {
            resource_version: resource_version.to_owned(),
            set: BTreeMap::new(),
            remove: Vec::new(),
        };
        for (key, value) in self.changes() {
            match value {
                Some(value) => {
                    patch.set.insert(key.to_owned(), value.to_owned());
                }
                None => patch.remove.push(key.to_owned()),
            }
        }
        patch
    }
}

/// The agent's Node: as last read, and what the agent's own patches accepted since changed
/// (applied on top when read, so that a patch does not copy the annotations read, which the
/// driver may share with its own copy of the Node).
#[derive(Debug, Clone, Default)]
struct KnownNode {
    view: NodeView,
    /// Annotations the accepted patches set (`Some`) or removed (`None`), latest last.
    patched: Vec<(&'static str, Option<String>)>,
}

impl KnownNode {
    /// Annotation `key` as the Node has it now (its patches applied to the view read).
    fn annotation(&self, key: &str) -> Option<&str> {
        match self.patched.iter().rev().find(|(k, _)| *k == key) {
            Some((_, value)) => value.as_deref(),
            None => self.view.annotations.get(key).map(String::as_str),
        }
    }

    fn has(&self, key: &str) -> bool {
        self.annotation(key).is_some()
    }

    /// How many changes are kept on top of the view before they are written into it.
    const MAX_PATCHED: usize = 16;

    /// Writes the changes into the view's annotations (a copy of them when shared).
    fn fold(&mut self) {
        let annotations: &mut BTreeMap<String, String> = &mut self.view.annotations;
        for (key, value) in self.patched.drain(..) {
            match value {
                Some(value) => {
                    annotations.insert(key.to_owned(), value);
                }
                None => {
                    annotations.remove(key);
                }
            }
        }
    }
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
    /// The bundle this agent stored in `bundle_steps/`.
    stored: Option<String>,
    node: Option<KnownNode>,
    node_fresh: bool,
    awaiting: Option<Awaiting>,
    sleep: Option<Sleep>,
    queue: VecDeque<AgentAction>,
    errors_in_row: u32,
    step_failures: u32,
    last_error: Option<AgentError>,
    status: AgentStatus,
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
            sleep: None,
            queue: VecDeque::new(),
            errors_in_row: 0,
            step_failures: 0,
            last_error: None,
            status: AgentStatus::Starting,
        };
        agent.decide(now);
        agent
    }

    /// The next action to carry out, or `None` when the agent waits for an answer or its
    /// timer. Call it after [`Agent::new`] and after every `handle_*` until it returns
    /// `None`.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<AgentAction> {
        self.queue.pop_front()
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
        let awaiting = self.awaiting.take();
        match (awaiting, input) {
            (Some(Awaiting::Bundle), AgentInput::Bundle(result)) => self.on_bundle(result, now),
            (Some(Awaiting::Node), AgentInput::Node(result)) => self.on_node(result, now),
            (Some(Awaiting::Patch(patch)), AgentInput::Patched(outcome)) => {
                self.on_patched(&patch, outcome, now);
            }
            (Some(Awaiting::Step(name)), AgentInput::StepFinished(outcome))
                if outcome.step == name =>
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

    /// Where the agent is.
    pub fn status(&self) -> &AgentStatus {
        &self.status
    }

    /// Whether the pass is complete: the node runs its desired bundle, its Node says so, and
    /// every action has been drained (the state files are written).
    pub fn is_up_to_date(&self) -> bool {
        matches!(self.status, AgentStatus::UpToDate { .. }) && self.queue.is_empty()
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

    fn request(&mut self, awaiting: Awaiting) {
        let action = match &awaiting {
            Awaiting::Bundle => AgentAction::FetchBundle,
            Awaiting::Node => AgentAction::ReadNode,
            Awaiting::Patch(p) => {
                let version = self.node.as_ref().map_or("", |n| &n.view.resource_version);
                AgentAction::PatchNode(p.node_patch(version))
            }
            Awaiting::Step(name) => AgentAction::RunStep { name: name.clone() },
        };
        self.queue.push_back(action);
        self.awaiting = Some(awaiting);
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
        self.queue.push_back(AgentAction::EmitEvent(AgentEvent {
            name,
            reason: reason.to_owned(),
            note,
        }));
    }

    /// The bundle last verified, when `desired` is that very bundle: the same published
    /// checksum and the same steps in the same order (so its steps hash to its checksum as
    /// they did, and pass the name checks as they did). Its SHA-256 is not computed again: an
    /// agent fetches the same bundle at every poll and before every step. A bundle whose
    /// steps differ in any byte (or only in their order) is verified in full, whatever its
    /// checksum. `None` also when [`AgentConfig::verify_every_fetch`] is set.
    fn already_verified(&self, desired: &DesiredBundle) -> Option<Arc<Verified>> {
        if self.config.verify_every_fetch {
            return None;
        }
        let last = self.bundle.as_ref()?;
        // `==` on the steps is a pointer comparison first: a driver that shares one bundle
        // hands out clones of the same steps.
        if !last.fetched_sorted || last.checksum != desired.checksum || last.steps != desired.steps
        {
            return None;
        }
        if last.rolling_update == desired.rolling_update {
            return Some(Arc::clone(last));
        }
        Some(Arc::new(Verified {
            rolling_update: desired.rolling_update,
            ..Verified::clone(last)
        }))
    }

    fn on_bundle(&mut self, result: Result<DesiredBundle, Cause>, now: Timestamp) {
        let desired = match result {
            Ok(b) => b,
            Err(cause) => return self.fail(AgentError::Fetch(cause), now),
        };
        let verified = match self.already_verified(&desired) {
            Some(v) => Ok(v),
            None => verify(desired, self.config.verify_every_fetch).map(Arc::new),
        };
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
        if self.bundle.as_ref().map(|b| &b.checksum) != Some(&verified.checksum) {
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

    fn on_node(&mut self, result: Result<Option<NodeView>, Cause>, now: Timestamp) {
        match result {
            Ok(Some(view)) => {
                self.errors_in_row = 0;
                self.node = Some(KnownNode {
                    view,
                    patched: Vec::new(),
                });
                self.node_fresh = true;
                self.decide(now);
            }
            Ok(None) => self.fail(AgentError::NodeGone(self.config.node.clone()), now),
            Err(source) => {
                let node = self.config.node.clone();
                self.fail(AgentError::ReadNode { node, source }, now);
            }
        }
    }

    fn on_patched(&mut self, patch: &OwnPatch, outcome: PatchOutcome, now: Timestamp) {
        match outcome {
            PatchOutcome::Applied { resource_version } => {
                self.errors_in_row = 0;
                let node = self.node.get_or_insert_with(KnownNode::default);
                for (key, value) in patch.changes() {
                    node.patched.push((key, value.map(str::to_owned)));
                }
                if node.patched.len() > KnownNode::MAX_PATCHED {
                    node.fold();
                }
                node.view.resource_version = resource_version;
                self.node_fresh = true;
                self.decide(now);
            }
            PatchOutcome::Conflict => {
                // The Node changed since it was read: read it again and re-decide; the request
                // is made again unless the new state already answers it.
                self.node_fresh = false;
                self.decide(now);
            }
            PatchOutcome::NotFound => {
                self.fail(AgentError::NodeGone(self.config.node.clone()), now)
            }
            PatchOutcome::Failed(source) => {
                let node = self.config.node.clone();
                self.fail(AgentError::Patch { node, source }, now);
            }
        }
    }

    fn on_step(&mut self, outcome: StepOutcome, now: Timestamp) {
        let Some(bundle) = &self.bundle else {
            return self.decide(now);
        };
        let checksum = bundle.checksum.clone();
        let key = bundle
            .steps
            .iter()
            .find(|s| s.name == outcome.step)
            .and_then(|s| s.disruption_key.clone());
        if outcome.succeeded() {
            self.step_failures = 0;
            let progress = self.files.progress.get_or_insert_with(Progress::default);
            if progress.bundle.as_deref() == Some(checksum.as_str()) {
                progress.done.insert(outcome.step.clone());
            }
            match key {
                Some(k) => progress.applied_keys.insert(outcome.step.clone(), k),
                None => progress.applied_keys.remove(&outcome.step),
            };
            self.queue
                .push_back(AgentAction::WriteProgress(progress.clone()));
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
                checksum,
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
        let Some(step) = bundle.steps.iter().find(|s| !done(&s.name)) else {
            return self.decide_report(&bundle, now);
        };
        let recorded_key = progress.and_then(|p| p.applied_keys.get(&step.name));
        let disruptive = step
            .disruption_key
            .as_ref()
            .is_some_and(|k| recorded_key != Some(k));
        let key_changes = recorded_key != step.disruption_key.as_ref();
        // Every step is preceded by a fresh read of the Node: the approvals must be on it now
        // (a Node deleted and registered again has lost them).
        if !self.files.first_run {
            let Some(node) = self.fresh_node() else {
                return;
            };
            let has = |key: &str| node.has(key);
            if !has(keys::ANNOTATION_APPROVED) {
                let asked = has(keys::ANNOTATION_WAITING_FOR_APPROVAL);
                let patch = (!asked).then_some(OwnPatch::AskApproval);
                self.set_waiting_for_approval(&bundle.checksum);
                return match patch {
                    None => self.sleep_for(now, self.config.poll_interval),
                    Some(patch) => self.request(Awaiting::Patch(patch)),
                };
            }
            if disruptive && !has(keys::ANNOTATION_DISRUPTION_APPROVED) {
                let key = if bundle.rolling_update {
                    keys::ANNOTATION_ROLLING_UPDATE
                } else {
                    keys::ANNOTATION_DISRUPTION_REQUIRED
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
            if has(keys::ANNOTATION_CONFIGURATION_CHECKSUM) {
                self.status = AgentStatus::Applying {
                    checksum: bundle.checksum.clone(),
                    step: step.name.clone(),
                };
                return self.request(Awaiting::Patch(OwnPatch::Unreport));
            }
        }
        self.begin_apply(&bundle);
        // The step may change what its key stands for: forget the recorded key before it runs,
        // so that a crash between its end and the record of its success leaves "unknown" (a
        // disruption next time), never a key the node no longer runs.
        if key_changes
            && let Some(record) = self.files.progress.as_mut()
            && record.applied_keys.remove(&step.name).is_some()
        {
            let record = record.clone();
            self.queue.push_back(AgentAction::WriteProgress(record));
        }
        self.status = AgentStatus::Applying {
            checksum: bundle.checksum.clone(),
            step: step.name.clone(),
        };
        self.request(Awaiting::Step(step.name.clone()));
    }

    /// Sets [`AgentStatus::WaitingForApproval`] for `checksum` (unless it is already that:
    /// a waiting agent decides this at every poll).
    fn set_waiting_for_approval(&mut self, checksum: &str) {
        if !matches!(&self.status, AgentStatus::WaitingForApproval { checksum: c } if c == checksum)
        {
            self.status = AgentStatus::WaitingForApproval {
                checksum: checksum.to_owned(),
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
            self.status = AgentStatus::WaitingForDisruptionApproval {
                checksum: checksum.to_owned(),
                step: step.to_owned(),
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
    fn begin_apply(&mut self, bundle: &Verified) {
        if self.files.configuration_checksum.take().is_some() {
            self.queue.push_back(AgentAction::RemoveChecksumFile);
        }
        if self.stored.as_deref() != Some(bundle.checksum.as_str()) {
            self.stored = Some(bundle.checksum.clone());
            self.queue.push_back(AgentAction::StoreBundle {
                checksum: bundle.checksum.clone(),
                steps: bundle.steps.to_vec(),
            });
        }
        let progress = self.files.progress.get_or_insert_with(Progress::default);
        if progress.bundle.as_deref() != Some(bundle.checksum.as_str()) {
            progress.bundle = Some(bundle.checksum.clone());
            progress.done.clear();
            let progress = progress.clone();
            self.queue.push_back(AgentAction::WriteProgress(progress));
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
            self.status = AgentStatus::Reporting {
                checksum: bundle.checksum.clone(),
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
            self.queue.push_back(AgentAction::RemoveFirstRun);
        }
        // Steps no longer in the bundle lose their key: if one comes back, it counts as new.
        if let Some(progress) = self.files.progress.as_mut() {
            let before = progress.applied_keys.len();
            progress
                .applied_keys
                .retain(|name, _| bundle.steps.iter().any(|s| &s.name == name));
            if progress.applied_keys.len() != before {
                let progress = progress.clone();
                self.queue.push_back(AgentAction::WriteProgress(progress));
            }
        }
        self.files.configuration_checksum = Some(bundle.checksum.clone());
        self.queue
            .push_back(AgentAction::WriteChecksumFile(bundle.checksum.clone()));
        tracing::info!(node = %self.config.node, checksum = %bundle.checksum, "node agent: bundle applied");
        self.status = AgentStatus::UpToDate {
            checksum: bundle.checksum.clone(),
        };
        self.finish_pass(now);
    }

    /// The checksum file equals the bundle: make sure the Node says so, tidy the state, done.
    fn decide_up_to_date(&mut self, bundle: &Arc<Verified>, now: Timestamp) {
        if self.files.first_run {
            self.files.first_run = false;
            self.queue.push_back(AgentAction::RemoveFirstRun);
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
            self.files.progress = Some(complete.clone());
            self.queue.push_back(AgentAction::WriteProgress(complete));
        }
        let Some(node) = self.fresh_node() else {
            return;
        };
        if !annotated(node, &bundle.checksum) {
            return self.request(Awaiting::Patch(OwnPatch::Report(Arc::clone(bundle))));
        }
        self.status = AgentStatus::UpToDate {
            checksum: bundle.checksum.clone(),
        };
        self.finish_pass(now);
    }

    fn finish_pass(&mut self, now: Timestamp) {
        self.errors_in_row = 0;
        self.sleep = Some(Sleep {
            until: self.config.pass_interval.map(|d| now + d),
        });
    }
}

/// Whether the Node carries `checksum` in its checksum annotation.
fn annotated(node: &KnownNode, checksum: &str) -> bool {
    node.annotation(keys::ANNOTATION_CONFIGURATION_CHECKSUM) == Some(checksum)
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
    use crate::bashible::Step;

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
                set: set(key, ""),
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
            Just(OwnPatch::AskDisruption(
                keys::ANNOTATION_DISRUPTION_REQUIRED
            )),
            Just(OwnPatch::AskDisruption(keys::ANNOTATION_ROLLING_UPDATE)),
            Just(OwnPatch::Report(bundle("c1"))),
            Just(OwnPatch::Report(bundle("c2"))),
        ]
    }

    proptest::proptest! {
        /// The Node as the agent knows it after its own accepted patches (the view read, the
        /// patches kept on top and folded into it past `MAX_PATCHED`) has the annotations the
        /// view has with every patch applied to it, as the API applies them; and each patch
        /// requested is the one the agent wrote out literally before.
        #[test]
        fn the_known_node_is_the_view_with_the_patches_applied(
            base in proptest::collection::btree_map(
                proptest::sample::select(vec![
                    keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                    keys::ANNOTATION_WAITING_FOR_APPROVAL,
                    keys::ANNOTATION_APPROVED,
                    keys::ANNOTATION_DISRUPTION_REQUIRED,
                    keys::ANNOTATION_DISRUPTION_APPROVED,
                    keys::ANNOTATION_ROLLING_UPDATE,
                    "other",
                ]),
                proptest::sample::select(vec!["", "c1", "c2"]),
                0..5,
            ),
            patches in proptest::collection::vec(own_patch_strategy(), 0..40),
        ) {
            let base: Vec<(&str, &str)> = base.into_iter().collect();
            let read = view("1", &base);
            let mut plain = read.annotations.clone();
            let mut known = KnownNode { view: read, patched: Vec::new() };
            for patch in &patches {
                let request = patch.node_patch("1");
                proptest::prop_assert_eq!(&request, &literal_patch(patch, "1"));
                request.apply_to(&mut plain);
                for (key, value) in patch.changes() {
                    known.patched.push((key, value.map(str::to_owned)));
                }
                if known.patched.len() > KnownNode::MAX_PATCHED {
                    known.fold();
                }
                let own = [
                    keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                    keys::ANNOTATION_WAITING_FOR_APPROVAL,
                    keys::ANNOTATION_DISRUPTION_REQUIRED,
                    keys::ANNOTATION_ROLLING_UPDATE,
                ];
                let own = own.iter().map(|k| (*k).to_owned());
                for key in keys_of(&plain).chain(keys_of(&known.view.annotations)).chain(own) {
                    proptest::prop_assert_eq!(
                        known.annotation(&key),
                        plain.get(&key).map(String::as_str),
                        "{}",
                        key
                    );
                }
            }
        }
    }

    fn keys_of(map: &BTreeMap<String, String>) -> impl Iterator<Item = String> + '_ {
        map.keys().cloned()
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
