//! Fencing under random fault schedules: nodes whose kubelet dies or who lose the API, agents
//! with random timings and clocks, and a controller whose own view of the API fails (list and
//! watch errors that freeze its caches, watch lag, failing direct reads, restarts that lose
//! what it observed, clock skew). Every node runs the core's [`FencingAgent`]; the controller
//! runs the core's rules in the order the k8s controller does ([`judge_cache`],
//! [`HeartbeatObserver::observe`], [`plan_fencing`], [`HeartbeatObserver::confirm`]). The
//! outcome says, for every deletion, whether the node's watchdog had fired, on a virtual clock
//! of real time. Used by `tests/fencing_properties.rs`.

use std::time::Duration;

use nodemgr_core::fencing::{
    AgentAction, AgentConfig, ApiCheck, CacheHealth, Confirmation, DirectRead, FencedNode,
    FencingAgent, FencingCommand, FencingConfig, HeartbeatObserver, judge_cache, plan_fencing,
};
use nodemgr_core::model::{FencingMode, NodeType, Timestamp};

/// A time window `[start, end)` in milliseconds of real time.
pub type Window = (i64, i64);

/// One node's faults and agent.
#[derive(Debug, Clone)]
pub struct NodeSchedule {
    /// Zone.
    pub zone: String,
    /// The kubelet renews its Lease every 10 s from this phase (ms).
    pub lease_phase: i64,
    /// The kubelet dies (stops renewing for good).
    pub kubelet_dies: Option<i64>,
    /// The node is cut off from the API (no renewals, agent checks unanswered).
    pub partition: Option<Window>,
    /// Agent check interval and API timeout (ms).
    pub check_ms: u64,
    /// Agent API timeout (ms).
    pub api_timeout_ms: u64,
    /// Latency of the agent's answered checks (ms).
    pub latency_ms: i64,
    /// The node's clock minus real time (ms).
    pub skew_ms: i64,
}

/// The controller's faults.
#[derive(Debug, Clone)]
pub struct ControllerSchedule {
    /// List and watch fail (its caches freeze, its watch health says failing).
    pub watch_errors: Vec<Window>,
    /// The watch delivers events this late (ms).
    pub watch_lag_ms: i64,
    /// Direct reads fail.
    pub read_errors: Vec<Window>,
    /// The controller restarts (forgets what it observed) at these times.
    pub restarts: Vec<i64>,
    /// Its clock minus real time (ms).
    pub skew_ms: i64,
    /// Pass period (ms).
    pub period_ms: i64,
}

/// A whole schedule.
#[derive(Debug, Clone)]
pub struct FencingSchedule {
    /// The fencing-enabled nodes.
    pub nodes: Vec<NodeSchedule>,
    /// The controller.
    pub controller: ControllerSchedule,
    /// How long to run (ms).
    pub horizon_ms: i64,
}

/// What happened to one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeOutcome {
    /// The agent armed (and labelled the node) at some point.
    pub armed: bool,
    /// When its watchdog fired (real ms).
    pub fired: Option<i64>,
    /// When the controller deleted its pods (real ms).
    pub pods_deleted: Option<i64>,
}

const STEP_MS: i64 = 100;
const BASE_MS: i64 = 1_000_000_000;
const RENEW_MS: i64 = 10_000;

fn within(windows: &[Window], t: i64) -> bool {
    windows.iter().any(|(a, b)| *a <= t && t < *b)
}

impl NodeSchedule {
    fn cut_off(&self, t: i64) -> bool {
        self.partition.is_some_and(|(a, b)| a <= t && t < b)
    }

    /// The kubelet writes a renewal at `t` (real ms) when alive and connected.
    fn renews_at(&self, t: i64) -> bool {
        self.kubelet_dies.is_none_or(|d| t < d) && !self.cut_off(t)
    }

    /// The Lease's renewTime (on the node's clock) as stored in the API at real time `t`.
    fn renew_time(&self, t: i64) -> Option<Timestamp> {
        let mut r = self.lease_phase + (t - self.lease_phase).div_euclid(RENEW_MS) * RENEW_MS;
        while r >= 0 {
            if r <= t && self.renews_at(r) {
                return Some(Timestamp::from_millis(BASE_MS + r + self.skew_ms));
            }
            r -= RENEW_MS;
        }
        None
    }
}

/// The fencing configuration of a schedule's agents (the controller is told the same).
fn agent_config(node: &NodeSchedule) -> AgentConfig {
    AgentConfig {
        api_check_interval: Duration::from_millis(node.check_ms),
        api_timeout: Duration::from_millis(node.api_timeout_ms),
        ..AgentConfig::default()
    }
}

/// Runs `schedule` with the real rules.
pub fn run_fencing_schedule(schedule: &FencingSchedule) -> Vec<NodeOutcome> {
    run_with(schedule, false)
}

