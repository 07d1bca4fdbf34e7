//! The parameter-to-disruption matrix: what a change of a NodeGroup spec does to the group's
//! nodes. A change may need a disruptive update (drain and approval, docs/deckhouse.md §3), a re-provision
//! (the machines are replaced by new ones), a kubelet restart, or nothing at all.
//!
//! Implements the table «Влияние параметров NodeGroup на обновление и перезапуск узлов» that
//! ends docs/deckhouse.md §10, and extends it to every field of [`NodeGroupSpec`]: [`rules()`]
//! holds one documented [`Rule`] per path, and a test walks a fully populated spec to check that
//! every leaf of the spec is covered by exactly one rule.
//!
//! # How a change is found
//! Both specs are serialized to JSON and normalized the same way:
//! 1. absent, `null`, an empty object and an empty array are the same thing (no setting);
//! 2. every documented default in [`defaults()`] is filled in where the field is absent, so that
//!    an absent field equals its default written out (`cri.type` unset equals `Containerd`, the
//!    model's [`NodeGroupSpec::cri_type`]; `cri.containerd.maxConcurrentDownloads` unset equals
//!    3; `chaos` unset equals `{mode: Disabled, period: 6h}`; …);
//! 3. int-or-string fields written as a string of digits (`"2"`) equal the integer (`2`).
//!
//! Then each rule compares the sub-value at its path; a rule whose sub-values differ reports one
//! [`ChangeImpact`] with the rule's effects.
//!
//! # Granularity
//! A rule's path is the unit reported. The object-valued rows of the table (docs/deckhouse.md §10: `chaos`,
//! `disruptions`, `nodeTemplate`, `static`, `cloudInstances.classReference`) are reported at that
//! path even when only a leaf inside changed; so are a few atomic values (`nodeType`,
//! `staticInstances.labelSelector`, `cloudInstances.zones`, `gpu.mig.customConfigs`,
//! `gpu.exclusive`). Everything else is reported per leaf (`kubelet.maxPods`).
//!
//! # Guarantees
//! - Every change of a spec field is reported: no field lacks a rule.
//! - `changes` is sorted by path and holds each path at most once; the totals are the unions.
//! - The impact of a multi-field change is the union of the single-field impacts.
//! - Only `cri.type` depends on the direction of a change (its disruption depends on the new
//!   value); every other rule gives the same result for `old → new` and `new → old`.
//!
//! The module has no error type: [`impact_of`] cannot fail.

mod normalize;
mod rules;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::model::NodeGroupSpec;

/// Whether one effect (disruption, re-provision, kubelet restart) follows a change of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Effect {
    /// The change never has this effect.
    Never,
    /// Every change of the path has this effect.
    Always,
    /// The change has this effect unless the new (normalized) value is this string: `cri.type`
    /// changed to `NotManaged` is not disruptive, a change to any other value is.
    UnlessNewValueIs(&'static str),
}

impl Effect {
    /// Whether a change whose new normalized value is `new` (`None`: unset) has the effect.
    pub fn applies(&self, new: Option<&Value>) -> bool {
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::UnlessNewValueIs(value) => new.and_then(Value::as_str) != Some(*value),
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Never => f.write_str("no"),
            Self::Always => f.write_str("yes"),
            Self::UnlessNewValueIs(value) => write!(f, "yes, unless new value is {value}"),
        }
    }
}

/// One row of the matrix: a spec path and what changing it does to the group's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Dotted path in the spec, without the `spec.` prefix (`kubelet.maxPods`). Covers the
    /// value at that path and everything inside it.
    pub path: &'static str,
    /// Whether the change needs a disruptive update (drain, approval).
    pub disruption: Effect,
    /// Whether the change replaces the group's machines with new ones.
    pub reprovision: Effect,
    /// Whether the change restarts the kubelet on the group's nodes.
    pub kubelet_restart: Effect,
    /// Why the rule is what it is, in a sentence.
    pub why: &'static str,
}

impl Rule {
    /// Whether `leaf` (a dotted path) is this rule's path or lies inside it.
    pub fn covers(&self, leaf: &str) -> bool {
        leaf.strip_prefix(self.path)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    }

    /// The impact of a change of this rule's path to the normalized value `new`.
    fn judge(&self, new: Option<&Value>) -> ChangeImpact {
        ChangeImpact {
            path: self.path.to_owned(),
            disruption: self.disruption.applies(new),
            reprovision: self.reprovision.applies(new),
            kubelet_restart: self.kubelet_restart.applies(new),
        }
    }
}

pub use crate::model::spec_facts::{FieldDefault, Literal, defaults};

pub use rules::{rule_for, rules};

use normalize::{lookup, normalized};
use rules::RULES;

/// What a change of one rule's path does to the group's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeImpact {
    /// The rule's dotted path, without the `spec.` prefix.
    pub path: String,
    /// The change needs a disruptive update (drain and approval).
    pub disruption: bool,
    /// The change replaces the group's machines.
    pub reprovision: bool,
    /// The change restarts the kubelet.
    pub kubelet_restart: bool,
}

impl ChangeImpact {
    /// Whether the change does nothing to the nodes.
    pub fn is_harmless(&self) -> bool {
        !(self.disruption || self.reprovision || self.kubelet_restart)
    }
}

impl fmt::Display for ChangeImpact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let effects: Vec<&str> = [
            (self.disruption, "disruption"),
            (self.reprovision, "reprovision"),
            (self.kubelet_restart, "kubelet restart"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if effects.is_empty() {
            write!(f, "{}: no node impact", self.path)
        } else {
            write!(f, "{}: {}", self.path, effects.join(", "))
        }
    }
}

