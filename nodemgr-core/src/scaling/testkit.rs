//! Random clusters for the scaling properties: groups with classes, zones, taints and
//! priorities; nodes made from their templates with pods that fit; DaemonSets, standby holders,
//! PDBs; and pending pods with selectors, affinity, tolerations, anti-affinity and extended
//! resources. Built from a seed so that every property can shrink over a few numbers.

use std::collections::BTreeMap;

use crate::model::{
    ClassReference, CloudInstances, LabelSelector, LabelSelectorRequirement, Node, NodeGroup,
    NodeGroupSpec, NodeTemplate, NodeType, ObjectMeta, Owner, Pod, PodDisruptionBudget, PodPhase,
    Quantity, SelectorOperator, Taint, TaintEffect, Timestamp, Toleration, keys,
};

use super::class::{InstanceClass, node_shape, template_node};
use super::placement::check_fit;
use super::snapshot::Upcoming;

/// xorshift64*.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Sizes of a random world.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub groups: usize,
    pub nodes_per_zone: u64,
    pub deployments: usize,
    pub max_per_zone: u64,
}

/// A random cluster.
#[derive(Debug, Clone)]
pub(crate) struct World {
    pub groups: Vec<NodeGroup>,
    pub classes: Vec<InstanceClass>,
    pub cloud_zones: Vec<String>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub upcoming: Vec<Upcoming>,
}

pub(crate) const ZONES: [&str; 3] = ["a", "b", "c"];

pub(crate) fn classes() -> Vec<InstanceClass> {
    let mut small = InstanceClass::new("InstanceClass", "small", 2, 4);
    small.pods = Some(8);
    let medium = InstanceClass::new("InstanceClass", "medium", 4, 16);
    let mut gpu = InstanceClass::new("InstanceClass", "gpu", 8, 32);
    gpu.extended
        .insert("nvidia.com/gpu".into(), Quantity::units(2));
    vec![small, medium, gpu]
}

pub(crate) fn scaling_group(
    name: &str,
    class: &str,
    min: i64,
    max: i64,
    priority: i64,
    zones: Option<Vec<String>>,
) -> NodeGroup {
    NodeGroup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: NodeGroupSpec {
            node_type: Some(NodeType::CloudEphemeral),
            cloud_instances: Some(CloudInstances {
                zones,
                min_per_zone: Some(min),
                max_per_zone: Some(max),
                priority: Some(priority),
                class_reference: Some(ClassReference {
                    kind: "InstanceClass".into(),
                    name: class.into(),
                }),
                ..CloudInstances::default()
            }),
            node_template: Some(NodeTemplate {
                labels: Some([("pool".to_string(), name.to_string())].into()),
                ..NodeTemplate::default()
            }),
            ..NodeGroupSpec::default()
        },
        ..NodeGroup::default()
    }
}

pub(crate) fn pod(ns: &str, name: &str, cpu_m: i64, mem_mi: i64) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        requests: [
            ("cpu".to_string(), Quantity(cpu_m)),
            ("memory".to_string(), Quantity::units(mem_mi << 20)),
        ]
        .into(),
        owner: Some(Owner {
            kind: "ReplicaSet".into(),
            name: format!("{name}-rs"),
        }),
        phase: PodPhase::Pending,
        ..Pod::default()
    }
}

fn tolerate_all() -> Toleration {
    Toleration {
        key: String::new(),
        exists: true,
        value: String::new(),
        effect: None,
    }
}

/// Binds `p` to `node` when it fits there.
fn bind(pods: &mut Vec<Pod>, node: &Node, mut p: Pod) -> bool {
    let on: Vec<&Pod> = pods
        .iter()
        .filter(|q| q.node_name.as_deref() == Some(node.name.as_str()))
        .collect();
    if check_fit(&p, node, &on).is_err() {
        return false;
    }
    p.node_name = Some(node.name.clone());
    p.phase = PodPhase::Running;
    pods.push(p);
    true
}

