//! Admission webhooks as kube-apiserver calls them: which webhooks of the stored
//! `MutatingWebhookConfiguration`s and `ValidatingWebhookConfiguration`s match a request
//! (rules: operations, apiGroups, apiVersions, resources with subresources and wildcards,
//! scope; `objectSelector`; `namespaceSelector` for namespaced objects; `matchPolicy`), the
//! `AdmissionReview` v1 sent, and what the answer means: a denial worded as kube-apiserver words
//! it (`admission webhook "NAME" denied the request: MSG`, the response's `status.code` or
//! 400), warnings, a mutating webhook's JSONPatch, `failurePolicy` (Fail/Ignore) for a webhook
//! that cannot be called, and `sideEffects` against `dryRun`. See `docs/api-emulator.md`.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::selector::LabelSelector;
use crate::status::ApiError;
use crate::webhook_client::{self, ServiceRoutes};

/// Mutating or validating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `MutatingWebhookConfiguration`: may patch the object; called one after another.
    Mutating,
    /// `ValidatingWebhookConfiguration`: may only allow or deny.
    Validating,
}

/// What is being admitted.
#[derive(Debug, Clone)]
pub struct Attributes {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    /// API group of the request.
    pub group: String,
    /// Version of the request.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`status`) or empty.
    pub subresource: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// Object name.
    pub name: String,
    /// The new object (CREATE, UPDATE), at the request's version.
    pub object: Option<Value>,
    /// The current object (UPDATE, DELETE), at the request's version.
    pub old_object: Option<Value>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// CreateOptions/UpdateOptions/DeleteOptions as sent.
    pub options: Value,
    /// Labels of the object's namespace (for `namespaceSelector`).
    pub namespace_labels: BTreeMap<String, String>,
}

/// One webhook of a configuration, with the version it wants the object at.
#[derive(Debug, Clone)]
pub struct MatchedWebhook {
    /// `webhooks[].name`.
    pub name: String,
    /// `webhooks[].clientConfig`.
    pub client_config: Value,
    /// `failurePolicy` is `Ignore` (default `Fail`).
    pub ignore_failures: bool,
    /// `timeoutSeconds` (default 10).
    pub timeout: Duration,
    /// Whether `sideEffects` allows dry-run requests (`None`/`NoneOnDryRun`).
    pub dry_run_safe: bool,
    /// The version the object is sent at (a different one than the request's when the rule
    /// names another version of the resource and `matchPolicy` is `Equivalent`).
    pub version: String,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

fn resource_listed(list: &[String], resource: &str, subresource: &str) -> bool {
    list.iter().any(|entry| {
        let (r, s) = entry.split_once('/').unwrap_or((entry.as_str(), ""));
        let resource_ok = r == "*" || r == resource;
        let sub_ok = if subresource.is_empty() {
            s.is_empty()
        } else {
            s == "*" || s == subresource
        };
        resource_ok && sub_ok
    })
}

/// The version a rule matches the request at: the request's own version, or (with
/// `matchPolicy: Equivalent`) another served version of the same resource the rule lists.
fn rule_version(
    rule: &Value,
    attrs: &Attributes,
    served_versions: &[String],
    equivalent: bool,
) -> Option<String> {
    let operations = strings(rule, "operations");
    if !listed(&operations, attrs.operation) {
        return None;
    }
    if !listed(&strings(rule, "apiGroups"), &attrs.group) {
        return None;
    }
    if !resource_listed(
        &strings(rule, "resources"),
        &attrs.resource,
        &attrs.subresource,
    ) {
        return None;
    }
    match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" if attrs.namespaced => return None,
        "Namespaced" if !attrs.namespaced => return None,
        _ => {}
    }
    let versions = strings(rule, "apiVersions");
    if listed(&versions, &attrs.version) {
        return Some(attrs.version.clone());
    }
    if equivalent {
        return served_versions
            .iter()
            .find(|v| versions.contains(v))
            .cloned();
    }
    None
}

