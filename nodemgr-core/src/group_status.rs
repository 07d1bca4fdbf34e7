//! `NodeGroup.status` from the group's nodes: counts, bounds, conditions and the one-line summary
//! `kubectl get ng` shows (docs/deckhouse.md §1.3).
//!
//! [`group_status`] is a pure function of a [`StatusInput`]; the status controller of
//! `nodemgr-k8s` feeds it from its caches and writes the result to the status subresource.
//!
//! # Fields
//! | field | value |
//! |---|---|
//! | `nodes` | nodes labelled with the group |
//! | `ready` | of those, with condition `Ready=True` |
//! | `upToDate` | of those, whose `node.deckhouse.io/configuration-checksum` equals the group's; left out when the group's checksum is unknown |
//! | `min`, `max` | CloudEphemeral: `minPerZone`/`maxPerZone` × zones; 0 for other types (as Deckhouse) |
//! | `instances`, `desired` | CloudEphemeral: from the machine layer when it reports ([`MachineCounts`], read from the group's `Instance` objects by [`MachineCounts::of_instances`]); else `instances` = `nodes` and `desired` = `nodes` clamped to `[min, max]`; 0 for other types |
//! | `standby` | the standby nodes the machine controller reports holding, when it does |
//! | `engine` | `CAPI` for groups whose machines nodemgr orders, else `None` ([`engine`]) |
//! | `kubernetesVersion` | `spec.kubernetesVersion`, else the API server's, never above the API server's ([`kubernetes_version`]) |
//! | `error` | the latest error (validation or machine), when any |
//! | `deckhouse.observed` | the spec's checksum ([`NodeGroup::spec_checksum`]) and when it was first seen; `deckhouse.processed` is bashible-apiserver's and kept as it is |
//! | `deckhouse.synced` | `True` when `processed` names the `observed` spec, else `False` ([`spec_sync`]) |
//!
//! # Conditions (docs/deckhouse.md §1.3)
//! - `Ready`: CloudEphemeral: Ready and schedulable nodes ≥ `min`; other types: every node
//!   Ready and schedulable.
//! - `Updating`: some node has an `update.node.deckhouse.io/*` annotation.
//! - `WaitingForDisruptiveApproval`: some node has `disruption-required` without
//!   `disruption-approved`.
//! - `Scaling` (CloudEphemeral only): `desired > nodes`, or `desired < instances`.
//! - `Error`: an error is reported.
//!
//! [`condition_transitions`] lists what changed between two statuses, for one Event each.
//!
//! A condition keeps its `lastTransitionTime` from the previous status while its `status`
//! does not change, so writing the status again with the same inputs changes nothing.
//! `conditionSummary.ready` mirrors `Ready`; `statusMessage` is empty for a healthy group and
//! names the first problem otherwise (error, not-Ready nodes, waiting disruptions).

use std::collections::BTreeSet;

use crate::machines::MachinePhase;
use crate::model::{
    Condition, ConditionSummary, Instance, Node, NodeGroup, NodeGroupStatus, NodeType, SpecStamp,
    SpecSync, Timestamp, keys,
};
use crate::scaling::group_zones;

/// Machine counts reported by the machine layer (cloud instances or the Instance objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineCounts {
    /// Machines in any state.
    pub instances: i64,
    /// Machines wanted.
    pub desired: i64,
}

