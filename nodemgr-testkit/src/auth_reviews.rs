//! The emulator's answers to `authentication.k8s.io/v1` TokenReview and
//! `authorization.k8s.io/v1` SubjectAccessReview, for components that authorize their callers
//! through the API server (nodemgr's `--metrics-auth kubernetes`).
//!
//! Tests say which bearer tokens belong to which users and what each user may do with
//! [`AuthReviews`], installed for one emulator with [`install`]. A TokenReview of an unknown
//! token answers `authenticated: false`; a SubjectAccessReview answers `allowed: true` only for a
//! (user, verb, non-resource path or resource) the test granted, directly or to one of the
//! user's groups. Without [`install`] both reviews answer 404 like any unknown resource.
//! Each review is counted, so a test can tell that a component really asked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use axum::http::Method;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A user a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `system:serviceaccount:<namespace>:<name>` or any name.
    pub name: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// What a SubjectAccessReview asks: a verb on a non-resource path (`/metrics`) or on a resource
/// (`pods`, `nodes`, …).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// `get`, `list`, …
    pub verb: String,
    /// The path (`/metrics`) or the resource's plural.
    pub target: String,
}

impl Permission {
    /// `verb` on the non-resource URL `path`.
    pub fn non_resource(verb: &str, path: &str) -> Permission {
        Permission {
            verb: verb.to_owned(),
            target: path.to_owned(),
        }
    }
}

/// The tokens, users and permissions of one emulator, and the reviews it answered.
#[derive(Debug, Default)]
pub struct AuthReviews {
    tokens: BTreeMap<String, User>,
    grants: BTreeMap<String, BTreeSet<Permission>>,
    token_reviews: u64,
    access_reviews: u64,
}

impl AuthReviews {
    /// No tokens, no grants.
    pub fn new() -> Self {
        AuthReviews::default()
    }

    /// `token` authenticates as `user`.
    pub fn token(mut self, token: &str, user: User) -> Self {
        self.tokens.insert(token.to_owned(), user);
        self
    }

    /// `subject` (a user name or a group) may do `permission`.
    pub fn grant(mut self, subject: &str, permission: Permission) -> Self {
        self.grants
            .entry(subject.to_owned())
            .or_default()
            .insert(permission);
        self
    }

    /// TokenReviews answered so far.
    pub fn token_reviews(&self) -> u64 {
        self.token_reviews
    }

    /// SubjectAccessReviews answered so far.
    pub fn access_reviews(&self) -> u64 {
        self.access_reviews
    }