/// The webhooks of `configurations` (objects of the phase's kind) that match, in order
/// (configurations by name, then webhooks in the order listed).
pub fn matching(
    configurations: &[Value],
    attrs: &Attributes,
    served_versions: &[String],
) -> Vec<MatchedWebhook> {
    let mut out = Vec::new();
    for configuration in configurations {
        for webhook in configuration
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let equivalent = webhook.get("matchPolicy").and_then(Value::as_str) != Some("Exact");
            let Some(version) = webhook
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find_map(|rule| rule_version(rule, attrs, served_versions, equivalent))
            else {
                continue;
            };
            if let Some(selector) = webhook.get("objectSelector") {
                let selector = LabelSelector::from_object(selector).unwrap_or_default();
                let matches = |o: &Option<Value>| o.as_ref().is_some_and(|o| selector.matches(o));
                if !selector.is_empty() && !matches(&attrs.object) && !matches(&attrs.old_object) {
                    continue;
                }
            }
            if attrs.namespaced
                && let Some(selector) = webhook.get("namespaceSelector")
            {
                let selector = LabelSelector::from_object(selector).unwrap_or_default();
                if !selector.is_empty() && !selector.matches_labels(&attrs.namespace_labels) {
                    continue;
                }
            }
            out.push(MatchedWebhook {
                name: webhook
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                client_config: webhook.get("clientConfig").cloned().unwrap_or(json!({})),
                ignore_failures: webhook.get("failurePolicy").and_then(Value::as_str)
                    == Some("Ignore"),
                timeout: Duration::from_secs(
                    webhook
                        .get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10)
                        .clamp(1, 30),
                ),
                dry_run_safe: matches!(
                    webhook.get("sideEffects").and_then(Value::as_str),
                    Some("None" | "NoneOnDryRun")
                ),
                version,
            });
        }
    }
    out
}

/// The `AdmissionReview` v1 request for `attrs`, with the object (already converted) at
/// `version`.
pub fn review(
    uid: &str,
    attrs: &Attributes,
    version: &str,
    object: Option<&Value>,
    old_object: Option<&Value>,
) -> Value {
    let gvk = |v: &str| json!({"group": attrs.group, "version": v, "kind": attrs.kind});
    let gvr = |v: &str| json!({"group": attrs.group, "version": v, "resource": attrs.resource});
    let mut request = json!({
        "uid": uid,
        "kind": gvk(version),
        "resource": gvr(version),
        "requestKind": gvk(&attrs.version),
        "requestResource": gvr(&attrs.version),
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": {"username": "system:anonymous", "groups": ["system:unauthenticated"]},
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old_object.cloned().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": attrs.options,
    });
    if !attrs.subresource.is_empty() {
        request["subResource"] = json!(attrs.subresource);
        request["requestSubResource"] = json!(attrs.subresource);
    }
    if attrs.namespaced {
        request["namespace"] = json!(attrs.namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// What a webhook answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Warnings to pass to the client.
    pub warnings: Vec<String>,
    /// A JSONPatch (mutating webhooks only).
    pub patch: Option<Value>,
}

/// Reads an `AdmissionReview` answer.
///
/// # Errors
/// The denial (as kube-apiserver words it), or a 500 when the answer is malformed (a
/// malformed answer counts as a failed call: see [`failed_call`]).
pub fn interpret(
    name: &str,
    uid: &str,
    answer: &Value,
    phase: Phase,
) -> Result<Verdict, (bool, ApiError)> {
    let malformed = |why: &str| (true, failed_call(name, why));
    let response = answer
        .get("response")
        .ok_or_else(|| malformed("the AdmissionReview answer has no response"))?;
    if response.get("uid").and_then(Value::as_str) != Some(uid) {
        return Err(malformed(&format!(
            "expected response.uid={uid:?}, got {:?}",
            response.get("uid").and_then(Value::as_str).unwrap_or("")
        )));
    }
    let warnings = strings(response, "warnings");
    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
        let status = response.get("status").cloned().unwrap_or(json!({}));
        let code = status
            .get("code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c >= 400)
            .unwrap_or(400);
        let message = status.get("message").and_then(Value::as_str).unwrap_or("");
        let reason = status.get("reason").and_then(Value::as_str).unwrap_or("");
        let denied = format!("admission webhook {name:?} denied the request");
        let text = if !message.is_empty() {
            format!("{denied}: {message}")
        } else if !reason.is_empty() {
            format!("{denied}: {reason}")
        } else {
            format!("{denied} without explanation")
        };
        let mut error = ApiError::new(code, reason, text);
        if let Some(details) = status.get("details") {
            error = error.with_details(details.clone());
        }
        return Err((false, error));
    }
    let patch = match (phase, response.get("patch").and_then(Value::as_str)) {
        (Phase::Mutating, Some(encoded)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| malformed(&format!("response.patch is not base64: {e}")))?;
            let patch: Value = serde_json::from_slice(&bytes)
                .map_err(|e| malformed(&format!("response.patch is not a JSONPatch: {e}")))?;
            Some(patch)
        }
        (Phase::Validating, Some(_)) => {
            return Err(malformed("a validating webhook may not return a patch"));
        }
        _ => None,
    };
    Ok(Verdict { warnings, patch })
}

/// kube-apiserver's error for a webhook that could not be called under `failurePolicy: Fail`.
pub fn failed_call(name: &str, why: &str) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("Internal error occurred: failed calling webhook {name:?}: failed to call webhook: {why}"),
    )
    .with_details(json!({"causes": [{"message": format!("failed calling webhook {name:?}: {why}")}]}))
}

