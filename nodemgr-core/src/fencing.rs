//! Decides the fencing of silent nodes (facts §5): on the node, when the fencing agent arms,
//! feeds and disarms the watchdog ([`FencingAgent`]); in the cluster, when the controller deletes
//! a silent node's pods and then the node ([`plan_fencing`]), with a storm guard Deckhouse lacks.
//!
//! # Agent
//!
//! Every `api_check_interval` the agent reads its own Node ([`AgentAction::CheckApi`]); the
//! binary reports the outcome with [`FencingAgent::handle_api_check`] and the node's maintenance
//! annotations with [`FencingAgent::handle_node`] (see [`is_maintenance`]). Then, in the order of
//! facts §5:
//!
//! 1. maintenance and armed → [`AgentAction::RemoveLabel`], then [`AgentAction::Disarm`];
//! 2. not maintenance and disarmed (and the API answered) → [`AgentAction::ArmWatchdog`], then
//!    [`AgentAction::SetLabel`] (a failed label ⇒ disarm and exit, see
//!    [`FencingAgent::handle_action_failed`]);
//! 3. API up, no maintenance, armed → [`AgentAction::Feed`] every `feed_interval`.
//!
//! After a failed check the agent never feeds until a later check succeeds, so a node cut off
//! from the API reboots `watchdog_timeout` after its last feed. While a check is in flight the
//! agent does not feed either (as Deckhouse's sequential loop), and a check that stays
//! unanswered for `api_timeout` counts as a timeout.
//!
//! # Controller
//!
//! [`plan_fencing`] takes a snapshot of the fencing-enabled nodes and returns commands. See its
//! doc for the rules and the storm guard.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

use crate::lifecycle::{ZoneState, zone_state};
use crate::model::{FencingMode, Node, NodeType, Timestamp, keys, parse_duration};

/// Errors of the fencing module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencingError {
    /// `spec.fencing.watchdog.timeout` is not a duration.
    #[error("failed to parse fencing.watchdog.timeout {0:?}: expected a duration such as 60s")]
    InvalidTimeout(String),
}

/// Why an API check failed, as far as the agent can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// No connection could be made or it broke before an answer: refused, reset, no route,
    /// DNS failure.
    Connect,
    /// The TLS handshake failed with an answer from a peer (certificate, protocol).
    Tls,
    /// The API answered with this HTTP status (401, 403, 404, 429, 5xx, …).
    Status(u16),
    /// Anything else (a body that does not decode, a client bug).
    Other(String),
}

/// The outcome of one API check (a GET of the agent's own Node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiCheck {
    /// The Node came back.
    Ok,
    /// No answer within `api_timeout`.
    Timeout,
    /// The request failed otherwise.
    Error(ApiErrorKind),
}

impl ApiCheck {
    /// Whether this outcome means "the API is unreachable from this node", which stops feeding.
    ///
    /// Deckhouse counts only a timeout. nodemgr counts a timeout **and** [`ApiErrorKind::Connect`]
    /// (refused, reset, no route, DNS): from the node these are the same partition: the kubelet
    /// cannot renew its Lease either, so the controller will delete the node's pods after the
    /// deadline, and the node must be down by then or its pods run twice. Connection refused is
    /// also what a node gets when its local kubernetes-api-proxy still runs but every upstream is
    /// gone.
    ///
    /// Every answer from the API server counts as reachable: an HTTP status of any kind (401 or
    /// 403 from an RBAC or token mistake, 404 for a deleted Node, 429 throttling, 5xx from an
    /// overloaded API server or a failing etcd), a TLS failure with a peer that answered, and
    /// other client-side errors. None of them is a partition of this node, and rebooting on them
    /// would turn a configuration error or a control-plane outage into a reboot of every fenced
    /// node at once; a control plane that answers 5xx cannot delete pods either, so staying up
    /// is safe.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Timeout | Self::Error(ApiErrorKind::Connect))
    }
}

/// Whether the node is in maintenance for the fencing agent: any of
/// `update.node.deckhouse.io/disruption-approved`, `update.node.deckhouse.io/approved`,
/// `node-manager.deckhouse.io/fencing-disable` (facts §5).
pub fn is_maintenance(node: &Node) -> bool {
    node.has_annotation(keys::ANNOTATION_DISRUPTION_APPROVED)
        || node.has_annotation(keys::ANNOTATION_APPROVED)
        || node.has_annotation(keys::ANNOTATION_FENCING_DISABLE)
}

/// The fencing agent's settings; `Default` = Deckhouse's env defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// `WATCHDOG_FEED_INTERVAL` (5 s).
    pub feed_interval: Duration,
    /// `KUBERNETES_API_CHECK_INTERVAL` (5 s).
    pub api_check_interval: Duration,
    /// `KUBERNETES_API_TIMEOUT` (10 s).
    pub api_timeout: Duration,
    /// Watchdog timeout, `fencing.watchdog.timeout` (60 s): the softdog `soft_margin`.
    pub watchdog_timeout: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            feed_interval: Duration::from_secs(5),
            api_check_interval: Duration::from_secs(5),
            api_timeout: Duration::from_secs(10),
            watchdog_timeout: Duration::from_secs(60),
        }
    }
}

