//! Keeping `spec.nodeTemplate` on a group's nodes: which labels, annotations and taints to set
//! and which to remove from each node (docs/deckhouse.md §1.1 `nodeTemplate`, Deckhouse's node-template
//! hook).
//!
//! [`plan_node_template`] compares one node with its group and returns a [`NodeChange`] (or
//! nothing when the node is as it should be); [`plan_node_templates`] does it for a cluster.
//!
//! # Rules
//! 1. Every template label and annotation is set to the template's value.
//! 2. A key that was applied from the template before (recorded in the node's
//!    [`keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE`] annotation, JSON
//!    `{"annotations":{…},"labels":{…},"taints":[…]}` as Deckhouse writes it) and is no longer
//!    in the template is removed. Keys the template never held are never touched, whoever set
//!    them.
//! 3. Taints are identified by key and effect: a template taint replaces the node's taint with
//!    the same key and effect (its value follows the template); a taint applied before and no
//!    longer in the template is removed; other taints stay, in their order.
//! 4. The bootstrap taint [`keys::TAINT_UNINITIALIZED`] is removed.
//! 5. The node gets `node-role.kubernetes.io/<group>=""` and `node.deckhouse.io/type=<type>`;
//!    nodes of group `master` also get the `control-plane` and `master` roles; nodes of
//!    `CloudPermanent`, `CloudStatic` and `Static` groups get
//!    `cluster-autoscaler.kubernetes.io/scale-down-disabled=true`.
//! 6. The last-applied annotation is rewritten to the current template.
//!
//! # Differences from Deckhouse
//! Deckhouse leaves CloudEphemeral nodes to the machine controller (MCM applies the template);
//! nodemgr has no MCM and applies the template to every node of every group. Deckhouse's
//! special repair of the `master` taint on single-node clusters is not reproduced.
//!
//! # Guarantees (checked by properties in `tests`)
//! - After [`NodeChange::apply`] the node carries every template entry, none of the removed
//!   ones, and every other label, annotation and taint it had.
//! - Planning again on the result yields no change (idempotence), so a controller that
//!   re-plans on every event converges and stops patching.
//! - The plan depends on the node's current labels and annotations only through the keys it
//!   manages, so two writers of unrelated keys never fight.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::model::{Node, NodeGroup, NodeType, Taint, keys};

/// What nodemgr applied to a node from its group's template last time: the content of the
/// [`keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE`] annotation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AppliedTemplate {
    /// Annotations applied.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Labels applied.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints applied.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

impl AppliedTemplate {
    /// The template of `group`, as it is recorded once applied.
    pub fn of(group: &NodeGroup) -> Self {
        let template = group.spec.node_template.as_ref();
        Self {
            annotations: template
                .and_then(|t| t.annotations.clone())
                .unwrap_or_default(),
            labels: template.and_then(|t| t.labels.clone()).unwrap_or_default(),
            taints: template.and_then(|t| t.taints.clone()).unwrap_or_default(),
        }
    }

    /// The annotation value: compact JSON with sorted keys, in Deckhouse's shape.
    pub fn to_annotation(&self) -> String {
        // Serializing maps of strings and plain structs cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the annotation of `node`; `Ok(None)` when the node has none.
    ///
    /// # Errors
    /// [`TemplateError::MalformedLastApplied`] when the value is not the JSON nodemgr (or
    /// Deckhouse) writes.
    pub fn from_node(node: &Node) -> Result<Option<Self>, TemplateError> {
        let Some(text) = node
            .annotations
            .get(keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE)
        else {
            return Ok(None);
        };
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| TemplateError::MalformedLastApplied {
                node: node.name.clone(),
                reason: e.to_string(),
            })
    }
}

/// Why a node's template could not be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The last-applied annotation cannot be read, so nodemgr cannot tell which keys it set
    /// before and refuses to guess.
    #[error(
        "node {node}: annotation {annotation} is not valid JSON ({reason}); delete the annotation \
         to let nodemgr apply the template again (keys applied from an older template then stay \
         on the node until removed by hand)",
        annotation = keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE
    )]
    MalformedLastApplied {
        /// The node.
        node: String,
        /// The JSON error.
        reason: String,
    },
}

/// The changes one node needs, in the shape of a JSON merge patch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeChange {
    /// The node.
    pub node: String,
    /// Labels to set (`Some`) or remove (`None`).
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations to set (`Some`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
    /// The node's complete new taint list, when it changes (taints are a list, replaced whole).
    pub taints: Option<Vec<Taint>>,
}