/// Runs `schedule` with the controller's direct confirmation and freshness rule switched off
/// (the rules before this module existed), to see a property catch them.
pub fn run_fencing_schedule_without_confirmation(schedule: &FencingSchedule) -> Vec<NodeOutcome> {
    run_with(schedule, true)
}

fn run_with(schedule: &FencingSchedule, broken: bool) -> Vec<NodeOutcome> {
    let cfg = FencingConfig::default();
    let mut agents: Vec<FencingAgent> = schedule
        .nodes
        .iter()
        .map(|n| FencingAgent::new(agent_config(n)))
        .collect();
    let mut pending: Vec<Option<i64>> = vec![None; schedule.nodes.len()];
    let mut out = vec![NodeOutcome::default(); schedule.nodes.len()];
    let ctl = &schedule.controller;
    let mut observer = HeartbeatObserver::new();
    // The controller's cache: what it last saw of each node's Lease (frozen while failing).
    let mut cache: Vec<Option<Timestamp>> = vec![None; schedule.nodes.len()];
    let mut last_delivery: Option<i64> = None;
    let mut last_error: Option<i64> = None;
    let mut t = 0i64;
    while t < schedule.horizon_ms {
        for (i, node) in schedule.nodes.iter().enumerate() {
            let agent = &mut agents[i];
            let o = &mut out[i];
            if o.fired.is_some() {
                continue;
            }
            let now = Timestamp::from_millis(BASE_MS + t + node.skew_ms);
            if let Some(expiry) = agent.watchdog_expiry()
                && expiry <= now
            {
                o.fired = Some(t - now.saturating_since(expiry).as_millis() as i64);
                continue;
            }
            if let Some(started) = pending[i]
                && t >= started + node.latency_ms
                && !node.cut_off(started + node.latency_ms)
            {
                pending[i] = None;
                agent.handle_api_check(ApiCheck::Ok, now);
                agent.handle_node(false, now);
                agent.handle_kubelet_lease(node.renew_time(started + node.latency_ms / 2), now);
            }
            while let Some(action) = agent.poll_action(now) {
                match action {
                    AgentAction::CheckApi => pending[i] = Some(t),
                    AgentAction::SetLabel => o.armed = true,
                    _ => {}
                }
            }
        }
        // The controller's watch.
        if within(&ctl.watch_errors, t) {
            last_error = Some(t);
        } else {
            let seen = t - ctl.watch_lag_ms;
            let mut delivered = false;
            for (i, node) in schedule.nodes.iter().enumerate() {
                let renew = node.renew_time(seen);
                if renew != cache[i] {
                    cache[i] = renew;
                    delivered = true;
                }
            }
            if delivered || last_delivery.is_none() {
                last_delivery = Some(t);
            }
        }
        if ctl.restarts.contains(&t) {
            observer = HeartbeatObserver::new();
        }
        if t % ctl.period_ms == 0 {
            let now = Timestamp::from_millis(BASE_MS + t + ctl.skew_ms);
            let failing = match (last_error, last_delivery) {
                (Some(e), d) if d.is_none_or(|d| e > d) => {
                    vec![("Lease".to_owned(), Duration::from_millis((t - e) as u64))]
                }
                _ => vec![],
            };
            let health = CacheHealth {
                lease_event_age: last_delivery.map(|d| Duration::from_millis((t - d) as u64)),
                failing,
            };
            if broken || judge_cache(&health, &cfg).is_fresh() {
                let views: Vec<FencedNode> = schedule
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| out[*i].armed && out[*i].pods_deleted.is_none())
                    .map(|(i, node)| FencedNode {
                        name: format!("n{i}"),
                        zone: node.zone.clone(),
                        group: "g".into(),
                        mode: FencingMode::Watchdog,
                        node_type: NodeType::CloudEphemeral,
                        last_heartbeat: if broken {
                            cache[i]
                        } else {
                            observer.observe(&format!("n{i}"), cache[i], now)
                        },
                        maintenance: false,
                        timeout: None,
                        has_pods: true,
                    })
                    .collect();
                let plan = plan_fencing(&views, &cfg, now);
                for command in plan.commands {
                    let FencingCommand::DeletePods { node } = command else {
                        continue;
                    };
                    let Some(i) = node.strip_prefix('n').and_then(|n| n.parse::<usize>().ok())
                    else {
                        continue;
                    };
                    let Some(view) = views.iter().find(|v| v.name == node) else {
                        continue;
                    };
                    let read = if within(&ctl.read_errors, t) {
                        DirectRead::Failed("injected".into())
                    } else {
                        DirectRead::Node {
                            heartbeat: schedule.nodes[i].renew_time(t),
                            maintenance: false,
                            fencing_enabled: true,
                        }
                    };
                    let confirmed = broken
                        || observer.confirm(view, &read, &cfg, now) == Confirmation::Confirmed;
                    if confirmed {
                        out[i].pods_deleted = Some(t);
                    }
                }
            }
        }
        t += STEP_MS;
    }
    out
}
