//! Instance classes and the shape of a node made from one: capacity from the class, allocatable
//! after the kubelet's system reserve (`spec.kubelet.resourceReservation`, docs/deckhouse.md §1.1), pods from
//! `spec.kubelet.maxPods`. Also the template [`Node`] a new node of a group and zone starts as,
//! which the scale-up simulation packs pods onto and executors create.
//!
//! Instance classes (`AWSInstanceClass`, `OpenStackInstanceClass`, …) are provider objects nodemgr
//! does not model in full; [`InstanceClass`] is the part scaling needs: the machine's size.

use std::collections::BTreeMap;
use std::hash::Hasher;

use crate::model::{
    ClassReference, Node, NodeGroup, NodeType, Quantity, ResourceReservationMode, Resources, Taint,
    keys,
};

use crate::hash::Fnv;

/// Pods per node when neither the class nor `kubelet.maxPods` says (the kubelet's default).
pub const DEFAULT_MAX_PODS: i64 = 110;

/// Memory the kubelet keeps free for its hard eviction threshold (`memory.available<100Mi`).
pub const EVICTION_THRESHOLD_MEMORY: Quantity = Quantity(100 * 1024 * 1024 * 1000);

/// The size of the machines an instance class makes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceClass {
    /// Kind, as in `classReference.kind` (`AWSInstanceClass`, `InstanceClass`, …).
    pub kind: String,
    /// Name, as in `classReference.name`.
    pub name: String,
    /// CPU capacity of one machine (`Quantity::units(4)` = 4 cores).
    pub cpu: Quantity,
    /// Memory capacity of one machine.
    pub memory: Quantity,
    /// Pods per machine, when the class fixes it (`kubelet.maxPods` of the group wins).
    pub pods: Option<i64>,
    /// Extended resources of one machine (`nvidia.com/gpu`, `hugepages-2Mi`, …).
    pub extended: Resources,
}

impl InstanceClass {
    /// A class of `cpu` cores and `memory_gib` GiB with no extended resources.
    pub fn new(kind: &str, name: &str, cpu: i64, memory_gib: i64) -> Self {
        Self {
            kind: kind.to_owned(),
            name: name.to_owned(),
            cpu: Quantity::units(cpu),
            memory: Quantity::units(memory_gib.saturating_mul(1 << 30)),
            pods: None,
            extended: Resources::new(),
        }
    }

    /// Whether `reference` points at this class.
    pub fn is_referenced_by(&self, reference: &ClassReference) -> bool {
        self.kind == reference.kind && self.name == reference.name
    }

    /// A stable checksum of everything that shapes a machine of this class: any change of the
    /// class, or pointing `classReference` at another class, changes it, and nodes made from the
    /// old value are replaced (`surge`). Deckhouse puts the same kind of checksum in its machine
    /// class names (docs/deckhouse.md §10).
    pub fn checksum(&self) -> String {
        let mut h = Fnv::default();
        for part in [self.kind.as_str(), self.name.as_str()] {
            h.write(part.as_bytes());
            h.write_u8(0);
        }
        h.write_i64(self.cpu.0);
        h.write_i64(self.memory.0);
        h.write_i64(self.pods.unwrap_or(-1));
        for (name, q) in &self.extended {
            h.write(name.as_bytes());
            h.write_u8(0);
            h.write_i64(q.0);
        }
        format!("{:016x}", h.finish())
    }
}

/// Finds the class `group.spec.cloudInstances.classReference` points at.
pub fn class_of<'c>(group: &NodeGroup, classes: &'c [InstanceClass]) -> Option<&'c InstanceClass> {
    let reference = group
        .spec
        .cloud_instances
        .as_ref()?
        .class_reference
        .as_ref()?;
    classes.iter().find(|c| c.is_referenced_by(reference))
}

/// What a node of a group made from a class offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeShape {
    /// What the machine has.
    pub capacity: Resources,
    /// What pods may request: capacity minus the system reserve (and the eviction threshold).
    pub allocatable: Resources,
}

