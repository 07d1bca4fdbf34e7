//! The fencing agent's state machine.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use crate::model::{Node, Timestamp, keys};

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
/// `node-manager.deckhouse.io/fencing-disable` (see `docs/fencing.md`).
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
    /// How long the node's own kubelet Lease (in `kube-node-lease`) may go without a renewal
    /// seen by the agent before it stops feeding (30 s: three of the kubelet's 10 s renewals;
    /// the agent sees a renewal up to one check interval late). Measured on the agent's own
    /// clock (see [`FencingAgent::handle_kubelet_lease`]), never by comparing `renewTime` with
    /// a clock.
    pub kubelet_stale_after: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            feed_interval: Duration::from_secs(5),
            api_check_interval: Duration::from_secs(5),
            api_timeout: Duration::from_secs(10),
            watchdog_timeout: crate::model::spec_facts::WATCHDOG_TIMEOUT_DEFAULT_DURATION,
            kubelet_stale_after: Duration::from_secs(30),
        }
    }
}

/// Something the fencing agent's binary must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentAction {
    /// GET the own Node and the own kubelet Lease (`kube-node-lease/<node>`) within one
    /// `api_timeout`, then call [`FencingAgent::handle_api_check`] (and, when the API answered,
    /// [`FencingAgent::handle_node`] with [`is_maintenance`] and
    /// [`FencingAgent::handle_kubelet_lease`] with the Lease's `renewTime`).
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
    /// When the last check started (kept after it is answered).
    last_check_started: Timestamp,
    /// The kubelet Lease's `renewTime` as last read (a token, never compared with a clock) and
    /// when the check that read it started.
    kubelet_lease: Option<(Timestamp, Timestamp)>,
    /// A moment before the kubelet's last renewal the agent has seen (see
    /// [`FencingAgent::handle_kubelet_lease`]).
    kubelet_renewal_seen: Option<Timestamp>,
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
            last_check_started: Timestamp::EPOCH,
            kubelet_lease: None,
            kubelet_renewal_seen: None,
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

    /// The `renewTime` of the node's own kubelet Lease as read by the check just answered
    /// (`None`: no Lease or no `renewTime`).
    ///
    /// The value is a token, only compared with the previous read, never with a clock: a
    /// different value is a renewal that happened after the previous read, so it is credited
    /// to the **start of the previous check that read the Lease** (a moment before the
    /// renewal). The kubelet counts as alive while the last credited renewal is at most
    /// [`AgentConfig::kubelet_stale_after`] old on the agent's clock; the first read after a
    /// start proves nothing, so the agent arms only once it has seen the kubelet renew.
    ///
    /// Hence the agent never feeds later than `kubelet_stale_after` after the kubelet's last
    /// renewal, whatever the check cadence, the API's latency or the clocks of other machines.
    pub fn handle_kubelet_lease(&mut self, renew_time: Option<Timestamp>, now: Timestamp) {
        self.touch(now);
        let Some(renew_time) = renew_time else {
            return;
        };
        let read_started = self.last_check_started.min(now);
        if let Some((previous, previous_read_started)) = self.kubelet_lease
            && previous != renew_time
        {
            self.kubelet_renewal_seen = Some(
                self.kubelet_renewal_seen
                    .map_or(previous_read_started, |seen| {
                        seen.max(previous_read_started)
                    }),
            );
        }
        self.kubelet_lease = Some((renew_time, read_started));
    }

    /// Whether the node's kubelet renewed its Lease within `kubelet_stale_after` of `now`, as
    /// seen by this agent.
    pub fn kubelet_alive(&self, now: Timestamp) -> bool {
        self.kubelet_renewal_seen
            .is_some_and(|seen| now.saturating_since(seen) <= self.cfg.kubelet_stale_after)
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
    /// (as Deckhouse does); a failed [`AgentAction::ArmWatchdog`] leaves the agent disarmed to retry after
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
            Some(false) if !self.armed && self.api_up && self.kubelet_alive(now) => {
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
            self.last_check_started = now;
            self.next_check = now + self.cfg.api_check_interval;
            return Some(AgentAction::CheckApi);
        }
        if self.armed
            && self.api_up
            && self.kubelet_alive(now)
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
            && self.kubelet_alive(self.last_now)
            && self.check_started.is_none()
            && self.maintenance == Some(false)
            && let Some(f) = self.last_feed
        {
            earliest = earliest.min(f + self.cfg.feed_interval);
        }
        Some(earliest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    /// A new agent that has read its kubelet's Lease once (the next changed read is a renewal).
    fn started_agent() -> FencingAgent {
        let mut agent = FencingAgent::new(AgentConfig::default());
        agent.handle_kubelet_lease(Some(Timestamp::from_millis(-1)), Timestamp::EPOCH);
        agent
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
                        // A live kubelet: a new renewTime at every check.
                        agent.handle_kubelet_lease(Some(now), now);
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
        let mut agent = started_agent();
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
    fn agent_arms_only_after_seeing_its_kubelet_renew_and_stops_feeding_when_it_dies() {
        let mut agent = FencingAgent::new(AgentConfig::default());
        let answer = |agent: &mut FencingAgent, now: Timestamp, renew: i64| {
            let mut acts = Vec::new();
            while let Some(a) = agent.poll_action(now) {
                if a == AgentAction::CheckApi {
                    agent.handle_api_check(ApiCheck::Ok, now);
                    agent.handle_node(false, now);
                    agent.handle_kubelet_lease(Some(t(renew)), now);
                }
                acts.push(a);
            }
            acts
        };
        // The first read proves nothing: no arming.
        assert_eq!(answer(&mut agent, t(0), 0), vec![AgentAction::CheckApi]);
        assert_eq!(answer(&mut agent, t(5), 0), vec![AgentAction::CheckApi]);
        // A renewal between the reads at 5 s and 10 s: credited to 5 s, armed.
        assert_eq!(
            answer(&mut agent, t(10), 10),
            vec![
                AgentAction::CheckApi,
                AgentAction::ArmWatchdog,
                AgentAction::SetLabel
            ]
        );
        assert!(agent.kubelet_alive(t(35)));
        assert!(!agent.kubelet_alive(Timestamp::from_millis(35_001)));
        // The kubelet dies (renewTime stays 10): feeding goes on while the API answers, until
        // 30 s after the credited renewal.
        let mut last_feed = t(10);
        for s in (15..=60).step_by(5) {
            let acts = answer(&mut agent, t(s), 10);
            if acts.contains(&AgentAction::Feed) {
                last_feed = t(s);
            }
        }
        assert_eq!(last_feed, t(35));
        assert_eq!(agent.watchdog_expiry(), Some(t(95)));
        assert!(
            agent.is_armed(),
            "a dead kubelet is no maintenance: no disarm"
        );
    }

    #[test]
    fn agent_unanswered_check_times_out() {
        let mut agent = started_agent();
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
        let mut agent = started_agent();
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
        let mut agent = started_agent();
        let _ = step(&mut agent, t(0), &ApiCheck::Ok, false);
        agent.handle_action_failed(AgentAction::SetLabel, t(0));
        assert_eq!(
            drain(&mut agent, t(0)),
            vec![AgentAction::Disarm, AgentAction::Exit]
        );
        assert_eq!(agent.next_deadline(), None);

        let mut agent = started_agent();
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn agent_never_feeds_after_failed_check(checks in prop::collection::vec((0u8..6, any::<bool>(), 1u64..12), 1..60)) {
            let mut agent = started_agent();
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
                                agent.handle_kubelet_lease(Some(now), now);
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
