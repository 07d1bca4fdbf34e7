//! `GET /metrics` of bashible-apiserver (OpenMetrics text, no token needed):
//! `d8_node_group_configurations_total{node_group}`, how many NodeGroupConfigurations target
//! each group (`*` for those targeting all groups), as Deckhouse names it; and
//! `bashible_apiserver_groups{state}`, groups served fresh, served stale (last good bundle
//! kept after a render failure) and failed (never rendered).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Shared;
use super::state::Served;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabel {
    node_group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// The OpenMetrics text of `served`.
pub fn encode(served: &Served) -> String {
    let mut registry = Registry::default();
    let configurations = Family::<GroupLabel, Gauge>::default();
    registry.register(
        "d8_node_group_configurations_total",
        "NodeGroupConfigurations targeting each NodeGroup (* for all groups)",
        configurations.clone(),
    );
    for (group, count) in &served.configuration_counts {
        configurations
            .get_or_create(&GroupLabel {
                node_group: group.clone(),
            })
            .set(i64::try_from(*count).unwrap_or(i64::MAX));
    }
    let groups = Family::<StateLabel, Gauge>::default();
    registry.register(
        "bashible_apiserver_groups",
        "NodeGroups served fresh, served stale (last good bundle) and failed",
        groups.clone(),
    );
    let stale = served
        .groups
        .values()
        .filter(|e| e.stale_because.is_some())
        .count();
    let fresh = served.groups.len().saturating_sub(stale);
    for (state, count) in [
        ("fresh", fresh),
        ("stale", stale),
        ("failed", served.failed.len()),
    ] {
        groups
            .get_or_create(&StateLabel {
                state: state.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
        text.clear();
    }
    text
}

/// `GET /metrics`.
pub async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            nodemgr_k8s::serve::OPENMETRICS_CONTENT_TYPE,
        )],
        encode(&shared.current()),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_group_are_encoded_with_deckhouse_names() {
        let served = Served {
            configuration_counts: [("worker".to_owned(), 2), ("*".to_owned(), 1)].into(),
            ..Served::default()
        };
        let text = encode(&served);
        assert!(
            text.contains("d8_node_group_configurations_total{node_group=\"worker\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("d8_node_group_configurations_total{node_group=\"*\"} 1"),
            "{text}"
        );
        assert!(text.contains("bashible_apiserver_groups{state=\"failed\"} 0"));
    }
}
