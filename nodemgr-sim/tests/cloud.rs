//! The machine controller ([`nodemgr_core::machines`]) against the simulator's in-memory
//! cloud ([`nodemgr_sim::cloud::SimCloud`]) on a virtual clock: a scaler asks for random
//! per-zone targets, the cloud refuses calls, loses answers of calls it applied and lists new
//! machines 12 s late (so the controller asks again for machines that exist), machines
//! start slowly, some never register a Node, some vanish; and the Kubernetes side fails too:
//! reads of Instances and Nodes fail (the pass decides nothing), writes of Instances and Node
//! deletions fail, the controller's view of Instances and Nodes lags up to 20 s behind (its
//! watch), and the controller restarts (its in-memory state is dropped and rebuilt) with the new
//! replica's clock up to two minutes off. Properties:
//! - one machine name never has two machines, whatever the failures and retries;
//! - no Node is deleted while its machine exists;
//! - once the cloud recovers and the targets hold, every zone converges to its target: as
//!   many machines, Running Instances and Ready Nodes, and nothing else, every Node carrying
//!   the provider ID of a machine that exists (never a stale Node of an earlier machine of its
//!   name, which a later machine's kubelet took over).
//!
//! `PROPTEST_CASES=10000 cargo test --release -p nodemgr-sim --test cloud` runs 10,000
//! schedules (the default is 48, to keep the suite fast).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nodemgr_core::machines::{
    ANNOTATION_PROVIDER_ID, MachineCommand, MachineConfig, MachinePhase, MachineRequests,
    MachineSnapshot, Machines, provider_ids_to_look_up,
};
use nodemgr_core::model::{Instance, InstanceCurrentStatus, Node, ObjectMeta, Timestamp, keys};
use nodemgr_core::ports::cloud::{CloudApi, CreateInstance, InstanceClass};
use nodemgr_sim::SimRng;
use nodemgr_sim::block_on;
use nodemgr_sim::cloud::{CloudFaults, SimCloud};
use proptest::prelude::*;

const ZONES: [&str; 2] = ["a", "b"];
const STEP: Duration = Duration::from_secs(5);

/// What the Kubernetes API and the controller's process do wrong while the weather is stormy.
#[derive(Debug, Clone, Copy, Default)]
struct ApiFaults {
    /// Chance a pass cannot read Instances and Nodes (it decides nothing).
    read_error: f64,
    /// Chance one write (an Instance created, updated or removed, a Node deleted) fails.
    write_error: f64,
    /// How many steps (of 5 s) the controller's view lags behind.
    lag_steps: usize,
    /// Chance the controller restarts before a pass.
    restart: f64,
}

struct World {
    now: Timestamp,
    cloud: SimCloud,
    machines: Machines,
    instances: BTreeMap<String, Instance>,
    nodes: BTreeMap<String, Node>,
    /// Machines that will never register a Node (broken images).
    broken: BTreeSet<String>,
    rng: SimRng,
    failures: usize,
    api: ApiFaults,
    /// The controller's view of Instances and Nodes at past steps, newest last.
    views: std::collections::VecDeque<(BTreeMap<String, Instance>, BTreeMap<String, Node>)>,
    /// The controller's clock offset from the world's, in milliseconds.
    skew_ms: i64,
}

impl World {
    fn new(seed: u64) -> Self {
        Self {
            now: Timestamp::from_secs(1_000),
            cloud: SimCloud::new(
                Timestamp::from_secs(1_000),
                Duration::from_secs(40),
                Duration::from_secs(15),
                seed,
            )
            .with_list_lag(Duration::from_secs(12)),
            machines: Machines::with_config(Self::config()),
            instances: BTreeMap::new(),
            nodes: BTreeMap::new(),
            broken: BTreeSet::new(),
            rng: SimRng::new(seed ^ 0xdead_beef),
            failures: 0,
            api: ApiFaults::default(),
            views: std::collections::VecDeque::new(),
            skew_ms: 0,
        }
    }

