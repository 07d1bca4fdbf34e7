//! The fencing controller's plan.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use super::FencingError;
use super::agent::{AgentConfig, is_maintenance};
use crate::lifecycle::{ZoneState, zone_state};
use crate::model::{FencingMode, Node, NodeType, Timestamp};

/// The controller's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FencingConfig {
    /// The fencing agents' timings as deployed (they must match the DaemonSet's flags); its
    /// `watchdog_timeout` stands for groups that set no `fencing.watchdog.timeout`. The
    /// deadline is derived from them ([`FencingConfig::deadline_for`], `deadline.rs`).
    pub agent: AgentConfig,
    /// Added to the derived deadline for the reboot itself, scheduling delays and clock rate
    /// drift (5 s).
    pub margin: Duration,
    /// `fencingTimeout`: the deadline of groups without their own watchdog timeout, when
    /// longer than the derived one; shorter is refused by [`FencingConfig::validate`].
    pub default_timeout: Option<Duration>,
    /// Share of a zone's fencing-enabled nodes silent together that stops fencing in the zone
    /// (0.55, like `--unhealthy-zone-threshold`).
    pub storm_threshold: f64,
    /// Fewest silent nodes that make a storm in a zone of more than two nodes (3, like the
    /// node lifecycle controller's "more than 2 NotReady"). In a zone of two, both silent is
    /// a storm; a single silent node is never a zone storm (a dead node is what fencing is
    /// for), but it counts toward the cluster guard.
    pub storm_min_silent: usize,
    /// Share of all the cluster's fencing-enabled nodes silent together that stops fencing
    /// everywhere (0.5): so many nodes going quiet across zones is the controller's own view
    /// of the API or the control plane failing, not node deaths.
    pub cluster_storm_threshold: f64,
    /// Fewest silent nodes that make a cluster storm (2): in a cluster of two or three
    /// fenced nodes, two going silent together are held back; one alone is fenced.
    pub cluster_storm_min_silent: usize,
    /// Heartbeat age from which the storm guard counts a node as going silent (20 s: two Lease
    /// renewals missed). Nodes that lose the API together stop renewing within one renewal
    /// period of each other, so each crosses its fencing deadline alone; counting the ones
    /// already silent this long when the first crosses it is what lets the guard see them as
    /// one event. Capped at half of each node's own deadline, so that even with a short deadline
    /// the companions are counted before the first crosses it.
    pub storm_suspect_after: Duration,
    /// The controller's cached view counts as fresh only if its Lease watch delivered an event
    /// within this long (30 s; every kubelet renews every 10 s) and no watch is failing
    /// ([`super::judge_cache`]).
    pub max_cache_age: Duration,
}