/// Something the fencing agent's binary must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentAction {
    /// GET the own Node with `api_timeout`, then call [`FencingAgent::handle_api_check`] (and
    /// [`FencingAgent::handle_node`] with [`is_maintenance`] when it answered).
    CheckApi,
    /// Open the watchdog device (starts the countdown).
    ArmWatchdog,
    /// Label the node `node-manager.deckhouse.io/fencing-enabled=""`.
    SetLabel,
    /// Write one byte to the watchdog.
    Feed,
    /// Remove the `fencing-enabled` label.
    RemoveLabel,
    /// Write `V` (magic close) and close the device.
    Disarm,
    /// Stop the agent (after a failed label, the watchdog disarmed first).
    Exit,
}

impl fmt::Display for AgentAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CheckApi => "check the API",
            Self::ArmWatchdog => "arm the watchdog",
            Self::SetLabel => "set the fencing-enabled label",
            Self::Feed => "feed the watchdog",
            Self::RemoveLabel => "remove the fencing-enabled label",
            Self::Disarm => "disarm the watchdog",
            Self::Exit => "exit",
        })
    }
}

/// The fencing agent's state machine (sans-I/O).
///
/// Drive it with `handle_*`, drain [`Self::poll_action`] until `None`, and sleep until
/// [`Self::next_deadline`]. Actions are assumed to succeed when polled; report failures with
/// [`Self::handle_action_failed`].
#[derive(Debug, Clone)]
pub struct FencingAgent {
    cfg: AgentConfig,
    armed: bool,
    labeled: bool,
    maintenance: Option<bool>,
    api_up: bool,
    last_feed: Option<Timestamp>,
    next_check: Timestamp,
    check_started: Option<Timestamp>,
    shutting_down: bool,
    exited: bool,
    pending: VecDeque<AgentAction>,
    last_now: Timestamp,
}

impl FencingAgent {
    /// A disarmed agent that checks the API at once.
    pub fn new(cfg: AgentConfig) -> Self {
        Self {
            cfg,
            armed: false,
            labeled: false,
            maintenance: None,
            api_up: false,
            last_feed: None,
            next_check: Timestamp::EPOCH,
            check_started: None,
            shutting_down: false,
            exited: false,
            pending: VecDeque::new(),
            last_now: Timestamp::EPOCH,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    /// Whether the watchdog is armed.
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// Whether the last API check succeeded (and none is overdue).
    pub fn api_up(&self) -> bool {
        self.api_up
    }

    /// When the watchdog fires unless fed again; `None` when disarmed.
    pub fn watchdog_expiry(&self) -> Option<Timestamp> {
        if !self.armed {
            return None;
        }
        self.last_feed.map(|f| f + self.cfg.watchdog_timeout)
    }

    /// The result of the check asked for by [`AgentAction::CheckApi`]. See
    /// [`ApiCheck::is_unreachable`] for which failures stop feeding.
    pub fn handle_api_check(&mut self, result: ApiCheck, now: Timestamp) {
        self.touch(now);
        self.check_started = None;
        let up = !result.is_unreachable();
        if !up {
            tracing::warn!(
                ?result,
                "kubernetes API unreachable; no more watchdog feeding"
            );
        } else if let ApiCheck::Error(kind) = &result {
            tracing::info!(
                ?kind,
                "API check failed but the API answered; still feeding"
            );
        }
        self.api_up = up;
    }

    /// The node's maintenance state ([`is_maintenance`]) as read by the last successful check.
    pub fn handle_node(&mut self, maintenance: bool, now: Timestamp) {
        self.touch(now);
        self.maintenance = Some(maintenance);
    }

    /// The agent is asked to stop: remove the label, then disarm (Deckhouse only disarms; a
    /// labelled node without a watchdog could have its pods deleted while it still runs them).
    /// The binary should disarm even if removing the label fails.
    pub fn handle_shutdown(&mut self) {
        self.shutting_down = true;
    }

    /// `action` (polled earlier) failed. A failed [`AgentAction::SetLabel`] disarms and exits
    /// (facts §5); a failed [`AgentAction::ArmWatchdog`] leaves the agent disarmed to retry after
    /// the next check; a failed [`AgentAction::RemoveLabel`] is retried on the next pass while
    /// the disarm goes ahead. Other failures change nothing (a failed feed is left to the
    /// watchdog).
    pub fn handle_action_failed(&mut self, action: AgentAction, now: Timestamp) {
        self.touch(now);
        match action {
            AgentAction::SetLabel => {
                self.labeled = false;
                self.pending.clear();
                if self.armed {
                    self.armed = false;
                    self.pending.push_back(AgentAction::Disarm);
                }
                self.pending.push_back(AgentAction::Exit);
                self.exited = true;
            }
            AgentAction::ArmWatchdog => {
                self.armed = false;
                let label_pending = self.pending.contains(&AgentAction::SetLabel);
                self.pending.retain(|a| *a != AgentAction::SetLabel);
                if label_pending {
                    self.labeled = false;
                }
            }
            AgentAction::RemoveLabel => self.labeled = true,
            AgentAction::CheckApi | AgentAction::Feed | AgentAction::Disarm | AgentAction::Exit => {
            }
        }
    }

    fn touch(&mut self, now: Timestamp) {
        self.last_now = self.last_now.max(now);
    }

    /// The next action at `now`. Call after every `handle_*` and at [`Self::next_deadline`],
    /// until `None`.
    #[must_use]
    pub fn poll_action(&mut self, now: Timestamp) -> Option<AgentAction> {
        self.touch(now);
        let now = self.last_now;
        if let Some(action) = self.pending.pop_front() {
            return Some(action);
        }
        if self.exited {
            return None;
        }
        if self.shutting_down {
            if self.labeled {
                self.labeled = false;
                self.pending.push_back(AgentAction::Disarm);
                self.armed = false;
                self.exited = true;
                self.pending.push_back(AgentAction::Exit);
                return Some(AgentAction::RemoveLabel);
            }
            self.exited = true;
            if self.armed {
                self.armed = false;
                self.pending.push_back(AgentAction::Exit);
                return Some(AgentAction::Disarm);
            }
            return Some(AgentAction::Exit);
        }
        // An unanswered check becomes a timeout.
        if let Some(started) = self.check_started
            && now.saturating_since(started) >= self.cfg.api_timeout
        {
            tracing::warn!("API check overdue; treating it as a timeout");
            self.check_started = None;
            self.api_up = false;
        }
        match self.maintenance {
            Some(true) if self.armed || self.labeled => {
                if self.labeled {
                    self.labeled = false;
                    if self.armed {
                        self.armed = false;
                        self.pending.push_back(AgentAction::Disarm);
                    }
                    return Some(AgentAction::RemoveLabel);
                }
                self.armed = false;
                return Some(AgentAction::Disarm);
            }
            Some(false) if !self.armed && self.api_up => {
                self.armed = true;
                self.labeled = true;
                // Opening the device starts the countdown: count it as a feed.
                self.last_feed = Some(now);
                self.pending.push_back(AgentAction::SetLabel);
                return Some(AgentAction::ArmWatchdog);
            }
            _ => {}
        }
        if self.check_started.is_none() && now >= self.next_check {
            self.check_started = Some(now);
            self.next_check = now + self.cfg.api_check_interval;
            return Some(AgentAction::CheckApi);
        }
        if self.armed
            && self.api_up
            && self.check_started.is_none()
            && self.maintenance == Some(false)
            && self
                .last_feed
                .is_none_or(|f| now >= f + self.cfg.feed_interval)
        {
            self.last_feed = Some(now);
            return Some(AgentAction::Feed);
        }
        None
    }

    /// When to call [`Self::poll_action`] next: the next check, the check's timeout, the next
    /// feed. `None` once the agent has exited.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if !self.pending.is_empty() {
            return Some(self.last_now);
        }
        if self.exited {
            return None;
        }
        if self.shutting_down {
            return Some(self.last_now);
        }
        let mut earliest = match self.check_started {
            Some(started) => started + self.cfg.api_timeout,
            None => self.next_check,
        };
        if self.armed
            && self.api_up
            && self.check_started.is_none()
            && self.maintenance == Some(false)
            && let Some(f) = self.last_feed
        {
            earliest = earliest.min(f + self.cfg.feed_interval);
        }
        Some(earliest)
    }
}

