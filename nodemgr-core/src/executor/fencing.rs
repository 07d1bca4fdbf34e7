//! The fencing executor: one pass of the fencing controller (docs/deckhouse.md §5,
//! docs/fencing.md) over the cluster port ([`ClusterApi`] + [`NodeHealthRead`]), the code the
//! simulator and node-manager both drive (docs/executors.md §4).
//!
//! # One step ([`FencingExecutor::step`])
//! 1. **Trust**: [`judge_cache`] on the port's cache health; a failing or quiet watch ends the
//!    step at once, having done nothing ([`FencingEvent::Paused`] once per episode, with a
//!    `FencingPaused` Warning Event).
//! 2. **Observe**: every node labelled `node-manager.deckhouse.io/fencing-enabled` of a group
//!    with `spec.fencing` becomes a [`FencedNode`] whose heartbeat (its Lease's `renewTime`, or
//!    the Ready condition's) was observed by [`HeartbeatObserver::observe`] on this executor's
//!    clock.
//! 3. **Plan**: [`plan_fencing`] (deadline, modes, the storm guard per zone and for the whole
//!    cluster). A zone (or `*`, the cluster) newly held back is reported once per episode
//!    ([`FencingEvent::Suppressed`], a `FencingSuppressed` Warning Event on its group).
//! 4. **Confirm and act**: before each deletion a direct read of the node and its Lease must
//!    confirm the silence ([`HeartbeatObserver::confirm`]); otherwise nothing is done for that
//!    node ([`FencingEvent::NotConfirmed`]). `DeletePods` deletes every pod bound to the node
//!    with grace period 0 and a UID precondition; `DeleteNode` deletes the Node with a UID
//!    precondition; `Notify` only reports. Each gets a Warning Event on the Node.
//!
//! # What it keeps between steps
//! When it observed each node's current heartbeat, the zones held back, and whether it is
//! paused. A new executor starts observing afresh: no node is fenced before a whole deadline
//! of its own observation has passed.
//!
//! # Timing
//! Call [`FencingExecutor::step`] every period (5 s) and at [`FencingExecutor::next_deadline`]
//! (the earliest moment a node not silent yet would be).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::fencing::{
    Confirmation, DirectRead, FencedNode, FencingCommand, FencingConfig, HeartbeatObserver,
    heartbeat_token, is_maintenance, judge_cache, plan_fencing,
};
use crate::model::{NodeType, Timestamp, keys};
use crate::ports::{
    ClusterApi, ClusterError, EventKind, NodeHealthRead, ObjectRef, PodRef, Precondition,
};

use super::update::emit;

/// The scope the cluster-wide storm guard is reported under.
pub const CLUSTER_SCOPE: &str = "*";

/// Something the fencing executor did or saw in a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencingEvent {
    /// The cached view is not to be trusted: nothing is done until it is (once per episode).
    Paused {
        /// Why ([`crate::fencing::CacheVerdict`]'s text).
        reason: String,
    },
    /// The cached view is fresh again.
    Resumed,
    /// The storm guard started holding a zone (or `*`, the cluster) back.
    Suppressed {
        /// The zone, or [`CLUSTER_SCOPE`].
        scope: String,
        /// A group with fenced nodes there (empty for the cluster).
        group: String,
        /// What the guard saw.
        message: String,
    },
    /// The storm guard released a zone.
    Released {
        /// The zone, or [`CLUSTER_SCOPE`].
        scope: String,
    },
    /// A deletion was not confirmed by the direct read; nothing was done for the node.
    NotConfirmed {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// A command was carried out.
    Applied {
        /// The node's group.
        group: String,
        /// The command.
        command: FencingCommand,
        /// Pods deleted (for `DeletePods`).
        pods_deleted: usize,
    },
}

impl fmt::Display for FencingEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Paused { reason } => write!(f, "fencing paused: {reason}"),
            Self::Resumed => f.write_str("fencing resumed: the cached view is fresh again"),
            Self::Suppressed { message, .. } => f.write_str(message),
            Self::Released { scope } => write!(f, "fencing no longer suppressed in {scope:?}"),
            Self::NotConfirmed { node, reason } => {
                write!(
                    f,
                    "fencing of {node} not confirmed by a direct read: {reason}"
                )
            }
            Self::Applied { command, .. } => write!(f, "{command}"),
        }
    }
}

