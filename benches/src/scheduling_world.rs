//! The pending pods of Karpenter's scheduling benchmark (`makeDiversePods` in
//! `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`, docs/peers.md §2),
//! as nodemgr's model: in sixths, generic pods, zone topology spread, hostname topology spread,
//! hostname pod affinity, zone pod affinity and hostname pod anti-affinity, the remainder
//! generic; over CloudEphemeral groups with distinct instance classes in 3 zones, and no node
//! yet (Karpenter's benchmark starts from an empty cluster too).
//!
//! As there: requests drawn from {100m, 250m, 500m, 1, 1.5} cpu and {100Mi, 256Mi, 512Mi,
//! 1Gi, 2Gi, 4Gi} memory; spread constraints `maxSkew: 1`, `DoNotSchedule`, on
//! `my-label=<v>` with the pod itself labelled `my-label=<w>`; affinity terms on
//! `my-affininity=<v>` with the pod labelled `my-affininity=<w>` (the key spelled as Karpenter
//! spells it); `v` and `w` drawn independently from seven values; every anti-affinity pod is
//! `app=nginx` and excludes `app=nginx` per node.

use nodemgr_core::model::{
    ClassReference, CloudInstances, LabelSelector, NamespaceScope, NodeGroup, NodeGroupSpec,
    NodeTemplate, NodeType, ObjectMeta, Pod, PodAffinityTerm, PodPhase, Quantity, TopologyKey,
    TopologySpreadConstraint, WhenUnsatisfiable,
};
use nodemgr_core::scaling::InstanceClass;

use crate::scaling_world::{ScalingWorld, ZONES};
use crate::update_world::UpdateRng;

const VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
const CPU_M: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEM_MI: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];

/// The kinds of pods, in the order Karpenter builds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixKind {
    /// No constraint.
    Generic,
    /// Zone topology spread.
    ZoneSpread,
    /// Hostname topology spread.
    HostnameSpread,
    /// Hostname pod affinity.
    HostnameAffinity,
    /// Zone pod affinity.
    ZoneAffinity,
    /// Hostname pod anti-affinity.
    HostnameAntiAffinity,
}

/// The six kinds, in order.
pub const MIX: [MixKind; 6] = [
    MixKind::Generic,
    MixKind::ZoneSpread,
    MixKind::HostnameSpread,
    MixKind::HostnameAffinity,
    MixKind::ZoneAffinity,
    MixKind::HostnameAntiAffinity,
];

fn value(rng: &mut UpdateRng) -> String {
    VALUES[rng.below(VALUES.len() as u64) as usize].to_owned()
}

fn one_label(key: &str, v: String) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(key.to_owned(), v)].into()),
        match_expressions: None,
    }
}

/// One pending pod of `kind`, named `pod-<i>`.
pub fn mix_pod(kind: MixKind, i: usize, rng: &mut UpdateRng) -> Pod {
    let mut p = Pod {
        namespace: "default".into(),
        name: format!("pod-{i:05}"),
        phase: PodPhase::Pending,
        ..Pod::default()
    };
    let spread = |key: TopologyKey, rng: &mut UpdateRng| TopologySpreadConstraint {
        max_skew: 1,
        topology: key,
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: Some(one_label("my-label", value(rng))),
        min_domains: None,
    };
    let affinity = |key: TopologyKey, rng: &mut UpdateRng| PodAffinityTerm {
        selector: Some(one_label("my-affininity", value(rng))),
        namespaces: NamespaceScope::Own,
        topology: key,
    };
    match kind {
        MixKind::Generic => {
            p.labels.insert("my-label".into(), value(rng));
        }
        MixKind::ZoneSpread => {
            p.labels.insert("my-label".into(), value(rng));
            p.topology_spread.push(spread(TopologyKey::Zone, rng));
        }
        MixKind::HostnameSpread => {
            p.labels.insert("my-label".into(), value(rng));
            p.topology_spread.push(spread(TopologyKey::Hostname, rng));
        }
        MixKind::HostnameAffinity => {
            p.labels.insert("my-affininity".into(), value(rng));
            p.pod_affinity.push(affinity(TopologyKey::Hostname, rng));
        }
        MixKind::ZoneAffinity => {
            p.labels.insert("my-affininity".into(), value(rng));
            p.pod_affinity.push(affinity(TopologyKey::Zone, rng));
        }
        MixKind::HostnameAntiAffinity => {
            p.labels.insert("app".into(), "nginx".into());
            // A required, own-namespace hostname term: what `pod_to_core` makes of it.
            p.hostname_anti_affinity = vec![one_label("app", "nginx".into())];
        }
    }
    p.requests = [
        (
            "cpu".to_string(),
            Quantity(CPU_M[rng.below(CPU_M.len() as u64) as usize]),
        ),
        (
            "memory".to_string(),
            Quantity::units(MEM_MI[rng.below(MEM_MI.len() as u64) as usize] << 20),
        ),
    ]
    .into();
    p
}