/// The resources the kubelet keeps for the system on a machine of `cpu` and `memory`, by
/// `kubelet.resourceReservation.mode`:
///
/// * `Off`: nothing.
/// * `Static`: the `static.cpu` / `static.memory` quantities (unparsable ones count as zero;
///   `validate` reports them).
/// * `Auto` (the default): tiers by machine size. Deckhouse's own Auto formula is not
///   documented (docs/deckhouse.md §8); nodemgr uses the widely published GKE tiers: CPU 6 % of the first core, 1 % of the
///   second, 0.5 % of cores 3–4 and 0.25 % above; memory 25 % of the first 4 GiB, 20 % of the
///   next 4, 10 % of the next 8, 6 % of the next 112 and 2 % above 128 GiB (255 MiB for machines
///   under 1 GiB).
///
/// The kubelet's hard eviction threshold (100 MiB of memory) is taken from allocatable in every
/// mode but `Off`.
pub fn system_reserve(group: &NodeGroup, cpu: Quantity, memory: Quantity) -> (Quantity, Quantity) {
    let reservation = group
        .spec
        .kubelet
        .as_ref()
        .and_then(|k| k.resource_reservation.as_ref());
    let mode = reservation
        .and_then(|r| r.mode.clone())
        .unwrap_or(ResourceReservationMode::Auto);
    match mode {
        ResourceReservationMode::Off => (Quantity::ZERO, Quantity::ZERO),
        ResourceReservationMode::Static => {
            let parse = |s: Option<&String>| {
                s.and_then(|s| Quantity::parse(s).ok())
                    .unwrap_or(Quantity::ZERO)
            };
            let st = reservation.and_then(|r| r.static_.as_ref());
            (
                parse(st.and_then(|s| s.cpu.as_ref())),
                parse(st.and_then(|s| s.memory.as_ref())) + EVICTION_THRESHOLD_MEMORY,
            )
        }
        // Unknown modes are reported by `validate`; reserve as Auto meanwhile.
        ResourceReservationMode::Auto | ResourceReservationMode::Unknown(_) => (
            auto_cpu_reserve(cpu),
            auto_memory_reserve(memory) + EVICTION_THRESHOLD_MEMORY,
        ),
    }
}

/// Applies `(upper bound of the tier, share in 1/10,000)` tiers to `amount`.
fn tiered(amount: i64, tiers: &[(i64, i64)]) -> i64 {
    let mut reserved: i128 = 0;
    let mut lower = 0i64;
    for &(upper, basis_points) in tiers {
        if amount <= lower {
            break;
        }
        let slice = i128::from(amount.min(upper) - lower);
        reserved += slice * i128::from(basis_points) / 10_000;
        lower = upper;
    }
    i64::try_from(reserved).unwrap_or(i64::MAX)
}

fn auto_cpu_reserve(cpu: Quantity) -> Quantity {
    // Millicores: 6 %, 1 %, 0.5 % (×2 cores), 0.25 % beyond.
    Quantity(tiered(
        cpu.0,
        &[(1000, 600), (2000, 100), (4000, 50), (i64::MAX, 25)],
    ))
}

fn auto_memory_reserve(memory: Quantity) -> Quantity {
    let gib = 1000i64 << 30; // milli-bytes per GiB
    if memory.0 < gib {
        return Quantity(255 * (1000 << 20));
    }
    Quantity(tiered(
        memory.0,
        &[
            (4 * gib, 2500),
            (8 * gib, 2000),
            (16 * gib, 1000),
            (128 * gib, 600),
            (i64::MAX, 200),
        ],
    ))
}

/// The shape of a node of `group` made from `class`.
pub fn node_shape(group: &NodeGroup, class: &InstanceClass) -> NodeShape {
    let pods = group
        .spec
        .kubelet
        .as_ref()
        .and_then(|k| k.max_pods)
        .filter(|p| *p > 0)
        .or(class.pods)
        .unwrap_or(DEFAULT_MAX_PODS);
    let mut capacity = class.extended.clone();
    capacity.insert("cpu".into(), class.cpu);
    capacity.insert("memory".into(), class.memory);
    capacity.insert("pods".into(), Quantity::units(pods));
    let (cpu_reserved, memory_reserved) = system_reserve(group, class.cpu, class.memory);
    let mut allocatable = capacity.clone();
    allocatable.insert("cpu".into(), Quantity((class.cpu - cpu_reserved).0.max(0)));
    allocatable.insert(
        "memory".into(),
        Quantity((class.memory - memory_reserved).0.max(0)),
    );
    NodeShape {
        capacity,
        allocatable,
    }
}