impl Default for FencingConfig {
    fn default() -> Self {
        Self {
            agent: AgentConfig::default(),
            margin: Duration::from_secs(5),
            default_timeout: None,
            storm_threshold: 0.55,
            storm_min_silent: 3,
            cluster_storm_threshold: 0.5,
            cluster_storm_min_silent: 2,
            storm_suspect_after: Duration::from_secs(20),
            max_cache_age: Duration::from_secs(30),
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
    /// When the controller **observed** the node's current heartbeat, on its own clock (see
    /// [`super::HeartbeatObserver`]); `None` = never fence.
    pub last_heartbeat: Option<Timestamp>,
    /// Any maintenance annotation ([`is_maintenance`]): never fenced.
    pub maintenance: bool,
    /// The group's `fencing.watchdog.timeout`; `None` = the group sets none. The deadline is
    /// [`FencingConfig::deadline_for`] of it.
    pub timeout: Option<Duration>,
    /// Pods with `spec.nodeName` = this node still exist (the caller lists them). The Node is
    /// deleted only in a pass where this is `false`.
    pub has_pods: bool,
}

impl FencedNode {
    /// Builds the view of `node` for a group with `fencing` settings and `node_type`;
    /// `observed` is when the controller observed its current heartbeat
    /// ([`super::HeartbeatObserver::observe`] of [`heartbeat_token`]), `has_pods` whether pods
    /// are bound to it.
    pub fn from_node(
        node: &Node,
        fencing: &crate::model::Fencing,
        node_type: NodeType,
        observed: Option<Timestamp>,
        has_pods: bool,
    ) -> Result<Self, FencingError> {
        let timeout = watchdog_timeout(fencing)?;
        let last_heartbeat = observed;
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

    /// How long this node must be silent before it is fenced.
    #[inline]
    pub fn deadline(&self, cfg: &FencingConfig) -> Duration {
        cfg.deadline_for(self.timeout)
    }
}

/// The node's heartbeat as a token: the newer of its Lease's `renewTime` and its Ready
/// condition's heartbeat (both written by its kubelet). Compared only with earlier tokens of
/// the same node, never with a clock.
pub fn heartbeat_token(node: &Node, lease_renew: Option<Timestamp>) -> Option<Timestamp> {
    match (node.last_heartbeat, lease_renew) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The group's `fencing.watchdog.timeout`, parsed (`None` when unset).
pub fn watchdog_timeout(fencing: &crate::model::Fencing) -> Result<Option<Duration>, FencingError> {
    match fencing.watchdog.as_ref().and_then(|w| w.timeout.as_deref()) {
        None => Ok(None),
        Some(text) => crate::model::spec_facts::parse_watchdog_timeout(text)
            .map(Some)
            .map_err(|_| FencingError::InvalidTimeout(text.to_owned())),
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

/// The whole cluster held back: too many of all fencing-enabled nodes are silent together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStorm {
    /// Silent fencing-enabled nodes.
    pub silent: usize,
    /// Fencing-enabled nodes counted (maintenance and already fenced nodes excluded).
    pub total: usize,
}

impl fmt::Display for ClusterStorm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing suppressed in the whole cluster: {} of {} nodes silent",
            self.silent, self.total
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
    /// The whole cluster held back by the storm guard (then `commands` has no deletion).
    pub cluster_suppressed: Option<ClusterStorm>,
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
/// This is the plan from the controller's cached view; before carrying out a deletion the
/// caller must check that the view is fresh ([`super::judge_cache`]) and confirm the node's
/// silence with a direct read ([`super::HeartbeatObserver::confirm`]).
///
/// # Rules
///
/// * Maintenance nodes and nodes with no heartbeat are skipped (Deckhouse requeues them).
/// * A node is **silent** when the heartbeat it was last seen with was observed strictly
///   longer ago than its deadline ([`FencingConfig::deadline_for`] of its group's watchdog
///   timeout: the watchdog has fired by then, see `deadline.rs`).
/// * **Storm guard** (beyond Deckhouse), counting over the non-maintenance nodes that are not
///   already fenced (silent past their deadline with no pod left), a node as *going silent*
///   once its heartbeat is older than `storm_suspect_after`, capped at half its deadline: nodes
///   cut off together cross their deadlines up to a Lease period apart, and the first must
///   not be fenced alone, so companions are counted at least half a deadline before anyone
///   is fenced (a cap at the deadline itself left no window when the deadline is short):
///   - **zone**: at least two going silent, and either at least `storm_min_silent` or the
///     whole zone (a zone of two both silent), and [`zone_state`] with `storm_threshold` not
///     Normal ⇒ nobody in the zone is fenced ([`StormSuppressed`]);
///   - **cluster**: at least `cluster_storm_min_silent` going silent and at least
///     `cluster_storm_threshold` of all counted nodes ⇒ nobody anywhere is fenced
///     ([`ClusterStorm`]): nodes in different zones going quiet together is the
///     controller's own view of the API or the control plane failing, not node deaths.
/// * A silent node in `Notify` mode (or an unknown mode) gets [`FencingCommand::Notify`]
///   (also under a storm: it changes nothing).
/// * A silent `Watchdog` node with pods gets [`FencingCommand::DeletePods`]; one whose pods are
///   gone gets [`FencingCommand::DeleteNode`], unless its type is `Static` or `CloudStatic`
///   (those keep the Node).
///
/// # Guarantees
///
/// Never deletes anything of a node whose observed heartbeat is not older than its deadline;
/// never plans a DeleteNode for a node that still has pods; plans no deletion in a suppressed
/// zone or under a cluster storm.
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
        let Some(hb) = node.last_heartbeat else {
            zones.entry(node.zone.as_str()).or_insert((0, 0)).0 += 1;
            silent_for.push(None);
            continue;
        };
        let deadline = node.deadline(cfg);
        let age = now.saturating_since(hb);
        let fenced_already = age > deadline && !node.has_pods;
        if !fenced_already {
            let slot = zones.entry(node.zone.as_str()).or_insert((0, 0));
            slot.0 += 1;
            if age > cfg.storm_suspect_after.min(deadline / 2) {
                slot.1 += 1;
            }
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
    let (mut cluster_total, mut cluster_silent) = (0usize, 0usize);
    for (zone, (total, silent)) in &zones {
        cluster_total += total;
        cluster_silent += silent;
        let state = zone_state(total - silent, *silent, cfg.storm_threshold);
        let enough = *silent >= 2 && (*silent >= cfg.storm_min_silent || silent == total);
        if enough && state != ZoneState::Normal {
            tracing::debug!(zone = %zone, silent, total, "fencing storm guard: holding back");
            stormy.insert(zone);
            plan.suppressed.push(StormSuppressed {
                zone: (*zone).to_owned(),
                silent: *silent,
                total: *total,
            });
        }
    }
    if cluster_silent >= cfg.cluster_storm_min_silent.max(1)
        && cluster_silent as f64 >= cfg.cluster_storm_threshold * cluster_total as f64
    {
        tracing::debug!(
            silent = cluster_silent,
            total = cluster_total,
            "fencing storm guard: holding back the whole cluster"
        );
        plan.cluster_suppressed = Some(ClusterStorm {
            silent: cluster_silent,
            total: cluster_total,
        });
    }
    // Pass 2: commands.
    for (node, silent) in nodes.iter().zip(silent_for) {
        let Some(age) = silent else {
            continue;
        };
        let held_back = plan.cluster_suppressed.is_some() || stormy.contains(&node.zone.as_str());
        let command = match node.mode {
            FencingMode::Watchdog if held_back => continue,
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
    use crate::fencing::agent::{AgentAction, ApiCheck, FencingAgent};
    use crate::fencing::confirm::{Confirmation, DirectRead, HeartbeatObserver};
    use crate::model::keys;
    use proptest::prelude::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
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

    /// `n` healthy nodes (heartbeat at `hb`) in `zone`.
    fn healthy(zone: &str, n: usize, hb: i64) -> Vec<FencedNode> {
        (0..n)
            .map(|i| fenced(&format!("{zone}-ok{i}"), zone, Some(hb)))
            .collect()
    }

    #[test]
    fn controller_pods_first_then_node() {
        let cfg = FencingConfig::default();
        // Default deadline: 60 s watchdog + 30 s kubelet staleness + 5 s margin.
        let mut nodes = vec![
            fenced("a", "z", Some(0)),
            fenced("b", "z", Some(50)),
            fenced("c", "z", None),
            fenced("d", "z", Some(100)),
        ];
        nodes.extend(healthy("y", 4, 100));
        let plan = plan_fencing(&nodes, &cfg, t(95));
        assert!(plan.commands.is_empty(), "95 s is not older than 95 s");
        assert_eq!(plan.next_deadline(), Some(Timestamp::from_millis(95_001)));
        let plan = plan_fencing(&nodes, &cfg, t(96));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeletePods { node: "a".into() }]
        );
        assert_eq!(plan.next_deadline(), Some(Timestamp::from_millis(145_001)));
        nodes[0].has_pods = false;
        let plan = plan_fencing(&nodes, &cfg, t(97));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeleteNode { node: "a".into() }]
        );
        // Static keeps the node; Notify only reports; maintenance is skipped; group timeout.
        nodes[0].node_type = NodeType::Static;
        nodes[1].mode = FencingMode::Notify;
        nodes[3].maintenance = true;
        let plan = plan_fencing(&nodes, &cfg, t(150));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::Notify {
                node: "b".into(),
                silent_for: Duration::from_secs(100)
            }]
        );
        nodes[1].mode = FencingMode::Watchdog;
        nodes[1].timeout = Some(Duration::from_secs(300));
        let plan = plan_fencing(&nodes, &cfg, t(150));
        assert!(plan.commands.is_empty());
        // b: 50 + 300 + 30 + 5 = 385 s; the healthy nodes are due first.
        assert_eq!(plan.next_deadline(), Some(Timestamp::from_millis(195_001)));
    }

    #[test]
    fn controller_storm_guard() {
        let cfg = FencingConfig::default();
        let mut nodes: Vec<FencedNode> = (0..10)
            .map(|i| fenced(&format!("a{i}"), "a", Some(if i < 6 { 0 } else { 100 })))
            .collect();
        nodes.push(fenced("b0", "b", Some(0)));
        nodes.extend(healthy("c", 10, 100));
        let plan = plan_fencing(&nodes, &cfg, t(120));
        assert_eq!(
            plan.suppressed,
            vec![StormSuppressed {
                zone: "a".into(),
                silent: 6,
                total: 10
            }]
        );
        assert_eq!(plan.cluster_suppressed, None, "7 of 21 silent");
        // Zone b is a single silent node: fenced.
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
    fn small_zones_and_the_whole_cluster_are_guarded_too() {
        let cfg = FencingConfig::default();
        // Both nodes of a zone of two silent together: held back; a lone node elsewhere is not.
        let mut nodes = vec![
            fenced("p0", "pair", Some(0)),
            fenced("p1", "pair", Some(5)),
            fenced("s0", "single", Some(0)),
        ];
        nodes.extend(healthy("big", 8, 100));
        let plan = plan_fencing(&nodes, &cfg, t(110));
        assert_eq!(
            plan.suppressed,
            vec![StormSuppressed {
                zone: "pair".into(),
                silent: 2,
                total: 2
            }]
        );
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeletePods { node: "s0".into() }]
        );
        // The measured failure: every heartbeat stops at once (the controller's caches froze).
        // Zones of one and two nodes, no zone storm by itself: the cluster guard holds all.
        let frozen = vec![
            fenced("x0", "x", Some(0)),
            fenced("y0", "y", Some(0)),
            fenced("y1", "y", Some(3)),
            fenced("w0", "w", Some(1)),
            fenced("w1", "w", Some(2)),
            fenced("w2", "w", Some(4)),
            fenced("w3", "w", Some(7)),
        ];
        let plan = plan_fencing(&frozen, &cfg, t(200));
        assert!(plan.commands.is_empty(), "{:?}", plan.commands);
        assert_eq!(
            plan.cluster_suppressed,
            Some(ClusterStorm {
                silent: 7,
                total: 7
            })
        );
        // Two of three fenced nodes silent together: held back; one of three: fenced.
        let three = vec![
            fenced("x0", "x", Some(0)),
            fenced("y0", "y", Some(0)),
            fenced("z0", "z", Some(190)),
        ];
        assert!(plan_fencing(&three, &cfg, t(200)).commands.is_empty());
        let three = vec![
            fenced("x0", "x", Some(0)),
            fenced("y0", "y", Some(190)),
            fenced("z0", "z", Some(190)),
        ];
        assert_eq!(plan_fencing(&three, &cfg, t(200)).commands.len(), 1);
        // Nodes already fenced (silent, no pods left) no longer count: a Static node kept
        // after its fencing does not hold the next lone death back forever.
        let mut settled = vec![
            fenced("x0", "x", Some(0)),
            fenced("y0", "y", Some(900)),
            fenced("z0", "z", Some(990)),
        ];
        settled[0].has_pods = false;
        settled[0].node_type = NodeType::Static;
        assert_eq!(
            plan_fencing(&settled, &cfg, t(1000)).commands,
            vec![FencingCommand::DeletePods { node: "y0".into() }]
        );
    }