/// What moving a node to a new configuration does to it, as one value: the strongest of the
/// impact matrix's columns. This is the one "impact kind" of the project: the simulator's
/// scenarios (`impact:` of a change), the test fleet's generations and the agent's simulated
/// steps all use it. Ordered by strength: `None < KubeletRestart < Disruptive`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ImpactKind {
    /// Applied in place without any restart.
    #[default]
    None,
    /// The kubelet restarts: the node is briefly NotReady.
    KubeletRestart,
    /// Needs a disruption (drain, approval; a reboot or a new machine).
    Disruptive,
}

impl ImpactKind {
    /// What the effect is called in messages (`no restart`, `kubelet restart`,
    /// `disruptive`); also its `Display`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "no restart",
            Self::KubeletRestart => "kubelet restart",
            Self::Disruptive => "disruptive",
        }
    }
}

impl fmt::Display for ImpactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a spec change does to the group's nodes: each changed path and the unions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Impact {
    /// One entry per changed rule path, sorted by path.
    pub changes: Vec<ChangeImpact>,
    /// Some change needs a disruptive update.
    pub disruption: bool,
    /// Some change replaces the group's machines.
    pub reprovision: bool,
    /// Some change restarts the kubelet.
    pub kubelet_restart: bool,
}

impl Impact {
    /// An impact from changes: sorts them by path and computes the unions.
    pub fn from_changes(mut changes: Vec<ChangeImpact>) -> Self {
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Self {
            disruption: changes.iter().any(|c| c.disruption),
            reprovision: changes.iter().any(|c| c.reprovision),
            kubelet_restart: changes.iter().any(|c| c.kubelet_restart),
            changes,
        }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The change as one [`ImpactKind`]: a disruption or a re-provision is
    /// [`ImpactKind::Disruptive`], else a kubelet restart is [`ImpactKind::KubeletRestart`].
    pub fn kind(&self) -> ImpactKind {
        if self.disruption || self.reprovision {
            ImpactKind::Disruptive
        } else if self.kubelet_restart {
            ImpactKind::KubeletRestart
        } else {
            ImpactKind::None
        }
    }

    /// A fixed-width text table: `PARAMETER | DISRUPTION | REPROVISION | KUBELET RESTART`, one
    /// line per change, then a `TOTAL` line; `no changes` when nothing changed. Every line ends
    /// with a newline.
    pub fn to_table(&self) -> String {
        if self.changes.is_empty() {
            return "no changes\n".to_owned();
        }
        let rows: Vec<(&str, bool, bool, bool)> = self
            .changes
            .iter()
            .map(|c| {
                (
                    c.path.as_str(),
                    c.disruption,
                    c.reprovision,
                    c.kubelet_restart,
                )
            })
            .chain(std::iter::once((
                "TOTAL",
                self.disruption,
                self.reprovision,
                self.kubelet_restart,
            )))
            .collect();
        let width = rows
            .iter()
            .map(|r| r.0.len())
            .chain(std::iter::once("PARAMETER".len()))
            .max()
            .unwrap_or_default();
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let mut out = format!(
            "{:<width$}  {:<10}  {:<11}  KUBELET RESTART\n",
            "PARAMETER", "DISRUPTION", "REPROVISION"
        );
        for (path, disruption, reprovision, restart) in rows {
            out.push_str(&format!(
                "{:<width$}  {:<10}  {:<11}  {}\n",
                path,
                yes_no(disruption),
                yes_no(reprovision),
                yes_no(restart)
            ));
        }
        out
    }
}

impl fmt::Display for Impact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_table())
    }
}

/// What changing a group's spec from `old` to `new` does to its nodes.
///
/// Both specs are normalized (see the module docs: absent equals empty equals the documented
/// default), then every rule compares the value at its path. The result lists each changed
/// rule path once, sorted, with the unions of the effects.
pub fn impact_of(old: &NodeGroupSpec, new: &NodeGroupSpec) -> Impact {
    let old = normalized(old);
    let new = normalized(new);
    let changes = RULES
        .iter()
        .filter_map(|rule| {
            let after = lookup(&new, rule.path);
            (lookup(&old, rule.path) != after).then(|| rule.judge(after))
        })
        .collect();
    Impact::from_changes(changes)
}

/// A fixed-width text table of the rules (`PARAMETER | DISRUPTION | REPROVISION | KUBELET
/// RESTART | WHY`), for `nodemgr explain --rules`.
pub fn rules_table() -> String {
    let width = RULES.iter().map(|r| r.path.len()).max().unwrap_or_default();
    let effect_width = RULES
        .iter()
        .map(|r| r.disruption.to_string().len())
        .chain(std::iter::once("DISRUPTION".len()))
        .max()
        .unwrap_or_default();
    let mut out = format!(
        "{:<width$}  {:<effect_width$}  {:<11}  {:<15}  WHY\n",
        "PARAMETER", "DISRUPTION", "REPROVISION", "KUBELET RESTART"
    );
    for rule in RULES {
        out.push_str(&format!(
            "{:<width$}  {:<effect_width$}  {:<11}  {:<15}  {}\n",
            rule.path,
            rule.disruption.to_string(),
            rule.reprovision.to_string(),
            rule.kubelet_restart.to_string(),
            rule.why
        ));
    }
    out
}
