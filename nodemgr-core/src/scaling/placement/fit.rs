//! Whether a pod fits a node, read plainly from the model objects: node condition, resources,
//! nodeSelector, required node affinity, taints and hostname anti-affinity (the rules listed in
//! the module docs of [`super`]). This is the reference reading the engine (`super::bins`,
//! `super::placer`) is held to; it also says which pods are standby holders.

use std::collections::BTreeMap;
use std::fmt;

use crate::model::{Node, Pod, Quantity, Resources, Taint, TaintEffect, keys};

/// Why a pod does not fit a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// The node is not Ready.
    NotReady,
    /// The node is cordoned.
    Cordoned,
    /// A `nodeSelector` pair is not a label of the node.
    NodeSelector {
        /// The label key.
        key: String,
    },
    /// No term of the required node affinity matches the node's labels.
    NodeAffinity,
    /// A `NoSchedule`/`NoExecute` taint the pod does not tolerate.
    Taint {
        /// The taint's key.
        key: String,
    },
    /// Not enough of a resource left.
    Resource {
        /// The resource (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, …).
        name: String,
        /// What the pod requests.
        requested: Quantity,
        /// What the node has left.
        free: Quantity,
    },
    /// A pod in the domain excludes this one by anti-affinity, or the other way round.
    AntiAffinity {
        /// The other pod, `namespace/name`.
        pod: String,
    },
    /// No pod matching the required pod affinity runs in the node's domain.
    PodAffinity,
    /// Placing the pod would make a `DoNotSchedule` spread constraint's skew too large.
    TopologySpread {
        /// The topology key.
        key: String,
        /// The skew the placement would make.
        skew: i64,
        /// `maxSkew`.
        max_skew: u32,
    },
    /// The node lacks the label of a topology key the pod's constraints need.
    MissingTopology {
        /// The label key.
        key: String,
    },
    /// The pod carries a required constraint nodemgr does not model.
    Unmodelled {
        /// Its description.
        what: String,
    },
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotReady => f.write_str("node is not Ready"),
            Self::Cordoned => f.write_str("node is cordoned"),
            Self::NodeSelector { key } => write!(f, "nodeSelector {key} does not match"),
            Self::NodeAffinity => f.write_str("required node affinity does not match"),
            Self::Taint { key } => write!(f, "taint {key} is not tolerated"),
            Self::Resource {
                name,
                requested,
                free,
            } => write!(
                f,
                "insufficient {name}: requests {} (milli-units), {} free",
                requested.0, free.0
            ),
            Self::AntiAffinity { pod } => write!(f, "pod anti-affinity with pod {pod}"),
            Self::PodAffinity => f.write_str("no pod matching the required pod affinity nearby"),
            Self::TopologySpread {
                key,
                skew,
                max_skew,
            } => write!(
                f,
                "topology spread on {key}: skew {skew} > maxSkew {max_skew}"
            ),
            Self::MissingTopology { key } => write!(f, "node has no {key} label"),
            Self::Unmodelled { what } => write!(f, "unmodelled constraint: {what}"),
        }
    }
}

