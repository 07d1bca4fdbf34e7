//! The `bashible.deckhouse.io/v1alpha1` API, shaped as an aggregated API server answers, so
//! that an APIService can front bashible-apiserver (`docs/bashible-apiserver.md`,
//! "APIService"): discovery at `/apis`, `/apis/bashible.deckhouse.io` and
//! `/apis/bashible.deckhouse.io/v1alpha1`, and three read-only, cluster-scoped resources
//! whose objects are named `<bundle>.<group>`:
//!
//! | resource | kind | `data` |
//! |---|---|---|
//! | `nodegroupbundles` | `NodeGroupBundle` | step name → script, in run order |
//! | `bootstrap` | `Bootstrap` | `bootstrap.sh` (needs a bootstrap token, as `/v1/...`) |
//! | `bashibles` | `Bashible` | `checksum` and `agent` (the path of the agent binary: nodemgr's agent is a binary, not `bashible.sh`) |
//!
//! A list answers the groups the bearer token may read, named `<LISTED_BUNDLE>.<group>`; a get
//! accepts any bundle name (nodemgr renders one bundle per group, whatever the OS). Objects
//! carry no timestamps, so every replica serves the same bytes.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::{self, Access};
use super::state::{GroupEntry, Served};
use super::{AppState, Refusal, authorize, bootstrap_of, error};

/// The API group.
pub const GROUP: &str = "bashible.deckhouse.io";
/// Its version.
pub const VERSION: &str = "v1alpha1";
/// The bundle name lists use.
pub const LISTED_BUNDLE: &str = "nodemgr";
/// The resources: (plural, kind).
pub const RESOURCES: [(&str, &str); 3] = [
    ("nodegroupbundles", "NodeGroupBundle"),
    ("bootstrap", "Bootstrap"),
    ("bashibles", "Bashible"),
];

fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// `GET /apis`.
pub async fn api_group_list() -> Response {
    axum::Json(json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [api_group()],
    }))
    .into_response()
}

fn api_group() -> Value {
    let version = json!({"groupVersion": group_version(), "version": VERSION});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version.clone()],
        "preferredVersion": version,
    })
}

/// `GET /apis/bashible.deckhouse.io`.
pub async fn api_group_document() -> Response {
    axum::Json(api_group()).into_response()
}

/// `GET /apis/bashible.deckhouse.io/v1alpha1`.
pub async fn api_resource_list() -> Response {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(|(plural, kind)| {
            json!({
                "name": plural,
                "singularName": "",
                "namespaced": false,
                "kind": kind,
                "verbs": ["get", "list"],
            })
        })
        .collect();
    axum::Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(),
        "resources": resources,
    }))
    .into_response()
}

/// `<bundle>.<group>` (Deckhouse's object names) or a bare `<group>`: the group is the part
/// after the last dot (group names hold no dots).
pub fn group_of(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

fn kind_of(resource: &str) -> Option<&'static str> {
    RESOURCES
        .iter()
        .find(|(plural, _)| *plural == resource)
        .map(|(_, kind)| *kind)
}

/// The object of `resource` named `name` from `entry`.
fn object(
    served: &Served,
    entry: &GroupEntry,
    headers: &HeaderMap,
    resource: &str,
    name: &str,
) -> Result<Value, Refusal> {
    let kind = kind_of(resource).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            format!("the server could not find the requested resource {resource}"),
        )
    })?;
    let data = match resource {
        "nodegroupbundles" => {
            let steps: serde_json::Map<String, Value> = entry
                .bundle
                .steps
                .iter()
                .map(|s| (s.name.clone(), json!(s.script)))
                .collect();
            Value::Object(steps)
        }
        "bootstrap" => {
            json!({"bootstrap.sh": bootstrap_of(served, entry, headers, group_of(name))?})
        }
        _ => json!({"checksum": entry.bundle.checksum, "agent": "/v1/agent/bashible"}),
    };
    Ok(json!({
        "apiVersion": group_version(),
        "kind": kind,
        "metadata": {"name": name},
        "data": data,
    }))
}

/// `GET /apis/bashible.deckhouse.io/v1alpha1/{resource}/{name}`.
pub async fn get_object(
    State(shared): AppState,
    Path((resource, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let served = shared.current();
    match authorize(&served, &headers, group_of(&name))
        .and_then(|entry| object(&served, &entry, &headers, &resource, &name))
    {
        Ok(value) => axum::Json(value).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

/// `GET /apis/bashible.deckhouse.io/v1alpha1/{resource}`: the groups the token may read
/// (a group whose bootstrap script the token may not read is left out of `bootstrap`).
pub async fn list_objects(
    State(shared): AppState,
    Path(resource): Path<String>,
    headers: HeaderMap,
) -> Response {
    let served = shared.current();
    let Some(kind) = kind_of(&resource) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("the server could not find the requested resource {resource}"),
        )
        .into_response();
    };
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let access = auth::access(&served.grants, authorization);
    if matches!(access, Access::Missing | Access::Unknown) {
        return super::unauthorized().into_response();
    }
    let items: Vec<Value> = served
        .groups
        .iter()
        .filter(|(group, _)| access.allows(group))
        .filter_map(|(group, entry)| {
            let name = format!("{LISTED_BUNDLE}.{group}");
            object(&served, entry, &headers, &resource, &name).ok()
        })
        .collect();
    axum::Json(json!({
        "apiVersion": group_version(),
        "kind": format!("{kind}List"),
        "metadata": {},
        "items": items,
    }))
    .into_response()
}

/// Routes of this API.
pub fn routes(router: axum::Router<Arc<super::Shared>>) -> axum::Router<Arc<super::Shared>> {
    use axum::routing::get;
    router
        .route("/apis", get(api_group_list))
        .route("/apis/bashible.deckhouse.io", get(api_group_document))
        .route(
            "/apis/bashible.deckhouse.io/v1alpha1",
            get(api_resource_list),
        )
        .route(
            "/apis/bashible.deckhouse.io/v1alpha1/{resource}",
            get(list_objects),
        )
        .route(
            "/apis/bashible.deckhouse.io/v1alpha1/{resource}/{name}",
            get(get_object),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_of_takes_the_part_after_the_last_dot() {
        assert_eq!(group_of("ubuntu-lts.worker"), "worker");
        assert_eq!(group_of("worker"), "worker");
    }
}
