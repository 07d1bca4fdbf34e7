//! The webhook's HTTP endpoints: `POST /validate` answers AdmissionReview `admission.k8s.io/v1`
//! with [`nodemgr_core::admission::admit`], `POST /convert` answers ConversionReview
//! `apiextensions.k8s.io/v1` with [`nodemgr_core::conversion::convert`], `GET /healthz`.
//!
//! A review body that is not a review is answered 400 with what is wrong; a review whose
//! cluster inputs cannot be read is answered 500, so the API server applies the webhook's
//! failurePolicy instead of taking a refusal the webhook never decided.

use nodemgr_core::ports::ErrorChain;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nodemgr_core::admission::{Operation, Review, admit, needs};
use nodemgr_core::conversion::convert;
use serde_json::{Value, json};

use super::cluster::ClusterSource;

/// Path of the ValidatingAdmissionWebhook endpoint.
pub const VALIDATE_PATH: &str = "/validate";
/// Path of the CRD conversion endpoint.
pub const CONVERT_PATH: &str = "/convert";

type Source = Arc<dyn ClusterSource>;

/// The router of the webhook's endpoints.
pub fn router(source: Source) -> Router {
    Router::new()
        .route(VALIDATE_PATH, post(validate))
        .route(CONVERT_PATH, post(convert_review))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(source)
}

fn bad_request(message: String) -> Response {
    tracing::warn!(%message, "malformed review");
    (StatusCode::BAD_REQUEST, message).into_response()
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

async fn validate(State(source): State<Source>, Json(body): Json<Value>) -> Response {
    let Some(request) = body.get("request") else {
        return bad_request(
            "the body is not an AdmissionReview: it has no `request`; send admission.k8s.io/v1 \
             AdmissionReview"
                .into(),
        );
    };
    let uid = str_at(request, "/uid").unwrap_or_default().to_owned();
    let Some(kind) = str_at(request, "/kind/kind") else {
        return bad_request("request.kind.kind is missing".into());
    };
    let operation: Operation = match str_at(request, "/operation").unwrap_or_default().parse() {
        Ok(op) => op,
        Err(e) => return bad_request(format!("request.operation: {e}")),
    };
    let review = Review {
        kind,
        operation,
        old: present(request.get("oldObject")),
        new: present(request.get("object")),
    };
    let inputs = match source.admission_inputs(&needs(&review)).await {
        Ok(inputs) => inputs,
        Err(error) => {
            let message = error.to_string();
            tracing::warn!(%message, error = %ErrorChain(&error), kind, "cannot decide a review");
            return (StatusCode::INTERNAL_SERVER_ERROR, message).into_response();
        }
    };
    let verdict = admit(&review, &inputs);
    tracing::info!(
        kind,
        name = str_at(request, "/name").unwrap_or_default(),
        operation = str_at(request, "/operation").unwrap_or_default(),
        allowed = verdict.allowed,
        warnings = verdict.warnings.len(),
        "admission review"
    );
    let mut response = json!({"uid": uid, "allowed": verdict.allowed});
    if let Some(message) = verdict.message {
        response["status"] = json!({"code": 403, "reason": "Forbidden", "message": message});
    }
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
    .into_response()
}

async fn convert_review(State(source): State<Source>, Json(body): Json<Value>) -> Response {
    let Some(request) = body.get("request") else {
        return bad_request(
            "the body is not a ConversionReview: it has no `request`; send \
             apiextensions.k8s.io/v1 ConversionReview"
                .into(),
        );
    };
    let uid = str_at(request, "/uid").unwrap_or_default().to_owned();
    let Some(desired) = str_at(request, "/desiredAPIVersion") else {
        return bad_request("request.desiredAPIVersion is missing".into());
    };
    let objects = match request.get("objects") {
        Some(Value::Array(objects)) => objects.as_slice(),
        None | Some(Value::Null) => &[],
        Some(_) => return bad_request("request.objects is not a list".into()),
    };
    let answer = |result: Value, converted: Vec<Value>| {
        Json(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "response": {"uid": uid, "result": result, "convertedObjects": converted},
        }))
        .into_response()
    };
    let ctx = match source.conversion_context().await {
        Ok(ctx) => ctx,
        Err(error) => {
            let message = error.to_string();
            tracing::warn!(%message, error = %ErrorChain(&error), "cannot convert");
            return answer(json!({"status": "Failure", "message": message}), vec![]);
        }
    };
    let mut converted = Vec::with_capacity(objects.len());
    for (i, object) in objects.iter().enumerate() {
        match convert(object, desired, &ctx) {
            Ok(out) => converted.push(out),
            Err(e) => {
                let name = str_at(object, "/metadata/name").unwrap_or_default();
                let message = format!("objects[{i}] ({name}): {e}");
                tracing::warn!(%message, "conversion failed");
                return answer(json!({"status": "Failure", "message": message}), vec![]);
            }
        }
    }
    tracing::debug!(objects = converted.len(), desired, "converted");
    answer(json!({"status": "Success"}), converted)
}
