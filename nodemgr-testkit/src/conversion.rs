//! CRD version conversion as kube-apiserver does it: custom objects are stored at the storage
//! version; with `conversion.strategy: None` another version is the same object with another
//! `apiVersion`; with `Webhook`, a `ConversionReview` v1 goes to the CRD's
//! `conversion.webhook.clientConfig` on every write (request version → storage version) and
//! every read, list and watch event (storage → requested version). The answer is checked as
//! the real one checks it: same uid, `result.status: Success`, as many objects as sent, each at
//! the desired `apiVersion` with the same kind, name, namespace and uid. See
//! `docs/api-emulator.md`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::status::ApiError;
use crate::webhook_client::{self, ServiceRoutes};

/// How long kube-apiserver waits for a conversion webhook.
pub const CONVERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The `ConversionReview` v1 request converting `objects` to `desired_api_version`.
pub fn review(uid: &str, desired_api_version: &str, objects: &[Value]) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired_api_version, "objects": objects},
    })
}

fn meta<'a>(object: &'a Value, key: &str) -> &'a str {
    object
        .pointer(&format!("/metadata/{key}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Reads a `ConversionReview` answer for `sent` objects.
///
/// # Errors
/// The webhook's failure message, or what is wrong with the answer.
pub fn interpret(
    uid: &str,
    desired_api_version: &str,
    sent: &[Value],
    answer: &Value,
) -> Result<Vec<Value>, String> {
    let response = answer
        .get("response")
        .ok_or("the ConversionReview answer has no response")?;
    if response.get("uid").and_then(Value::as_str) != Some(uid) {
        return Err(format!(
            "expected response.uid={uid:?}, got {:?}",
            response.get("uid").and_then(Value::as_str).unwrap_or("")
        ));
    }
    let status = response
        .pointer("/result/status")
        .and_then(Value::as_str)
        .unwrap_or("");
    if status != "Success" {
        let message = response
            .pointer("/result/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(format!("conversion webhook failed: {message}"));
    }
    let converted = response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .ok_or("response.convertedObjects is missing")?;
    if converted.len() != sent.len() {
        return Err(format!(
            "expected {} converted objects, got {}",
            sent.len(),
            converted.len()
        ));
    }
    for (before, after) in sent.iter().zip(converted) {
        if after.get("apiVersion").and_then(Value::as_str) != Some(desired_api_version) {
            return Err(format!(
                "invalid apiVersion {:?} in converted object, expected {desired_api_version:?}",
                after
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ));
        }
        if after.get("kind") != before.get("kind") {
            return Err("the converted object changed its kind".to_owned());
        }
        for key in ["name", "namespace", "uid"] {
            if meta(before, key) != meta(after, key) {
                return Err(format!("the converted object changed metadata.{key}"));
            }
        }
    }
    Ok(converted.clone())
}

/// Converts `objects` (all of one CRD, at one or more versions) to `desired_api_version`
/// through the webhook at `client_config`. Objects already there are not sent.
///
/// # Errors
/// 500 InternalError naming the kind when the webhook fails or answers wrongly.
pub async fn convert_by_webhook(
    client_config: &Value,
    routes: &ServiceRoutes,
    kind: &str,
    desired_api_version: &str,
    uid: &str,
    objects: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    let pending: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(desired_api_version))
        .map(|(i, _)| i)
        .collect();
    if pending.is_empty() {
        return Ok(objects);
    }
    let sent: Vec<Value> = pending
        .iter()
        .filter_map(|i| objects.get(*i).cloned())
        .collect();
    let failed = |why: String| {
        ApiError::internal(format!(
            "conversion webhook for {desired_api_version}, Kind={kind} failed: {why}"
        ))
    };
    let answer = webhook_client::call(
        client_config,
        routes,
        CONVERSION_TIMEOUT,
        &review(uid, desired_api_version, &sent),
    )
    .await
    .map_err(|e| failed(e.to_string()))?;
    let converted = interpret(uid, desired_api_version, &sent, &answer).map_err(failed)?;
    let mut out = objects;
    for (i, object) in pending.into_iter().zip(converted) {
        if let Some(slot) = out.get_mut(i) {
            *slot = object;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(api_version: &str) -> Value {
        json!({"apiVersion": api_version, "kind": "NodeGroup", "metadata": {"name": "a", "uid": "1"}})
    }

    #[test]
    fn answers_are_checked() {
        let sent = [object("deckhouse.io/v1")];
        let ok = json!({"response": {"uid": "u", "result": {"status": "Success"}, "convertedObjects": [object("deckhouse.io/v1alpha2")]}});
        assert_eq!(
            interpret("u", "deckhouse.io/v1alpha2", &sent, &ok).unwrap()[0]["apiVersion"],
            "deckhouse.io/v1alpha2"
        );
        let wrong_version = json!({"response": {"uid": "u", "result": {"status": "Success"}, "convertedObjects": [object("deckhouse.io/v1")]}});
        assert!(
            interpret("u", "deckhouse.io/v1alpha2", &sent, &wrong_version)
                .unwrap_err()
                .contains("invalid apiVersion")
        );
        let failed = json!({"response": {"uid": "u", "result": {"status": "Failure", "message": "unknown nodeType"}}});
        assert_eq!(
            interpret("u", "deckhouse.io/v1alpha2", &sent, &failed).unwrap_err(),
            "conversion webhook failed: unknown nodeType"
        );
        let missing = json!({"response": {"uid": "u", "result": {"status": "Success"}, "convertedObjects": []}});
        assert!(
            interpret("u", "deckhouse.io/v1alpha2", &sent, &missing)
                .unwrap_err()
                .contains("expected 1")
        );
        let renamed = json!({"response": {"uid": "u", "result": {"status": "Success"}, "convertedObjects": [
            {"apiVersion": "deckhouse.io/v1alpha2", "kind": "NodeGroup", "metadata": {"name": "b", "uid": "1"}}]}});
        assert!(
            interpret("u", "deckhouse.io/v1alpha2", &sent, &renamed)
                .unwrap_err()
                .contains("metadata.name")
        );
    }
}