impl NodeChange {
    /// Whether the change changes nothing.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty() && self.taints.is_none()
    }

    /// Applies the change to `node` (what the API server does with the patch).
    pub fn apply(&self, node: &mut Node) {
        apply_map(&mut node.labels, &self.labels);
        apply_map(&mut node.annotations, &self.annotations);
        if let Some(taints) = &self.taints {
            node.taints.clone_from(taints);
        }
    }

    /// Label keys set and removed, for logs and events.
    pub fn summary(&self) -> String {
        let count = |m: &BTreeMap<String, Option<String>>| {
            let set = m.values().filter(|v| v.is_some()).count();
            (set, m.len() - set)
        };
        let (ls, lr) = count(&self.labels);
        let (a_set, a_rm) = count(&self.annotations);
        let mut text = format!(
            "node {}: labels +{ls}/-{lr}, annotations +{a_set}/-{a_rm}",
            self.node
        );
        if let Some(t) = &self.taints {
            text.push_str(&format!(", taints now {}", t.len()));
        }
        text
    }
}

fn apply_map(target: &mut BTreeMap<String, String>, change: &BTreeMap<String, Option<String>>) {
    for (k, v) in change {
        match v {
            Some(v) => {
                target.insert(k.clone(), v.clone());
            }
            None => {
                target.remove(k);
            }
        }
    }
}

/// Whether two taints are the same taint for Kubernetes (same key and effect).
fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// The labels nodemgr keeps on every node of `group` besides the template's (rule 5).
fn role_labels(group: &NodeGroup) -> Vec<(String, String)> {
    let mut labels = vec![(
        format!("{}{}", keys::LABEL_NODE_ROLE_PREFIX, group.name()),
        String::new(),
    )];
    if let Some(t) = &group.spec.node_type {
        labels.push((keys::LABEL_NODE_TYPE.to_owned(), t.as_str().to_owned()));
    }
    if group.name() == "master" {
        for role in ["control-plane", "master"] {
            labels.push((
                format!("{}{role}", keys::LABEL_NODE_ROLE_PREFIX),
                String::new(),
            ));
        }
    }
    labels
}

/// Plans the template changes of one `node` of `group`, with the template already recorded as
/// `template` (pass [`AppliedTemplate::of`]; [`plan_node_templates`] computes it once a group).
/// Returns `Ok(None)` when the node needs no change.
///
/// # Errors
/// [`TemplateError::MalformedLastApplied`]: see [`AppliedTemplate::from_node`].
pub fn plan_node_template_with(
    group: &NodeGroup,
    template: &AppliedTemplate,
    template_annotation: &str,
    node: &Node,
) -> Result<Option<NodeChange>, TemplateError> {
    let last = AppliedTemplate::from_node(node)?.unwrap_or_default();
    let mut change = NodeChange {
        node: node.name.clone(),
        ..NodeChange::default()
    };

    diff_map(
        &node.labels,
        &template.labels,
        &last.labels,
        &mut change.labels,
    );
    for (k, v) in role_labels(group) {
        if node.labels.get(&k) != Some(&v) {
            change.labels.insert(k, Some(v));
        } else {
            change.labels.remove(&k);
        }
    }

    diff_map(
        &node.annotations,
        &template.annotations,
        &last.annotations,
        &mut change.annotations,
    );
    if matches!(
        group.spec.node_type,
        Some(NodeType::CloudPermanent | NodeType::CloudStatic | NodeType::Static)
    ) && node
        .annotations
        .get(keys::ANNOTATION_SCALE_DOWN_DISABLED)
        .map(String::as_str)
        != Some("true")
    {
        change.annotations.insert(
            keys::ANNOTATION_SCALE_DOWN_DISABLED.to_owned(),
            Some("true".to_owned()),
        );
    }
    let recorded = node
        .annotations
        .get(keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE)
        .map(String::as_str);
    if recorded != Some(template_annotation) {
        change.annotations.insert(
            keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE.to_owned(),
            Some(template_annotation.to_owned()),
        );
    }

    let taints = merge_taints(&node.taints, &template.taints, &last.taints);
    if taints != node.taints {
        change.taints = Some(taints);
    }

    Ok((!change.is_empty()).then_some(change))
}