/// Calls one webhook and interprets its answer; `Ok(None)` when the call failed and the
/// webhook's failure policy is `Ignore`.
///
/// # Errors
/// A denial, a dry-run request to a webhook with side effects, or a failed call under
/// `failurePolicy: Fail`.
pub async fn call(
    webhook: &MatchedWebhook,
    routes: &ServiceRoutes,
    uid: &str,
    review: &Value,
    phase: Phase,
    dry_run: bool,
) -> Result<Option<Verdict>, ApiError> {
    if dry_run && !webhook.dry_run_safe {
        return Err(ApiError::bad_request(format!(
            "admission webhook {:?} does not support dry run",
            webhook.name
        )));
    }
    let answer = match webhook_client::call(&webhook.client_config, routes, webhook.timeout, review)
        .await
    {
        Ok(answer) => answer,
        Err(error) if webhook.ignore_failures => {
            tracing::warn!(webhook = %webhook.name, %error, "webhook call failed; failurePolicy Ignore");
            return Ok(None);
        }
        Err(error) => return Err(failed_call(&webhook.name, &error.to_string())),
    };
    match interpret(&webhook.name, uid, &answer, phase) {
        Ok(verdict) => Ok(Some(verdict)),
        Err((true, _)) if webhook.ignore_failures => Ok(None),
        Err((_, error)) => Err(error),
    }
}

