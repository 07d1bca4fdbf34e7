//! The static instances executor: one reconcile step of the static machines of every Static
//! or CloudStatic group — which StaticInstance is bootstrapped, adopted, cleaned up or released
//! ([`crate::static_nodes`]) — carried out over the static instances port
//! ([`crate::ports::StaticInstanceApi`]). node-manager (`nodemgr-k8s`) drives it over kube and
//! SSH; the simulator has no static machines (docs/executors.md §5).
//!
//! # One step ([`StaticInstancesExecutor::step`])
//! 1. **Read** the NodeGroups, StaticInstances and SSHCredentials. A failed read ends the step
//!    with an error and changes nothing.
//! 2. **Take the ends** of the operations the port ran since the last step
//!    ([`crate::ports::StaticInstanceApi::take_ends`]) and hand them to the policy
//!    ([`StaticNodes::handle_finished`]); then read the Nodes (after the ends, so a bootstrap
//!    that just ended finds the Node it made). A failed Node read ends the step with an error;
//!    the ends taken are kept by the policy for the next step.
//! 3. **Plan** ([`StaticNodes::step`] at `now`) and **apply** the commands in order
//!    through the port. A command the port could not persist is reported
//!    ([`StaticReport::errors`]) and the others still run; the next step decides again (the
//!    policy keeps the operations it started, so nothing starts twice).
//!
//! # What the executor keeps between steps
//! The policy's memory only: operations in flight and failure backoffs. Everything else is
//! read again every step.
//!
//! # Timing
//! Call [`StaticInstancesExecutor::step`] every period (10 s), at
//! [`StaticInstancesExecutor::next_deadline`] (an operation's timeout, the end of a backoff),
//! and whenever the port reports that an operation ended.

use std::fmt;

use crate::model::Timestamp;
use crate::ports::{ClusterError, OperationEnd, StaticInstanceApi};
use crate::static_nodes::{StaticCommand, StaticConfig, StaticNodes, StaticSnapshot};

/// Why a step decided nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not read {what}; nothing was decided")]
pub struct StaticError {
    /// What could not be read.
    pub what: String,
    /// The port's error.
    #[source]
    pub source: ClusterError,
}

/// A command the port could not carry out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not apply `{command}`")]
pub struct StaticActionError {
    /// The command.
    pub command: StaticCommand,
    /// The port's error.
    #[source]
    pub source: ClusterError,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaticReport {
    /// Operations that ended since the last step, as the port reported them.
    pub ended: Vec<OperationEnd>,
    /// Commands applied, in order.
    pub applied: Vec<StaticCommand>,
    /// Commands the port could not apply (decided again next step).
    pub errors: Vec<StaticActionError>,
    /// Why groups or instances wait, for people.
    pub waiting: Vec<String>,
}

impl fmt::Display for StaticReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ended, {} applied, {} failed",
            self.ended.len(),
            self.applied.len(),
            self.errors.len()
        )
    }
}

/// The static instances executor (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct StaticInstancesExecutor {
    policy: StaticNodes,
}

impl StaticInstancesExecutor {
    /// An executor with `config`'s timeouts and backoff, nothing in flight.
    pub fn new(config: StaticConfig) -> Self {
        Self {
            policy: StaticNodes::with_config(config),
        }
    }

    /// The policy's memory (operations in flight, backoffs).
    pub fn policy(&self) -> &StaticNodes {
        &self.policy
    }

