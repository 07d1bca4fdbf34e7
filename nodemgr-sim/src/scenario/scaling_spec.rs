//! The `scaling` section of a scenario and the `scaleWorkload` event: their spec types and
//! their checks against the rest of the scenario. What the scaling controller does with them
//! is [`crate::scaling`]'s; this module only decides what a valid section is, so the scenario
//! owns every type it reads without depending on the controllers.

use std::collections::BTreeMap;
use std::time::Duration;

use nodemgr_core::model::{NodeGroup, NodeType, Quantity};
use nodemgr_core::scaling::{InstanceClass, class_of};
use serde::{Deserialize, Serialize};

use super::{Scenario, ScenarioError, SimDuration, invalid};

/// The `scaling` section of a scenario (see the README's "Scaling" section).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingSpec {
    /// How often the controller runs. Default 10 s.
    #[serde(default = "default_period")]
    pub period: SimDuration,
    /// Instance classes the groups' `cloudInstances.classReference` point at.
    pub classes: Vec<ClassSpec>,
    /// Time from ordering a machine to its Node joining. Default: the scenario's
    /// `provisionDelay`.
    #[serde(default)]
    pub provision_delay: Option<SimDuration>,
    /// Requested utilization (percent) under which a node is underutilized. Default 50.
    #[serde(default = "fifty")]
    pub scale_down_utilization_percent: u32,
    /// How long a node stays underutilized before it is removed. Default 10 min.
    #[serde(default = "ten_minutes")]
    pub scale_down_unneeded_time: SimDuration,
    /// No scale-down this long after a scale-up. Default 10 min.
    #[serde(default = "ten_minutes")]
    pub scale_down_delay_after_add: SimDuration,
    /// A node not Ready this long counts as failed and is replaced. Default 10 min.
    #[serde(default = "ten_minutes")]
    pub failed_after: SimDuration,
    /// Scheduling constraints of workloads' pods.
    #[serde(default)]
    pub pods: Vec<PodConstraints>,
}

fn default_period() -> SimDuration {
    SimDuration::secs(10)
}

fn fifty() -> u32 {
    50
}

fn ten_minutes() -> SimDuration {
    SimDuration::secs(600)
}

/// An instance class: the size of the machines it makes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClassSpec {
    /// `classReference.name`.
    pub name: String,
    /// `classReference.kind`. Default `InstanceClass`.
    #[serde(default = "default_class_kind")]
    pub kind: String,
    /// CPU of one machine (`4`, `3500m`).
    pub cpu: String,
    /// Memory of one machine (`16Gi`).
    pub memory: String,
    /// Pods per machine (`kubelet.maxPods` wins). Default 110.
    #[serde(default)]
    pub pods: Option<i64>,
    /// Extended resources of one machine (`nvidia.com/gpu: 1`).
    #[serde(default)]
    pub extended: BTreeMap<String, String>,
}

fn default_class_kind() -> String {
    "InstanceClass".into()
}

impl ClassSpec {
    fn to_class(&self, path: &str) -> Result<InstanceClass, ScenarioError> {
        let parse = |what: &str, v: &str| {
            Quantity::parse(v).map_err(|e| ScenarioError::Invalid {
                path: format!("{path}.{what}"),
                message: format!("`{v}`: {e}"),
            })
        };
        let mut class = InstanceClass {
            kind: self.kind.clone(),
            name: self.name.clone(),
            cpu: parse("cpu", &self.cpu)?,
            memory: parse("memory", &self.memory)?,
            pods: self.pods,
            extended: BTreeMap::new(),
        };
        for (k, v) in &self.extended {
            class
                .extended
                .insert(k.clone(), parse(&format!("extended.{k}"), v)?);
        }
        Ok(class)
    }
}

/// Scheduling constraints of one workload's pods.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodConstraints {
    /// The workload.
    pub workload: String,
    /// `nodeSelector` (the workload's `group` adds `node.deckhouse.io/group`).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Taint keys tolerated (`Exists`, any effect).
    #[serde(default)]
    pub tolerations: Vec<String>,
    /// At most one pod of the workload per node (required hostname anti-affinity on its
    /// labels).
    #[serde(default)]
    pub hostname_anti_affinity: bool,
    /// Spread the workload's pods over zones (a `DoNotSchedule` topology spread constraint on
    /// the zone key, selecting the workload's labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_spread: Option<ZoneSpread>,
}

