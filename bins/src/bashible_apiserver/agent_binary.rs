//! The node agent on bootstrapped nodes. `GET /v1/agent/bashible` serves the agent's binary
//! (the file given with `--agent-binary`) to bootstrap scripts: any known bearer token may read
//! it (the binary is the same for every group); without one, or with a wrong or expired one,
//! the answer is the server's one 401 (`{"error":"Unauthorized"}`), and 404 when the server was
//! started without `--agent-binary`.
//!
//! With `--public-url` as well, a group's bootstrap script installs the agent
//! ([`agent_install`]): it downloads the binary from that URL and leaves the node the token of
//! the grant that names exactly that group (never a `*` grant, which would let every node read
//! every group); a group without such a grant gets a bootstrap script without the agent, and
//! the reason in the log. In cluster mode the script also carries the server's CA (from its
//! TLS Secret), which the download and the installed agent trust.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use nodemgr_core::bashible::{AgentInstall, RenderError};

use super::auth::{self, Access, Grant, Scope};
use super::{Shared, error, unauthorized};

/// Serves the agent binary.
pub async fn agent_binary(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let served = shared.current();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match auth::access(&served.grants, authorization) {
        // The same answer whatever was wrong, as every other path (see `super::unauthorized`).
        Access::Missing | Access::Unknown => return unauthorized().into_response(),
        Access::Granted(_) => {}
    }
    let Some(path) = served.agent_binary.clone() else {
        return error(
            StatusCode::NOT_FOUND,
            "this server does not serve the agent: start it with --agent-binary PATH",
        )
        .into_response();
    };
    let read = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || std::fs::read(path)).await
    };
    let read = read.unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match read {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot read the agent binary");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the agent binary cannot be read: {e}"),
            )
            .into_response()
        }
    }
}

/// The agent a group's bootstrap script installs, if the server is configured for it and a
/// grant names the group.
///
/// # Errors
/// A `--public-url` that a systemd unit line cannot carry.
pub fn agent_install(
    public_url: Option<&str>,
    serves_binary: bool,
    ca: Option<&str>,
    grants: &[Grant],
    group: &str,
) -> Result<Option<AgentInstall>, RenderError> {
    let Some(url) = public_url.filter(|_| serves_binary) else {
        return Ok(None);
    };
    // Never an expiring grant (a bootstrap token): the installed agent keeps its token.
    let grant = grants.iter().find(|g| {
        g.expires.is_none() && matches!(&g.scope, Scope::Groups(groups) if groups.contains(group))
    });
    match grant {
        Some(grant) => {
            let agent = AgentInstall::new(url, grant.token())?;
            match ca {
                Some(ca) => agent.with_ca(ca).map(Some),
                None => Ok(Some(agent)),
            }
        }
        None => {
            tracing::warn!(
                %group,
                "no token grant names this group; its bootstrap script does not install the node agent (add `TOKEN {group}` to --tokens-file)"
            );
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_grant_naming_the_group_is_handed_to_its_nodes() {
        let grants = vec![
            Grant::from_flag("admin-token-0123456789=*").expect("a grant"),
            Grant::from_flag("worker-token-0123456789=worker,db").expect("a grant"),
        ];
        let url = Some("http://10.0.0.5:9600");
        let worker = agent_install(url, true, None, &grants, "worker")
            .expect("a valid URL")
            .expect("a grant names worker");
        assert_eq!(worker.bundle_token(), "worker-token-0123456789");
        assert_eq!(
            agent_install(url, true, None, &grants, "gpu").expect("valid"),
            None
        );
        assert_eq!(
            agent_install(url, false, None, &grants, "worker").expect("valid"),
            None
        );
        assert_eq!(
            agent_install(None, true, None, &grants, "worker").expect("valid"),
            None
        );
        assert!(agent_install(Some("http://a b"), true, None, &grants, "worker").is_err());
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let pinned = agent_install(url, true, Some(ca), &grants, "worker")
            .expect("valid")
            .expect("a grant names worker");
        assert_eq!(pinned.ca(), Some(ca));
        assert!(agent_install(url, true, Some("junk"), &grants, "worker").is_err());
    }
}