    fn config() -> MachineConfig {
        MachineConfig {
            creation_timeout: Duration::from_secs(300),
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(60),
            orphan_grace: Duration::from_secs(60),
            gc_grace: Duration::from_secs(60),
            failures_kept: 5,
        }
    }

    /// The controller's clock.
    fn controller_now(&self) -> Timestamp {
        Timestamp(self.now.0.saturating_add(self.skew_ms))
    }

    /// Whether an injected Kubernetes write failure hits this write.
    fn write_fails(&mut self, chaos: bool) -> bool {
        chaos && self.rng.chance(self.api.write_error)
    }

    fn zone_of(i: &Instance) -> &str {
        i.metadata
            .labels
            .get(keys::LABEL_TOPOLOGY_ZONE)
            .map_or("", String::as_str)
    }

    fn phase(i: &Instance) -> MachinePhase {
        MachinePhase::parse(
            i.status
                .current_status
                .as_ref()
                .and_then(|c| c.phase.as_deref()),
        )
    }

    /// The scaler: creates what a zone lacks, removes the newest excess (from the controller's
    /// view of the Instances).
    fn requests(
        instances: &BTreeMap<String, Instance>,
        targets: &BTreeMap<&str, u32>,
    ) -> MachineRequests {
        let mut requests = MachineRequests::default();
        for zone in ZONES {
            let target = targets.get(zone).copied().unwrap_or(0);
            let mut live: Vec<&Instance> = instances
                .values()
                .filter(|i| Self::zone_of(i) == zone && Self::phase(i) != MachinePhase::Terminating)
                .collect();
            let have = u32::try_from(live.len()).unwrap();
            if have < target {
                requests
                    .create
                    .push(("worker".into(), zone.into(), target - have));
            } else if have > target {
                live.sort_by_key(|i| std::cmp::Reverse(i.metadata.creation_timestamp.clone()));
                for i in live.iter().take((have - target) as usize) {
                    requests.remove.insert(i.metadata.name.clone().unwrap());
                }
            }
        }
        requests
    }

    /// Kubelets: a running machine registers its Node 60 s after it started, unless broken.
    /// A machine started under the name of an existing Node takes that Node over, as a real
    /// kubelet does (the Node's provider ID is immutable, so it keeps the earlier machine's).
    fn kubelets(&mut self) {
        let mut heartbeating = BTreeSet::new();
        for m in self.cloud.existing() {
            let started = m.launched.unwrap_or(self.now) + Duration::from_secs(60);
            if self.broken.contains(&m.machine) || self.now < started {
                continue;
            }
            heartbeating.insert(m.machine.clone());
            self.nodes.entry(m.machine.clone()).or_insert_with(|| Node {
                name: m.machine.clone(),
                ready: true,
                provider_id: Some(m.provider_id.clone()),
                created: Some(self.now),
                labels: [(keys::LABEL_NODE_GROUP.to_owned(), "worker".to_owned())].into(),
                ..Node::default()
            });
        }
        // A Node is Ready while a kubelet posts its status: its own machine, or a later one
        // of its name that took it over. A Node whose machine is gone stops being Ready.
        let alive: BTreeSet<String> = self
            .cloud
            .existing()
            .into_iter()
            .map(|m| m.provider_id)
            .collect();
        for node in self.nodes.values_mut() {
            let own_machine_alive = node.provider_id.as_ref().is_none_or(|p| alive.contains(p));
            node.ready = (node.ready && own_machine_alive) || heartbeating.contains(&node.name);
        }
    }

