//! Tests of the scaling executor over in-memory ports: one fake is the cluster, the machine
//! records and the cloud at once; a helper plays the kubelets (a machine joins as a Ready
//! node) and the update executor (a `draining` node becomes `drained`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::model::{Chaos, ChaosMode, IntOrString, PodDisruptionBudget, PodPhase, Quantity};
use crate::ports::{ClusterRead, EventApi, EvictionResult, NodeApi, PodApi, PodRef, RecordedEvent};
use crate::scaling::bounds::tests::group;
use crate::scaling::{node_shape, template_node};

fn block_on<F: Future>(future: F) -> F::Output {
    crate::ports::block_on_ready(future).expect("the fake port never waits")
}

#[derive(Default)]
struct State {
    groups: Vec<NodeGroup>,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    events: Vec<RecordedEvent>,
    instances: BTreeMap<String, Instance>,
    holders: BTreeMap<String, StandbyHolder>,
    machines: BTreeMap<String, CloudInstance>,
    next_id: u64,
    cloud_down: bool,
    cloud_calls: usize,
}

#[derive(Default)]
struct Fake(Mutex<State>);

impl Fake {
    fn s(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
}

#[async_trait]
impl ClusterRead for Fake {
    async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
        Ok(self.s().groups.clone())
    }
    async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
        Ok(self.s().nodes.clone())
    }
    async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        Ok(self.s().pods.clone())
    }
    async fn list_pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        Ok(Vec::new())
    }
    async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        Ok(BTreeMap::new())
    }
}

#[async_trait]
impl NodeApi for Fake {
    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<Node, ClusterError> {
        let mut s = self.s();
        let node = s
            .nodes
            .iter_mut()
            .find(|n| n.name == name)
            .ok_or_else(|| ClusterError::not_found(name))?;
        patch.apply_to(node);
        Ok(node.clone())
    }
    async fn delete_node(&self, name: &str, _: &Precondition) -> Result<(), ClusterError> {
        self.s().nodes.retain(|n| n.name != name);
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
        _: &PodRef,
        _: Option<Duration>,
        _: &Precondition,
    ) -> Result<(), ClusterError> {
        Ok(())
    }
}

#[async_trait]
impl EventApi for Fake {
    async fn emit_event(&self, event: &RecordedEvent) -> Result<(), ClusterError> {
        self.s().events.push(event.clone());
        Ok(())
    }
}

#[async_trait]
impl MachineApi for Fake {
    async fn list_instances(&self) -> Result<Vec<Instance>, ClusterError> {
        Ok(self.s().instances.values().cloned().collect())
    }
    async fn create_instance(&self, i: &NewInstance, now: Timestamp) -> Result<(), ClusterError> {
        let mut record = Instance::default();
        record.metadata.name = Some(i.machine.clone());
        record.metadata.labels = [
            (keys::LABEL_NODE_GROUP.to_owned(), i.group.clone()),
            (keys::LABEL_TOPOLOGY_ZONE.to_owned(), i.zone.clone()),
        ]
        .into();
        record.metadata.annotations = [(
            keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.to_owned(),
            i.class_checksum.clone(),
        )]
        .into();
        record.metadata.creation_timestamp = Some(now.to_rfc3339());
        self.s()
            .instances
            .entry(i.machine.clone())
            .or_insert(record);
        Ok(())
    }
    async fn set_instance_phase(
        &self,
        machine: &str,
        phase: MachinePhase,
        _: Option<&str>,
        provider_id: Option<&str>,
        _: Timestamp,
    ) -> Result<(), ClusterError> {
        let mut s = self.s();
        let i = s
            .instances
            .get_mut(machine)
            .ok_or_else(|| ClusterError::not_found(machine))?;
        i.status.current_status = Some(crate::model::InstanceCurrentStatus {
            phase: Some(phase.as_str().into()),
            last_update_time: None,
        });
        if let Some(id) = provider_id {
            i.metadata
                .annotations
                .insert(crate::machines::ANNOTATION_PROVIDER_ID.into(), id.into());
        }
        Ok(())
    }
    async fn forget_instance(&self, machine: &str) -> Result<(), ClusterError> {
        self.s().instances.remove(machine);
        Ok(())
    }
    async fn record_machine_failure(
        &self,
        _: &str,
        _: &MachineFailure,
        _: usize,
    ) -> Result<(), ClusterError> {
        Ok(())
    }
    async fn list_standby_holders(&self) -> Result<Vec<AppliedHolder>, ClusterError> {
        Ok(self
            .s()
            .holders
            .values()
            .map(StandbyHolder::applied)
            .collect())
    }
    async fn apply_standby_holder(&self, holder: &StandbyHolder) -> Result<(), ClusterError> {
        self.s()
            .holders
            .insert(holder.group.clone(), holder.clone());
        Ok(())
    }
    async fn delete_standby_holder(&self, group: &str) -> Result<(), ClusterError> {
        self.s().holders.remove(group);
        Ok(())
    }
    async fn set_standby_status(&self, group: &str, standby: u32) -> Result<(), ClusterError> {
        let mut s = self.s();
        if let Some(g) = s.groups.iter_mut().find(|g| g.name() == group) {
            g.status.get_or_insert_with(Default::default).standby = Some(i64::from(standby));
        }
        Ok(())
    }
}