/// Whether a resource missing from a node's allocatable counts as 0 (extended resources) rather
/// than unlimited.
pub fn is_extended_resource(name: &str) -> bool {
    name.starts_with("hugepages-") || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

/// The node-level (label and taint) part of a fit: nodeSelector, required node affinity and
/// taints.
///
/// # Errors
/// The first rule that fails.
pub fn check_static(
    pod: &Pod,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> Result<(), Misfit> {
    for (k, v) in &pod.node_selector {
        if labels.get(k) != Some(v) {
            return Err(Misfit::NodeSelector { key: k.clone() });
        }
    }
    if !pod.required_node_affinity.is_empty()
        && !pod
            .required_node_affinity
            .iter()
            .any(|term| !term.is_empty() && term.iter().all(|req| req.matches(labels)))
    {
        return Err(Misfit::NodeAffinity);
    }
    for t in taints {
        if matches!(t.effect, Some(TaintEffect::PreferNoSchedule)) {
            continue;
        }
        if !pod.tolerations.iter().any(|tol| tol.tolerates(t)) {
            return Err(Misfit::Taint { key: t.key.clone() });
        }
    }
    Ok(())
}

/// Whether `pod` passes the node-level rules of a node with `labels` and `taints`: the same
/// answer as [`check_static`], without building the reason.
pub fn static_fits(pod: &Pod, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
    pod.node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        && (pod.required_node_affinity.is_empty()
            || pod
                .required_node_affinity
                .iter()
                .any(|term| !term.is_empty() && term.iter().all(|req| req.matches(labels))))
        && taints.iter().all(|t| {
            matches!(t.effect, Some(TaintEffect::PreferNoSchedule))
                || pod.tolerations.iter().any(|tol| tol.tolerates(t))
        })
}

/// Whether `pod` and `other` exclude each other by hostname anti-affinity.
pub fn anti_affine(pod: &Pod, other: &Pod) -> bool {
    pod.namespace == other.namespace
        && (pod
            .hostname_anti_affinity
            .iter()
            .any(|s| s.matches(&other.labels))
            || other
                .hostname_anti_affinity
                .iter()
                .any(|s| s.matches(&pod.labels)))
}

/// Whether `pod` fits `node`, which already runs `pods_on_node` (finished pods are ignored),
/// by every rule in the module docs. This is the reference reading; the planners use a faster
/// engine that agrees with it.
///
/// # Errors
/// The first rule that fails.
pub fn check_fit(pod: &Pod, node: &Node, pods_on_node: &[&Pod]) -> Result<(), Misfit> {
    if !node.ready {
        return Err(Misfit::NotReady);
    }
    if node.unschedulable {
        return Err(Misfit::Cordoned);
    }
    check_static(pod, &node.labels, &node.taints)?;
    let live: Vec<&Pod> = pods_on_node
        .iter()
        .copied()
        .filter(|p| !p.is_terminal())
        .collect();
    let mut wanted: Resources = pod
        .requests
        .iter()
        .filter(|(k, q)| k.as_str() != "pods" && q.0 > 0)
        .map(|(k, q)| (k.clone(), *q))
        .collect();
    wanted.insert("pods".into(), Quantity::units(1));
    for (name, requested) in &wanted {
        let used: Quantity = if name == "pods" {
            Quantity::units(live.len() as i64)
        } else {
            live.iter()
                .filter_map(|p| p.requests.get(name))
                .fold(Quantity::ZERO, |a, b| a + *b)
        };
        let Some(alloc) =
            node.allocatable.get(name).copied().or_else(|| {
                (name == "pods" || is_extended_resource(name)).then_some(Quantity::ZERO)
            })
        else {
            continue;
        };
        let free = alloc - used;
        if free < *requested {
            return Err(Misfit::Resource {
                name: name.clone(),
                requested: *requested,
                free,
            });
        }
    }
    if let Some(other) = live.iter().find(|o| anti_affine(pod, o)) {
        return Err(Misfit::AntiAffinity { pod: other.key() });
    }
    Ok(())
}

/// Whether `pod` is a standby-holder pod (priority class `standby`, or label
/// `app=standby-holder`): the only pods the simulation preempts.
pub fn is_standby_holder(pod: &Pod) -> bool {
    pod.priority_class.as_deref() == Some(keys::STANDBY_PRIORITY_CLASS)
        || pod.labels.get("app").map(String::as_str) == Some(keys::STANDBY_HOLDER_APP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        LabelSelector, LabelSelectorRequirement, PodPhase, SelectorOperator, Toleration,
    };
    use crate::scaling::placement::test_support::{node, pod, q};

    #[test]
    fn resources_and_pod_slots() {
        let n = node("n", "2", "4Gi", 2);
        let a = pod("a", "1500m", "1Gi");
        let b = pod("b", "600m", "1Gi");
        assert!(check_fit(&a, &n, &[]).is_ok());
        assert!(matches!(
            check_fit(&b, &n, &[&a]),
            Err(Misfit::Resource { ref name, .. }) if name == "cpu"
        ));
        let tiny = pod("t", "1m", "1Mi");
        assert!(check_fit(&tiny, &n, &[&tiny.clone()]).is_ok());
        assert!(matches!(
            check_fit(&tiny, &n, &[&tiny.clone(), &tiny.clone()]),
            Err(Misfit::Resource { ref name, .. }) if name == "pods"
        ));
        let mut done = a.clone();
        done.phase = PodPhase::Succeeded;
        assert!(
            check_fit(&a, &n, &[&done]).is_ok(),
            "finished pods hold nothing"
        );
    }

    #[test]
    fn extended_resources_default_to_zero_standard_ones_to_unlimited() {
        let n = node("n", "2", "4Gi", 10);
        let mut gpu = pod("g", "1", "1Gi");
        gpu.requests
            .insert("nvidia.com/gpu".into(), Quantity::units(1));
        assert!(check_fit(&gpu, &n, &[]).is_err());
        let mut eph = pod("e", "1", "1Gi");
        eph.requests.insert("ephemeral-storage".into(), q("10Gi"));
        assert!(check_fit(&eph, &n, &[]).is_ok());
        let mut with_gpu = n.clone();
        with_gpu
            .allocatable
            .insert("nvidia.com/gpu".into(), Quantity::units(1));
        assert!(check_fit(&gpu, &with_gpu, &[]).is_ok());
        assert!(check_fit(&gpu, &with_gpu, &[&gpu]).is_err());
    }

    #[test]
    fn selectors_affinity_taints() {
        let mut n = node("n", "4", "8Gi", 10);
        n.labels.insert("disk".into(), "ssd".into());
        n.taints.push(Taint {
            key: "dedicated".into(),
            value: Some("db".into()),
            effect: Some(TaintEffect::NoSchedule),
        });
        n.taints.push(Taint {
            key: "soft".into(),
            value: None,
            effect: Some(TaintEffect::PreferNoSchedule),
        });
        let mut p = pod("p", "1", "1Gi");
        assert_eq!(
            check_fit(&p, &n, &[]),
            Err(Misfit::Taint {
                key: "dedicated".into()
            })
        );
        p.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: None,
        });
        assert!(check_fit(&p, &n, &[]).is_ok());
        p.node_selector.insert("disk".into(), "hdd".into());
        assert!(matches!(
            check_fit(&p, &n, &[]),
            Err(Misfit::NodeSelector { .. })
        ));
        p.node_selector.clear();
        let req = |op, vals: &[&str]| LabelSelectorRequirement {
            key: "disk".into(),
            operator: Some(op),
            values: Some(vals.iter().map(|s| s.to_string()).collect()),
        };
        p.required_node_affinity = vec![vec![req(SelectorOperator::NotIn, &["ssd"])]];
        assert_eq!(check_fit(&p, &n, &[]), Err(Misfit::NodeAffinity));
        p.required_node_affinity
            .push(vec![req(SelectorOperator::In, &["ssd"])]);
        assert!(check_fit(&p, &n, &[]).is_ok(), "terms are ORed");
        p.required_node_affinity = vec![vec![]];
        assert_eq!(check_fit(&p, &n, &[]), Err(Misfit::NodeAffinity));
    }

    #[test]
    fn anti_affinity_is_symmetric_and_namespaced() {
        let n = node("n", "8", "8Gi", 10);
        let mut a = pod("a", "100m", "1Mi");
        a.labels.insert("app".into(), "web".into());
        a.hostname_anti_affinity = vec![LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        }];
        let mut b = pod("b", "100m", "1Mi");
        b.labels.insert("app".into(), "web".into());
        assert!(check_fit(&a, &n, &[&b]).is_err());
        assert!(
            check_fit(&b, &n, &[&a]).is_err(),
            "existing pod's rule counts"
        );
        b.namespace = "other".into();
        assert!(check_fit(&a, &n, &[&b]).is_ok());
    }
}
