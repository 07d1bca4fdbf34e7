//! PodDisruptionBudget arithmetic, as kube-controller-manager's disruption controller computes
//! a PDB's status and as the `pods/eviction` subresource decides: which pods a budget covers,
//! how many are healthy, how many must stay healthy (`minAvailable`/`maxUnavailable`, integers
//! or percentages) and so how many disruptions are allowed.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::selector::LabelSelector;

/// The computed `status` numbers of one PDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetStatus {
    /// Pods matched by the selector (excluding terminal ones).
    pub expected_pods: i64,
    /// Matched pods that are Running, Ready and not being deleted.
    pub current_healthy: i64,
    /// How many must stay healthy.
    pub desired_healthy: i64,
    /// `max(0, current_healthy - desired_healthy)`.
    pub disruptions_allowed: i64,
}

/// Whether `pdb`'s selector matches `pod` (same namespace is the caller's job). A PDB with a
/// null selector matches nothing; an empty selector matches every pod of the namespace.
pub fn budget_covers(pdb: &Value, pod: &Value) -> bool {
    budget_covers_labels(pdb, &crate::selector::labels_of(pod))
}

/// [`budget_covers`] for a pod with these labels.
pub fn budget_covers_labels(pdb: &Value, labels: &BTreeMap<String, String>) -> bool {
    match pdb.pointer("/spec/selector") {
        None | Some(Value::Null) => false,
        Some(selector) => {
            LabelSelector::from_object(selector).is_some_and(|s| s.matches_labels(labels))
        }
    }
}

/// Whether a pod counts as healthy for budgets: Running, condition Ready=True, not deleting.
pub fn pod_is_healthy(pod: &Value) -> bool {
    let running = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running");
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    running && ready && !deleting
}

/// Whether an eviction of this pod may skip the budget check: it is terminal (Succeeded or
/// Failed), Pending, or already being deleted, as the eviction subresource decides.
pub fn eviction_ignores_budget(pod: &Value) -> bool {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    matches!(phase, "Succeeded" | "Failed" | "Pending") || deleting
}

/// Computes a budget's status over the pods of its namespace.
pub fn compute_status<P: Borrow<Value>>(
    pdb: &Value,
    namespace_pods: impl IntoIterator<Item = P>,
) -> BudgetStatus {
    let mut expected = 0i64;
    let mut healthy = 0i64;
    for pod in namespace_pods {
        let pod = pod.borrow();
        if !budget_covers(pdb, pod) {
            continue;
        }
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        if matches!(phase, "Succeeded" | "Failed") {
            continue;
        }
        expected += 1;
        if pod_is_healthy(pod) {
            healthy += 1;
        }
    }
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected, true)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected, true)).max(0)
    } else {
        // Neither set: the API server defaults minAvailable to 1.
        1
    };
    BudgetStatus {
        expected_pods: expected,
        current_healthy: healthy,
        desired_healthy: desired,
        disruptions_allowed: (healthy - desired).max(0),
    }
}

/// An IntOrString (`2` or `"50%"`) scaled against `total`, rounding percentages up when
/// `round_up` (as `intstr.GetScaledValueFromIntOrPercent`). Malformed values count as 0.
fn scaled(value: &Value, total: i64, round_up: bool) -> i64 {
    match value {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
        {
            Some(percent) => {
                let product = percent * total;
                if round_up {
                    (product + 99) / 100
                } else {
                    product / 100
                }
            }
            None => s.parse().unwrap_or(0),
        },
        _ => 0,
    }
}

/// Writes the computed numbers into a PDB's `status` (keeping its conditions up to date).
/// Returns whether anything changed.
pub fn write_status(pdb: &mut Value, status: BudgetStatus) -> bool {
    let generation = pdb
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    let allowed = status.disruptions_allowed > 0;
    let condition = json!({
        "type": "DisruptionAllowed",
        "status": if allowed { "True" } else { "False" },
        "reason": if allowed { "SufficientPods" } else { "InsufficientPods" },
        "message": "",
        "observedGeneration": generation,
    });
    let old = pdb.get("status").cloned().unwrap_or(Value::Null);
    let keep_time = old
        .pointer("/conditions/0")
        .filter(|c| c["status"] == condition["status"])
        .and_then(|c| c.get("lastTransitionTime").cloned());
    let mut condition = condition;
    condition["lastTransitionTime"] =
        keep_time.unwrap_or_else(|| json!(crate::time::now_rfc3339()));
    let mut new = json!({
        "observedGeneration": generation,
        "expectedPods": status.expected_pods,
        "currentHealthy": status.current_healthy,
        "desiredHealthy": status.desired_healthy,
        "disruptionsAllowed": status.disruptions_allowed,
        "conditions": [condition],
    });
    if let Some(disrupted) = old.get("disruptedPods") {
        new["disruptedPods"] = disrupted.clone();
    }
    if new == old {
        return false;
    }
    pdb["status"] = new;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(app: &str, ready: bool) -> Value {
        json!({"metadata": {"labels": {"app": app}}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    #[test]
    fn min_available_and_max_unavailable() {
        let pods = [
            pod("web", true),
            pod("web", true),
            pod("web", false),
            pod("db", true),
        ];
        let pdb = json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
        let s = compute_status(&pdb, pods.iter());
        assert_eq!(
            (
                s.expected_pods,
                s.current_healthy,
                s.desired_healthy,
                s.disruptions_allowed
            ),
            (3, 2, 1, 1)
        );
        let pdb =
            json!({"spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}});
        // 50% of 3 rounds up to 2 unavailable, so 1 must stay healthy.
        assert_eq!(compute_status(&pdb, pods.iter()).disruptions_allowed, 1);
        let pdb =
            json!({"spec": {"minAvailable": "100%", "selector": {"matchLabels": {"app": "web"}}}});
        assert_eq!(compute_status(&pdb, pods.iter()).disruptions_allowed, 0);
        let pdb = json!({"spec": {"minAvailable": 0}});
        assert_eq!(
            compute_status(&pdb, pods.iter()).expected_pods,
            0,
            "null selector matches nothing"
        );
    }

    proptest! {
        #[test]
        fn allowed_never_exceeds_healthy(healthy in 0usize..20, unready in 0usize..20, min in 0i64..30) {
            let pods: Vec<Value> = (0..healthy).map(|_| pod("a", true)).chain((0..unready).map(|_| pod("a", false))).collect();
            let pdb = json!({"spec": {"minAvailable": min, "selector": {"matchLabels": {"app": "a"}}}});
            let s = compute_status(&pdb, pods.iter());
            prop_assert!(s.disruptions_allowed <= s.current_healthy);
            prop_assert!(s.disruptions_allowed >= 0);
            prop_assert!(s.current_healthy - s.disruptions_allowed >= min.min(s.current_healthy));
        }
    }
}