    #[test]
    fn nodes_cut_off_together_are_one_storm_though_their_deadlines_are_staggered() {
        // Three of four nodes lose the API at once; their last Lease renewals are up to a
        // renewal period apart (phases 0, 4 and 9 s), so the first crosses its deadline alone.
        let cfg = FencingConfig::default();
        let mut nodes = vec![
            fenced("a0", "a", Some(100)),
            fenced("a1", "a", Some(104)),
            fenced("a2", "a", Some(109)),
            fenced("a3", "a", Some(194)),
        ];
        nodes.extend(healthy("b", 6, 194));
        let plan = plan_fencing(&nodes, &cfg, t(196));
        assert!(plan.commands.is_empty(), "{:?}", plan.commands);
        assert_eq!(plan.suppressed.len(), 1);
        // One node cut off alone is fenced at its deadline.
        let mut lone = vec![fenced("a0", "a", Some(100)), fenced("a1", "a", Some(194))];
        lone.extend(healthy("b", 2, 194));
        let plan = plan_fencing(&lone, &cfg, t(196));
        assert_eq!(
            plan.commands,
            vec![FencingCommand::DeletePods { node: "a0".into() }]
        );
    }

    #[test]
    fn from_node_reads_group_and_heartbeat() {
        let mut node = Node {
            name: "n".into(),
            last_heartbeat: Some(t(10)),
            ..Node::default()
        };
        node.labels
            .insert(keys::LABEL_TOPOLOGY_ZONE.into(), "z1".into());
        node.labels
            .insert(keys::LABEL_NODE_GROUP.into(), "workers".into());
        assert_eq!(heartbeat_token(&node, Some(t(20))), Some(t(20)));
        assert_eq!(heartbeat_token(&node, Some(t(5))), Some(t(10)));
        assert_eq!(heartbeat_token(&node, None), Some(t(10)));
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

    /// One node's story on a virtual clock (milliseconds of real time).
    #[derive(Debug, Clone)]
    struct Story {
        /// The kubelet renews its Lease every 10 s from this phase.
        lease_phase: i64,
        /// The kubelet dies (stops renewing) at this time.
        kubelet_dies: Option<i64>,
        /// The node loses the API (agent checks unanswered, no renewals) at this time.
        partition: Option<i64>,
        /// Agent timing.
        check_ms: u64,
        api_timeout_ms: u64,
        /// API latency of the agent's answered checks.
        latency_ms: i64,
        /// The agent's and the controller's clocks minus real time.
        agent_skew: i64,
        controller_skew: i64,
        /// The controller starts (or restarts) observing at this time.
        controller_start: i64,
        /// The controller's cache lags real time by this much.
        cache_lag: i64,
    }

    /// Runs `story` with the real agent and the real controller rules and returns (when the
    /// watchdog fired, when the controller first deleted the node's pods), both in real time.
    /// `rule` is the controller's silence rule (the real one, or a broken one to see the
    /// property fail).
    fn run_story(story: &Story, rule: Rule) -> (Option<i64>, Option<i64>, bool) {
        let agent_cfg = AgentConfig {
            api_check_interval: Duration::from_millis(story.check_ms),
            api_timeout: Duration::from_millis(story.api_timeout_ms),
            ..AgentConfig::default()
        };
        let cfg = FencingConfig {
            agent: agent_cfg.clone(),
            ..FencingConfig::default()
        };
        let dead = |real: i64| {
            story.kubelet_dies.is_some_and(|d| real >= d)
                || story.partition.is_some_and(|p| real >= p)
        };
        // The renewTime (kubelet clock = agent clock) of the last renewal at or before `real`.
        let last_renewal = |real: i64| {
            let mut r = story.lease_phase + (real - story.lease_phase).div_euclid(10_000) * 10_000;
            if r > real {
                r -= 10_000;
            }
            while r > 0 && dead(r) {
                r -= 10_000;
            }
            r
        };
        // Clocks start far from the epoch so that skews stay positive.
        const BASE: i64 = 1_000_000_000;
        let node_clock = |real: i64| Timestamp::from_millis(BASE + real + story.agent_skew);
        let mut labelled = false;
        let mut agent = FencingAgent::new(agent_cfg);
        let mut observer = HeartbeatObserver::new();
        let mut pending_check: Option<i64> = None;
        let mut fired = None;
        let mut fenced_at = None;
        let mut real = 0i64;
        while real < 600_000 && (fired.is_none() || fenced_at.is_none()) {
            // Agent.
            if fired.is_none() {
                let now = node_clock(real);
                if let Some(expiry) = agent.watchdog_expiry()
                    && expiry <= now
                {
                    fired = Some(real - (now.as_millis() - expiry.as_millis()));
                }
                if let Some(started) = pending_check
                    && real >= started + story.latency_ms
                    && story
                        .partition
                        .is_none_or(|p| started + story.latency_ms < p)
                {
                    pending_check = None;
                    agent.handle_api_check(ApiCheck::Ok, now);
                    agent.handle_node(false, now);
                    let read_at = started + story.latency_ms / 2;
                    agent.handle_kubelet_lease(Some(node_clock(last_renewal(read_at))), now);
                }
                while let Some(action) = agent.poll_action(now) {
                    match action {
                        AgentAction::CheckApi => pending_check = Some(real),
                        AgentAction::SetLabel => labelled = true,
                        _ => {}
                    }
                }
            }
            // Controller.
            // The controller only fences nodes its agent labelled.
            if labelled && real >= story.controller_start && real % 5_000 == 0 {
                let now = Timestamp::from_millis(BASE + real + story.controller_skew);
                let token = Some(node_clock(last_renewal(real - story.cache_lag)));
                let observed = match rule {
                    Rule::Observed => observer.observe("n", token, now),
                    Rule::RenewTime => token,
                };
                let node = FencedNode {
                    last_heartbeat: observed,
                    ..fenced("n", "z", None)
                };
                let plan = plan_fencing(std::slice::from_ref(&node), &cfg, now);
                if plan.commands == vec![FencingCommand::DeletePods { node: "n".into() }] {
                    let direct = DirectRead::Node {
                        heartbeat: Some(node_clock(last_renewal(real))),
                        maintenance: false,
                        fencing_enabled: true,
                    };
                    let confirmed = match rule {
                        Rule::Observed => observer.confirm(&node, &direct, &cfg, now),
                        Rule::RenewTime => Confirmation::Confirmed,
                    };
                    if confirmed == Confirmation::Confirmed && fenced_at.is_none() {
                        fenced_at = Some(real);
                    }
                }
            }
            real += 100;
        }
        (fired, fenced_at, labelled)
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Rule {
        /// The real rule: observed time + direct confirmation.
        Observed,
        /// Broken on purpose: age from the node's renewTime on the controller's clock.
        RenewTime,
    }

    fn arb_story() -> impl Strategy<Value = Story> {
        (
            0i64..10_000,
            prop::option::of(20_000i64..200_000),
            prop::option::of(20_000i64..200_000),
            (1_000u64..10_000, 1_000u64..15_000, 0i64..3_000),
            (-600_000i64..600_000, -600_000i64..600_000),
            (0i64..100_000, 0i64..20_000),
        )
            .prop_map(
                |(lease_phase, kubelet_dies, partition, timing, skew, controller)| Story {
                    lease_phase,
                    kubelet_dies,
                    partition,
                    check_ms: timing.0,
                    api_timeout_ms: timing.1,
                    latency_ms: timing.2.min(timing.1 as i64 - 1),
                    agent_skew: skew.0,
                    controller_skew: skew.1,
                    controller_start: controller.0 / 5_000 * 5_000,
                    cache_lag: controller.1,
                },
            )
    }

    #[test]
    fn the_default_deadline_fences_only_after_the_watchdog_fired() {
        // Before: deadline = watchdog timeout (60 s) fenced at 160 s a node whose watchdog
        // fired at 165 s. Now the same partition (renewal at 100 s, partition at 109.9 s):
        let story = Story {
            lease_phase: 0,
            kubelet_dies: None,
            partition: Some(109_900),
            check_ms: 5_000,
            api_timeout_ms: 10_000,
            latency_ms: 10,
            agent_skew: 0,
            controller_skew: 0,
            controller_start: 0,
            cache_lag: 0,
        };
        let (fired, fenced_at, _) = run_story(&story, Rule::Observed);
        let (fired, fenced_at) = (fired.expect("fires"), fenced_at.expect("fenced"));
        assert!(fired <= fenced_at, "fired {fired} fenced {fenced_at}");
        // Last feed at 105 s (the last answered check), fired 60 s later.
        assert!((165_000..=165_200).contains(&fired), "fired at {fired}");
        // The kubelet dies while the API still answers: the agent stops feeding within its
        // staleness, the watchdog fires, and only then are the pods deleted.
        let story = Story {
            kubelet_dies: Some(50_500),
            partition: None,
            ..story
        };
        let (fired, fenced_at, _) = run_story(&story, Rule::Observed);
        let (fired, fenced_at) = (fired.expect("fires"), fenced_at.expect("fenced"));
        assert!(fired <= 50_000 + 30_000 + 60_000, "fired at {fired}");
        assert!(fired <= fenced_at, "fired {fired} fenced {fenced_at}");
    }

    #[test]
    fn a_broken_rule_is_caught_by_the_story_property() {
        // Measuring silence from the node's renewTime on the controller's clock fences early
        // as soon as the node's clock is behind the controller's.
        let story = Story {
            lease_phase: 0,
            kubelet_dies: None,
            partition: Some(109_900),
            check_ms: 5_000,
            api_timeout_ms: 10_000,
            latency_ms: 10,
            agent_skew: -60_000,
            controller_skew: 0,
            controller_start: 0,
            cache_lag: 0,
        };
        let (fired, fenced_at, _) = run_story(&story, Rule::RenewTime);
        assert!(fenced_at < fired, "fired {fired:?} fenced {fenced_at:?}");
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
        fn controller_invariants(mut nodes in prop::collection::vec(arb_node(), 0..40), now in 0i64..700) {
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
                // A node observed within its deadline, a maintenance node, a node without
                // heartbeat is never touched.
                let hb = n.last_heartbeat;
                prop_assert!(hb.is_some_and(|hb| now.saturating_since(hb) > cfg.deadline_for(n.timeout)));
                prop_assert!(!n.maintenance);
                if deletes {
                    prop_assert!(!plan.suppressed.iter().any(|s| s.zone == n.zone));
                    prop_assert!(plan.cluster_suppressed.is_none());
                    prop_assert_eq!(&n.mode, &FencingMode::Watchdog);
                }
                if let FencingCommand::DeleteNode { .. } = cmd {
                    prop_assert!(!n.has_pods, "node deleted before its pods");
                    prop_assert!(!matches!(n.node_type, NodeType::Static | NodeType::CloudStatic));
                }
            }
            // Storm: a zone over the threshold gets no deletions, and every such zone is reported.
            let counted: Vec<(&FencedNode, bool)> = nodes
                .iter()
                .filter(|n| !n.maintenance)
                .filter_map(|n| {
                    let deadline = cfg.deadline_for(n.timeout);
                    let age = n.last_heartbeat.map(|hb| now.saturating_since(hb));
                    if age.is_some_and(|a| a > deadline) && !n.has_pods {
                        return None;
                    }
                    Some((n, age.is_some_and(|a| a > cfg.storm_suspect_after.min(deadline))))
                })
                .collect();
            for zone in ["z0", "z1", "z2"] {
                let members: Vec<bool> = counted.iter().filter(|(n, _)| n.zone == zone).map(|(_, s)| *s).collect();
                let silent = members.iter().filter(|s| **s).count();
                let storm = silent >= 2
                    && (silent >= 3 || silent == members.len())
                    && silent as f64 / members.len() as f64 >= cfg.storm_threshold;
                prop_assert_eq!(storm, plan.suppressed.iter().any(|s| s.zone == zone));
            }
            let silent = counted.iter().filter(|(_, s)| *s).count();
            let cluster_storm = silent >= 2 && silent as f64 >= 0.5 * counted.len() as f64;
            prop_assert_eq!(cluster_storm, plan.cluster_suppressed.is_some());
            // The next deadline is in the future and belongs to a node not yet silent.
            if let Some(d) = plan.next_deadline() {
                prop_assert!(d > now);
            }
        }

        /// No pod is deleted on a node whose watchdog has not fired: any API partition,
        /// kubelet death, agent timing, API latency, clock skew (±10 min between the node and
        /// the controller), controller (re)start and cache lag.
        #[test]
        fn pods_are_deleted_only_after_the_watchdog_fired(story in arb_story()) {
            let (fired, fenced_at, labelled) = run_story(&story, Rule::Observed);
            if let Some(fenced_at) = fenced_at {
                prop_assert!(fired.is_some_and(|f| f <= fenced_at), "fired {fired:?}, fenced at {fenced_at}: {story:?}");
            }
            // And an armed node that lost its kubelet or the API is fenced in the end.
            if labelled && (story.kubelet_dies.is_some() || story.partition.is_some()) {
                prop_assert!(fenced_at.is_some(), "never fenced: {story:?}");
            }
        }
    }
}