    fn review_token(&mut self, review: &Value) -> Value {
        self.token_reviews = self.token_reviews.saturating_add(1);
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let status = match self.tokens.get(token) {
            Some(user) => json!({
                "authenticated": true,
                "user": {"username": user.name, "groups": user.groups, "uid": format!("uid-{}", user.name)},
            }),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        answer(review, status)
    }

    fn review_access(&mut self, review: &Value) -> Value {
        self.access_reviews = self.access_reviews.saturating_add(1);
        let spec = &review["spec"];
        let (verb, target) = if spec["nonResourceAttributes"].is_object() {
            (
                &spec["nonResourceAttributes"]["verb"],
                &spec["nonResourceAttributes"]["path"],
            )
        } else {
            (
                &spec["resourceAttributes"]["verb"],
                &spec["resourceAttributes"]["resource"],
            )
        };
        let wanted = Permission {
            verb: verb.as_str().unwrap_or_default().to_owned(),
            target: target.as_str().unwrap_or_default().to_owned(),
        };
        let mut subjects = vec![spec["user"].as_str().unwrap_or_default().to_owned()];
        subjects.extend(
            spec["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned),
        );
        let allowed = subjects
            .iter()
            .any(|s| self.grants.get(s).is_some_and(|g| g.contains(&wanted)));
        let status = if allowed {
            json!({"allowed": true, "reason": "granted by the test"})
        } else {
            json!({"allowed": false, "reason": format!("{} may not {} {}", subjects[0], wanted.verb, wanted.target)})
        };
        answer(review, status)
    }
}

/// The review sent back with its `status` (the API server echoes the object).
fn answer(review: &Value, status: Value) -> Value {
    let mut out = review.clone();
    out["status"] = status;
    if out["metadata"].is_null() {
        out["metadata"] = json!({});
    }
    out
}

type Registry = Mutex<HashMap<String, Arc<Mutex<AuthReviews>>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// Makes the emulator listening on `address` (`host:port`, [`crate::Emulator::address`])
/// answer reviews from `reviews`; returns a handle to read the counters and change the grants.
pub fn install(address: &str, reviews: AuthReviews) -> Arc<Mutex<AuthReviews>> {
    let shared = Arc::new(Mutex::new(reviews));
    registry()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(address.to_owned(), shared.clone());
    shared
}

/// The route hook of the emulator's handler: the answer to a `POST` of a TokenReview or a
/// SubjectAccessReview to the emulator at `address`, when reviews were installed for it.
pub fn route(address: &str, method: &Method, path: &str, body: &[u8]) -> Option<Response> {
    if method != Method::POST {
        return None;
    }
    let kind = match path.trim_end_matches('/') {
        "/apis/authentication.k8s.io/v1/tokenreviews" => "TokenReview",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => "SubjectAccessReview",
        _ => return None,
    };
    let reviews = registry()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(address)
        .cloned()?;
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return Some(
            (
                axum::http::StatusCode::BAD_REQUEST,
                format!("the body of the {kind} is not JSON"),
            )
                .into_response(),
        );
    };
    let mut reviews = reviews
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let answer = if kind == "TokenReview" {
        reviews.review_token(&review)
    } else {
        reviews.review_access(&review)
    };
    Some((axum::http::StatusCode::CREATED, axum::Json(answer)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reviews() -> AuthReviews {
        AuthReviews::new()
            .token(
                "good",
                User {
                    name: "system:serviceaccount:monitoring:prometheus".into(),
                    groups: vec!["system:serviceaccounts".into()],
                },
            )
            .token(
                "other",
                User {
                    name: "alice".into(),
                    groups: vec!["devs".into()],
                },
            )
            .grant(
                "system:serviceaccount:monitoring:prometheus",
                Permission::non_resource("get", "/metrics"),
            )
            .grant("ops", Permission::non_resource("get", "/metrics"))
    }

    #[test]
    fn tokens_authenticate_as_their_users_and_unknown_ones_do_not() {
        let mut r = reviews();
        let out = r.review_token(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "good"}}));
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(
            out["status"]["user"]["username"],
            "system:serviceaccount:monitoring:prometheus"
        );
        let out = r.review_token(&json!({"spec": {"token": "forged"}}));
        assert_eq!(out["status"]["authenticated"], false);
        assert_eq!(r.token_reviews(), 2);
    }

    #[test]
    fn access_is_allowed_only_as_granted_to_the_user_or_a_group() {
        let mut r = reviews();
        let ask = |user: &str, groups: &[&str], verb: &str, path: &str| json!({"spec": {"user": user, "groups": groups, "nonResourceAttributes": {"verb": verb, "path": path}}});
        let allowed =
            |r: &mut AuthReviews, v: Value| r.review_access(&v)["status"]["allowed"] == true;
        assert!(allowed(
            &mut r,
            ask(
                "system:serviceaccount:monitoring:prometheus",
                &[],
                "get",
                "/metrics"
            )
        ));
        assert!(!allowed(&mut r, ask("alice", &["devs"], "get", "/metrics")));
        assert!(allowed(&mut r, ask("bob", &["ops"], "get", "/metrics")));
        assert!(!allowed(
            &mut r,
            ask(
                "system:serviceaccount:monitoring:prometheus",
                &[],
                "post",
                "/metrics"
            )
        ));
        assert!(!allowed(
            &mut r,
            ask(
                "system:serviceaccount:monitoring:prometheus",
                &[],
                "get",
                "/healthz"
            )
        ));
        assert_eq!(r.access_reviews(), 5);
    }
}