impl MachineCounts {
    /// The counts the machine controller's `Instance` objects of one group say (the machine
    /// controller creates an Instance before its machine and marks it `Terminating` when it
    /// deletes the machine, docs/deckhouse.md §8): `instances` = every Instance, `desired` =
    /// those not being deleted (phase `Terminating` or a deletion timestamp).
    ///
    /// `None` when the group has no Instance at all: then no machine layer has reported (it is
    /// not running, or it has not created the group's first machine yet), and the status falls
    /// back to its estimate from the nodes, whose `desired` is at least `min`.
    pub fn of_instances<'a>(instances: impl IntoIterator<Item = &'a Instance>) -> Option<Self> {
        let mut counts = MachineCounts {
            instances: 0,
            desired: 0,
        };
        for instance in instances {
            counts.instances = counts.instances.saturating_add(1);
            let phase = MachinePhase::parse(
                instance
                    .status
                    .current_status
                    .as_ref()
                    .and_then(|c| c.phase.as_deref()),
            );
            if phase != MachinePhase::Terminating && instance.metadata.deletion_timestamp.is_none()
            {
                counts.desired = counts.desired.saturating_add(1);
            }
        }
        (counts.instances > 0).then_some(counts)
    }
}

/// `status.deckhouse` for `group` at `now`: `observed` names the current spec (its stamp kept
/// while the spec does not change), `processed` is carried over from the previous status (its
/// writer is bashible-apiserver), `synced` compares the two.
pub fn spec_sync(
    group: &NodeGroup,
    previous: Option<&NodeGroupStatus>,
    now: Timestamp,
) -> SpecSync {
    let check_sum = group.spec_checksum();
    let before = previous.and_then(|p| p.deckhouse.as_ref());
    let observed = before
        .and_then(|d| d.observed.clone())
        .filter(|o| o.check_sum.as_deref() == Some(check_sum.as_str()))
        .unwrap_or_else(|| SpecStamp {
            last_timestamp: Some(now.to_rfc3339()),
            check_sum: Some(check_sum.clone()),
        });
    let processed = before.and_then(|d| d.processed.clone());
    let synced = processed
        .as_ref()
        .is_some_and(|p| p.check_sum.as_deref() == Some(check_sum.as_str()));
    SpecSync {
        observed: Some(observed),
        processed,
        synced: Some(if synced { "True" } else { "False" }.to_owned()),
    }
}

