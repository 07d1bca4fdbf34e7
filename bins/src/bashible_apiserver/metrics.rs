//! `GET /metrics` of bashible-apiserver (no bundle token needed; behind Kubernetes authorization
//! with `--metrics-auth kubernetes`), in the format the scraper asks for
//! (`nodemgr_k8s::exposition`: classic text 0.0.4 by default and for `text/plain`, OpenMetrics
//! when asked): `d8_node_group_configurations_total{node_group}`, how many
//! NodeGroupConfigurations target each group (`*` for those targeting all groups), as
//! Deckhouse names it; `bashible_apiserver_groups{state}`, groups served fresh, served stale
//! (last good bundle kept after a render failure) and failed (never rendered); and
//! `bashible_apiserver_build_info{version}`.
//!
//! `d8_node_group_configurations_total` goes down when a configuration is deleted, so it is no
//! counter; a gauge named `…_total` is what `promtool check metrics` refuses. It keeps
//! Deckhouse's name (dashboards and alerts written for Deckhouse query it) with the type
//! `unknown` (`untyped` in the classic format), which makes no claim either way.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
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

/// A gauge's value exposed with the type `unknown` (see the module docs).
#[derive(Debug, Default, Clone)]
struct Untyped(Gauge);

impl TypedMetric for Untyped {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for Untyped {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// The registry of `served`'s metrics.
pub fn registry(served: &Served) -> Registry {
    let mut registry = Registry::default();
    let configurations = Family::<GroupLabel, Untyped>::default();
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
            .0
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
    registry.register(
        "bashible_apiserver_build",
        "The version of bashible-apiserver",
        Info::new(vec![(
            "version".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        )]),
    );
    registry
}

/// The OpenMetrics text of `served`.
pub fn encode(served: &Served) -> String {
    nodemgr_k8s::exposition::encode_open_metrics(&registry(served))
}

/// `GET /metrics`, in the format the request's `Accept` asks for.
pub async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    nodemgr_k8s::exposition::respond(&registry(&shared.current()), &headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemgr_k8s::exposition::{Format, encode as encode_as};

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
        assert!(text.contains("# TYPE d8_node_group_configurations_total unknown"));
        assert!(text.contains("bashible_apiserver_groups{state=\"failed\"} 0"));
        assert!(text.contains("bashible_apiserver_build_info{version=\""));
        let classic = encode_as(&registry(&served), Format::Classic);
        assert!(
            classic.contains("# TYPE d8_node_group_configurations_total untyped\n"),
            "{classic}"
        );
        assert!(classic.contains("# TYPE bashible_apiserver_build_info gauge\n"));
        assert!(!classic.contains("# EOF"));
    }
}