/// A zone topology spread constraint of a workload's pods.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZoneSpread {
    /// `maxSkew` (at least 1).
    pub max_skew: u32,
    /// `minDomains`: while fewer zones have nodes, the global minimum counts as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<u32>,
}

/// The `scaleWorkload` event: a workload's replica count changes (a burst of pods arriving,
/// or a load leaving).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleWorkloadSpec {
    /// The workload (`Deployment`, `StatefulSet` or `Bare`).
    pub workload: String,
    /// The new replica count.
    pub replicas: usize,
}

impl ScalingSpec {
    /// The instance classes.
    ///
    /// # Errors
    /// A class whose quantities do not parse (path `scaling.classes[i].…`).
    pub fn instance_classes(&self) -> Result<Vec<InstanceClass>, ScenarioError> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| c.to_class(&format!("scaling.classes[{i}]")))
            .collect()
    }

    /// Checks the section against the scenario: classes parse, every CloudEphemeral group
    /// with `cloudInstances` points at a known class, constraints name workloads.
    ///
    /// # Errors
    /// The first problem, naming its field.
    pub fn check(&self, scenario: &Scenario) -> Result<(), ScenarioError> {
        let classes = self.instance_classes()?;
        if self.period.0 < Duration::from_millis(100) {
            return Err(invalid("scaling.period", "must be at least 100ms"));
        }
        if !scenario.updates {
            return Err(invalid(
                "updates",
                "the scaling controller drains nodes through the update executor; keep `updates: true`",
            ));
        }
        for (i, g) in scenario.groups.iter().enumerate() {
            let path = format!("groups[{i}].spec.cloudInstances");
            let spec = super::group_spec(&g.spec, &format!("groups[{i}].spec"))?;
            let mut group = NodeGroup {
                spec,
                ..NodeGroup::default()
            };
            default_class_kind_of(&mut group);
            let Some(ci) = group.spec.cloud_instances.as_ref() else {
                continue;
            };
            if group.spec.node_type != Some(NodeType::CloudEphemeral) {
                continue;
            }
            let Some(r) = ci.class_reference.as_ref() else {
                return Err(invalid(
                    format!("{path}.classReference"),
                    "a scaling group needs classReference {kind, name} naming one of scaling.classes",
                ));
            };
            if class_of(&group, &classes).is_none() {
                return Err(invalid(
                    format!("{path}.classReference"),
                    format!(
                        "no class {}/{} in scaling.classes (kind defaults to InstanceClass)",
                        r.kind, r.name
                    ),
                ));
            }
        }
        for (i, p) in self.pods.iter().enumerate() {
            if !scenario.workloads.iter().any(|w| w.name == p.workload) {
                return Err(invalid(
                    format!("scaling.pods[{i}].workload"),
                    format!("no workload named `{}`", p.workload),
                ));
            }
        }
        Ok(())
    }
}

/// An empty `classReference.kind` reads as `InstanceClass`.
pub(crate) fn default_class_kind_of(group: &mut NodeGroup) {
    if let Some(r) = group
        .spec
        .cloud_instances
        .as_mut()
        .and_then(|c| c.class_reference.as_mut())
        && r.kind.is_empty()
    {
        r.kind = default_class_kind();
    }
}

/// Checks a `scaleWorkload` event at `path`.
///
/// # Errors
/// An unknown workload, or a per-node one (DaemonSet, Static).
pub fn check_scale_workload(
    scenario: &Scenario,
    spec: &ScaleWorkloadSpec,
    path: &str,
) -> Result<(), ScenarioError> {
    match scenario.workloads.iter().find(|w| w.name == spec.workload) {
        None => Err(invalid(
            format!("{path}.workload"),
            format!("no workload named `{}`", spec.workload),
        )),
        Some(w) if w.kind.per_node() => Err(invalid(
            format!("{path}.workload"),
            "per-node workloads (DaemonSet, Static) follow the nodes; scale a Deployment",
        )),
        Some(_) => Ok(()),
    }
}