    fn step(&mut self, targets: &BTreeMap<&str, u32>, chaos: bool) {
        self.now = self.now + STEP;
        self.cloud.advance(self.now);
        if chaos && self.rng.chance(0.02) {
            let existing = self.cloud.existing();
            if !existing.is_empty() {
                let pick = existing[self.rng.below(existing.len() as u64) as usize].clone();
                self.cloud.terminate_out_of_band(&pick.instance_id);
            }
        }
        self.kubelets();
        // The controller's watch: the view `lag_steps` old while stormy, current when calm.
        self.views
            .push_back((self.instances.clone(), self.nodes.clone()));
        let lag = if chaos { self.api.lag_steps } else { 0 };
        while self.views.len() > lag + 1 {
            self.views.pop_front();
        }
        if chaos && self.rng.chance(self.api.restart) {
            self.machines = Machines::with_config(Self::config());
            self.skew_ms = i64::try_from(self.rng.below(240_001)).unwrap_or(0) - 120_000;
        }
        if !chaos {
            self.skew_ms = 0;
        }
        if chaos && self.rng.chance(self.api.read_error) {
            return; // the Kubernetes reads failed: nothing is decided this pass
        }
        let Some((view_instances, view_nodes)) = self.views.front().cloned() else {
            return;
        };
        let nodes_before: Vec<Node> = view_nodes.values().cloned().collect();
        // The executor lists the cloud after reading the Nodes.
        let listed = match block_on(self.cloud.list_group_instances("worker")).unwrap() {
            Ok(listed) => listed,
            Err(_) => return, // a failed listing: nothing is decided this pass
        };
        let instances: Vec<Instance> = view_instances.values().cloned().collect();
        // Look-ups of not-Ready Nodes the listing does not explain (the cloud node GC's input).
        let mut absent = BTreeSet::new();
        for id in provider_ids_to_look_up(&nodes_before, &listed) {
            if let Ok(None) = block_on(self.cloud.get_instance(id)).unwrap() {
                absent.insert(id.to_owned());
            }
        }
        let requests = Self::requests(&view_instances, targets);
        let now = self.controller_now();
        let plan = self.machines.step(
            &MachineSnapshot {
                instances: &instances,
                cloud: &listed,
                absent: &absent,
                nodes: &nodes_before,
            },
            &requests,
            now,
        );
        for command in plan.commands {
            self.apply(command, chaos);
        }
        self.check_unique();
    }

    fn create(&mut self, group: &str, zone: &str, machine: &str, token: &str) {
        let request = CreateInstance {
            group: group.into(),
            zone: zone.into(),
            machine: machine.into(),
            class: InstanceClass::default(),
            user_data: String::new(),
            client_token: token.into(),
        };
        let result = block_on(self.cloud.create_instance(&request)).unwrap();
        let now = self.controller_now();
        self.machines.handle_create(machine, result.as_ref(), now);
    }

    fn apply(&mut self, command: MachineCommand, chaos: bool) {
        match command {
            MachineCommand::Create {
                group,
                zone,
                machine,
                client_token,
            } => {
                if self.write_fails(chaos) {
                    // The Instance could not be created: the executor stops before the cloud.
                    return;
                }
                self.instances.insert(
                    machine.clone(),
                    Instance {
                        metadata: ObjectMeta {
                            name: Some(machine.clone()),
                            labels: [
                                (keys::LABEL_NODE_GROUP.to_owned(), group.clone()),
                                (keys::LABEL_TOPOLOGY_ZONE.to_owned(), zone.clone()),
                            ]
                            .into(),
                            creation_timestamp: Some(self.now.to_rfc3339()),
                            ..ObjectMeta::default()
                        },
                        ..Instance::default()
                    },
                );
                if chaos && self.rng.chance(0.1) {
                    self.broken.insert(machine.clone());
                }
                self.create(&group, &zone, &machine, &client_token);
            }
            MachineCommand::EnsureMachine {
                group,
                zone,
                machine,
                client_token,
            } => self.create(&group, &zone, &machine, &client_token),
            MachineCommand::SetPhase {
                machine,
                phase,
                provider_id,
                ..
            } => {
                if self.write_fails(chaos) {
                    return;
                }
                let Some(i) = self.instances.get_mut(&machine) else {
                    return; // the view was stale: the Instance is gone (update answers 404)
                };
                i.status.current_status = Some(InstanceCurrentStatus {
                    phase: Some(phase.as_str().into()),
                    last_update_time: None,
                });
                if let Some(id) = provider_id {
                    i.metadata
                        .annotations
                        .insert(ANNOTATION_PROVIDER_ID.into(), id);
                }
            }
            MachineCommand::DeleteMachine {
                machine,
                provider_id,
                ..
            } => {
                let result = block_on(self.cloud.delete_instance(&provider_id)).unwrap();
                let now = self.controller_now();
                self.machines
                    .handle_delete(&machine, result.as_ref().map(|_| ()), now);
            }
            MachineCommand::ForgetInstance { machine } => {
                if self.write_fails(chaos) {
                    return;
                }
                self.instances.remove(&machine);
            }
            MachineCommand::RecordFailure { .. } => self.failures += 1,
            MachineCommand::DeleteNode { node, .. } => {
                if self.write_fails(chaos) {
                    return;
                }
                let id = self.nodes.get(&node).and_then(|n| n.provider_id.clone());
                let exists = self
                    .cloud
                    .existing()
                    .iter()
                    .any(|m| Some(&m.provider_id) == id.as_ref());
                assert!(!exists, "Node {node} deleted while its machine exists");
                self.nodes.remove(&node);
            }
        }
    }