/// A random cluster from `seed`.
pub(crate) fn world(seed: u64, sizes: Sizes) -> World {
    let mut rng = Rng::new(seed);
    let classes = classes();
    let cloud_zones: Vec<String> = ZONES.iter().map(|z| (*z).to_string()).collect();
    let mut groups = Vec::new();
    for i in 0..sizes.groups {
        let class = match rng.below(10) {
            0 => "gpu",
            1..=4 => "small",
            5 => "missing",
            _ => "medium",
        };
        let min = rng.below(2) as i64;
        let max = min + rng.below(sizes.max_per_zone + 1) as i64;
        let zones = if rng.chance(50) {
            None
        } else {
            let mut z: Vec<String> = ZONES
                .iter()
                .filter(|_| rng.chance(60))
                .map(|z| (*z).to_string())
                .collect();
            if z.is_empty() {
                z.push("a".into());
            }
            Some(z)
        };
        let mut g = scaling_group(
            &format!("g{i}"),
            class,
            min,
            max,
            rng.below(3) as i64,
            zones,
        );
        if rng.chance(25) {
            g.spec.node_template.as_mut().unwrap().taints = Some(vec![Taint {
                key: "dedicated".into(),
                value: Some(format!("g{i}")),
                effect: Some(if rng.chance(50) {
                    TaintEffect::NoSchedule
                } else {
                    TaintEffect::NoExecute
                }),
            }]);
        }
        groups.push(g);
    }
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    // Existing nodes of each group, with a DaemonSet pod and some workload each.
    let ds = |node: &str| {
        let mut p = pod("kube-system", &format!("ds-{node}"), 50, 64);
        p.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "agent".into(),
        });
        p.tolerations.push(tolerate_all());
        p
    };
    for g in &groups {
        let zones = super::bounds::group_zones(g, &cloud_zones);
        let Some(class) = classes.iter().find(|c| {
            c.name
                == g.spec
                    .cloud_instances
                    .as_ref()
                    .unwrap()
                    .class_reference
                    .as_ref()
                    .unwrap()
                    .name
        }) else {
            continue;
        };
        let shape = node_shape(g, class);
        for z in &zones {
            for k in 0..rng.below(sizes.nodes_per_zone + 1) {
                let name = format!("{}-{z}-{k}", g.name());
                let mut n = template_node(g, class, &shape, z, &name);
                n.ready = !rng.chance(8);
                n.unschedulable = rng.chance(5);
                n.created = Some(Timestamp::from_secs(rng.below(1000) as i64));
                n.last_heartbeat = Some(Timestamp::from_secs(1_000_000));
                let _ = bind(&mut pods, &n, ds(&name));
                for j in 0..rng.below(5) {
                    let mut p = pod(
                        "work",
                        &format!("{name}-w{j}"),
                        100 * (1 + rng.below(12) as i64),
                        128 * (1 + rng.below(24) as i64),
                    );
                    p.tolerations.push(tolerate_all());
                    p.labels
                        .insert("app".into(), format!("app{}", rng.below(4)));
                    if rng.chance(10) {
                        p.priority_class = Some(keys::STANDBY_PRIORITY_CLASS.into());
                        p.labels
                            .insert("app".into(), keys::STANDBY_HOLDER_APP.into());
                        p.labels.insert("ng".into(), g.name().into());
                        p.priority = -1000;
                    }
                    if rng.chance(10) {
                        p.has_local_storage = true;
                    }
                    if rng.chance(5) {
                        p.owner = None;
                    }
                    if rng.chance(5) {
                        p.annotations.insert(
                            keys::ANNOTATION_SAFE_TO_EVICT.into(),
                            if rng.chance(50) { "true" } else { "false" }.into(),
                        );
                    }
                    let _ = bind(&mut pods, &n, p);
                }
                nodes.push(n);
            }
        }
    }
    // A static node outside every scaling group.
    let mut st = Node {
        name: "static-0".into(),
        ready: true,
        allocatable: [
            ("cpu".to_string(), Quantity::units(4)),
            ("memory".to_string(), Quantity::units(8 << 30)),
            ("pods".to_string(), Quantity::units(20)),
        ]
        .into(),
        ..Node::default()
    };
    st.labels
        .insert(keys::LABEL_HOSTNAME.into(), "static-0".into());
    st.labels
        .insert(keys::LABEL_TOPOLOGY_ZONE.into(), "a".into());
    let _ = bind(&mut pods, &st, ds("static-0"));
    nodes.push(st);

    // Pending pods, in deployments of identical replicas.
    for d in 0..sizes.deployments {
        let mut p = pod(
            "work",
            "",
            100 * (1 + rng.below(30) as i64),
            128 * (1 + rng.below(64) as i64),
        );
        p.labels.insert("app".into(), format!("dep{d}"));
        if rng.chance(8) {
            p.requests
                .insert("nvidia.com/gpu".into(), Quantity::units(1));
        }
        if rng.chance(25) {
            p.node_selector.insert(
                "pool".into(),
                format!("g{}", rng.below(sizes.groups as u64 + 1)),
            );
        }
        if rng.chance(15) {
            p.node_selector.insert(
                keys::LABEL_TOPOLOGY_ZONE.into(),
                ZONES[rng.below(3) as usize].into(),
            );
        }
        if rng.chance(10) {
            p.required_node_affinity = vec![vec![LabelSelectorRequirement {
                key: keys::LABEL_TOPOLOGY_ZONE.into(),
                operator: Some(SelectorOperator::NotIn),
                values: Some(vec![ZONES[rng.below(3) as usize].into()]),
            }]];
        }
        if rng.chance(25) {
            p.tolerations.push(Toleration {
                key: "dedicated".into(),
                exists: true,
                value: String::new(),
                effect: None,
            });
        }
        if rng.chance(5) {
            p.tolerations.push(tolerate_all());
        }
        if rng.chance(15) {
            p.hostname_anti_affinity = vec![LabelSelector {
                match_labels: Some([("app".to_string(), format!("dep{d}"))].into()),
                match_expressions: None,
            }];
        }
        if rng.chance(3) {
            p.requests.insert("cpu".into(), Quantity::units(64));
        }
        for r in 0..1 + rng.below(6) {
            let mut q = p.clone();
            q.name = format!("dep{d}-{r}");
            q.owner = Some(Owner {
                kind: "ReplicaSet".into(),
                name: format!("dep{d}"),
            });
            pods.push(q);
        }
    }
    // PDBs over some apps.
    let mut pdbs = Vec::new();
    for a in 0..4 {
        if rng.chance(50) {
            pdbs.push(PodDisruptionBudget {
                namespace: "work".into(),
                name: format!("pdb-app{a}"),
                selector: LabelSelector {
                    match_labels: Some([("app".to_string(), format!("app{a}"))].into()),
                    match_expressions: None,
                },
                disruptions_allowed: rng.below(3) as i32,
            });
        }
    }
    let mut upcoming = Vec::new();
    for g in &groups {
        if rng.chance(20) {
            let zones = super::bounds::group_zones(g, &cloud_zones);
            if let Some(z) = zones.first() {
                upcoming.push(Upcoming {
                    group: g.name().into(),
                    zone: z.clone(),
                    count: 1,
                });
            }
        }
    }
    World {
        groups,
        classes,
        cloud_zones,
        nodes,
        pods,
        pdbs,
        upcoming,
    }
}

