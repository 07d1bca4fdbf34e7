//! `GET /v1/agent/bashible`: the node agent's binary (the file given with `--agent-binary`),
//! for bootstrap scripts and nodes updating themselves. Any known bearer token may read it (the
//! binary is the same for every group); without one the answer is 401, and 404 when the server
//! was started without `--agent-binary`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::auth::{self, Access};
use super::{Shared, error};

/// Serves the agent binary.
pub async fn agent_binary(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let served = shared.current();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match auth::access(&served.grants, authorization) {
        Access::Missing => {
            return error(
                StatusCode::UNAUTHORIZED,
                "missing bearer token: send `Authorization: Bearer TOKEN`",
            )
            .into_response();
        }
        Access::Unknown => {
            return error(StatusCode::UNAUTHORIZED, "unknown bearer token").into_response();
        }
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