    fn check_unique(&self) {
        let mut seen = BTreeSet::new();
        for m in self.cloud.existing() {
            assert!(
                seen.insert(m.machine.clone()),
                "two machines named {}",
                m.machine
            );
        }
    }
}

fn targets(a: u32, b: u32) -> BTreeMap<&'static str, u32> {
    [("a", a), ("b", b)].into()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn machines_stay_unique_nodes_outlive_nothing_and_zones_converge(
        seed in any::<u64>(),
        refuse in 0.0..0.5_f64,
        lose_answer in 0.0..0.4_f64,
        phases in proptest::collection::vec((0..6_u32, 0..6_u32), 1..4),
        read_error in 0.0..0.3_f64,
        write_error in 0.0..0.3_f64,
        lag_steps in 0_usize..=4,
        restart in 0.0..0.05_f64,
    ) {
        let mut w = World::new(seed);
        w.cloud.set_faults(CloudFaults { refuse, lose_answer });
        w.api = ApiFaults { read_error, write_error, lag_steps, restart };
        // Stormy: targets change every 5 virtual minutes.
        for (a, b) in &phases {
            for _ in 0..60 {
                w.step(&targets(*a, *b), true);
            }
        }
        // Calm: the cloud recovers, the last targets hold, broken machines are replaced.
        w.cloud.set_faults(CloudFaults::default());
        let (a, b) = *phases.last().unwrap();
        for _ in 0..240 {
            w.step(&targets(a, b), false);
        }
        w.broken.clear();
        for _ in 0..120 {
            w.step(&targets(a, b), false);
        }
        for (zone, want) in [("a", a), ("b", b)] {
            let machines = w.cloud.existing().into_iter().filter(|m| m.zone == zone).count();
            prop_assert_eq!(machines, want as usize, "machines in {}", zone);
            let running = w.instances.values()
                .filter(|i| World::zone_of(i) == zone && World::phase(i) == MachinePhase::Running)
                .count();
            prop_assert_eq!(running, want as usize, "Running Instances in {}", zone);
        }
        prop_assert_eq!(w.instances.len(), (a + b) as usize, "no Instance left over");
        let ready = w.nodes.values().filter(|n| n.ready).count();
        prop_assert_eq!(ready, (a + b) as usize, "Ready Nodes");
        prop_assert_eq!(w.nodes.len(), (a + b) as usize, "dead Nodes collected");
        let machine_ids: BTreeSet<String> =
            w.cloud.existing().into_iter().map(|m| m.provider_id).collect();
        for node in w.nodes.values() {
            prop_assert!(
                node.provider_id.as_ref().is_some_and(|p| machine_ids.contains(p)),
                "Node {} names machine {:?}, which does not exist (a stale Node taken over by \
                 a second machine of its name)", node.name, node.provider_id
            );
        }
    }
}
