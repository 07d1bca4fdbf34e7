//! Synthetic clusters for the `scaling` benchmark: CloudEphemeral groups over 3 zones with five
//! instance classes (one with GPUs), priorities, taints and zone restrictions; existing nodes made
//! from the groups' templates and filled with running pods; and pending pods in deployments with
//! a realistic mix of requests, nodeSelectors, required node affinity, tolerations, hostname
//! anti-affinity, GPUs, and a few pods no group can host.

use nodemgr_core::model::{
    ClassReference, CloudInstances, LabelSelector, LabelSelectorRequirement, Node, NodeGroup,
    NodeGroupSpec, NodeTemplate, NodeType, ObjectMeta, Owner, Pod, PodDisruptionBudget, PodPhase,
    Quantity, SelectorOperator, Taint, TaintEffect, Timestamp, Toleration, keys,
};
use nodemgr_core::scaling::{InstanceClass, node_shape, template_node};

use crate::update_world::UpdateRng;

/// The zones of the synthetic cloud.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Everything the scaling policies take.
#[derive(Debug, Clone)]
pub struct ScalingWorld {
    /// The node groups (all CloudEphemeral).
    pub groups: Vec<NodeGroup>,
    /// Their instance classes.
    pub classes: Vec<InstanceClass>,
    /// The cloud's zones.
    pub zones: Vec<String>,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Bound and pending pods.
    pub pods: Vec<Pod>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
}

/// When the nodes last sent a heartbeat (the benchmark's `now` is shortly after).
pub const HEARTBEAT: Timestamp = Timestamp::from_secs(1_000_000);

fn classes() -> Vec<InstanceClass> {
    let small = InstanceClass::new("InstanceClass", "small", 2, 4);
    let medium = InstanceClass::new("InstanceClass", "medium", 4, 16);
    let large = InstanceClass::new("InstanceClass", "large", 8, 32);
    let xlarge = InstanceClass::new("InstanceClass", "xlarge", 16, 64);
    let mut gpu = InstanceClass::new("InstanceClass", "gpu", 8, 64);
    gpu.extended
        .insert("nvidia.com/gpu".into(), Quantity::units(4));
    vec![small, medium, large, xlarge, gpu]
}

/// `groups` groups: class by index, priorities 0..3, a `dedicated` taint on every fifth, two
/// zones only on every seventh, `pool=<name>` and `tier` labels, `maxPerZone` as given.
fn make_groups(count: usize, max_per_zone: i64) -> Vec<NodeGroup> {
    let classes = classes();
    (0..count)
        .map(|i| {
            let name = format!("g{i:02}");
            let class = &classes[i % classes.len()];
            let taints = (i % 5 == 3).then(|| {
                vec![Taint {
                    key: "dedicated".into(),
                    value: Some(name.clone()),
                    effect: Some(TaintEffect::NoSchedule),
                }]
            });
            let tier = if i % 3 == 0 { "batch" } else { "web" };
            NodeGroup {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                spec: NodeGroupSpec {
                    node_type: Some(NodeType::CloudEphemeral),
                    cloud_instances: Some(CloudInstances {
                        zones: (i % 7 == 0).then(|| vec![ZONES[0].into(), ZONES[1].into()]),
                        min_per_zone: Some((i % 2) as i64),
                        max_per_zone: Some(max_per_zone),
                        priority: Some((i % 4) as i64),
                        class_reference: Some(ClassReference {
                            kind: class.kind.clone(),
                            name: class.name.clone(),
                        }),
                        ..CloudInstances::default()
                    }),
                    node_template: Some(NodeTemplate {
                        labels: Some(
                            [
                                ("pool".to_string(), name.clone()),
                                ("tier".to_string(), tier.to_string()),
                            ]
                            .into(),
                        ),
                        taints,
                        ..NodeTemplate::default()
                    }),
                    ..NodeGroupSpec::default()
                },
                ..NodeGroup::default()
            }
        })
        .collect()
}

fn tolerate_all() -> Toleration {
    Toleration {
        key: String::new(),
        exists: true,
        value: String::new(),
        effect: None,
    }
}

fn pod(ns: &str, name: String, cpu_m: i64, mem_mi: i64, owner: Owner) -> Pod {
    Pod {
        namespace: ns.into(),
        name,
        requests: [
            ("cpu".to_string(), Quantity(cpu_m)),
            ("memory".to_string(), Quantity::units(mem_mi << 20)),
        ]
        .into(),
        owner: Some(owner),
        phase: PodPhase::Pending,
        ..Pod::default()
    }
}

fn replica_set(name: String) -> Owner {
    Owner {
        kind: "ReplicaSet".into(),
        name,
    }
}

