//! Fetches the group's bundle from `bashible-apiserver` (`GET /v1/groups/{group}/bundle`,
//! bearer token) and checks what only the I/O side can: the bundle is the group's, and every
//! step name is a plain file name (so no step is written outside `bundle_steps/`). The
//! checksum is recomputed from the steps by the core agent, which refuses a bundle that does
//! not match it (Event `BashibleBundleRejected`) before anything of it is stored or run.

use std::time::Duration;

use nodemgr_core::bashible::Step;
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
    /// The configuration checksum the server published (verified by the agent).
    pub checksum: String,
    /// The steps in the order they run.
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
struct WireBundle {
    group: String,
    checksum: String,
    steps: Vec<Step>,
}

fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks a served body: the group and the step names.
///
/// # Errors
/// [`FetchError::Malformed`] or [`FetchError::Unusable`].
pub fn check_bundle(group: &str, body: &[u8]) -> Result<FetchedBundle, FetchError> {
    let wire: WireBundle =
        serde_json::from_slice(body).map_err(|source| FetchError::Malformed {
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
    let steps = wire.steps;
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
    Ok(FetchedBundle {
        group: wire.group,
        checksum: wire.checksum,
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
    /// A client of the server at `base` (`http://host:port` or `https://host:port`) with
    /// `token`; `ca_pem`, when given, holds the only certificates an `https` server is
    /// trusted by (bashible-apiserver's self-signed certificate, say).
    ///
    /// # Errors
    /// When `ca_pem` holds no certificate, or the HTTP client cannot be built.
    pub fn new(
        base: &str,
        token: Secret,
        timeout: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, reqwest::Error> {
        // reqwest has no built-in crypto provider in this workspace: ring, as everywhere.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout);
        if let Some(pem) = ca_pem {
            builder = builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(pem)?);
        }
        let http = builder.build()?;
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
        let steps: Vec<Step> = steps.iter().map(|(n, s)| Step::new(*n, *s)).collect();
        nodemgr_core::bashible::configuration_checksum(&steps)
    }

    #[test]
    fn a_bundle_whose_checksum_matches_is_accepted() {
        let steps = [("001_a.sh", "echo a"), ("002_b.sh", "echo b")];
        let bundle = check_bundle("worker", &body(&sum(&steps), &steps)).expect("valid");
        assert_eq!(bundle.steps.len(), 2);
        assert_eq!(bundle.checksum, sum(&steps));
    }

    #[test]
    fn a_changed_step_reaches_the_agent_which_refuses_it() {
        use nodemgr_core::agent::{
            Agent, AgentAction, AgentConfig, AgentInput, DesiredBundle, StateFiles,
        };
        let steps = [("001_a.sh", "echo a")];
        let fetched = check_bundle("worker", &body(&sum(&steps), &[("001_a.sh", "rm -rf /")]))
            .expect("well-formed");
        let now = nodemgr_core::model::Timestamp::EPOCH;
        let mut agent = Agent::new(AgentConfig::new("n1"), StateFiles::first_run(), now);
        assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
        agent.handle_input(
            AgentInput::Bundle(Ok(DesiredBundle {
                checksum: fetched.checksum,
                steps: fetched.steps.into(),
                rolling_update: false,
            })),
            now,
        );
        let actions: Vec<AgentAction> = std::iter::from_fn(|| agent.poll_action()).collect();
        assert!(
            actions.iter().all(|a| !matches!(
                a,
                AgentAction::StoreBundle { .. } | AgentAction::RunStep { .. }
            )),
            "{actions:?}"
        );
        assert!(
            actions.iter().any(
                |a| matches!(a, AgentAction::EmitEvent(e) if e.reason == "BashibleBundleRejected")
            ),
            "{actions:?}"
        );
    }

    proptest::proptest! {
        /// A served step name is accepted only when it stays a plain file in `bundle_steps/`.
        #[test]
        fn an_accepted_step_name_stays_in_the_directory(name in "(?s).{0,12}") {
            let steps = [(name.as_str(), "x")];
            if check_bundle("worker", &body(&sum(&steps), &steps)).is_ok() {
                let path = std::path::Path::new("/b").join(&name);
                proptest::prop_assert_eq!(path.parent(), Some(std::path::Path::new("/b")));
                proptest::prop_assert!(!name.starts_with('.') && !name.contains('/'));
            }
        }
    }

    #[test]
    fn names_that_leave_the_directory_and_other_groups_are_refused() {
        for name in ["../evil.sh", "a/b.sh", ".hidden", ""] {
            let steps = [(name, "x")];
            let error = check_bundle("worker", &body(&sum(&steps), &steps)).expect_err(name);
            assert!(
                matches!(error, FetchError::Unusable { .. }),
                "{name}: {error}"
            );
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