/// Pods bound to each node, by node name (finished pods left out).
pub(crate) fn pods_by_node(pods: &[Pod]) -> BTreeMap<&str, Vec<&Pod>> {
    let mut m: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        if let Some(n) = &p.node_name
            && !p.is_terminal()
        {
            m.entry(n.as_str()).or_default().push(p);
        }
    }
    m
}

/// Whether the pods on `node` are a valid placement: each passes the node-level rules, the
/// requests fit allocatable, and no two exclude each other.
pub(crate) fn valid_node(node: &Node, on: &[&Pod]) -> Result<(), String> {
    for (i, p) in on.iter().enumerate() {
        let others: Vec<&Pod> = on
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, q)| *q)
            .collect();
        // Resources are checked in total below; here the rest, against all the others.
        let mut empty = node.clone();
        empty.allocatable.clear();
        for (k, v) in &node.allocatable {
            empty
                .allocatable
                .insert(k.clone(), Quantity(v.0.max(0) + (1 << 60)));
        }
        if let Err(m) = check_fit(p, &empty, &others) {
            return Err(format!("pod {} on {}: {m}", p.key(), node.name));
        }
    }
    let mut used: BTreeMap<&str, i64> = BTreeMap::new();
    for p in on {
        for (k, q) in &p.requests {
            if k != "pods" {
                *used.entry(k.as_str()).or_default() += q.0;
            }
        }
        *used.entry("pods").or_default() += 1000;
    }
    for (k, u) in used {
        let alloc =
            node.allocatable.get(k).map(|q| q.0).or_else(|| {
                (k == "pods" || super::placement::is_extended_resource(k)).then_some(0)
            });
        if let Some(a) = alloc
            && u > a
        {
            return Err(format!("{} overcommitted in {k}: {u} > {a}", node.name));
        }
    }
    Ok(())
}