/// The controller's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FencingConfig {
    /// Heartbeat age after which a node without its own timeout is fenced (60 s).
    pub default_timeout: Duration,
    /// Share of a zone's fencing-enabled nodes silent together that stops fencing in the zone
    /// (0.55, like `--unhealthy-zone-threshold`).
    pub storm_threshold: f64,
    /// Fewest silent nodes that can make a storm (3, like the node lifecycle controller's
    /// "more than 2 NotReady"): a fully silent zone of one or two nodes is still fenced, since
    /// a single dead node is what fencing is for.
    pub storm_min_silent: usize,
    /// Heartbeat age from which the storm guard counts a node as going silent (20 s: two Lease
    /// renewals missed). Nodes that lose the API together stop renewing within one renewal
    /// period of each other, so each crosses its fencing deadline alone; counting the ones
    /// already silent this long when the first crosses it is what lets the guard see them as
    /// one event. Capped at each node's own deadline.
    pub storm_suspect_after: Duration,
}

impl Default for FencingConfig {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(60),
            storm_threshold: 0.55,
            storm_min_silent: 3,
            storm_suspect_after: Duration::from_secs(20),
        }
    }
}

/// A fencing-enabled node as the controller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct FencedNode {
    /// Node name.
    pub name: String,
    /// Zone (`""` when the node has none).
    pub zone: String,
    /// NodeGroup.
    pub group: String,
    /// `Watchdog` (delete) or `Notify` (report only); an unknown mode is treated as `Notify`.
    pub mode: FencingMode,
    /// The group's node type; `Static` and `CloudStatic` nodes keep their Node object.
    pub node_type: NodeType,
    /// Lease `renewTime` or the Ready heartbeat, whichever is newer; `None` = never fence.
    pub last_heartbeat: Option<Timestamp>,
    /// Any maintenance annotation ([`is_maintenance`]): never fenced.
    pub maintenance: bool,
    /// The group's `fencing.watchdog.timeout`; `None` = [`FencingConfig::default_timeout`].
    pub timeout: Option<Duration>,
    /// Pods with `spec.nodeName` = this node still exist (the caller lists them). The Node is
    /// deleted only in a pass where this is `false`.
    pub has_pods: bool,
}

impl FencedNode {
    /// Builds the view of `node` for a group with `fencing` settings and `node_type`;
    /// `lease_renew` is the Lease's `renewTime`, `has_pods` whether pods are bound to it.
    pub fn from_node(
        node: &Node,
        fencing: &crate::model::Fencing,
        node_type: NodeType,
        lease_renew: Option<Timestamp>,
        has_pods: bool,
    ) -> Result<Self, FencingError> {
        let timeout = watchdog_timeout(fencing)?;
        let last_heartbeat = match (node.last_heartbeat, lease_renew) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Ok(Self {
            name: node.name.clone(),
            zone: node.zone().unwrap_or_default().to_owned(),
            group: node.group().unwrap_or_default().to_owned(),
            mode: fencing.mode.clone().unwrap_or(FencingMode::Watchdog),
            node_type,
            last_heartbeat,
            maintenance: is_maintenance(node),
            timeout,
            has_pods,
        })
    }