/// Plans the template changes of one `node` of `group` (see the module rules).
///
/// # Errors
/// [`TemplateError::MalformedLastApplied`]: see [`AppliedTemplate::from_node`].
pub fn plan_node_template(
    group: &NodeGroup,
    node: &Node,
) -> Result<Option<NodeChange>, TemplateError> {
    let template = AppliedTemplate::of(group);
    let annotation = template.to_annotation();
    plan_node_template_with(group, &template, &annotation, node)
}

/// Rules 1 and 2 for one map.
fn diff_map(
    actual: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
    last: &BTreeMap<String, String>,
    out: &mut BTreeMap<String, Option<String>>,
) {
    for key in last.keys() {
        if !template.contains_key(key) && actual.contains_key(key) {
            out.insert(key.clone(), None);
        }
    }
    for (key, value) in template {
        if actual.get(key) != Some(value) {
            out.insert(key.clone(), Some(value.clone()));
        }
    }
}

/// Rules 3 and 4: the node's new taint list.
fn merge_taints(actual: &[Taint], template: &[Taint], last: &[Taint]) -> Vec<Taint> {
    let mut out: Vec<Taint> = Vec::with_capacity(actual.len() + template.len());
    for taint in actual {
        if taint.key == keys::TAINT_UNINITIALIZED {
            continue;
        }
        let removed = last.iter().any(|l| same_taint(l, taint))
            && !template.iter().any(|t| same_taint(t, taint));
        if removed {
            continue;
        }
        match template.iter().find(|t| same_taint(t, taint)) {
            Some(wanted) => out.push(wanted.clone()),
            None => out.push(taint.clone()),
        }
    }
    for wanted in template {
        if !out.iter().any(|t| same_taint(t, wanted)) {
            out.push(wanted.clone());
        }
    }
    out
}

/// A node that could not be planned, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFailure {
    /// The node.
    pub node: String,
    /// Why.
    pub error: TemplateError,
}

/// The result of one pass over a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TemplatePlan {
    /// Nodes that need a change, in the order given.
    pub changes: Vec<NodeChange>,
    /// Nodes whose last-applied annotation is broken.
    pub failures: Vec<TemplateFailure>,
}

