//! Fetches the group's bundle from `bashible-apiserver` (`GET /v1/groups/{group}/bundle`,
//! bearer token) and checks it: the checksum is recomputed from the steps
//! ([`nodemgr_core::bashible::configuration_checksum`]) and must equal the one served, and
//! every step name must be a plain file name. A bundle that fails either check is never written
//! to disk nor run.

use std::time::Duration;

use nodemgr_core::bashible::{Step, configuration_checksum};
use serde::Deserialize;

use super::secret::Secret;

/// Why no usable bundle was fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The server did not answer (connection refused, timeout, reset).
    #[error("the bundle server {server} is unreachable: {source}")]
    Unreachable {
        /// The server's URL.
        server: String,
        /// reqwest's error.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("the bundle server refused the bundle of group {group}: HTTP {status}: {message}")]
    Refused {
        /// The group.
        group: String,
        /// The HTTP status.
        status: u16,
        /// The server's message (`{"error": …}`), or the start of the body.
        message: String,
    },
    /// The body is not a bundle.
    #[error("the bundle of group {group} is not valid JSON of a bundle: {source}")]
    Malformed {
        /// The group.
        group: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The served checksum is not the checksum of the served steps.
    #[error(
        "the bundle of group {group} does not match its checksum (served {served}, computed \
         {computed}): the download was corrupted or the server is broken; nothing is applied"
    )]
    ChecksumMismatch {
        /// The group.
        group: String,
        /// The checksum the server sent.
        served: String,
        /// The checksum of the steps received.
        computed: String,
    },
    /// A step name would write outside `bundle_steps/`, or the bundle is for another group.
    #[error("the bundle of group {group} is unusable: {problem}")]
    Unusable {
        /// The group.
        group: String,
        /// What is wrong.
        problem: String,
    },
}

/// A bundle as served and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedBundle {
    /// The group.
    pub group: String,
    /// The configuration checksum (verified).
    pub checksum: String,
    /// The steps in the order they run.
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
struct WireStep {
    name: String,
    script: String,
}

#[derive(Deserialize)]
struct WireBundle {
    group: String,
    checksum: String,
    steps: Vec<WireStep>,
}

fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks a served body: the group, the step names and the checksum.
///
/// # Errors
/// [`FetchError::Malformed`], [`FetchError::Unusable`] or [`FetchError::ChecksumMismatch`].
pub fn check_bundle(group: &str, body: &[u8]) -> Result<FetchedBundle, FetchError> {
    let wire: WireBundle = serde_json::from_slice(body).map_err(|source| FetchError::Malformed {
        group: group.to_owned(),
        source,
    })?;
    let unusable = |problem: String| FetchError::Unusable {
        group: group.to_owned(),
        problem,
    };
    if wire.group != group {
        return Err(unusable(format!(
            "the server sent the bundle of group {}",
            wire.group
        )));
    }
    let steps: Vec<Step> = wire
        .steps
        .into_iter()
        .map(|s| Step {
            name: s.name,
            script: s.script,
        })
        .collect();
    if let Some(bad) = steps.iter().find(|s| !plain_file_name(&s.name)) {
        return Err(unusable(format!(
            "step name {:?} is not a plain file name",
            bad.name
        )));
    }
    if steps.windows(2).any(|w| w[0].name >= w[1].name) {
        return Err(unusable(
            "the steps are not in strictly increasing lexical order of their names".into(),
        ));
    }
    let computed = configuration_checksum(&steps);
    if computed != wire.checksum {
        return Err(FetchError::ChecksumMismatch {
            group: group.to_owned(),
            served: wire.checksum,
            computed,
        });
    }
    Ok(FetchedBundle {
        group: wire.group,
        checksum: computed,
        steps,
    })
}

/// The bundle server of this node.
#[derive(Debug, Clone)]
pub struct BundleServer {
    base: String,
    token: Secret,
    http: reqwest::Client,
}

impl BundleServer {
    /// A client of the server at `base` (`http://host:port`) with `token`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(base: &str, token: Secret, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Fetches and checks the bundle of `group`.
    ///
    /// # Errors
    /// See [`FetchError`].
    pub async fn fetch(&self, group: &str) -> Result<FetchedBundle, FetchError> {
        let unreachable = |source| FetchError::Unreachable {
            server: self.base.clone(),
            source,
        };
        let response = self
            .http
            .get(format!("{}/v1/groups/{group}/bundle", self.base))
            .bearer_auth(self.token.expose())
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        let body = response.bytes().await.map_err(unreachable)?;
        if !status.is_success() {
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
            return Err(FetchError::Refused {
                group: group.to_owned(),
                status: status.as_u16(),
                message,
            });
        }
        check_bundle(group, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(checksum: &str, steps: &[(&str, &str)]) -> Vec<u8> {
        let steps: Vec<_> = steps
            .iter()
            .map(|(n, s)| json!({"name": n, "script": s}))
            .collect();
        serde_json::to_vec(&json!({"group": "worker", "checksum": checksum, "steps": steps}))
            .expect("json")
    }

    fn sum(steps: &[(&str, &str)]) -> String {
        let steps: Vec<Step> = steps
            .iter()
            .map(|(n, s)| Step {
                name: (*n).into(),
                script: (*s).into(),
            })
            .collect();
        configuration_checksum(&steps)
    }

    #[test]
    fn a_bundle_whose_checksum_matches_is_accepted() {
        let steps = [("001_a.sh", "echo a"), ("002_b.sh", "echo b")];
        let bundle = check_bundle("worker", &body(&sum(&steps), &steps)).expect("valid");
        assert_eq!(bundle.steps.len(), 2);
        assert_eq!(bundle.checksum, sum(&steps));
    }

    #[test]
    fn a_changed_step_is_caught_by_the_checksum() {
        let steps = [("001_a.sh", "echo a")];
        let error = check_bundle("worker", &body(&sum(&steps), &[("001_a.sh", "rm -rf /")]))
            .expect_err("tampered");
        assert!(matches!(error, FetchError::ChecksumMismatch { .. }), "{error}");
        assert!(error.to_string().contains("nothing is applied"));
    }

    #[test]
    fn names_that_leave_the_directory_and_other_groups_are_refused() {
        for name in ["../evil.sh", "a/b.sh", ".hidden", ""] {
            let steps = [(name, "x")];
            let error = check_bundle("worker", &body(&sum(&steps), &steps)).expect_err(name);
            assert!(matches!(error, FetchError::Unusable { .. }), "{name}: {error}");
        }
        let steps = [("002.sh", "x"), ("001.sh", "y")];
        assert!(check_bundle("worker", &body(&sum(&steps), &steps)).is_err());
        let steps = [("001.sh", "x")];
        assert!(check_bundle("db", &body(&sum(&steps), &steps)).is_err());
        assert!(matches!(
            check_bundle("worker", b"<html>"),
            Err(FetchError::Malformed { .. })
        ));
    }
}