/// Everything [`group_status`] needs about one group.
#[derive(Debug, Clone)]
pub struct StatusInput<'a> {
    /// The group.
    pub group: &'a NodeGroup,
    /// Its nodes (labelled `node.deckhouse.io/group=<name>`).
    pub nodes: Vec<&'a Node>,
    /// The configuration checksum its nodes should report, when known.
    pub desired_checksum: Option<&'a str>,
    /// Zones of the cloud, used when `cloudInstances.zones` is empty (CloudEphemeral).
    pub cloud_zones: &'a [String],
    /// What the machine layer reports, when it does.
    pub machines: Option<MachineCounts>,
    /// Standby-holder pods, when known.
    pub standby: Option<i64>,
    /// The API server's `major.minor` version (`/version`), when known.
    pub api_server_version: Option<&'a str>,
    /// The latest error to report (validation, machine failure).
    pub error: Option<&'a str>,
    /// The status written last time (for `lastTransitionTime`).
    pub previous: Option<&'a NodeGroupStatus>,
    /// Now.
    pub now: Timestamp,
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Computes the status of one group (see the module docs).
pub fn group_status(input: &StatusInput<'_>) -> NodeGroupStatus {
    let group = input.group;
    let nodes = &input.nodes;
    let total = count(nodes.len());
    let ready = count(nodes.iter().filter(|n| n.ready).count());
    let ready_schedulable = count(nodes.iter().filter(|n| n.ready && !n.unschedulable).count());
    let up_to_date = input
        .desired_checksum
        .filter(|c| !c.is_empty())
        .map(|c| count(nodes.iter().filter(|n| n.checksum() == Some(c)).count()));

    let ephemeral = group.spec.node_type == Some(NodeType::CloudEphemeral);
    let (min, max, instances, desired) = if ephemeral {
        let mut zones = group_zones(group, input.cloud_zones).len();
        if zones == 0 {
            zones = nodes
                .iter()
                .filter_map(|n| n.zone())
                .collect::<BTreeSet<_>>()
                .len();
        }
        let zones = count(zones.max(1));
        let cloud = group.spec.cloud_instances.as_ref();
        let min = cloud
            .and_then(|c| c.min_per_zone)
            .unwrap_or(0)
            .max(0)
            .saturating_mul(zones);
        let max = cloud
            .and_then(|c| c.max_per_zone)
            .unwrap_or(0)
            .max(0)
            .saturating_mul(zones);
        let (instances, desired) = match input.machines {
            Some(m) => (m.instances, m.desired),
            None => (total, total.min(max).max(min)),
        };
        (min, max, instances, desired)
    } else {
        (0, 0, 0, 0)
    };

    let updating = nodes.iter().any(|n| {
        n.annotations
            .keys()
            .any(|k| k.starts_with(keys::UPDATE_ANNOTATION_PREFIX))
    });
    let waiting_disruption: Vec<&str> = nodes
        .iter()
        .filter(|n| {
            n.has_annotation(keys::ANNOTATION_DISRUPTION_REQUIRED)
                && !n.has_annotation(keys::ANNOTATION_DISRUPTION_APPROVED)
        })
        .map(|n| n.name.as_str())
        .collect();
    let (is_ready, ready_message) = if ephemeral {
        (
            ready_schedulable >= min,
            format!("{ready_schedulable} Ready and schedulable nodes, {min} required"),
        )
    } else {
        (
            ready_schedulable == total,
            format!("{ready_schedulable} of {total} nodes Ready and schedulable"),
        )
    };
    let scaling = ephemeral && (desired > total || desired < instances);

    let mut conditions = vec![
        condition("Ready", is_ready, Some(ready_message)),
        condition("Updating", updating, None),
        condition(
            "WaitingForDisruptiveApproval",
            !waiting_disruption.is_empty(),
            (!waiting_disruption.is_empty())
                .then(|| format!("nodes waiting: {}", waiting_disruption.join(", "))),
        ),
    ];
    if ephemeral {
        conditions.push(condition(
            "Scaling",
            scaling,
            scaling.then(|| format!("desired {desired}, nodes {total}, instances {instances}")),
        ));
    }
    conditions.push(condition(
        "Error",
        input.error.is_some(),
        input.error.map(str::to_owned),
    ));
    let previous = input.previous.and_then(|p| p.conditions.as_deref());
    // Conditions of types computed elsewhere (bashible-apiserver's `BundleRenderFailed`) are
    // kept as they are, so that the two writers do not undo each other.
    let foreign: Vec<Condition> = previous
        .unwrap_or_default()
        .iter()
        .filter(|o| !conditions.iter().any(|c| c.type_ == o.type_))
        .cloned()
        .collect();
    let now = input.now.to_rfc3339();
    for c in &mut conditions {
        let kept = previous
            .and_then(|p| {
                p.iter()
                    .find(|o| o.type_ == c.type_ && o.status == c.status)
            })
            .and_then(|o| o.last_transition_time.clone());
        c.last_transition_time = Some(kept.unwrap_or_else(|| now.clone()));
    }
    conditions.extend(foreign);

    let status_message = if let Some(e) = input.error {
        e.to_owned()
    } else if !is_ready {
        if ephemeral {
            format!("{ready_schedulable} of {min} required nodes Ready")
        } else {
            format!("{} of {total} nodes not Ready", total - ready_schedulable)
        }
    } else if !waiting_disruption.is_empty() {
        format!(
            "{} nodes wait for disruption approval",
            waiting_disruption.len()
        )
    } else {
        String::new()
    };

    NodeGroupStatus {
        engine: Some(engine(group).to_owned()),
        kubernetes_version: kubernetes_version(group, input.api_server_version),
        nodes: Some(total),
        ready: Some(ready),
        up_to_date,
        instances: Some(instances),
        desired: Some(desired),
        min: Some(min),
        max: Some(max),
        standby: input.standby,
        error: input.error.map(str::to_owned),
        condition_summary: Some(ConditionSummary {
            status_message: Some(status_message),
            ready: Some(if is_ready { "True" } else { "False" }.to_owned()),
        }),
        conditions: Some(conditions),
        deckhouse: Some(spec_sync(group, input.previous, input.now)),
        ..input.previous.cloned().unwrap_or_default()
    }
}

