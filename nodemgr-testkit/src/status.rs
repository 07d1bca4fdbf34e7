//! API errors as `metav1.Status` objects with the reason and code kube-apiserver uses, so that
//! clients (kube-rs `ErrorResponse`, kubectl's `errors.IsConflict`…) classify them correctly.

use serde_json::{Value, json};

/// A failed API request: HTTP code, `reason`, message and optional details.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// Machine-readable `Status.reason` (`NotFound`, `AlreadyExists`, `Conflict`…).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `Status.details`, when there is something to say (name, kind, causes).
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429 and some 500s).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A bare error with a code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// Adds `Status.details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 404 for an object: `pods "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// 404 for a path the emulator does not serve.
    pub fn no_route(path: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
        .with_details(json!({}))
    }

    /// 409 for a create of an existing object.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// 409 for an update with a stale resourceVersion or a failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }

    /// 400 for a request the emulator cannot parse.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 422 for an object that fails validation.
    pub fn invalid(group: &str, kind: &str, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::new(
            422,
            "Invalid",
            format!("{kind}.{group} \"{name}\" is invalid: {message}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message}]}))
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 415 for a patch type the resource does not support.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type})"
            ),
        )
    }

    /// 410 for a resourceVersion older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 500 for an internal failure.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    /// The `metav1.Status` JSON body of this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(seconds) = self.retry_after {
            status["details"]["retryAfterSeconds"] = json!(seconds);
        }
        status
    }
}

/// `pods` or `leases.coordination.k8s.io`, as error messages name resources.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// A `Status` of success, as returned by deletes of collections and evictions.
pub fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
}