/// `count` pods in sixths, the remainder generic, as `makeDiversePods` builds them.
pub fn mix_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut rng = UpdateRng::new(seed);
    let sixth = count / MIX.len();
    let mut pods = Vec::with_capacity(count);
    for kind in MIX {
        for _ in 0..sixth {
            let i = pods.len();
            pods.push(mix_pod(kind, i, &mut rng));
        }
    }
    while pods.len() < count {
        let i = pods.len();
        pods.push(mix_pod(MixKind::Generic, i, &mut rng));
    }
    pods
}

/// `groups` CloudEphemeral groups, each with an instance class of its own (cores from 2 to 96,
/// 1 to 16 GiB per core), in every zone, `maxPerZone` as given, all of priority 0.
pub fn mix_groups(groups: usize, max_per_zone: i64) -> (Vec<NodeGroup>, Vec<InstanceClass>) {
    const CORES: [i64; 10] = [2, 4, 6, 8, 12, 16, 24, 32, 64, 96];
    const GIB_PER_CORE: [i64; 5] = [1, 2, 4, 8, 16];
    let mut gs = Vec::with_capacity(groups);
    let mut classes = Vec::with_capacity(groups);
    for i in 0..groups {
        let cores = CORES[i % CORES.len()];
        let per_core = GIB_PER_CORE[(i / CORES.len()) % GIB_PER_CORE.len()];
        let name = format!("g{i:02}");
        let class = InstanceClass::new(
            "InstanceClass",
            &format!("c{cores}-m{}-{i}", cores * per_core),
            cores,
            cores * per_core,
        );
        gs.push(NodeGroup {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            spec: NodeGroupSpec {
                node_type: Some(NodeType::CloudEphemeral),
                cloud_instances: Some(CloudInstances {
                    min_per_zone: Some(0),
                    max_per_zone: Some(max_per_zone),
                    priority: Some(0),
                    class_reference: Some(ClassReference {
                        kind: class.kind.clone(),
                        name: class.name.clone(),
                    }),
                    ..CloudInstances::default()
                }),
                node_template: Some(NodeTemplate {
                    labels: Some([("pool".to_string(), name)].into()),
                    ..NodeTemplate::default()
                }),
                ..NodeGroupSpec::default()
            },
            ..NodeGroup::default()
        });
        classes.push(class);
    }
    (gs, classes)
}

/// The benchmark's world: `groups` groups (`maxPerZone` 20,000), no node, `pods` pending pods
/// of the mix.
pub fn mix_world(groups: usize, pods: usize, seed: u64) -> ScalingWorld {
    let (groups, classes) = mix_groups(groups, 20_000);
    ScalingWorld {
        groups,
        classes,
        zones: ZONES.iter().map(|z| (*z).to_string()).collect(),
        nodes: Vec::new(),
        pods: mix_pods(pods, seed),
        pdbs: Vec::new(),
    }
}
