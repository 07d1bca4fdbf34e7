//! The kubelets of ordered machines: a running machine joins once as a Ready Node shaped by the
//! instance class its Instance records, and the scenario's initial nodes of scaling groups are
//! made to look as if they had been made that way.

use super::*;

/// Makes `node` look like a node of its group's class: the group's `nodeTemplate` labels and
/// taints, the zone (moved to `zone` when given), allocatable after the system reserve, and
/// the class checksum.
pub(super) fn conform_node(
    world: &mut World,
    node: &str,
    class: &InstanceClass,
    zone: Option<&str>,
) {
    let Some(sn) = world.nodes.get(node) else {
        return;
    };
    let Some(g) = world.groups.get(&sn.group) else {
        return;
    };
    let group = g.group.clone();
    let zone = zone.map_or_else(|| sn.zone.clone(), str::to_owned);
    let shape = node_shape(&group, class);
    let template = template_node(&group, class, &shape, &zone, node);
    if let Some(sn) = world.nodes.get_mut(node) {
        sn.zone = zone.clone();
        let n = Arc::make_mut(&mut sn.node);
        n.labels.extend(template.labels);
        n.annotations.extend(template.annotations);
        n.taints = template.taints;
        n.allocatable = template.allocatable;
    }
    world.agent_inputs_changed(node);
}

impl ScalingController {
    /// Nodes of scaling groups without a class checksum that are not machines of this cloud
    /// (RollingUpdate replacements) are made from the group's current class.
    pub(super) fn conform_new_nodes(&self, world: &mut World) {
        let todo: Vec<(String, String)> = world
            .nodes
            .values()
            .filter(|n| {
                !n.node
                    .has_annotation(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
            })
            .map(|n| (n.node.name.clone(), n.group.clone()))
            .collect();
        for (node, group) in todo {
            if let Some(class) = self.class_for(world, &group) {
                conform_node(world, &node, &class, None);
            }
        }
    }

    /// Kubelets: every running machine that has not joined yet joins as a Ready Node named
    /// like the machine, made from the class its Instance records.
    pub(super) fn join_running(&mut self, world: &mut World) {
        for m in self.cloud.existing() {
            if m.state != InstanceState::Running
                || self.joined.contains(&m.machine)
                || world.nodes.contains_key(&m.machine)
            {
                continue;
            }
            let recorded = world
                .instances
                .get(&m.machine)
                .and_then(|i| {
                    i.metadata
                        .annotations
                        .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
                })
                .cloned();
            let class = recorded
                .and_then(|c| self.classes.iter().find(|k| k.checksum() == c).cloned())
                .or_else(|| self.class_for(world, &m.group));
            let Some(class) = class else {
                continue;
            };
            self.joined.insert(m.machine.clone());
            let now = world.now;
            let Some(name) = world.add_node_as(&m.group, &m.machine, &m.zone, now) else {
                continue;
            };
            conform_node(world, &name, &class, Some(&m.zone));
            if let Some(n) = world.nodes.get_mut(&name) {
                Arc::make_mut(&mut n.node).provider_id = Some(m.provider_id.clone());
            }
            world.record(
                "nodeJoined",
                Some(&name),
                None,
                format!(
                    "machine of {} in {} joined as a Ready node",
                    m.group, m.zone
                ),
            );
        }
    }
}