/// A label selector on `app`.
pub(crate) fn app_selector(app: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some([("app".to_string(), app.to_string())].into()),
        match_expressions: None,
    })
}

/// Adds random inter-pod constraints to a world (docs/scheduling.md §1): per pending
/// deployment (all its replicas alike) topology spread on the zone or hostname key (both
/// `whenUnsatisfiable` values, `minDomains`), required pod affinity and anti-affinity on either
/// key and preferred terms, on its own `app` label or another's; and anti-affinity, spread or
/// affinity on some bound pods (what they carry matters to others, and to themselves when
/// scale-down moves them).
pub(crate) fn constrain(w: &mut World, seed: u64) {
    use crate::model::{
        NamespaceScope, PodAffinityTerm, TopologyKey, TopologySpreadConstraint,
        WeightedPodAffinityTerm, WhenUnsatisfiable,
    };
    let mut rng = Rng::new(seed ^ 0x5eed_c0de);
    let deployments: Vec<String> = {
        let mut d: Vec<String> = w
            .pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .filter_map(|p| p.labels.get("app").cloned())
            .collect();
        d.sort();
        d.dedup();
        d
    };
    let other = |rng: &mut Rng| -> String {
        if !deployments.is_empty() && rng.chance(60) {
            deployments[rng.below(deployments.len() as u64) as usize].clone()
        } else {
            format!("app{}", rng.below(4))
        }
    };
    let key = |rng: &mut Rng| {
        if rng.chance(50) {
            TopologyKey::Zone
        } else {
            TopologyKey::Hostname
        }
    };
    let term = |app: String, topology: TopologyKey| PodAffinityTerm {
        selector: app_selector(&app),
        namespaces: NamespaceScope::Own,
        topology,
    };
    // One draw of constraints per app (deployment), applied to every pod carrying it.
    let mut drawn: BTreeMap<String, Pod> = BTreeMap::new();
    for i in 0..w.pods.len() {
        let p = &w.pods[i];
        if p.namespace != "work" || p.is_daemonset() {
            continue;
        }
        let Some(app) = p.labels.get("app").cloned() else {
            continue;
        };
        let bound = p.node_name.is_some();
        let key_of = if bound {
            format!("{app}@{}", p.name)
        } else {
            app.clone()
        };
        if !drawn.contains_key(&key_of) {
            let mut c = Pod::default();
            let chance = if bound { 35 } else { 70 };
            if rng.chance(chance) {
                let target = if rng.chance(65) {
                    app.clone()
                } else {
                    other(&mut rng)
                };
                match rng.below(8) {
                    0..=2 => c.topology_spread.push(TopologySpreadConstraint {
                        max_skew: 1 + rng.below(2) as u32,
                        topology: key(&mut rng),
                        when_unsatisfiable: if rng.chance(80) {
                            WhenUnsatisfiable::DoNotSchedule
                        } else {
                            WhenUnsatisfiable::ScheduleAnyway
                        },
                        selector: app_selector(&target),
                        min_domains: rng.chance(25).then(|| 2 + rng.below(3) as u32),
                    }),
                    3 | 4 => c.pod_affinity.push(term(target, key(&mut rng))),
                    5 | 6 => c.pod_anti_affinity.push(term(target, key(&mut rng))),
                    _ => {
                        let w = WeightedPodAffinityTerm {
                            weight: 1 + rng.below(100) as i32,
                            term: term(target, TopologyKey::Zone),
                        };
                        if rng.chance(50) {
                            c.preferred_pod_affinity.push(w);
                        } else {
                            c.preferred_pod_anti_affinity.push(w);
                        }
                    }
                }
                if rng.chance(20) {
                    c.topology_spread.push(TopologySpreadConstraint {
                        max_skew: 1,
                        topology: TopologyKey::Zone,
                        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                        selector: app_selector(&app),
                        min_domains: None,
                    });
                }
            }
            drawn.insert(key_of.clone(), c);
        }
        if let Some(c) = drawn.get(&key_of) {
            let p = &mut w.pods[i];
            p.topology_spread.clone_from(&c.topology_spread);
            p.pod_affinity.clone_from(&c.pod_affinity);
            p.pod_anti_affinity.clone_from(&c.pod_anti_affinity);
            p.preferred_pod_affinity
                .clone_from(&c.preferred_pod_affinity);
            p.preferred_pod_anti_affinity
                .clone_from(&c.preferred_pod_anti_affinity);
        }
    }
}