/// An action that failed in a step; the next step tries again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to {action} of node {node}")]
pub struct FencingActionError {
    /// The node.
    pub node: String,
    /// What was attempted.
    pub action: String,
    /// The port's error.
    #[source]
    pub source: ClusterError,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FencingReport {
    /// What happened, in order.
    pub events: Vec<FencingEvent>,
    /// Actions that failed (retried next step).
    pub errors: Vec<FencingActionError>,
    /// Zones (and [`CLUSTER_SCOPE`]) held back after this step.
    pub suppressed: BTreeSet<String>,
}

/// The fencing executor (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct FencingExecutor {
    config: FencingConfig,
    observer: HeartbeatObserver,
    suppressed: BTreeSet<String>,
    paused: bool,
    next_deadline: Option<Timestamp>,
}

/// A planned command with what carrying it out needs.
struct Action {
    command: FencingCommand,
    view: Option<FencedNode>,
    group: String,
    uid: String,
    pods: Vec<(PodRef, String)>,
}

impl FencingExecutor {
    /// An executor with `config` that has observed nothing.
    pub fn new(config: FencingConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &FencingConfig {
        &self.config
    }

    /// When a step next has something to do without new input: the last plan's earliest
    /// deadline of a node not silent yet.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.next_deadline
    }

    /// Runs one step at `now` (see the module docs).
    ///
    /// # Errors
    /// When the cluster cannot be read (nothing was done).
    pub async fn step<C>(
        &mut self,
        cluster: &C,
        now: Timestamp,
    ) -> Result<FencingReport, ClusterError>
    where
        C: ClusterApi + NodeHealthRead + ?Sized,
    {
        let mut report = FencingReport::default();
        let verdict = judge_cache(&cluster.cache_health(), &self.config);
        if !verdict.is_fresh() {
            if !self.paused {
                let reason = verdict.to_string();
                emit(
                    cluster,
                    ObjectRef::node_group(String::new()),
                    EventKind::Warning,
                    "FencingPaused",
                    reason.clone(),
                    now,
                )
                .await;
                report.events.push(FencingEvent::Paused { reason });
            }
            self.paused = true;
            self.next_deadline = None;
            report.suppressed = self.suppressed.clone();
            return Ok(report);
        }
        if self.paused {
            report.events.push(FencingEvent::Resumed);
        }
        self.paused = false;
        let groups = cluster.list_node_groups().await?;
        let nodes = cluster.list_nodes().await?;
        let leases = cluster.lease_renewals();
        // Only the pods of nodes that may be fenced: adapters index pods by node, so a cluster
        // without fenced groups reads no pod at all (docs/scale.md §2).
        let mut pods_on: BTreeMap<String, Vec<(PodRef, String)>> = BTreeMap::new();
        for node in &nodes {
            if node.labels.contains_key(keys::LABEL_FENCING_ENABLED) {
                let pods = cluster.list_pods_on_node(&node.name).await?;
                pods_on.insert(
                    node.name.clone(),
                    pods.iter()
                        .map(|p| (PodRef::of(p), p.uid.clone()))
                        .collect(),
                );
            }
        }

        let (actions, storms) = {
            let by_name: BTreeMap<&str, _> = groups.iter().map(|g| (g.name(), g)).collect();
            self.observer
                .retain(|name| nodes.iter().any(|n| n.name == name));
            let mut fenced = Vec::new();
            let mut uids: BTreeMap<&str, &str> = BTreeMap::new();
            for node in &nodes {
                if !node.labels.contains_key(keys::LABEL_FENCING_ENABLED) {
                    continue;
                }
                let Some(group) = node.group().and_then(|g| by_name.get(g)) else {
                    continue;
                };
                let Some(settings) = group.spec.fencing.as_ref() else {
                    continue;
                };
                let node_type = group
                    .spec
                    .node_type
                    .clone()
                    .unwrap_or(NodeType::CloudEphemeral);
                let observed = self.observer.observe(
                    &node.name,
                    heartbeat_token(node, leases.get(&node.name).copied()),
                    now,
                );
                let has_pods = pods_on
                    .get(node.name.as_str())
                    .is_some_and(|p| !p.is_empty());
                match FencedNode::from_node(node, settings, node_type, observed, has_pods) {
                    Ok(view) => {
                        uids.insert(node.name.as_str(), node.uid.as_str());
                        fenced.push(view);
                    }
                    Err(error) => {
                        tracing::warn!(node = %node.name, group = %group.name(), %error, "fencing settings unreadable; node not fenced");
                    }
                }
            }
            let plan = plan_fencing(&fenced, &self.config, now);
            self.next_deadline = plan.next_deadline;
            let mut storms: Vec<(String, String, String)> = plan
                .suppressed
                .iter()
                .map(|s| {
                    let group = fenced
                        .iter()
                        .find(|n| n.zone == s.zone)
                        .map(|n| n.group.clone())
                        .unwrap_or_default();
                    (s.zone.clone(), group, s.to_string())
                })
                .collect();
            if let Some(storm) = &plan.cluster_suppressed {
                storms.push((CLUSTER_SCOPE.to_owned(), String::new(), storm.to_string()));
            }
            let actions: Vec<Action> = plan
                .commands
                .iter()
                .map(|command| {
                    let node = match command {
                        FencingCommand::DeletePods { node }
                        | FencingCommand::DeleteNode { node }
                        | FencingCommand::Notify { node, .. } => node.as_str(),
                    };
                    let view = fenced.iter().find(|v| v.name == node).cloned();
                    Action {
                        group: view.as_ref().map(|v| v.group.clone()).unwrap_or_default(),
                        view,
                        uid: uids.get(node).map(|u| (*u).to_owned()).unwrap_or_default(),
                        pods: pods_on.get(node).cloned().unwrap_or_default(),
                        command: command.clone(),
                    }
                })
                .collect();
            (actions, storms)
        };

        let now_suppressed: BTreeSet<String> = storms.iter().map(|s| s.0.clone()).collect();
        for (scope, group, message) in storms {
            if self.suppressed.contains(&scope) {
                continue;
            }
            emit(
                cluster,
                ObjectRef::node_group(group.clone()),
                EventKind::Warning,
                "FencingSuppressed",
                format!("{message}: a partition or a control-plane problem is more likely than dead nodes; nobody there is fenced"),
                now,
            )
            .await;
            report.events.push(FencingEvent::Suppressed {
                scope,
                group,
                message,
            });
        }
        for scope in self.suppressed.difference(&now_suppressed) {
            report.events.push(FencingEvent::Released {
                scope: scope.clone(),
            });
        }
        self.suppressed = now_suppressed;
        report.suppressed = self.suppressed.clone();

        for action in actions {
            self.carry_out(cluster, action, now, &mut report).await;
        }
        Ok(report)
    }