/// `status.engine`: what provisions the group's machines, in Deckhouse's vocabulary (`None`,
/// `MCM`, `CAPI`). nodemgr's own machine layer keeps one Instance object per machine, as
/// Deckhouse's Cluster API engine does, so groups whose machines nodemgr orders (CloudEphemeral
/// groups and Static groups with `staticInstances`) report `CAPI`; the others `None`.
pub fn engine(group: &NodeGroup) -> &'static str {
    let ordered = group.spec.node_type == Some(NodeType::CloudEphemeral)
        || (group.spec.node_type == Some(NodeType::Static)
            && group.spec.static_instances.is_some());
    if ordered { "CAPI" } else { "None" }
}

/// A `major.minor` Kubernetes version, read leniently (`1.33`, `v1.33.2`, minor `33+`).
fn parse_minor_version(text: &str) -> Option<(u32, u32)> {
    let text = text.trim().trim_start_matches('v');
    let mut parts = text.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// `status.kubernetesVersion`: the group's `spec.kubernetesVersion`, else the API server's,
/// never above the API server's (a node's kubelet may not be newer than its API server). `None`
/// when neither is known or readable.
pub fn kubernetes_version(group: &NodeGroup, api_server: Option<&str>) -> Option<String> {
    let server = api_server.and_then(parse_minor_version);
    let wanted = group
        .spec
        .kubernetes_version
        .as_deref()
        .and_then(parse_minor_version);
    let version = match (wanted, server) {
        (Some(w), Some(s)) => w.min(s),
        (Some(v), None) | (None, Some(v)) => v,
        (None, None) => return None,
    };
    Some(format!("{}.{}", version.0, version.1))
}

/// A condition that changed between two statuses: it is new, its status flipped, or its message
/// changed. The status controller raises one Event per transition (Deckhouse raises condition
/// messages as deduplicated Events), so an unchanged condition raises nothing however often the
/// status is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionTransition {
    /// The condition type (`Ready`, `Error`, …).
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// What the Event says.
    pub message: String,
    /// Whether it is bad news (a Warning Event): `Ready` turned `False`, or another condition
    /// (`Error`, `WaitingForDisruptiveApproval`, …) turned or stayed `True` with a new message.
    pub warning: bool,
}

/// The transitions from `previous` to `current` (see [`ConditionTransition`]), in the order of
/// `current`'s conditions. A condition that did not exist before and is in its quiet state
/// (`Ready=True`, others `False`) raises nothing.
pub fn condition_transitions(
    previous: Option<&NodeGroupStatus>,
    current: &NodeGroupStatus,
) -> Vec<ConditionTransition> {
    let before = previous
        .and_then(|p| p.conditions.as_deref())
        .unwrap_or_default();
    let mut out = Vec::new();
    for c in current.conditions.as_deref().unwrap_or_default() {
        let quiet = (c.type_ == "Ready") == (c.status == "True");
        let old = before.iter().find(|o| o.type_ == c.type_);
        let changed = match old {
            Some(o) => o.status != c.status || o.message != c.message,
            None => !quiet,
        };
        if !changed {
            continue;
        }
        let message = match &c.message {
            Some(m) if !m.is_empty() => format!("{} is {}: {m}", c.type_, c.status),
            _ => format!("{} is {}", c.type_, c.status),
        };
        out.push(ConditionTransition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            message,
            warning: !quiet,
        });
    }
    out
}