    fn deadline(&self, cfg: &FencingConfig) -> Duration {
        self.timeout.unwrap_or(cfg.default_timeout)
    }
}

/// The group's `fencing.watchdog.timeout`, parsed (`None` when unset).
pub fn watchdog_timeout(fencing: &crate::model::Fencing) -> Result<Option<Duration>, FencingError> {
    match fencing.watchdog.as_ref().and_then(|w| w.timeout.as_deref()) {
        None => Ok(None),
        Some(text) => parse_duration(text)
            .filter(|d| !d.is_zero())
            .map(Some)
            .ok_or_else(|| FencingError::InvalidTimeout(text.to_owned())),
    }
}

/// One command of a fencing plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencingCommand {
    /// Delete every pod bound to `node` with grace period 0.
    DeletePods {
        /// The silent node.
        node: String,
    },
    /// Delete the Node object (background propagation); only planned once its pods are gone.
    DeleteNode {
        /// The silent node.
        node: String,
    },
    /// `Notify` mode: report the silent node, change nothing.
    Notify {
        /// The silent node.
        node: String,
        /// How long it has been silent.
        silent_for: Duration,
    },
}

impl fmt::Display for FencingCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeletePods { node } => write!(f, "delete pods of silent node {node} (grace 0)"),
            Self::DeleteNode { node } => write!(f, "delete silent node {node}"),
            Self::Notify { node, silent_for } => {
                write!(f, "node {node} silent for {}s", silent_for.as_secs())
            }
        }
    }
}

/// A zone where fencing was held back because too many nodes are silent together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StormSuppressed {
    /// The zone.
    pub zone: String,
    /// Silent fencing-enabled nodes in it.
    pub silent: usize,
    /// Fencing-enabled nodes in it (maintenance excluded).
    pub total: usize,
}

impl fmt::Display for StormSuppressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing suppressed in zone {:?}: {} of {} nodes silent",
            self.zone, self.silent, self.total
        )
    }
}

/// What the controller does in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FencingPlan {
    /// Commands, in node order; for one node, never DeletePods and DeleteNode in the same plan.
    pub commands: Vec<FencingCommand>,
    /// Zones held back by the storm guard (the caller emits an event and a metric).
    pub suppressed: Vec<StormSuppressed>,
    /// Earliest heartbeat + deadline among nodes not silent yet: when to plan again at the
    /// latest (plus on any change of the inputs).
    pub next_deadline: Option<Timestamp>,
}

impl FencingPlan {
    /// When to plan again at the latest (see the field).
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.next_deadline
    }
}