/// Creates `count` nodes spread round-robin over the groups and their zones, each with a
/// DaemonSet pod, and fills each with running pods drawn by `next_pod` up to `fill_percent`
/// of its cpu (the last draw that overflows is dropped). Returns nodes and pods.
fn nodes_with_pods(
    groups: &[NodeGroup],
    classes: &[InstanceClass],
    count: usize,
    rng: &mut UpdateRng,
    mut fill_percent: impl FnMut(&mut UpdateRng) -> i64,
    mut next_pod: impl FnMut(&mut UpdateRng, usize) -> Pod,
) -> (Vec<Node>, Vec<Pod>) {
    let mut nodes = Vec::with_capacity(count);
    let mut pods = Vec::new();
    for k in 0..count {
        let g = &groups[k % groups.len()];
        let ci = g.spec.cloud_instances.as_ref();
        let zones: Vec<String> = ci
            .and_then(|c| c.zones.clone())
            .unwrap_or_else(|| ZONES.iter().map(|z| (*z).to_string()).collect());
        let zone = &zones[(k / groups.len()) % zones.len()];
        let class_name = ci
            .and_then(|c| c.class_reference.as_ref())
            .map(|r| r.name.clone())
            .unwrap_or_default();
        let Some(class) = classes.iter().find(|c| c.name == class_name) else {
            continue;
        };
        let shape = node_shape(g, class);
        let name = format!("{}-{zone}-{k:05}", g.name());
        let mut node = template_node(g, class, &shape, zone, &name);
        node.last_heartbeat = Some(HEARTBEAT);
        node.created = Some(Timestamp::from_secs(1000));
        let cpu = shape.allocatable.get("cpu").map_or(0, |q| q.0);
        let mem = shape.allocatable.get("memory").map_or(0, |q| q.0);
        let max_pods = shape.allocatable.get("pods").map_or(0, |q| q.0 / 1000);
        let mut ds = pod(
            "kube-system",
            format!("agent-{name}"),
            100,
            128,
            Owner {
                kind: "DaemonSet".into(),
                name: "agent".into(),
            },
        );
        ds.tolerations.push(tolerate_all());
        ds.node_name = Some(name.clone());
        ds.phase = PodPhase::Running;
        let req = |p: &Pod, k: &str| p.requests.get(k).map_or(0, |q| q.0);
        let (mut used_cpu, mut used_mem, mut used_pods) = (req(&ds, "cpu"), req(&ds, "memory"), 1);
        let target = cpu * fill_percent(rng) / 100;
        pods.push(ds);
        loop {
            let mut p = next_pod(rng, k);
            let (c, m) = (req(&p, "cpu"), req(&p, "memory"));
            if used_cpu + c > target || used_mem + m > mem || used_pods >= max_pods {
                break;
            }
            used_cpu += c;
            used_mem += m;
            used_pods += 1;
            p.tolerations.push(tolerate_all());
            p.node_name = Some(name.clone());
            p.phase = PodPhase::Running;
            pods.push(p);
        }
        nodes.push(node);
    }
    (nodes, pods)
}

/// A pending pod of deployment `d`, replica `r`, drawn from the mix described in the module
/// docs.
struct PendingSpec {
    template: Pod,
    replicas: u64,
}

fn pending_spec(rng: &mut UpdateRng, d: usize, groups: usize) -> PendingSpec {
    const CPU: [i64; 8] = [50, 100, 250, 500, 500, 1000, 2000, 3000];
    const MEM: [i64; 8] = [64, 128, 256, 512, 1024, 2048, 4096, 8192];
    let ns = format!("team-{}", d % 10);
    let app = format!("dep{d}");
    let mut p = pod(
        &ns,
        String::new(),
        CPU[rng.below(8) as usize],
        MEM[rng.below(8) as usize],
        replica_set(app.clone()),
    );
    p.labels.insert("app".into(), app.clone());
    let roll = rng.below(100);
    match roll {
        0..=19 => {
            let g = rng.below(groups as u64);
            p.node_selector.insert("pool".into(), format!("g{g:02}"));
            if g % 5 == 3 {
                // A pod pinned to a dedicated group tolerates its taint.
                p.tolerations.push(Toleration {
                    key: "dedicated".into(),
                    exists: true,
                    value: String::new(),
                    effect: None,
                });
            }
        }
        20..=29 => {
            p.node_selector.insert("tier".into(), "batch".into());
        }
        30..=39 => {
            p.required_node_affinity = vec![vec![LabelSelectorRequirement {
                key: keys::LABEL_TOPOLOGY_ZONE.into(),
                operator: Some(SelectorOperator::In),
                values: Some(vec![ZONES[rng.below(3) as usize].into()]),
            }]];
        }
        40..=44 => {
            p.required_node_affinity = vec![vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: Some(SelectorOperator::NotIn),
                    values: Some(vec!["batch".into()]),
                },
                LabelSelectorRequirement {
                    key: "pool".into(),
                    operator: Some(SelectorOperator::Exists),
                    values: None,
                },
            ]];
        }
        _ => {}
    }
    if rng.below(100) < 20 {
        p.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: None,
        });
    }
    if rng.below(100) < 8 {
        p.hostname_anti_affinity = vec![LabelSelector {
            match_labels: Some([("app".to_string(), app)].into()),
            match_expressions: None,
        }];
    }
    if rng.below(100) < 3 {
        p.requests
            .insert("nvidia.com/gpu".into(), Quantity::units(1));
    }
    // About 2 % of the deployments fit no group at all.
    match rng.below(100) {
        0 => {
            p.requests.insert("cpu".into(), Quantity::units(64));
        }
        1 => {
            p.node_selector.insert("pool".into(), "no-such-pool".into());
        }
        _ => {}
    }
    PendingSpec {
        template: p,
        replicas: 1 + rng.below(40),
    }
}

