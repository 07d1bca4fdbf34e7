//! Kubernetes authorization of scrapes (`--metrics-auth kubernetes`), what kube-rbac-proxy does
//! in front of Deckhouse's components, built into the binaries: the caller's bearer token is
//! checked with a `TokenReview` (`authentication.k8s.io/v1`), then the user it names with a
//! `SubjectAccessReview` (`authorization.k8s.io/v1`) for `get` on the non-resource URL of the
//! request (`/metrics`). No token or a token the API server does not accept: 401; a user
//! without the permission: 403; the API server not answering: 503. Nothing is cached: each
//! scrape costs two API calls.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// Who may scrape: the mode of `--metrics-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MetricsAuth {
    /// Anyone who reaches the address (plain HTTP unless a certificate is given).
    #[default]
    None,
    /// HTTPS, and the caller's token must be allowed `get` on `/metrics` (TokenReview and
    /// SubjectAccessReview against the API server).
    Kubernetes,
}

/// The outcome of checking one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The user may.
    Allowed {
        /// The user the token belongs to.
        user: String,
    },
    /// No bearer token, or one the API server does not accept.
    Unauthenticated(String),
    /// The user may not.
    Forbidden {
        /// The user the token belongs to.
        user: String,
        /// The authorizer's reason, if it gave one.
        reason: String,
    },
    /// The reviews could not be made.
    Unavailable(String),
}

/// Checks scrapes against the API server.
#[derive(Clone)]
pub struct KubernetesAuthorizer {
    client: kube::Client,
}

impl KubernetesAuthorizer {
    /// An authorizer asking the API server `client` talks to.
    pub fn new(client: kube::Client) -> Self {
        KubernetesAuthorizer { client }
    }

    /// Whether the holder of `token` may `get` the non-resource URL `path`.
    pub async fn decide(&self, token: Option<&str>, path: &str) -> Decision {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Decision::Unauthenticated("no bearer token".into());
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(reviewed) => reviewed,
            Err(error) => return Decision::Unavailable(format!("TokenReview failed: {error}")),
        };
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Decision::Unauthenticated(
                status
                    .error
                    .unwrap_or_else(|| "the token is not valid".into()),
            );
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
        {
            Ok(reviewed) => {
                let status = reviewed.status.unwrap_or_default();
                if status.allowed {
                    Decision::Allowed { user: name }
                } else {
                    Decision::Forbidden {
                        user: name,
                        reason: status.reason.unwrap_or_default(),
                    }
                }
            }
            Err(error) => Decision::Unavailable(format!("SubjectAccessReview failed: {error}")),
        }
    }
}

/// The bearer token of an `Authorization` header value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Axum middleware: passes a request for `/metrics` on only when
/// [`KubernetesAuthorizer::decide`] allows it; other paths (`/healthz`, `/readyz`, which the
/// kubelet probes without a token) pass unchecked.
pub async fn require(
    State(authorizer): State<KubernetesAuthorizer>,
    request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().starts_with("/metrics") {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .map(str::to_owned);
    let path = request.uri().path().to_owned();
    match authorizer.decide(token.as_deref(), &path).await {
        Decision::Allowed { .. } => next.run(request).await,
        Decision::Unauthenticated(why) => {
            tracing::debug!(%path, %why, "scrape refused: unauthenticated");
            (StatusCode::UNAUTHORIZED, format!("Unauthorized: {why}\n")).into_response()
        }
        Decision::Forbidden { user, reason } => {
            tracing::debug!(%path, %user, %reason, "scrape refused: forbidden");
            (
                StatusCode::FORBIDDEN,
                format!("Forbidden: user {user:?} may not get {path}\n"),
            )
                .into_response()
        }
        Decision::Unavailable(why) => {
            tracing::warn!(%path, %why, "scrape refused: cannot ask the API server");
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
    }
}