/// Plans one pass of the fencing controller over `nodes` at `now`.
///
/// # Rules
///
/// * Maintenance nodes and nodes with no heartbeat are skipped (Deckhouse requeues them).
/// * A node is **silent** when its last heartbeat is strictly older than its deadline (its
///   group's `fencing.watchdog.timeout`, else [`FencingConfig::default_timeout`]), measured from
///   the heartbeat, not from when the controller noticed.
/// * **Storm guard** (beyond Deckhouse): per zone, over the non-maintenance nodes, when at least
///   `storm_min_silent` are going silent (heartbeat older than `storm_suspect_after`, capped at
///   their deadline: nodes cut off together cross their deadlines up to a Lease period apart,
///   and the first must not be fenced alone) and [`zone_state`] with `storm_threshold` is not
///   Normal,
///   nobody in the zone is fenced and a [`StormSuppressed`] is reported: so many nodes going
///   quiet together is more likely the controller's or the zone's network than dead nodes.
/// * A silent node in `Notify` mode (or an unknown mode) gets [`FencingCommand::Notify`].
/// * A silent `Watchdog` node with pods gets [`FencingCommand::DeletePods`]; one whose pods are
///   gone gets [`FencingCommand::DeleteNode`], unless its type is `Static` or `CloudStatic`
///   (facts §5: those keep the Node).
///
/// # Caveats
///
/// As in Deckhouse, the default deadline (60 s) equals the watchdog timeout, but the agent's last
/// feed can come up to one kubelet Lease renew interval (10 s) after the node's last heartbeat: a
/// node cut off at time P is fenced from P + 50 s on but may run until P + 60 s (the
/// `deadline_vs_reboot` tests simulate it). A controller timeout of at least the watchdog timeout
/// plus the Lease renew interval (70 s by default) closes that window.
///
/// # Guarantees
///
/// Never deletes anything of a node whose heartbeat is not older than its deadline; never plans
/// a DeleteNode for a node that still has pods; plans no deletion in a suppressed zone.
pub fn plan_fencing(nodes: &[FencedNode], cfg: &FencingConfig, now: Timestamp) -> FencingPlan {
    // Pass 1: silence per node and per zone.
    let mut zones: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut silent_for: Vec<Option<Duration>> = Vec::with_capacity(nodes.len());
    let mut next_deadline: Option<Timestamp> = None;
    for node in nodes {
        if node.maintenance {
            silent_for.push(None);
            continue;
        }
        let slot = zones.entry(node.zone.as_str()).or_insert((0, 0));
        slot.0 += 1;
        let Some(hb) = node.last_heartbeat else {
            silent_for.push(None);
            continue;
        };
        let deadline = node.deadline(cfg);
        let age = now.saturating_since(hb);
        if age > cfg.storm_suspect_after.min(deadline) {
            slot.1 += 1;
        }
        if age > deadline {
            silent_for.push(Some(age));
        } else {
            let due = hb + deadline + Duration::from_millis(1);
            next_deadline = Some(next_deadline.map_or(due, |d| d.min(due)));
            silent_for.push(None);
        }
    }
    let mut plan = FencingPlan {
        next_deadline,
        ..FencingPlan::default()
    };
    let mut stormy: BTreeSet<&str> = BTreeSet::new();
    for (zone, (total, silent)) in &zones {
        let state = zone_state(total - silent, *silent, cfg.storm_threshold);
        if *silent >= cfg.storm_min_silent && state != ZoneState::Normal {
            tracing::debug!(zone = %zone, silent, total, "fencing storm guard: holding back");
            stormy.insert(zone);
            plan.suppressed.push(StormSuppressed {
                zone: (*zone).to_owned(),
                silent: *silent,
                total: *total,
            });
        }
    }
    // Pass 2: commands.
    for (node, silent) in nodes.iter().zip(silent_for) {
        let Some(age) = silent else {
            continue;
        };
        if stormy.contains(&node.zone.as_str()) {
            continue;
        }
        let command = match node.mode {
            FencingMode::Watchdog => {
                if node.has_pods {
                    FencingCommand::DeletePods {
                        node: node.name.clone(),
                    }
                } else if matches!(node.node_type, NodeType::Static | NodeType::CloudStatic) {
                    continue;
                } else {
                    FencingCommand::DeleteNode {
                        node: node.name.clone(),
                    }
                }
            }
            FencingMode::Notify | FencingMode::Unknown(_) => FencingCommand::Notify {
                node: node.name.clone(),
                silent_for: age,
            },
        };
        plan.commands.push(command);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn drain(agent: &mut FencingAgent, now: Timestamp) -> Vec<AgentAction> {
        let mut out = Vec::new();
        while let Some(a) = agent.poll_action(now) {
            out.push(a);
            assert!(out.len() < 20, "agent does not settle: {out:?}");
        }
        out
    }

    /// Answers every CheckApi with `check` and `maintenance`.
    fn step(
        agent: &mut FencingAgent,
        now: Timestamp,
        check: &ApiCheck,
        maintenance: bool,
    ) -> Vec<AgentAction> {
        let mut out = Vec::new();
        for _ in 0..4 {
            let acts = drain(agent, now);
            if acts.is_empty() {
                break;
            }
            for a in &acts {
                if *a == AgentAction::CheckApi {
                    agent.handle_api_check(check.clone(), now);
                    if !check.is_unreachable() {
                        agent.handle_node(maintenance, now);
                    }
                }
            }
            out.extend(acts);
        }
        out
    }

    #[test]
    fn unreachable_only_for_timeout_and_connect() {
        assert!(ApiCheck::Timeout.is_unreachable());
        assert!(ApiCheck::Error(ApiErrorKind::Connect).is_unreachable());
        assert!(!ApiCheck::Ok.is_unreachable());
        for status in [401, 403, 404, 429, 500, 503] {
            assert!(!ApiCheck::Error(ApiErrorKind::Status(status)).is_unreachable());
        }
        assert!(!ApiCheck::Error(ApiErrorKind::Tls).is_unreachable());
        assert!(!ApiCheck::Error(ApiErrorKind::Other("decode".into())).is_unreachable());
    }

    #[test]
    fn maintenance_annotations() {
        let mut node = Node::default();
        assert!(!is_maintenance(&node));
        for key in [
            keys::ANNOTATION_DISRUPTION_APPROVED,
            keys::ANNOTATION_APPROVED,
            keys::ANNOTATION_FENCING_DISABLE,
        ] {
            node.annotations.clear();
            node.annotations.insert(key.to_owned(), String::new());
            assert!(is_maintenance(&node), "{key}");
        }
        node.annotations.clear();
        node.annotations.insert(
            keys::ANNOTATION_WAITING_FOR_APPROVAL.to_owned(),
            String::new(),
        );
        assert!(!is_maintenance(&node));
    }

    #[test]
    fn agent_arms_then_labels_feeds_and_stops_on_timeout() {
        let mut agent = FencingAgent::new(AgentConfig::default());
        let acts = step(&mut agent, t(0), &ApiCheck::Ok, false);
        assert_eq!(
            acts,
            vec![
                AgentAction::CheckApi,
                AgentAction::ArmWatchdog,
                AgentAction::SetLabel
            ]
        );
        assert_eq!(agent.next_deadline(), Some(t(5)));
        let acts = step(&mut agent, t(5), &ApiCheck::Ok, false);
        assert_eq!(acts, vec![AgentAction::CheckApi, AgentAction::Feed]);
        // The API times out: no feed until it answers again.
        let acts = step(&mut agent, t(10), &ApiCheck::Timeout, false);
        assert_eq!(acts, vec![AgentAction::CheckApi]);
        let acts = step(
            &mut agent,
            t(15),
            &ApiCheck::Error(ApiErrorKind::Connect),
            false,
        );
        assert_eq!(acts, vec![AgentAction::CheckApi]);
        assert_eq!(agent.watchdog_expiry(), Some(t(65)));
        // An RBAC error is an answer: feeding resumes.
        let acts = step(
            &mut agent,
            t(20),
            &ApiCheck::Error(ApiErrorKind::Status(403)),
            false,
        );
        assert_eq!(acts, vec![AgentAction::CheckApi, AgentAction::Feed]);
    }

    #[test]
    fn agent_unanswered_check_times_out() {
        let mut agent = FencingAgent::new(AgentConfig::default());
        let _ = step(&mut agent, t(0), &ApiCheck::Ok, false);
        let _ = step(&mut agent, t(5), &ApiCheck::Ok, false);
        assert_eq!(drain(&mut agent, t(10)), vec![AgentAction::CheckApi]);
        // Never answered: no feeding while it is in flight, a timeout after 10 s.
        assert_eq!(agent.next_deadline(), Some(t(20)));
        assert_eq!(drain(&mut agent, t(19)), vec![]);
        assert!(agent.api_up());
        assert_eq!(drain(&mut agent, t(20)), vec![AgentAction::CheckApi]);
        assert!(!agent.api_up());
    }

    #[test]
    fn agent_maintenance_removes_label_then_disarms_and_rearms_after() {
        let mut agent = FencingAgent::new(AgentConfig::default());
        let _ = step(&mut agent, t(0), &ApiCheck::Ok, false);
        let acts = step(&mut agent, t(5), &ApiCheck::Ok, true);
        assert_eq!(
            acts,
            vec![
                AgentAction::CheckApi,
                AgentAction::RemoveLabel,
                AgentAction::Disarm
            ]
        );
        assert!(!agent.is_armed());
        let acts = step(&mut agent, t(10), &ApiCheck::Ok, true);
        assert_eq!(acts, vec![AgentAction::CheckApi]);
        let acts = step(&mut agent, t(15), &ApiCheck::Ok, false);
        assert_eq!(
            acts,
            vec![
                AgentAction::CheckApi,
                AgentAction::ArmWatchdog,
                AgentAction::SetLabel
            ]
        );
    }

    #[test]
    fn agent_label_failure_disarms_and_exits_shutdown_disarms() {
        let mut agent = FencingAgent::new(AgentConfig::default());
        let _ = step(&mut agent, t(0), &ApiCheck::Ok, false);
        agent.handle_action_failed(AgentAction::SetLabel, t(0));
        assert_eq!(
            drain(&mut agent, t(0)),
            vec![AgentAction::Disarm, AgentAction::Exit]
        );
        assert_eq!(agent.next_deadline(), None);

        let mut agent = FencingAgent::new(AgentConfig::default());
        let _ = step(&mut agent, t(0), &ApiCheck::Ok, false);
        agent.handle_shutdown();
        assert_eq!(
            drain(&mut agent, t(1)),
            vec![
                AgentAction::RemoveLabel,
                AgentAction::Disarm,
                AgentAction::Exit
            ]
        );
        assert!(!agent.is_armed());
    }

    fn fenced(name: &str, zone: &str, hb: Option<i64>) -> FencedNode {
        FencedNode {
            name: name.to_owned(),
            zone: zone.to_owned(),
            group: "workers".to_owned(),
            mode: FencingMode::Watchdog,
            node_type: NodeType::CloudEphemeral,
            last_heartbeat: hb.map(t),
            maintenance: false,
            timeout: None,
            has_pods: true,
        }
    }

    #[test]
    fn controller_pods_first_then_node() {
        let cfg = FencingConfig::default();
        let mut nodes = vec![
            fenced("a", "z", Some(0)),
            fenced("b", "z", Some(50)),
            fenced("c", "z", None),
            fenced("d", "z", Some(100)),
        ];
        let plan = plan_fencing(&nodes, &cfg, t(60));
        assert!(plan.commands.is_empty(), "60 s is not older than 60 s");
        assert_eq!(plan.next_deadline(), Some(Timestamp::from_millis(60_001)));
        let plan = plan_fencing(&nodes, &cfg, t(61));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeletePods { node: "a".into() }]
        );
        assert_eq!(plan.next_deadline(), Some(Timestamp::from_millis(110_001)));
        nodes[0].has_pods = false;
        let plan = plan_fencing(&nodes, &cfg, t(62));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeleteNode { node: "a".into() }]
        );
        // Static keeps the node; Notify only reports; maintenance is skipped; group timeout.
        nodes[0].node_type = NodeType::Static;
        nodes[1].mode = FencingMode::Notify;
        nodes[3].maintenance = true;
        let plan = plan_fencing(&nodes, &cfg, t(200));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::Notify {
                node: "b".into(),
                silent_for: Duration::from_secs(150)
            }]
        );
        nodes[1].mode = FencingMode::Watchdog;
        nodes[1].timeout = Some(Duration::from_secs(300));
        let plan = plan_fencing(&nodes, &cfg, t(200));
        assert!(plan.commands.is_empty());
        assert_eq!(plan.next_deadline(), Some(Timestamp::from_millis(350_001)));
    }

    #[test]
    fn controller_storm_guard() {
        let cfg = FencingConfig::default();
        let mut nodes: Vec<FencedNode> = (0..10)
            .map(|i| fenced(&format!("a{i}"), "a", Some(if i < 6 { 0 } else { 100 })))
            .collect();
        nodes.push(fenced("b0", "b", Some(0)));
        let plan = plan_fencing(&nodes, &cfg, t(120));
        assert_eq!(
            plan.suppressed,
            vec![StormSuppressed {
                zone: "a".into(),
                silent: 6,
                total: 10
            }]
        );
        // Zone b is a single silent node (FullDisruption but below storm_min_silent): fenced.
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeletePods { node: "b0".into() }]
        );
        // 5 of 10 silent: below 55 %, all five fenced.
        nodes[5].last_heartbeat = Some(t(100));
        let plan = plan_fencing(&nodes, &cfg, t(120));
        assert!(plan.suppressed.is_empty());
        assert_eq!(plan.commands.len(), 6);
    }

    #[test]
    fn nodes_cut_off_together_are_one_storm_though_their_deadlines_are_staggered() {
        // Three of four nodes lose the API at once; their last Lease renewals are up to a
        // renewal period apart (phases 0, 4 and 9 s), so the first crosses 60 s alone.
        let cfg = FencingConfig::default();
        let nodes = vec![
            fenced("a0", "a", Some(100)),
            fenced("a1", "a", Some(104)),
            fenced("a2", "a", Some(109)),
            fenced("a3", "a", Some(159)),
        ];
        let plan = plan_fencing(&nodes, &cfg, t(161));
        assert!(plan.commands.is_empty(), "{:?}", plan.commands);
        assert_eq!(plan.suppressed.len(), 1);
        // One node cut off alone is fenced at its deadline.
        let lone = vec![fenced("a0", "a", Some(100)), fenced("a1", "a", Some(159))];
        let plan = plan_fencing(&lone, &cfg, t(161));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeletePods { node: "a0".into() }]
        );
    }

    #[test]
    fn from_node_reads_group_and_lease() {
        let mut node = Node {
            name: "n".into(),
            last_heartbeat: Some(t(10)),
            ..Node::default()
        };
        node.labels
            .insert(keys::LABEL_TOPOLOGY_ZONE.into(), "z1".into());
        node.labels
            .insert(keys::LABEL_NODE_GROUP.into(), "workers".into());
        let fencing = crate::model::Fencing {
            mode: Some(FencingMode::Watchdog),
            watchdog: Some(crate::model::WatchdogSettings {
                timeout: Some("2m".into()),
            }),
        };
        let f = FencedNode::from_node(&node, &fencing, NodeType::Static, Some(t(20)), true);
        let f = f.map_err(|e| e.to_string());
        assert_eq!(
            f.as_ref().map(|f| (
                f.zone.as_str(),
                f.group.as_str(),
                f.last_heartbeat,
                f.timeout
            )),
            Ok(("z1", "workers", Some(t(20)), Some(Duration::from_secs(120))))
        );
        let bad = crate::model::Fencing {
            mode: None,
            watchdog: Some(crate::model::WatchdogSettings {
                timeout: Some("soon".into()),
            }),
        };
        assert_eq!(
            watchdog_timeout(&bad),
            Err(FencingError::InvalidTimeout("soon".into()))
        );
    }

    /// Virtual-time run of one node cut off from the API at `partition`: the kubelet renews its
    /// Lease every 10 s from `lease_phase` on, the agent checks and feeds on its own schedule
    /// (checks after the partition are never answered). Returns (the moment the watchdog
    /// reboots the node, the first moment the controller plans DeletePods with `timeout`).
    fn deadline_vs_reboot(
        start: Timestamp,
        partition: Timestamp,
        lease_phase_ms: i64,
        timeout: Duration,
    ) -> (Timestamp, Timestamp) {
        let mut agent = FencingAgent::new(AgentConfig::default());
        let mut now = start;
        let reboot = loop {
            if let Some(expiry) = agent.watchdog_expiry()
                && expiry <= now
            {
                break expiry;
            }
            while let Some(a) = agent.poll_action(now) {
                if a == AgentAction::CheckApi && now < partition {
                    agent.handle_api_check(ApiCheck::Ok, now);
                    agent.handle_node(false, now);
                }
            }
            let next = agent.next_deadline().unwrap_or(now);
            let next = agent.watchdog_expiry().map_or(next, |e| e.min(next));
            assert!(next >= now && now < start + Duration::from_secs(600));
            now = next.max(now);
        };
        // Last Lease renewal strictly before the partition.
        let period = 10_000;
        let since = partition.as_millis() - 1 - lease_phase_ms;
        let hb = Timestamp::from_millis(lease_phase_ms + since.div_euclid(period) * period);
        let node = FencedNode {
            timeout: Some(timeout),
            last_heartbeat: Some(hb),
            ..fenced("n", "z", None)
        };
        let cfg = FencingConfig::default();
        let first = plan_fencing(std::slice::from_ref(&node), &cfg, hb)
            .next_deadline()
            .unwrap_or(hb);
        assert_eq!(
            plan_fencing(std::slice::from_ref(&node), &cfg, first).commands,
            vec![FencingCommand::DeletePods { node: "n".into() }]
        );
        (reboot, first)
    }

    #[test]
    fn default_deadline_can_fence_a_node_before_its_watchdog_fires() {
        // Lease renewed at 100 s, partition at 109.9 s: the agent fed at 105 s.
        let (reboot, fenced_at) = deadline_vs_reboot(
            t(0),
            Timestamp::from_millis(109_900),
            0,
            Duration::from_secs(60),
        );
        assert_eq!(fenced_at, Timestamp::from_millis(160_001));
        assert_eq!(reboot, t(165));
        assert!(reboot > fenced_at);
    }

    fn arb_node() -> impl Strategy<Value = FencedNode> {
        (
            0usize..3,
            prop::option::of(0i64..400),
            any::<bool>(),
            any::<bool>(),
            0u8..4,
            any::<bool>(),
            prop::option::of(30u64..200),
        )
            .prop_map(|(zone, hb, maintenance, has_pods, ty, notify, timeout)| {
                FencedNode {
                    name: String::new(),
                    zone: format!("z{zone}"),
                    group: "g".into(),
                    mode: if notify {
                        FencingMode::Notify
                    } else {
                        FencingMode::Watchdog
                    },
                    node_type: match ty {
                        0 => NodeType::Static,
                        1 => NodeType::CloudStatic,
                        2 => NodeType::CloudPermanent,
                        _ => NodeType::CloudEphemeral,
                    },
                    last_heartbeat: hb.map(t),
                    maintenance,
                    timeout: timeout.map(Duration::from_secs),
                    has_pods,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn controller_invariants(mut nodes in prop::collection::vec(arb_node(), 0..40), now in 0i64..500) {
            for (i, n) in nodes.iter_mut().enumerate() {
                n.name = format!("n{i}");
            }
            let cfg = FencingConfig::default();
            let now = t(now);
            let plan = plan_fencing(&nodes, &cfg, now);
            let by_name: BTreeMap<&str, &FencedNode> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
            for cmd in &plan.commands {
                let (name, deletes) = match cmd {
                    FencingCommand::DeletePods { node } => (node, true),
                    FencingCommand::DeleteNode { node } => (node, true),
                    FencingCommand::Notify { node, .. } => (node, false),
                };
                let n = by_name[name.as_str()];
                // A reachable node (fresh heartbeat), a maintenance node, a node without
                // heartbeat is never touched.
                let hb = n.last_heartbeat;
                prop_assert!(hb.is_some_and(|hb| now.saturating_since(hb) > n.timeout.unwrap_or(cfg.default_timeout)));
                prop_assert!(!n.maintenance);
                prop_assert!(!plan.suppressed.iter().any(|s| s.zone == n.zone) || !deletes);
                if let FencingCommand::DeleteNode { .. } = cmd {
                    prop_assert!(!n.has_pods, "node deleted before its pods");
                    prop_assert!(!matches!(n.node_type, NodeType::Static | NodeType::CloudStatic));
                }
                if deletes {
                    prop_assert_eq!(&n.mode, &FencingMode::Watchdog);
                }
            }
            // Storm: a zone over the threshold gets no deletions, and every such zone is reported.
            for zone in ["z0", "z1", "z2"] {
                let members: Vec<&FencedNode> = nodes.iter().filter(|n| n.zone == zone && !n.maintenance).collect();
                // Going silent: quiet longer than the suspect window (capped at the deadline).
                let silent = members.iter().filter(|n| n.last_heartbeat.is_some_and(|hb| now.saturating_since(hb) > cfg.storm_suspect_after.min(n.timeout.unwrap_or(cfg.default_timeout)))).count();
                let storm = silent >= 3 && silent as f64 / members.len() as f64 >= cfg.storm_threshold;
                prop_assert_eq!(storm, plan.suppressed.iter().any(|s| s.zone == zone));
            }
            // The next deadline is in the future and belongs to a node not yet silent.
            if let Some(d) = plan.next_deadline() {
                prop_assert!(d > now);
            }
        }

        #[test]
        fn seventy_second_deadline_fences_only_rebooted_nodes(partition_ms in 20_000i64..200_000, phase in 0i64..10_000) {
            let (reboot, fenced_at) = deadline_vs_reboot(t(0), Timestamp::from_millis(partition_ms), phase, Duration::from_secs(70));
            prop_assert!(reboot <= fenced_at, "reboot {reboot} after fencing {fenced_at}");
            // And the reboot follows the partition by at most the watchdog timeout.
            prop_assert!(reboot <= Timestamp::from_millis(partition_ms) + Duration::from_secs(60));
        }

        #[test]
        fn agent_never_feeds_after_failed_check(checks in prop::collection::vec((0u8..6, any::<bool>(), 1u64..12), 1..60)) {
            let mut agent = FencingAgent::new(AgentConfig::default());
            let mut now = t(0);
            let mut last_check_ok = false;
            let mut maintenance = false;
            for (kind, maint, dt) in checks {
                let result = match kind {
                    0 => ApiCheck::Timeout,
                    1 => ApiCheck::Error(ApiErrorKind::Connect),
                    2 => ApiCheck::Error(ApiErrorKind::Status(503)),
                    3 => ApiCheck::Error(ApiErrorKind::Status(403)),
                    _ => ApiCheck::Ok,
                };
                while let Some(a) = agent.poll_action(now) {
                    match a {
                        AgentAction::CheckApi => {
                            last_check_ok = !result.is_unreachable();
                            agent.handle_api_check(result.clone(), now);
                            if last_check_ok {
                                maintenance = maint;
                                agent.handle_node(maint, now);
                            }
                        }
                        AgentAction::Feed => {
                            prop_assert!(last_check_ok, "fed after a failed check");
                            prop_assert!(!maintenance, "fed in maintenance");
                            prop_assert!(agent.is_armed());
                        }
                        AgentAction::ArmWatchdog => prop_assert!(!maintenance),
                        _ => {}
                    }
                }
                if maintenance {
                    prop_assert!(!agent.is_armed());
                }
                now = now + Duration::from_secs(dt);
            }
        }
    }
}