/// The node a new machine of `group` in `zone` registers as, named `name`: the group's
/// `nodeTemplate` labels and taints, the group, node-type, zone and hostname labels, the class
/// checksum annotation, Ready and schedulable, allocatable from `shape`.
pub fn template_node(
    group: &NodeGroup,
    class: &InstanceClass,
    shape: &NodeShape,
    zone: &str,
    name: &str,
) -> Node {
    let template = group.spec.node_template.as_ref();
    let mut labels: BTreeMap<String, String> =
        template.and_then(|t| t.labels.clone()).unwrap_or_default();
    labels.insert(keys::LABEL_NODE_GROUP.into(), group.name().to_owned());
    labels.insert(
        keys::LABEL_NODE_TYPE.into(),
        NodeType::CloudEphemeral.as_str().to_owned(),
    );
    labels.insert(keys::LABEL_TOPOLOGY_ZONE.into(), zone.to_owned());
    labels.insert(keys::LABEL_HOSTNAME.into(), name.to_owned());
    let mut annotations: BTreeMap<String, String> = template
        .and_then(|t| t.annotations.clone())
        .unwrap_or_default();
    annotations.insert(
        keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.into(),
        class.checksum(),
    );
    let taints: Vec<Taint> = template.and_then(|t| t.taints.clone()).unwrap_or_default();
    Node {
        name: name.to_owned(),
        uid: String::new(),
        resource_version: String::new(),
        labels: labels.into(),
        annotations: annotations.into(),
        taints,
        unschedulable: false,
        ready: true,
        last_heartbeat: None,
        allocatable: shape.allocatable.clone().into(),
        provider_id: None,
        addresses: Vec::new(),
        created: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kubelet, ResourceReservation, StaticReservation};

    fn gib(n: i64) -> Quantity {
        Quantity::units(n << 30)
    }

    #[test]
    fn auto_reserve_follows_the_tiers() {
        // 4 cores: 60m + 10m + 2×5m = 80m.
        assert_eq!(auto_cpu_reserve(Quantity::units(4)), Quantity(80));
        // 8 cores: 80m + 4×2.5m = 90m.
        assert_eq!(auto_cpu_reserve(Quantity::units(8)), Quantity(90));
        // 16 GiB: 1 GiB + 0.8 GiB + 0.8 GiB = 2.6 GiB.
        let got = auto_memory_reserve(gib(16)).0;
        let want = gib(1).0 + gib(8).0 * 2 / 10;
        assert_eq!(got, want);
        assert_eq!(
            auto_memory_reserve(Quantity::units(512 << 20)).0,
            255 * (1000 << 20)
        );
    }

    #[test]
    fn shape_applies_reserve_and_max_pods() {
        let mut group = NodeGroup::default();
        let class = InstanceClass::new("AWSInstanceClass", "m5", 4, 16);
        let shape = node_shape(&group, &class);
        assert_eq!(shape.capacity["cpu"], Quantity::units(4));
        assert_eq!(shape.allocatable["cpu"], Quantity(4000 - 80));
        assert_eq!(shape.allocatable["pods"], Quantity::units(110));
        assert!(shape.allocatable["memory"] < shape.capacity["memory"]);

        group.spec.kubelet = Some(Kubelet {
            max_pods: Some(30),
            resource_reservation: Some(ResourceReservation {
                mode: Some(ResourceReservationMode::Static),
                static_: Some(StaticReservation {
                    cpu: Some("500m".into()),
                    memory: Some("1Gi".into()),
                    ephemeral_storage: None,
                }),
            }),
            ..Kubelet::default()
        });
        let shape = node_shape(&group, &class);
        assert_eq!(shape.allocatable["cpu"], Quantity(3500));
        assert_eq!(shape.allocatable["pods"], Quantity::units(30));
        assert_eq!(
            shape.allocatable["memory"],
            gib(16) - gib(1) - EVICTION_THRESHOLD_MEMORY
        );
    }

    #[test]
    fn checksum_changes_with_the_class() {
        let a = InstanceClass::new("AWSInstanceClass", "m5", 4, 16);
        let mut b = a.clone();
        assert_eq!(a.checksum(), b.checksum());
        b.cpu = Quantity::units(8);
        assert_ne!(a.checksum(), b.checksum());
        let c = InstanceClass::new("AWSInstanceClass", "m6", 4, 16);
        assert_ne!(a.checksum(), c.checksum());
    }
}