/// Plans every node that belongs to one of `groups` (by [`keys::LABEL_NODE_GROUP`]); nodes
/// without the label or of an unknown group are left alone, as Deckhouse does.
pub fn plan_node_templates<'a, N>(groups: &[NodeGroup], nodes: N) -> TemplatePlan
where
    N: IntoIterator<Item = &'a Node>,
{
    let prepared: HashMap<&str, (&NodeGroup, AppliedTemplate, String)> = groups
        .iter()
        .map(|g| {
            let template = AppliedTemplate::of(g);
            let annotation = template.to_annotation();
            (g.name(), (g, template, annotation))
        })
        .collect();
    let mut plan = TemplatePlan::default();
    for node in nodes {
        let Some((group, template, annotation)) = node.group().and_then(|g| prepared.get(g)) else {
            continue;
        };
        match plan_node_template_with(group, template, annotation, node) {
            Ok(Some(change)) => plan.changes.push(change),
            Ok(None) => {}
            Err(error) => plan.failures.push(TemplateFailure {
                node: node.name.clone(),
                error,
            }),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeGroupSpec, NodeTemplate, ObjectMeta, TaintEffect};
    use proptest::prelude::*;

    fn group(name: &str, node_type: NodeType, template: NodeTemplate) -> NodeGroup {
        NodeGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: NodeGroupSpec {
                node_type: Some(node_type),
                node_template: Some(template),
                ..NodeGroupSpec::default()
            },
            ..NodeGroup::default()
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: Some(effect),
        }
    }

    fn node(name: &str, group: &str) -> Node {
        Node {
            name: name.into(),
            labels: map(&[(keys::LABEL_NODE_GROUP, group)]).into(),
            ..Node::default()
        }
    }

    fn converge(g: &NodeGroup, n: &mut Node) {
        if let Some(c) = plan_node_template(g, n).unwrap() {
            c.apply(n);
        }
    }

    #[test]
    fn applies_template_roles_and_records_it() {
        let g = group(
            "worker",
            NodeType::Static,
            NodeTemplate {
                labels: Some(map(&[("env", "prod")])),
                annotations: Some(map(&[("team", "a")])),
                taints: Some(vec![taint("dedicated", "db", TaintEffect::NoSchedule)]),
            },
        );
        let mut n = node("w-1", "worker");
        n.taints = vec![taint(
            keys::TAINT_UNINITIALIZED,
            "",
            TaintEffect::NoSchedule,
        )];
        converge(&g, &mut n);
        assert_eq!(n.labels["env"], "prod");
        assert_eq!(n.labels["node-role.kubernetes.io/worker"], "");
        assert_eq!(n.labels[keys::LABEL_NODE_TYPE], "Static");
        assert_eq!(n.annotations["team"], "a");
        assert_eq!(n.annotations[keys::ANNOTATION_SCALE_DOWN_DISABLED], "true");
        assert_eq!(
            n.taints,
            vec![taint("dedicated", "db", TaintEffect::NoSchedule)]
        );
        assert_eq!(
            n.annotations[keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE],
            r#"{"annotations":{"team":"a"},"labels":{"env":"prod"},"taints":[{"effect":"NoSchedule","key":"dedicated","value":"db"}]}"#
        );
        assert_eq!(plan_node_template(&g, &n).unwrap(), None);
    }

    #[test]
    fn removed_entries_leave_and_foreign_ones_stay() {
        let mut g = group(
            "worker",
            NodeType::CloudEphemeral,
            NodeTemplate {
                labels: Some(map(&[("env", "prod"), ("tier", "1")])),
                annotations: None,
                taints: Some(vec![taint("dedicated", "db", TaintEffect::NoSchedule)]),
            },
        );
        let mut n = node("w-1", "worker");
        n.labels
            .insert("kubernetes.io/hostname".into(), "w-1".into());
        n.taints = vec![taint("other", "", TaintEffect::NoExecute)];
        converge(&g, &mut n);
        g.spec.node_template = Some(NodeTemplate {
            labels: Some(map(&[("env", "staging")])),
            ..NodeTemplate::default()
        });
        let change = plan_node_template(&g, &n).unwrap().unwrap();
        assert_eq!(change.labels.get("tier"), Some(&None));
        assert_eq!(change.labels.get("env"), Some(&Some("staging".into())));
        change.apply(&mut n);
        assert!(!n.labels.contains_key("tier"));
        assert_eq!(n.labels["kubernetes.io/hostname"], "w-1");
        assert_eq!(n.taints, vec![taint("other", "", TaintEffect::NoExecute)]);
        assert!(
            !n.annotations
                .contains_key(keys::ANNOTATION_SCALE_DOWN_DISABLED)
        );
    }

    #[test]
    fn template_taint_replaces_same_key_and_effect() {
        let g = group(
            "w",
            NodeType::Static,
            NodeTemplate {
                taints: Some(vec![taint("dedicated", "new", TaintEffect::NoSchedule)]),
                ..NodeTemplate::default()
            },
        );
        let mut n = node("n", "w");
        n.taints = vec![
            taint("dedicated", "old", TaintEffect::NoSchedule),
            taint("dedicated", "x", TaintEffect::NoExecute),
        ];
        converge(&g, &mut n);
        assert_eq!(
            n.taints,
            vec![
                taint("dedicated", "new", TaintEffect::NoSchedule),
                taint("dedicated", "x", TaintEffect::NoExecute),
            ]
        );
    }

    #[test]
    fn master_gets_control_plane_roles() {
        let g = group("master", NodeType::CloudPermanent, NodeTemplate::default());
        let mut n = node("m-0", "master");
        converge(&g, &mut n);
        assert_eq!(n.labels["node-role.kubernetes.io/control-plane"], "");
        assert_eq!(n.labels["node-role.kubernetes.io/master"], "");
    }

    #[test]
    fn malformed_annotation_is_refused_with_advice() {
        let g = group("w", NodeType::Static, NodeTemplate::default());
        let mut n = node("n", "w");
        n.annotations.insert(
            keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE.into(),
            "{not json".into(),
        );
        let err = plan_node_template(&g, &n).unwrap_err();
        assert!(err.to_string().contains("delete the annotation"), "{err}");
        let plan = plan_node_templates(&[g], [&n]);
        assert_eq!(plan.failures.len(), 1);
        assert!(plan.changes.is_empty());
    }

    #[test]
    fn reads_deckhouse_annotation_with_empty_fields() {
        let mut n = node("n", "w");
        n.annotations.insert(
            keys::ANNOTATION_LAST_APPLIED_NODE_TEMPLATE.into(),
            r#"{"annotations":{},"labels":{"node-role.kubernetes.io/master":""},"taints":[{"effect":"NoSchedule","key":"node-role.kubernetes.io/master"}]}"#.into(),
        );
        let last = AppliedTemplate::from_node(&n).unwrap().unwrap();
        assert_eq!(last.labels.len(), 1);
        assert_eq!(last.taints[0].value, None);
    }

    #[test]
    fn nodes_of_unknown_groups_are_left_alone() {
        let g = group("w", NodeType::Static, NodeTemplate::default());
        let stranger = node("s", "other");
        let unlabelled = Node {
            name: "u".into(),
            ..Node::default()
        };
        let plan = plan_node_templates(&[g], [&stranger, &unlabelled]);
        assert!(plan.changes.is_empty() && plan.failures.is_empty());
    }

    fn small_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map("[a-d]", "[xy]", 0..4)
    }

    fn small_taints() -> impl Strategy<Value = Vec<Taint>> {
        let effect = prop_oneof![
            Just(TaintEffect::NoSchedule),
            Just(TaintEffect::NoExecute),
            Just(TaintEffect::PreferNoSchedule),
        ];
        prop::collection::vec(("[a-c]", "[xy]?", effect), 0..4).prop_map(|v| {
            let mut out: Vec<Taint> = Vec::new();
            for (k, val, e) in v {
                let t = taint(&k, &val, e);
                if !out.iter().any(|o| same_taint(o, &t)) {
                    out.push(t);
                }
            }
            out
        })
    }

    fn template() -> impl Strategy<Value = NodeTemplate> {
        (small_map(), small_map(), small_taints()).prop_map(|(labels, annotations, taints)| {
            NodeTemplate {
                labels: Some(labels),
                annotations: Some(annotations),
                taints: Some(taints),
            }
        })
    }

    proptest! {
        /// From any node state, through any two templates in a row: the result carries the
        /// second template, nothing of the first that the second dropped (unless someone else
        /// had set it before the first was applied and the first did not own it), everything
        /// foreign, and re-planning is a no-op.
        #[test]
        fn template_changes_converge(
            first in template(),
            second in template(),
            foreign_labels in prop::collection::btree_map("[e-g]", "[xy]", 0..3),
            foreign_taints in prop::collection::vec(("[e-g]", "[xy]?"), 0..3),
        ) {
            let mut n = node("n", "w");
            n.labels.extend(foreign_labels.clone());
            let foreign: Vec<Taint> = foreign_taints
                .iter()
                .map(|(k, v)| taint(k, v, TaintEffect::NoSchedule))
                .fold(Vec::new(), |mut acc, t| {
                    if !acc.iter().any(|o| same_taint(o, &t)) { acc.push(t); }
                    acc
                });
            n.taints = foreign.clone();
            let mut g = group("w", NodeType::Static, first.clone());
            converge(&g, &mut n);
            g.spec.node_template = Some(second.clone());
            converge(&g, &mut n);

            prop_assert_eq!(plan_node_template(&g, &n).unwrap(), None);
            let second_labels = second.labels.clone().unwrap_or_default();
            for (k, v) in &second_labels {
                prop_assert_eq!(n.labels.get(k), Some(v));
            }
            for (k, v) in second.annotations.clone().unwrap_or_default() {
                prop_assert_eq!(n.annotations.get(&k), Some(&v));
            }
            for k in first.labels.clone().unwrap_or_default().keys() {
                if !second_labels.contains_key(k) {
                    prop_assert!(!n.labels.contains_key(k), "label {} stayed", k);
                }
            }
            for (k, v) in &foreign_labels {
                prop_assert_eq!(n.labels.get(k), Some(v));
            }
            let second_taints = second.taints.clone().unwrap_or_default();
            for t in &second_taints {
                prop_assert!(n.taints.contains(t), "template taint {:?} missing", t);
            }
            for t in &foreign {
                prop_assert!(n.taints.contains(t), "foreign taint {:?} lost", t);
            }
            for t in first.taints.clone().unwrap_or_default() {
                if !second_taints.iter().any(|s| same_taint(s, &t)) {
                    prop_assert!(!n.taints.iter().any(|x| same_taint(x, &t)), "taint {:?} stayed", t);
                }
            }
            // No duplicate taints.
            for (i, a) in n.taints.iter().enumerate() {
                for b in &n.taints[i + 1..] {
                    prop_assert!(!same_taint(a, b));
                }
            }
        }
    }
}