    /// When a step next has something to do without new input: an operation's timeout or
    /// the end of a backoff.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.policy.next_deadline()
    }

    /// One step at `now` (see the module docs).
    ///
    /// # Errors
    /// When the groups, instances, credentials or nodes cannot be read (nothing was applied).
    pub async fn step<P: StaticInstanceApi + ?Sized>(
        &mut self,
        port: &P,
        now: Timestamp,
    ) -> Result<StaticReport, StaticError> {
        let read = |what: &str| {
            let what = what.to_owned();
            move |source: ClusterError| StaticError { what, source }
        };
        let groups = port
            .list_node_groups()
            .await
            .map_err(read("the node groups"))?;
        let mut instances = port
            .list_static_instances()
            .await
            .map_err(read("the StaticInstances"))?;
        let credentials = port
            .list_ssh_credentials()
            .await
            .map_err(read("the SSHCredentials"))?;
        let mut report = StaticReport {
            ended: port.take_ends(&mut instances).await,
            ..StaticReport::default()
        };
        for end in &report.ended {
            self.policy
                .handle_finished(&end.instance, end.operation, end.outcome.clone());
        }
        let nodes = port.list_nodes().await.map_err(read("the nodes"))?;
        let snapshot = StaticSnapshot {
            groups: &groups,
            instances: &instances,
            credentials: &credentials,
            nodes: &nodes,
        };
        let plan = self.policy.step(&snapshot, now);
        report.waiting = plan.waiting;
        for command in plan.commands {
            match port.apply(&command, &snapshot, now).await {
                Ok(()) => report.applied.push(command),
                Err(source) => report.errors.push(StaticActionError { command, source }),
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::model::{
        Node, NodeGroup, NodeGroupSpec, NodeType, ObjectMeta, ObjectReference, SshCredentials,
        SshCredentialsSpec, StaticInstance, StaticInstanceCurrentStatus, StaticInstancePhase,
        StaticInstanceSpec, StaticInstances, keys,
    };
    use crate::static_nodes::{Cause, Failure, Operation, machine_ref_for, phase_of};

    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    /// What the fake holds: the objects, the operations it was asked to start, and the
    /// failures to inject.
    #[derive(Default)]
    struct State {
        groups: Vec<NodeGroup>,
        instances: BTreeMap<String, StaticInstance>,
        credentials: Vec<SshCredentials>,
        nodes: Vec<Node>,
        /// Started and not ended: instance → (operation, group).
        running: BTreeMap<String, (Operation, String)>,
        ends: Vec<OperationEnd>,
        started: Vec<(String, Operation)>,
        fail_list_nodes: bool,
        fail_apply: bool,
    }

    /// An in-memory port: commands change the instances as node-manager's adapter persists
    /// them; operations end when the test says so.
    #[derive(Default)]
    struct Fake(Mutex<State>);

    impl Fake {
        fn state(&self) -> std::sync::MutexGuard<'_, State> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// Ends the running operation on `instance`; a successful bootstrap made a Node.
        fn end(&self, instance: &str, outcome: Result<(), Failure>) {
            let mut s = self.state();
            let Some((operation, group)) = s.running.remove(instance) else {
                panic!("no operation runs on {instance}");
            };
            if outcome.is_ok() && operation == Operation::Bootstrap {
                let address = s.instances[instance].spec.address.clone();
                let mut node = Node {
                    name: format!("node-{instance}"),
                    ready: true,
                    addresses: address.into_iter().collect(),
                    ..Node::default()
                };
                node.labels
                    .insert(keys::LABEL_NODE_GROUP.into(), group.clone());
                node.annotations
                    .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "sum".into());
                s.nodes.push(node);
            }
            s.ends.push(OperationEnd {
                instance: instance.into(),
                group,
                operation,
                outcome,
            });
        }

        fn phase(&self, instance: &str) -> StaticInstancePhase {
            phase_of(&self.state().instances[instance])
        }
    }

    fn set_phase(i: &mut StaticInstance, phase: StaticInstancePhase) {
        i.status.get_or_insert_default().current_status = Some(StaticInstanceCurrentStatus {
            phase: Some(phase),
            last_update_time: None,
        });
    }

    #[async_trait]
    impl StaticInstanceApi for Fake {
        async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
            Ok(self.state().groups.clone())
        }
        async fn list_static_instances(&self) -> Result<Vec<StaticInstance>, ClusterError> {
            Ok(self.state().instances.values().cloned().collect())
        }
        async fn list_ssh_credentials(&self) -> Result<Vec<SshCredentials>, ClusterError> {
            Ok(self.state().credentials.clone())
        }
        async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
            let s = self.state();
            if s.fail_list_nodes {
                return Err(ClusterError::unavailable("nodes"));
            }
            Ok(s.nodes.clone())
        }
        async fn take_ends(&self, _: &mut [StaticInstance]) -> Vec<OperationEnd> {
            std::mem::take(&mut self.state().ends)
        }
        async fn apply(
            &self,
            command: &StaticCommand,
            _: &StaticSnapshot<'_>,
            _: Timestamp,
        ) -> Result<(), ClusterError> {
            let mut s = self.state();
            if s.fail_apply {
                return Err(ClusterError::unavailable("write"));
            }
            let name = command.instance().to_owned();
            let Some(i) = s.instances.get_mut(&name) else {
                return Err(ClusterError::not_found(name));
            };
            let mut start = None;
            match command {
                StaticCommand::AddFinalizer { .. } => {
                    i.metadata
                        .finalizers
                        .push(keys::FINALIZER_STATIC_INSTANCE.into());
                }
                StaticCommand::RemoveFinalizer { .. } => i.metadata.finalizers.clear(),
                StaticCommand::Bootstrap { group, .. } => {
                    set_phase(i, StaticInstancePhase::Bootstrapping);
                    i.status.get_or_insert_default().machine_ref = Some(machine_ref_for(group));
                    start = Some((Operation::Bootstrap, group.clone()));
                }
                StaticCommand::Cleanup { group, .. } => {
                    set_phase(i, StaticInstancePhase::Cleaning);
                    start = Some((Operation::Cleanup, group.clone()));
                }
                StaticCommand::MarkRunning { node, .. } | StaticCommand::Adopt { node, .. } => {
                    set_phase(i, StaticInstancePhase::Running);
                    i.status.get_or_insert_default().node_ref = Some(ObjectReference {
                        name: node.clone(),
                        ..ObjectReference::default()
                    });
                }
                StaticCommand::Release { .. }
                | StaticCommand::ReturnToPending { .. }
                | StaticCommand::MarkPending { .. } => {
                    set_phase(i, StaticInstancePhase::Pending);
                    let status = i.status.get_or_insert_default();
                    status.machine_ref = None;
                    status.node_ref = None;
                }
                StaticCommand::MarkError { .. } => {
                    set_phase(i, StaticInstancePhase::Error);
                    s.running.remove(&name);
                }
            }
            if let Some((operation, group)) = start {
                s.started.push((name.clone(), operation));
                s.running.insert(name, (operation, group));
            }
            Ok(())
        }
    }

    fn fake(count: i64) -> Fake {
        let state = State {
            groups: vec![NodeGroup {
                metadata: ObjectMeta {
                    name: Some("static".into()),
                    ..ObjectMeta::default()
                },
                spec: NodeGroupSpec {
                    node_type: Some(NodeType::Static),
                    static_instances: Some(StaticInstances {
                        count: Some(count),
                        label_selector: None,
                    }),
                    ..NodeGroupSpec::default()
                },
                ..NodeGroup::default()
            }],
            instances: [(
                "si-1".to_owned(),
                StaticInstance {
                    metadata: ObjectMeta {
                        name: Some("si-1".into()),
                        ..ObjectMeta::default()
                    },
                    spec: StaticInstanceSpec {
                        address: Some("10.0.0.1".into()),
                        credentials_ref: Some(ObjectReference {
                            kind: Some("SSHCredentials".into()),
                            name: "ssh".into(),
                            ..ObjectReference::default()
                        }),
                    },
                    ..StaticInstance::default()
                },
            )]
            .into(),
            credentials: vec![SshCredentials {
                metadata: ObjectMeta {
                    name: Some("ssh".into()),
                    ..ObjectMeta::default()
                },
                spec: SshCredentialsSpec {
                    user: Some("ubuntu".into()),
                    sudo_password: Some("secret".into()),
                    ..SshCredentialsSpec::default()
                },
                ..SshCredentials::default()
            }],
            ..State::default()
        };
        Fake(Mutex::new(state))
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(1_000_000 + secs)
    }

    fn step(executor: &mut StaticInstancesExecutor, port: &Fake, now: Timestamp) -> StaticReport {
        match block_on(executor.step(port, now)) {
            Ok(report) => report,
            Err(error) => panic!("step failed: {error}"),
        }
    }

    #[test]
    fn a_bootstrap_starts_ends_through_the_port_and_the_instance_runs() {
        let port = fake(1);
        let mut executor = StaticInstancesExecutor::new(StaticConfig::default());
        assert_eq!(executor.next_deadline(), None);
        step(&mut executor, &port, t(0));
        // The bootstrap is started exactly once.
        step(&mut executor, &port, t(1));
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Bootstrapping);
        assert_eq!(
            port.state().started,
            [("si-1".to_owned(), Operation::Bootstrap)]
        );
        // While it runs, the next deadline is its timeout and nothing starts again.
        let deadline = executor.next_deadline();
        assert!(deadline.is_some_and(|d| d > t(1)), "{deadline:?}");
        step(&mut executor, &port, t(5));
        assert_eq!(port.state().started.len(), 1);
        // It ends with the Node made: the instance is Running.
        port.end("si-1", Ok(()));
        let report = step(&mut executor, &port, t(6));
        assert_eq!(report.ended.len(), 1);
        assert!(
            report.applied.iter().any(
                |c| matches!(c, StaticCommand::MarkRunning { node, .. } if node == "node-si-1")
            ),
            "{:?}",
            report.applied
        );
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Running);
        assert_eq!(executor.next_deadline(), None);
    }

    #[test]
    fn a_bootstrap_that_never_ends_times_out_into_error() {
        let port = fake(1);
        let config = StaticConfig::default();
        let mut executor = StaticInstancesExecutor::new(config);
        // The finalizer and the bootstrap come in the same plan.
        let report = step(&mut executor, &port, t(0));
        assert!(matches!(
            report.applied.as_slice(),
            [
                StaticCommand::AddFinalizer { .. },
                StaticCommand::Bootstrap { .. }
            ]
        ));
        step(&mut executor, &port, t(1));
        let Some(deadline) = executor.next_deadline() else {
            panic!("a running bootstrap has a deadline");
        };
        assert_eq!(deadline, t(0) + config.bootstrap_timeout);
        let report = step(&mut executor, &port, deadline);
        assert!(
            report
                .applied
                .iter()
                .any(|c| matches!(c, StaticCommand::MarkError { .. })),
            "{:?}",
            report.applied
        );
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Error);
    }

    #[test]
    fn a_refused_connection_returns_the_instance_to_pending_and_backs_off() {
        let port = fake(1);
        let mut executor = StaticInstancesExecutor::new(StaticConfig::default());
        step(&mut executor, &port, t(0));
        step(&mut executor, &port, t(1));
        port.end(
            "si-1",
            Err(Failure::new(Cause::Unreachable, "connection refused")),
        );
        let report = step(&mut executor, &port, t(2));
        assert!(
            report
                .applied
                .iter()
                .any(|c| matches!(c, StaticCommand::ReturnToPending { .. })),
            "{:?}",
            report.applied
        );
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Pending);
        // Not taken again before the backoff ends, then bootstrapped again.
        let Some(retry) = executor.next_deadline() else {
            panic!("a backoff has a deadline");
        };
        assert!(retry > t(2));
        step(&mut executor, &port, t(3));
        assert_eq!(port.state().started.len(), 1);
        step(&mut executor, &port, retry);
        assert_eq!(port.state().started.len(), 2);
    }

    #[test]
    fn a_failed_read_applies_nothing_and_keeps_the_ends_for_the_next_step() {
        let port = fake(1);
        let mut executor = StaticInstancesExecutor::new(StaticConfig::default());
        step(&mut executor, &port, t(0));
        step(&mut executor, &port, t(1));
        port.end("si-1", Ok(()));
        port.state().fail_list_nodes = true;
        let error = block_on(executor.step(&port, t(2)));
        assert!(
            matches!(&error, Err(StaticError { what, .. }) if what == "the nodes"),
            "{error:?}"
        );
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Bootstrapping);
        // The end was handed to the policy: the next step completes the bootstrap.
        port.state().fail_list_nodes = false;
        step(&mut executor, &port, t(3));
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Running);
    }

    #[test]
    fn a_failed_write_is_reported_and_decided_again() {
        let port = fake(1);
        let mut executor = StaticInstancesExecutor::new(StaticConfig::default());
        port.state().fail_apply = true;
        let report = step(&mut executor, &port, t(0));
        assert!(report.applied.is_empty());
        assert!(!report.errors.is_empty());
        assert!(
            port.state().instances["si-1"]
                .metadata
                .finalizers
                .is_empty()
        );
        port.state().fail_apply = false;
        step(&mut executor, &port, t(1));
        assert_eq!(
            port.state().instances["si-1"].metadata.finalizers,
            [keys::FINALIZER_STATIC_INSTANCE]
        );
    }

    #[test]
    fn a_group_scaled_down_cleans_its_instance_up_and_releases_it() {
        let port = fake(1);
        let mut executor = StaticInstancesExecutor::new(StaticConfig::default());
        step(&mut executor, &port, t(0));
        step(&mut executor, &port, t(1));
        port.end("si-1", Ok(()));
        step(&mut executor, &port, t(2));
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Running);
        if let Some(g) = port.state().groups.first_mut()
            && let Some(s) = g.spec.static_instances.as_mut()
        {
            s.count = Some(0);
        }
        step(&mut executor, &port, t(3));
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Cleaning);
        port.end("si-1", Ok(()));
        step(&mut executor, &port, t(4));
        assert_eq!(port.phase("si-1"), StaticInstancePhase::Pending);
        assert_eq!(
            port.state().started,
            [
                ("si-1".to_owned(), Operation::Bootstrap),
                ("si-1".to_owned(), Operation::Cleanup)
            ]
        );
    }
}