/// The `Warning` header value kube-apiserver sends for a warning: `299 - "text"`.
pub fn warning_header(text: &str) -> String {
    let escaped: String = text
        .chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!("299 - \"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs() -> Attributes {
        Attributes {
            operation: "CREATE",
            group: "deckhouse.io".into(),
            version: "v1alpha2".into(),
            resource: "nodegroups".into(),
            subresource: String::new(),
            kind: "NodeGroup".into(),
            namespace: String::new(),
            namespaced: false,
            name: "workers".into(),
            object: Some(json!({"metadata": {"name": "workers", "labels": {"team": "a"}}})),
            old_object: None,
            dry_run: false,
            options: json!({}),
            namespace_labels: BTreeMap::new(),
        }
    }

    fn configuration(rule: Value, extra: Value) -> Value {
        let mut webhook = json!({"name": "nodegroup.deckhouse.io", "clientConfig": {"url": "https://x"},
            "rules": [rule], "sideEffects": "None", "admissionReviewVersions": ["v1"]});
        if let (Some(w), Some(e)) = (webhook.as_object_mut(), extra.as_object()) {
            w.extend(e.clone());
        }
        json!({"metadata": {"name": "c"}, "webhooks": [webhook]})
    }

    #[test]
    fn rules_match_with_wildcards_subresources_and_equivalent_versions() {
        let served = vec!["v1".to_owned(), "v1alpha2".to_owned()];
        let rule = json!({"operations": ["CREATE", "UPDATE"], "apiGroups": ["deckhouse.io"], "apiVersions": ["v1"], "resources": ["nodegroups"]});
        let matched = matching(&[configuration(rule.clone(), json!({}))], &attrs(), &served);
        assert_eq!(matched.len(), 1);
        assert_eq!(
            matched[0].version, "v1",
            "Equivalent: sent at the version the rule names"
        );
        assert!(
            matching(
                &[configuration(rule.clone(), json!({"matchPolicy": "Exact"}))],
                &attrs(),
                &served
            )
            .is_empty()
        );
        let mut status = attrs();
        status.subresource = "status".into();
        assert!(matching(&[configuration(rule, json!({}))], &status, &served).is_empty());
        let all = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]});
        assert_eq!(
            matching(&[configuration(all, json!({}))], &status, &served).len(),
            1
        );
        let delete_only = json!({"operations": ["DELETE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        assert!(matching(&[configuration(delete_only, json!({}))], &attrs(), &served).is_empty());
        let namespaced = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Namespaced"});
        assert!(matching(&[configuration(namespaced, json!({}))], &attrs(), &served).is_empty());
    }

    #[test]
    fn object_selector_filters() {
        let served = vec!["v1alpha2".to_owned()];
        let rule = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        let team_b = json!({"objectSelector": {"matchLabels": {"team": "b"}}});
        assert!(matching(&[configuration(rule.clone(), team_b)], &attrs(), &served).is_empty());
        let team_a = json!({"objectSelector": {"matchLabels": {"team": "a"}}, "failurePolicy": "Ignore", "timeoutSeconds": 3});
        let matched = matching(&[configuration(rule, team_a)], &attrs(), &served);
        assert!(matched[0].ignore_failures && matched[0].timeout == Duration::from_secs(3));
    }

    #[test]
    fn namespace_selector_applies_to_namespaced_objects_only() {
        let served = vec!["v1".to_owned()];
        let rule = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        let prod_only = json!({"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}});
        let mut pod = attrs();
        pod.namespaced = true;
        pod.namespace = "web".into();
        pod.version = "v1".into();
        pod.namespace_labels = BTreeMap::from([("env".to_owned(), "dev".to_owned())]);
        assert!(
            matching(
                &[configuration(rule.clone(), prod_only.clone())],
                &pod,
                &served
            )
            .is_empty()
        );
        pod.namespace_labels.insert("env".into(), "prod".into());
        assert_eq!(
            matching(
                &[configuration(rule.clone(), prod_only.clone())],
                &pod,
                &served
            )
            .len(),
            1
        );
        let mut cluster_scoped = attrs();
        cluster_scoped.version = "v1".into();
        assert_eq!(
            matching(&[configuration(rule, prod_only)], &cluster_scoped, &served).len(),
            1
        );
    }

    #[test]
    fn denials_are_worded_as_kube_apiserver_words_them() {
        let denied = json!({"response": {"uid": "u", "allowed": false, "status": {"message": "maxPerZone < minPerZone", "code": 403}}});
        let (_, e) = interpret("ng.deckhouse.io", "u", &denied, Phase::Validating).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"admission webhook "ng.deckhouse.io" denied the request: maxPerZone < minPerZone"#
        );
        let bare = json!({"response": {"uid": "u", "allowed": false}});
        let (_, e) = interpret("w", "u", &bare, Phase::Validating).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                r#"admission webhook "w" denied the request without explanation"#
            )
        );
        let wrong_uid = json!({"response": {"uid": "other", "allowed": true}});
        assert!(
            interpret("w", "u", &wrong_uid, Phase::Validating)
                .unwrap_err()
                .0
        );
        let allowed =
            json!({"response": {"uid": "u", "allowed": true, "warnings": ["deprecated field"]}});
        assert_eq!(
            interpret("w", "u", &allowed, Phase::Validating)
                .unwrap()
                .warnings,
            ["deprecated field"]
        );
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/spec/x","value":1}]"#);
        let mutated = json!({"response": {"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": patch}});
        assert!(
            interpret("w", "u", &mutated, Phase::Mutating)
                .unwrap()
                .patch
                .is_some()
        );
    }

    #[test]
    fn warning_headers_quote_their_text() {
        assert_eq!(
            warning_header(r#"unknown field "spec.x""#),
            r#"299 - "unknown field \"spec.x\"""#
        );
    }
}