#[async_trait]
impl CloudApi for Fake {
    async fn create_instance(&self, r: &CreateInstance) -> Result<CloudInstance, CloudError> {
        let mut s = self.s();
        s.cloud_calls += 1;
        if let Some(m) = s.machines.values().find(|m| m.machine == r.machine) {
            return Ok(m.clone());
        }
        s.next_id += 1;
        let id = format!("i-{}", s.next_id);
        let m = CloudInstance {
            provider_id: format!("fake:///{}/{id}", r.zone),
            instance_id: id.clone(),
            group: r.group.clone(),
            zone: r.zone.clone(),
            machine: r.machine.clone(),
            state: crate::ports::InstanceState::Running,
            launched: Some(Timestamp::from_secs(0)),
        };
        s.machines.insert(m.provider_id.clone(), m.clone());
        Ok(m)
    }
    async fn delete_instance(&self, provider_id: &str) -> Result<(), CloudError> {
        self.s().machines.remove(provider_id);
        Ok(())
    }
    async fn list_group_instances(&self, group: &str) -> Result<Vec<CloudInstance>, CloudError> {
        let s = self.s();
        if s.cloud_down {
            return Err(CloudError::unavailable("down"));
        }
        Ok(s.machines
            .values()
            .filter(|m| m.group == group)
            .cloned()
            .collect())
    }
    async fn get_instance(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudError> {
        Ok(self.s().machines.get(provider_id).cloned())
    }
}

fn small() -> InstanceClass {
    InstanceClass::new("InstanceClass", "small", 4, 16)
}

fn settings() -> ScalingSettings {
    ScalingSettings {
        classes: vec![MachineClass {
            scaling: small(),
            cloud: CloudClass::default(),
        }],
        zones: vec!["a".into()],
        machines: MachineConfig {
            retry_initial: Duration::from_secs(1),
            ..MachineConfig::default()
        },
        ..ScalingSettings::default()
    }
}

fn one_zone(mut g: NodeGroup) -> NodeGroup {
    if let Some(ci) = g.spec.cloud_instances.as_mut() {
        ci.zones = Some(vec!["a".into()]);
    }
    g
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_secs(secs)
}

/// Kubelets: every machine without a node joins as a Ready node of its group's class; and
/// the update executor: every `draining` node is `drained`.
fn world_moves(fake: &Fake, now: Timestamp) {
    let mut s = fake.s();
    let machines: Vec<CloudInstance> = s.machines.values().cloned().collect();
    for m in machines {
        if s.nodes.iter().any(|n| n.name == m.machine) {
            continue;
        }
        let Some(g) = s.groups.iter().find(|g| g.name() == m.group).cloned() else {
            continue;
        };
        let mut node = template_node(&g, &small(), &node_shape(&g, &small()), &m.zone, &m.machine);
        node.ready = true;
        node.provider_id = Some(m.provider_id.clone());
        node.created = Some(now);
        node.last_heartbeat = Some(now);
        s.nodes.push(node);
    }
    for n in &mut s.nodes {
        if let Some(source) = n.annotations.remove(keys::ANNOTATION_DRAINING) {
            n.annotations
                .insert(keys::ANNOTATION_DRAINED.into(), source);
        }
    }
}

fn step(exec: &mut ScalingExecutor, fake: &Fake, now: Timestamp) -> ScalingReport {
    let report = block_on(exec.step(fake, fake, fake, now)).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    report
}

fn ordered(report: &ScalingReport) -> Vec<(u32, String)> {
    report
        .events
        .iter()
        .filter_map(|e| match e {
            ScalingEvent::Ordered { command, machines } => match command {
                ScalingCommand::CreateNodes { why, .. } => {
                    Some((u32::try_from(machines.len()).unwrap(), why.to_string()))
                }
                ScalingCommand::RemoveNode { .. } => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn later_phases_count_earlier_orders_and_instances_come_before_machines() {
    let fake = Fake::default();
    fake.s().groups.push(one_zone(group("g", 2, 4, None)));
    // A pending pod the two minimum nodes can host: no extra node for it.
    let mut pod = crate::model::Pod {
        namespace: "app".into(),
        name: "web".into(),
        phase: PodPhase::Pending,
        ..Pod::default()
    };
    pod.requests.insert("cpu".into(), Quantity::units(1));
    fake.s().pods.push(pod);
    let mut exec = ScalingExecutor::new(settings());
    let report = step(&mut exec, &fake, t(0));
    assert_eq!(ordered(&report).len(), 1, "{:?}", report.events);
    assert_eq!(ordered(&report)[0].0, 2);
    {
        let s = fake.s();
        assert_eq!(s.instances.len(), 2);
        assert_eq!(s.machines.len(), 2);
        for i in s.instances.values() {
            assert_eq!(
                i.metadata.annotations[keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM],
                small().checksum()
            );
        }
    }
    assert_eq!(exec.desired()[&("g".to_owned(), "a".to_owned())], 2);
    // The next step sees the machines as upcoming (Provisioning) and orders nothing more.
    let report = step(&mut exec, &fake, t(10));
    assert!(ordered(&report).is_empty(), "{:?}", report.events);
    world_moves(&fake, t(20));
    let report = step(&mut exec, &fake, t(30));
    assert!(ordered(&report).is_empty(), "{:?}", report.events);
    let s = fake.s();
    assert!(s.instances.values().all(|i| {
        i.status
            .current_status
            .as_ref()
            .and_then(|c| c.phase.as_deref())
            == Some("Running")
    }));
}

#[test]
fn a_removal_is_drained_then_its_machine_then_its_node_go() {
    let fake = Fake::default();
    fake.s().groups.push(one_zone(group("g", 3, 3, None)));
    let mut exec = ScalingExecutor::new(settings());
    step(&mut exec, &fake, t(0));
    world_moves(&fake, t(1));
    step(&mut exec, &fake, t(2));
    assert_eq!(fake.s().nodes.len(), 3);
    // Down to a fixed 2: one node is marked for removal, not deleted yet.
    fake.s().groups[0]
        .spec
        .cloud_instances
        .as_mut()
        .unwrap()
        .max_per_zone = Some(2);
    fake.s().groups[0]
        .spec
        .cloud_instances
        .as_mut()
        .unwrap()
        .min_per_zone = Some(2);
    let report = step(&mut exec, &fake, t(3));
    let removed: Vec<String> = report
        .events
        .iter()
        .filter_map(|e| match e {
            ScalingEvent::RemovalStarted {
                command: ScalingCommand::RemoveNode { node, .. },
            } => Some(node.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(removed.len(), 1, "{:?}", report.events);
    let victim = removed[0].clone();
    {
        let s = fake.s();
        let n = s.nodes.iter().find(|n| n.name == victim).unwrap();
        assert!(n.labels.contains_key(keys::LABEL_TERMINATION_IN_PROGRESS));
        assert_eq!(
            n.annotations
                .get(keys::ANNOTATION_DRAINING)
                .map(String::as_str),
            Some(DRAIN_SOURCE_SCALE_DOWN)
        );
        assert_eq!(s.machines.len(), 3, "no machine deleted before the drain");
    }
    // Not drained yet: the next step removes nothing else and deletes nothing.
    let report = step(&mut exec, &fake, t(4));
    assert!(report.events.iter().all(|e| !matches!(
        e,
        ScalingEvent::RemovalStarted { .. } | ScalingEvent::MachineDeleted { .. }
    )));
    // Drained: the machine goes, then the node and the Instance.
    world_moves(&fake, t(5));
    let report = step(&mut exec, &fake, t(6));
    assert!(report.events.iter().any(|e| matches!(
        e,
        ScalingEvent::MachineDeleted { machine, reason: DeleteReason::ScaledDown, .. } if *machine == victim
    )));
    step(&mut exec, &fake, t(7));
    let s = fake.s();
    assert_eq!(s.machines.len(), 2);
    assert!(s.nodes.iter().all(|n| n.name != victim));
    assert!(!s.instances.contains_key(&victim));
    assert_eq!(exec.desired()[&("g".to_owned(), "a".to_owned())], 2);
}

#[test]
fn the_chaos_monkey_marks_one_victim_at_a_time_with_an_event() {
    let fake = Fake::default();
    let mut g = one_zone(group("g", 2, 2, None));
    g.spec.chaos = Some(Chaos {
        mode: Some(ChaosMode::DrainAndDelete),
        period: Some("1m".into()),
    });
    fake.s().groups.push(g);
    let mut exec = ScalingExecutor::new(settings());
    step(&mut exec, &fake, t(0));
    world_moves(&fake, t(1));
    step(&mut exec, &fake, t(2));
    let victims = |fake: &Fake| -> Vec<String> {
        fake.s()
            .nodes
            .iter()
            .filter(|n| n.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM))
            .map(|n| n.name.clone())
            .collect()
    };
    assert!(victims(&fake).is_empty(), "no victim before a period");
    let report = step(&mut exec, &fake, t(61));
    let v = victims(&fake);
    assert_eq!(v.len(), 1, "{:?}", report.events);
    {
        let s = fake.s();
        let n = s.nodes.iter().find(|n| n.name == v[0]).unwrap();
        assert!(n.labels.contains_key(keys::LABEL_TERMINATION_IN_PROGRESS));
        assert!(n.has_annotation(keys::ANNOTATION_DRAINING));
        assert!(s.events.iter().any(|e| e.reason == "ChaosMonkeyVictim"
            && e.regarding.name == v[0]
            && e.kind == EventKind::Warning));
    }
    // Another period later the victim is still there (not drained): no second one.
    step(&mut exec, &fake, t(122));
    assert_eq!(victims(&fake), v);
}

#[test]
fn standby_sizes_the_holder_and_orders_for_its_missing_replicas() {
    let fake = Fake::default();
    let mut g = one_zone(group("g", 0, 3, None));
    g.spec.cloud_instances.as_mut().unwrap().standby = Some(IntOrString::Int(1));
    fake.s().groups.push(g);
    let mut exec = ScalingExecutor::new(settings());
    let report = step(&mut exec, &fake, t(0));
    {
        let s = fake.s();
        let holder = &s.holders["g"];
        assert_eq!(holder.replicas, 1);
        assert_eq!(holder.template.requests["cpu"], Quantity::units(2));
        assert_eq!(
            s.groups[0].status.as_ref().and_then(|st| st.standby),
            Some(0)
        );
    }
    // The Deployment has no pod yet: a node is ordered for its replica at once.
    assert_eq!(
        ordered(&report),
        vec![(1, "1 pending pod(s) need room".to_owned())]
    );
    // The ReplicaSet controller makes the pod; the machine ordered covers it.
    let mut pod = fake.s().holders["g"].template.clone();
    pod.name = "standby-holder-g-x1".into();
    fake.s().pods.push(pod.clone());
    let report = step(&mut exec, &fake, t(10));
    assert!(ordered(&report).is_empty(), "{:?}", report.events);
    assert!(
        report
            .events
            .iter()
            .all(|e| !matches!(e, ScalingEvent::StandbyHolder { .. })),
        "an unchanged holder is not written again"
    );
    // Bound: status.standby says so.
    world_moves(&fake, t(11));
    let node = fake.s().nodes[0].name.clone();
    fake.s().pods[0].node_name = Some(node);
    step(&mut exec, &fake, t(12));
    assert_eq!(
        fake.s().groups[0].status.as_ref().and_then(|st| st.standby),
        Some(1)
    );
    // Standby off: the Deployment goes.
    fake.s().groups[0]
        .spec
        .cloud_instances
        .as_mut()
        .unwrap()
        .standby = None;
    step(&mut exec, &fake, t(13));
    assert!(fake.s().holders.is_empty());
}

#[test]
fn a_failed_cloud_listing_decides_nothing() {
    let fake = Fake::default();
    fake.s().groups.push(one_zone(group("g", 2, 2, None)));
    fake.s().cloud_down = true;
    let mut exec = ScalingExecutor::new(settings());
    let error = block_on(exec.step(&fake, &fake, &fake, t(0))).unwrap_err();
    assert!(error.to_string().contains("machines of g"), "{error}");
    let s = fake.s();
    assert!(s.instances.is_empty());
    assert_eq!(s.cloud_calls, 0);
}