    async fn carry_out<C>(
        &mut self,
        cluster: &C,
        action: Action,
        now: Timestamp,
        report: &mut FencingReport,
    ) where
        C: ClusterApi + NodeHealthRead + ?Sized,
    {
        let node = match &action.command {
            FencingCommand::DeletePods { node }
            | FencingCommand::DeleteNode { node }
            | FencingCommand::Notify { node, .. } => node.clone(),
        };
        let deletes = matches!(
            action.command,
            FencingCommand::DeletePods { .. } | FencingCommand::DeleteNode { .. }
        );
        if deletes {
            let Some(view) = &action.view else {
                return;
            };
            let read = match cluster.read_node_direct(&node).await {
                Ok(None) => DirectRead::NodeGone,
                Ok(Some((object, lease))) => DirectRead::Node {
                    heartbeat: heartbeat_token(&object, lease),
                    maintenance: is_maintenance(&object),
                    fencing_enabled: object.labels.contains_key(keys::LABEL_FENCING_ENABLED),
                },
                Err(error) => DirectRead::Failed(error.to_string()),
            };
            match self.observer.confirm(view, &read, &self.config, now) {
                Confirmation::Confirmed => {}
                Confirmation::Refuted(why) | Confirmation::Unconfirmed(why) => {
                    report.events.push(FencingEvent::NotConfirmed {
                        node,
                        reason: why.to_string(),
                    });
                    return;
                }
            }
        }
        let mut pods_deleted = 0;
        let reason = match &action.command {
            FencingCommand::DeletePods { .. } => {
                for (pod, uid) in &action.pods {
                    match cluster
                        .delete_pod(pod, Some(Duration::ZERO), &Precondition::Uid(uid.clone()))
                        .await
                    {
                        Ok(()) => pods_deleted += 1,
                        Err(error) if error.is_not_found() => {}
                        Err(source) => report.errors.push(FencingActionError {
                            node: node.clone(),
                            action: format!("delete pod {pod}"),
                            source,
                        }),
                    }
                }
                "FencingDeletePods"
            }
            FencingCommand::DeleteNode { .. } => {
                match cluster
                    .delete_node(&node, &Precondition::Uid(action.uid.clone()))
                    .await
                {
                    Ok(()) => {}
                    Err(error) if error.is_not_found() => {}
                    Err(source) => {
                        report.errors.push(FencingActionError {
                            node,
                            action: "delete the Node".into(),
                            source,
                        });
                        return;
                    }
                }
                "FencingDeleteNode"
            }
            FencingCommand::Notify { .. } => "FencingNotify",
        };
        emit(
            cluster,
            ObjectRef::node(node),
            EventKind::Warning,
            reason,
            action.command.to_string(),
            now,
        )
        .await;
        report.events.push(FencingEvent::Applied {
            group: action.group,
            command: action.command,
            pods_deleted,
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::Future;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::fencing::CacheHealth;
    use crate::model::{
        Fencing, FencingMode, Node, NodeGroup, ObjectMeta, Pod, PodDisruptionBudget,
    };
    use crate::ports::{
        ClusterRead, EventApi, EvictionResult, NodeApi, NodePatch, PodApi, RecordedEvent,
    };

    fn block_on<F: Future>(future: F) -> F::Output {
        crate::ports::block_on_ready(future).expect("the fake port never waits")
    }

    #[derive(Default)]
    struct State {
        nodes: Vec<Node>,
        pods: Vec<Pod>,
        /// The direct read's view of the heartbeat (the cache may lag it).
        direct_heartbeat: Option<Timestamp>,
        stale: bool,
        events: Vec<String>,
    }

    #[derive(Default)]
    struct Fake(Mutex<State>);

    fn group() -> NodeGroup {
        let mut g = NodeGroup {
            metadata: ObjectMeta {
                name: Some("edge".into()),
                ..ObjectMeta::default()
            },
            ..NodeGroup::default()
        };
        g.spec.fencing = Some(Fencing {
            mode: Some(FencingMode::Watchdog),
            watchdog: None,
        });
        g
    }

    #[async_trait]
    impl ClusterRead for Fake {
        async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
            Ok(vec![group()])
        }
        async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
            Ok(self.0.lock().unwrap().nodes.clone())
        }
        async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError> {
            Ok(self.0.lock().unwrap().pods.clone())
        }
        async fn list_pod_disruption_budgets(
            &self,
        ) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
            Ok(Vec::new())
        }
        async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
            Ok(BTreeMap::new())
        }
    }

    #[async_trait]
    impl NodeHealthRead for Fake {
        fn cache_health(&self) -> CacheHealth {
            let stale = self.0.lock().unwrap().stale;
            CacheHealth {
                lease_event_age: Some(if stale {
                    Duration::from_secs(3600)
                } else {
                    Duration::ZERO
                }),
                failing: Vec::new(),
            }
        }
        fn lease_renewals(&self) -> BTreeMap<String, Timestamp> {
            BTreeMap::new()
        }
        async fn read_node_direct(
            &self,
            name: &str,
        ) -> Result<Option<(Node, Option<Timestamp>)>, ClusterError> {
            let s = self.0.lock().unwrap();
            Ok(s.nodes.iter().find(|n| n.name == name).map(|n| {
                let mut n = n.clone();
                if s.direct_heartbeat.is_some() {
                    n.last_heartbeat = s.direct_heartbeat;
                }
                (n, None)
            }))
        }
    }

    #[async_trait]
    impl NodeApi for Fake {
        async fn patch_node(&self, name: &str, _: &NodePatch) -> Result<Node, ClusterError> {
            Err(ClusterError::not_found(name))
        }
        async fn delete_node(&self, name: &str, p: &Precondition) -> Result<(), ClusterError> {
            let mut s = self.0.lock().unwrap();
            assert!(matches!(p, Precondition::Uid(u) if u == "uid-n1"));
            s.nodes.retain(|n| n.name != name);
            Ok(())
        }
    }

    #[async_trait]
    impl PodApi for Fake {
        async fn evict_pod(&self, _: &PodRef) -> Result<EvictionResult, ClusterError> {
            Ok(EvictionResult::Gone)
        }
        async fn delete_pod(
            &self,
            pod: &PodRef,
            grace: Option<Duration>,
            p: &Precondition,
        ) -> Result<(), ClusterError> {
            assert_eq!(grace, Some(Duration::ZERO));
            assert!(matches!(p, Precondition::Uid(_)));
            self.0.lock().unwrap().pods.retain(|q| q.name != pod.name);
            Ok(())
        }
    }

    #[async_trait]
    impl EventApi for Fake {
        async fn emit_event(&self, event: &RecordedEvent) -> Result<(), ClusterError> {
            self.0.lock().unwrap().events.push(event.reason.clone());
            Ok(())
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn fake() -> Fake {
        let fake = Fake::default();
        {
            let mut s = fake.0.lock().unwrap();
            let mut n = Node {
                name: "n1".into(),
                uid: "uid-n1".into(),
                last_heartbeat: Some(t(0)),
                ..Node::default()
            };
            n.labels
                .insert(keys::LABEL_FENCING_ENABLED.into(), String::new());
            n.labels
                .insert(keys::LABEL_NODE_GROUP.into(), "edge".into());
            s.nodes.push(n);
            s.pods.push(Pod {
                namespace: "app".into(),
                name: "web".into(),
                uid: "uid-web".into(),
                node_name: Some("n1".into()),
                ..Pod::default()
            });
        }
        fake
    }

    fn applied(report: &FencingReport) -> Vec<String> {
        report
            .events
            .iter()
            .filter_map(|e| match e {
                FencingEvent::Applied { command, .. } => Some(command.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_silent_node_loses_its_pods_then_its_node_after_the_deadline() {
        let fake = fake();
        let mut exec = FencingExecutor::new(FencingConfig::default());
        let report = block_on(exec.step(&fake, t(0))).unwrap();
        assert!(applied(&report).is_empty());
        // Silent for more than 95 s (watchdog 60 s + kubelet staleness 30 s + margin 5 s).
        assert_eq!(exec.next_deadline(), Some(t(95) + Duration::from_millis(1)));
        assert!(applied(&block_on(exec.step(&fake, t(95))).unwrap()).is_empty());
        let report = block_on(exec.step(&fake, t(96))).unwrap();
        assert_eq!(
            applied(&report),
            vec!["delete pods of silent node n1 (grace 0)"]
        );
        assert!(fake.0.lock().unwrap().pods.is_empty());
        let report = block_on(exec.step(&fake, t(100))).unwrap();
        assert_eq!(applied(&report), vec!["delete silent node n1"]);
        let s = fake.0.lock().unwrap();
        assert!(s.nodes.is_empty());
        assert_eq!(s.events, vec!["FencingDeletePods", "FencingDeleteNode"]);
    }

    #[test]
    fn a_stale_cache_pauses_once_and_a_direct_read_can_refute() {
        let fake = fake();
        fake.0.lock().unwrap().stale = true;
        let mut exec = FencingExecutor::new(FencingConfig::default());
        let report = block_on(exec.step(&fake, t(0))).unwrap();
        assert!(matches!(
            report.events.as_slice(),
            [FencingEvent::Paused { .. }]
        ));
        let report = block_on(exec.step(&fake, t(200))).unwrap();
        assert!(report.events.is_empty(), "paused once per episode");
        assert_eq!(fake.0.lock().unwrap().pods.len(), 1);
        fake.0.lock().unwrap().stale = false;
        // Resumed: the silence is counted from this executor's first observation.
        block_on(exec.step(&fake, t(201))).unwrap();
        assert!(applied(&block_on(exec.step(&fake, t(296))).unwrap()).is_empty());
        // The cache says silent past the deadline; the API itself shows a newer heartbeat.
        fake.0.lock().unwrap().direct_heartbeat = Some(t(290));
        let report = block_on(exec.step(&fake, t(297))).unwrap();
        assert!(applied(&report).is_empty(), "{report:?}");
        assert!(
            report
                .events
                .iter()
                .any(|e| matches!(e, FencingEvent::NotConfirmed { node, .. } if node == "n1"))
        );
        assert_eq!(fake.0.lock().unwrap().pods.len(), 1);
    }
}
