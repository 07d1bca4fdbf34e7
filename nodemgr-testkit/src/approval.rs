//! The `approval` subresource of CertificateSigningRequests
//! (`/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval`): an update or
//! patch there changes only `status.conditions`, with kube-apiserver's rules: `Approved` and
//! `Denied` never together, their status `True`, and once written never removed.

use serde_json::{Value, json};

use crate::status::ApiError;

const DECISIONS: [&str; 2] = ["Approved", "Denied"];

fn invalid(name: &str, message: String) -> ApiError {
    ApiError::invalid(
        "certificates.k8s.io",
        "CertificateSigningRequest",
        name,
        message,
    )
}

fn decision_types(object: &Value) -> Vec<String> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("type").and_then(Value::as_str))
        .filter(|t| DECISIONS.contains(t))
        .map(str::to_owned)
        .collect()
}

/// The object to store after an approval write: `live` with the conditions of `candidate`
/// (the body of a PUT, or `live` with a patch applied), keeping the candidate's
/// resourceVersion as the write's precondition.
///
/// # Errors
/// 422 Invalid when the conditions break the rules above.
pub fn approval_update(live: &Value, candidate: &Value) -> Result<Value, ApiError> {
    let name = live
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let conditions = candidate
        .pointer("/status/conditions")
        .cloned()
        .unwrap_or_else(|| json!([]));
    let list = conditions.as_array().ok_or_else(|| {
        invalid(
            name,
            "status.conditions: Invalid value: must be a list".to_owned(),
        )
    })?;
    for (i, c) in list.iter().enumerate() {
        let kind = c.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind.is_empty() {
            return Err(invalid(
                name,
                format!("status.conditions[{i}].type: Required value"),
            ));
        }
        if DECISIONS.contains(&kind) && c.get("status").and_then(Value::as_str) != Some("True") {
            return Err(invalid(
                name,
                format!(
                    "status.conditions[{i}].status: Unsupported value: {kind} conditions must be \"True\""
                ),
            ));
        }
    }
    let after = decision_types(candidate);
    if after.iter().any(|t| t == "Approved") && after.iter().any(|t| t == "Denied") {
        return Err(invalid(
            name,
            "status.conditions: Invalid value: Approved and Denied conditions are mutually exclusive"
                .to_owned(),
        ));
    }
    for before in decision_types(live) {
        if !after.contains(&before) {
            return Err(invalid(
                name,
                format!(
                    "status.conditions: Forbidden: updates may not remove a condition of type {before:?}"
                ),
            ));
        }
    }
    let mut out = live.clone();
    if !out.get("status").is_some_and(Value::is_object) {
        out["status"] = json!({});
    }
    out["status"]["conditions"] = conditions;
    if let Some(rv) = candidate.pointer("/metadata/resourceVersion") {
        out["metadata"]["resourceVersion"] = rv.clone();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(conditions: Value) -> Value {
        json!({"metadata": {"name": "c", "resourceVersion": "5"},
               "spec": {"signerName": "kubernetes.io/kubelet-serving"},
               "status": {"conditions": conditions}})
    }

    #[test]
    fn discovery_lists_the_approval_subresource() {
        let types = crate::registry::builtin_types();
        let list = crate::discovery::resource_list(&types, "certificates.k8s.io", "v1")
            .expect("certificates.k8s.io/v1 is served");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for want in [
            "certificatesigningrequests",
            "certificatesigningrequests/status",
            "certificatesigningrequests/approval",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
    }

    #[test]
    fn only_conditions_change_and_decisions_are_final() {
        let live = csr(json!([]));
        let mut candidate = csr(json!([{"type": "Approved", "status": "True", "reason": "R"}]));
        candidate["spec"]["signerName"] = json!("other");
        let out = approval_update(&live, &candidate).expect("valid approval");
        assert_eq!(out["spec"]["signerName"], "kubernetes.io/kubelet-serving");
        assert_eq!(out["status"]["conditions"][0]["type"], "Approved");

        let both = csr(
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
        );
        assert_eq!(approval_update(&live, &both).unwrap_err().code, 422);
        let e = approval_update(&out, &csr(json!([]))).unwrap_err();
        assert!(e.message.contains("may not remove"), "{e}");
        let false_status = csr(json!([{"type": "Denied", "status": "False"}]));
        assert_eq!(approval_update(&live, &false_status).unwrap_err().code, 422);
    }
}