fn condition(type_: &str, status: bool, message: Option<String>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        last_transition_time: None,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CloudInstances, NodeGroupSpec, ObjectMeta};
    use proptest::prelude::*;

    fn group(node_type: NodeType, cloud: Option<CloudInstances>) -> NodeGroup {
        NodeGroup {
            metadata: ObjectMeta {
                name: Some("w".into()),
                ..ObjectMeta::default()
            },
            spec: NodeGroupSpec {
                node_type: Some(node_type),
                cloud_instances: cloud,
                ..NodeGroupSpec::default()
            },
            ..NodeGroup::default()
        }
    }

    fn node(name: &str, ready: bool, checksum: &str) -> Node {
        let mut n = Node {
            name: name.into(),
            ready,
            ..Node::default()
        };
        n.labels.insert(keys::LABEL_NODE_GROUP.into(), "w".into());
        if !checksum.is_empty() {
            n.annotations.insert(
                keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(),
                checksum.into(),
            );
        }
        n
    }

    fn input<'a>(g: &'a NodeGroup, nodes: &'a [Node]) -> StatusInput<'a> {
        StatusInput {
            group: g,
            nodes: nodes.iter().collect(),
            desired_checksum: Some("abc"),
            cloud_zones: &[],
            machines: None,
            standby: None,
            api_server_version: Some("1.33"),
            error: None,
            previous: None,
            now: Timestamp::from_secs(1_700_000_000),
        }
    }

    #[test]
    fn engine_and_kubernetes_version() {
        let mut g = group(NodeType::CloudEphemeral, None);
        assert_eq!(engine(&g), "CAPI");
        g.spec.node_type = Some(NodeType::Static);
        assert_eq!(engine(&g), "None");
        g.spec.static_instances = Some(crate::model::StaticInstances::default());
        assert_eq!(engine(&g), "CAPI");
        g.spec.node_type = Some(NodeType::CloudPermanent);
        assert_eq!(engine(&g), "None");

        assert_eq!(
            kubernetes_version(&g, Some("1.33")).as_deref(),
            Some("1.33")
        );
        assert_eq!(
            kubernetes_version(&g, Some("v1.31.4")).as_deref(),
            Some("1.31")
        );
        assert_eq!(
            kubernetes_version(&g, Some("1.30+")).as_deref(),
            Some("1.30")
        );
        assert_eq!(kubernetes_version(&g, None), None);
        g.spec.kubernetes_version = Some("1.32".into());
        assert_eq!(
            kubernetes_version(&g, Some("1.33")).as_deref(),
            Some("1.32")
        );
        assert_eq!(
            kubernetes_version(&g, Some("1.31")).as_deref(),
            Some("1.31"),
            "never above the API server"
        );
        assert_eq!(kubernetes_version(&g, None).as_deref(), Some("1.32"));
        assert_eq!(
            kubernetes_version(&g, Some("garbage")).as_deref(),
            Some("1.32")
        );
    }

    #[test]
    fn condition_transitions_raise_once_per_change() {
        let g = group(NodeType::Static, None);
        let healthy = [node("a", true, "abc")];
        let first = group_status(&input(&g, &healthy));
        assert!(
            condition_transitions(None, &first).is_empty(),
            "a healthy first status raises nothing"
        );
        let sick = [node("a", false, "abc")];
        let second = group_status(&StatusInput {
            previous: Some(&first),
            ..input(&g, &sick)
        });
        let t = condition_transitions(Some(&first), &second);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(
            (t[0].type_.as_str(), t[0].status.as_str()),
            ("Ready", "False")
        );
        assert!(t[0].warning);
        assert!(
            t[0].message.starts_with("Ready is False: 0 of 1"),
            "{}",
            t[0].message
        );
        let again = group_status(&StatusInput {
            previous: Some(&second),
            ..input(&g, &sick)
        });
        assert!(condition_transitions(Some(&second), &again).is_empty());
        let healed = group_status(&StatusInput {
            previous: Some(&again),
            ..input(&g, &healthy)
        });
        let t = condition_transitions(Some(&again), &healed);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!((t[0].status.as_str(), t[0].warning), ("True", false));
    }

    fn cond<'a>(s: &'a NodeGroupStatus, t: &str) -> &'a Condition {
        s.conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == t))
            .unwrap()
    }

    #[test]
    fn conditions_of_other_writers_are_kept_and_equal_status_is_stable() {
        let g = group(NodeType::Static, None);
        let nodes = vec![node("a", true, "abc")];
        let first = group_status(&input(&g, &nodes));
        let mut previous = first.clone();
        let foreign = Condition {
            type_: "BundleRenderFailed".into(),
            status: "True".into(),
            last_transition_time: Some("2026-01-01T00:00:00Z".into()),
            message: Some("spec.kubelet.rootDir: not accepted".into()),
        };
        previous.conditions.as_mut().unwrap().push(foreign.clone());
        let mut with_previous = input(&g, &nodes);
        with_previous.previous = Some(&previous);
        let again = group_status(&with_previous);
        assert_eq!(cond(&again, "BundleRenderFailed"), &foreign);
        assert_eq!(again, previous, "nothing changed: no write");
    }

    #[test]
    fn static_group_counts_and_conditions() {
        let g = group(NodeType::Static, None);
        let mut nodes = vec![
            node("a", true, "abc"),
            node("b", false, "old"),
            node("c", true, ""),
        ];
        nodes[1]
            .annotations
            .insert(keys::ANNOTATION_DISRUPTION_REQUIRED.into(), String::new());
        let s = group_status(&input(&g, &nodes));
        assert_eq!(
            (s.nodes, s.ready, s.up_to_date),
            (Some(3), Some(2), Some(1))
        );
        assert_eq!(
            (s.min, s.max, s.desired, s.instances),
            (Some(0), Some(0), Some(0), Some(0))
        );
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "Updating").status, "True");
        assert_eq!(cond(&s, "WaitingForDisruptiveApproval").status, "True");
        assert!(
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .all(|c| c.type_ != "Scaling")
        );
        let summary = s.condition_summary.unwrap();
        assert_eq!(summary.ready.as_deref(), Some("False"));
        assert_eq!(
            summary.status_message.as_deref(),
            Some("1 of 3 nodes not Ready")
        );
        assert_eq!(
            cond(&group_status(&input(&g, &nodes)), "Ready")
                .last_transition_time
                .as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
    }

    #[test]
    fn ephemeral_bounds_follow_zones() {
        let g = group(
            NodeType::CloudEphemeral,
            Some(CloudInstances {
                zones: Some(vec!["a".into(), "b".into()]),
                min_per_zone: Some(1),
                max_per_zone: Some(3),
                ..CloudInstances::default()
            }),
        );
        let nodes = vec![node("a", true, "abc")];
        let s = group_status(&input(&g, &nodes));
        assert_eq!(
            (s.min, s.max, s.desired, s.instances),
            (Some(2), Some(6), Some(2), Some(1))
        );
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "Scaling").status, "True");
        let mut i = input(&g, &nodes);
        i.machines = Some(MachineCounts {
            instances: 1,
            desired: 1,
        });
        let s = group_status(&i);
        assert_eq!(cond(&s, "Scaling").status, "False");
    }

    #[test]
    fn machine_counts_come_from_instances() {
        use crate::model::InstanceCurrentStatus;
        let instance = |phase: &str, deleting: bool| {
            let mut i = Instance::default();
            i.status.current_status = Some(InstanceCurrentStatus {
                phase: Some(phase.into()),
                last_update_time: None,
            });
            if deleting {
                i.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
            }
            i
        };
        assert_eq!(MachineCounts::of_instances(&[]), None);
        let instances = [
            instance("Running", false),
            instance("Pending", false),
            instance("Terminating", false),
            instance("Running", true),
        ];
        assert_eq!(
            MachineCounts::of_instances(&instances),
            Some(MachineCounts {
                instances: 4,
                desired: 2
            })
        );
    }

    #[test]
    fn spec_sync_observes_the_spec_and_compares_it_with_the_processed_one() {
        let g = group(NodeType::Static, None);
        let nodes = vec![node("a", true, "abc")];
        let first = group_status(&input(&g, &nodes));
        let sync = first.deckhouse.clone().unwrap();
        let observed = sync.observed.clone().unwrap();
        assert_eq!(
            observed.check_sum.as_deref(),
            Some(g.spec_checksum().as_str())
        );
        assert_eq!(sync.processed, None);
        assert_eq!(sync.synced.as_deref(), Some("False"));
        // bashible-apiserver processes the spec: synced, and the observed stamp stays.
        let mut processed = first.clone();
        processed.deckhouse = Some(SpecSync {
            processed: Some(SpecStamp {
                last_timestamp: Some("2026-01-01T00:00:00Z".into()),
                check_sum: Some(g.spec_checksum()),
            }),
            ..sync.clone()
        });
        let mut later = input(&g, &nodes);
        later.previous = Some(&processed);
        later.now = Timestamp::from_millis(later.now.as_millis() + 60_000);
        let second = group_status(&later);
        let sync2 = second.deckhouse.clone().unwrap();
        assert_eq!(sync2.synced.as_deref(), Some("True"));
        assert_eq!(sync2.observed, Some(observed.clone()));
        assert_eq!(group_status(&later), second, "same inputs, same status");
        // The spec changes: a new observed stamp, not synced until processed again.
        let mut changed = g.clone();
        changed.spec.node_drain_timeout_second = Some(60);
        let mut after = input(&changed, &nodes);
        after.previous = Some(&second);
        let sync3 = group_status(&after).deckhouse.unwrap();
        assert_ne!(sync3.observed, Some(observed));
        assert_eq!(sync3.synced.as_deref(), Some("False"));
        assert_eq!(sync3.processed, sync2.processed);
    }

    #[test]
    fn unknown_checksum_leaves_up_to_date_out_and_errors_are_reported() {
        let g = group(NodeType::Static, None);
        let nodes = vec![node("a", true, "abc")];
        let mut i = input(&g, &nodes);
        i.desired_checksum = None;
        i.error = Some("spec.cri.type: Docker is not supported");
        let s = group_status(&i);
        assert_eq!(s.up_to_date, None);
        assert_eq!(cond(&s, "Error").status, "True");
        assert_eq!(
            s.condition_summary.unwrap().status_message.as_deref(),
            i.error
        );
    }

    proptest! {
        /// Counts stay within bounds, and recomputing from the written status with a later
        /// clock changes nothing (the controller does not rewrite an unchanged status).
        #[test]
        fn status_is_consistent_and_stable(
            states in prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..12),
            later in 1i64..10_000,
        ) {
            let g = group(NodeType::Static, None);
            let nodes: Vec<Node> = states
                .iter()
                .enumerate()
                .map(|(i, (ready, current, cordoned))| {
                    let mut n = node(&format!("n{i}"), *ready, if *current { "abc" } else { "x" });
                    n.unschedulable = *cordoned;
                    n
                })
                .collect();
            let first = group_status(&input(&g, &nodes));
            let (total, ready, current) = (first.nodes.unwrap(), first.ready.unwrap(), first.up_to_date.unwrap());
            prop_assert!(ready <= total && current <= total);
            let mut again = input(&g, &nodes);
            again.previous = Some(&first);
            again.now = Timestamp::from_secs(1_700_000_000 + later);
            prop_assert_eq!(group_status(&again), first.clone());
            let all_ok = states.iter().all(|(r, _, c)| *r && !*c);
            prop_assert_eq!(cond(&first, "Ready").status == "True", all_ok);
        }
    }
}