/// A scale-up world: `groups` groups (`maxPerZone` 400), `nodes` existing nodes filled to
/// 75–98 % of their cpu, and `pending` pending pods in deployments of 1–40 replicas.
pub fn scale_up_world(groups: usize, nodes: usize, pending: usize, seed: u64) -> ScalingWorld {
    let mut rng = UpdateRng::new(seed);
    let classes = classes();
    let groups_vec = make_groups(groups, 400);
    let (nodes_vec, mut pods) = nodes_with_pods(
        &groups_vec,
        &classes,
        nodes,
        &mut rng,
        |r| 75 + r.below(24) as i64,
        |r, k| {
            let n = r.below(1_000_000);
            let mut p = pod(
                &format!("team-{}", n % 10),
                format!("run-{k}-{n}"),
                100 * (1 + r.below(10) as i64),
                128 * (1 + r.below(16) as i64),
                replica_set(format!("run{}", n % 500)),
            );
            p.labels.insert("app".into(), format!("run{}", n % 500));
            p
        },
    );
    let mut made = 0usize;
    let mut d = 0usize;
    while made < pending {
        let spec = pending_spec(&mut rng, d, groups);
        let n = (spec.replicas as usize).min(pending - made);
        for r in 0..n {
            let mut p = spec.template.clone();
            p.name = format!("dep{d}-{r}");
            pods.push(p);
        }
        made += n;
        d += 1;
    }
    ScalingWorld {
        groups: groups_vec,
        classes,
        zones: ZONES.iter().map(|z| (*z).to_string()).collect(),
        nodes: nodes_vec,
        pods,
        pdbs: Vec::new(),
    }
}

/// A scale-down world: `groups` groups, `nodes` nodes and about `pods` running pods. A quarter
/// of the nodes are underutilized (10–45 % cpu requested), the rest 60–90 %. Some pods carry
/// local storage or `safe-to-evict: "false"`, some apps are under PodDisruptionBudgets.
pub fn scale_down_world(groups: usize, nodes: usize, pods: usize, seed: u64) -> ScalingWorld {
    let mut rng = UpdateRng::new(seed);
    let classes = classes();
    let groups_vec = make_groups(groups, 1000);
    // Average pod cpu ≈ cpu per node × fill / pods per node; draw sizes to land near `pods`.
    let per_node = (pods * 4 / 3 / nodes.max(1)).max(1) as i64;
    let (nodes_vec, pods_vec) = nodes_with_pods(
        &groups_vec,
        &classes,
        nodes,
        &mut rng,
        |r| {
            if r.below(4) == 0 {
                10 + r.below(36) as i64
            } else {
                60 + r.below(31) as i64
            }
        },
        |r, k| {
            let n = r.below(1_000_000);
            let app = n % 2000;
            // Cpu sized so that a node of the group holds about `per_node` pods.
            let base = [2000i64, 4000, 8000, 16000, 8000][(k % groups) % 5] * 3 / 4 / per_node;
            let mut p = pod(
                &format!("team-{}", app % 10),
                format!("run-{k}-{n}"),
                (base / 2 + r.below(base as u64 + 1) as i64).max(10),
                64 * (1 + r.below(8) as i64),
                replica_set(format!("app{app}")),
            );
            p.labels.insert("app".into(), format!("app{app}"));
            match r.below(200) {
                0 => p.has_local_storage = true,
                1 => {
                    p.annotations
                        .insert(keys::ANNOTATION_SAFE_TO_EVICT.into(), "false".into());
                }
                _ => {}
            }
            p
        },
    );
    let pdbs = (0..200)
        .map(|a| PodDisruptionBudget {
            namespace: format!("team-{}", a % 10),
            name: format!("pdb-app{a}"),
            selector: LabelSelector {
                match_labels: Some([("app".to_string(), format!("app{a}"))].into()),
                match_expressions: None,
            },
            disruptions_allowed: a % 3,
        })
        .collect();
    ScalingWorld {
        groups: groups_vec,
        classes,
        zones: ZONES.iter().map(|z| (*z).to_string()).collect(),
        nodes: nodes_vec,
        pods: pods_vec,
        pdbs,
    }
}
