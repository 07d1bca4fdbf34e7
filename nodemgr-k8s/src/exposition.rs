//! Which text format `/metrics` answers in, decided from the scraper's `Accept` header: the
//! OpenMetrics text format (1.0.0) when the scraper lists `application/openmetrics-text` at
//! least as high as `text/plain`, else the classic Prometheus text format 0.0.4 (what
//! `promtool check metrics`, old Prometheus versions and `curl` without an `Accept` get).
//!
//! `prometheus-client` encodes only OpenMetrics; [`to_classic_text`] turns that into the
//! classic format: a counter family `x` becomes `# TYPE x_total counter` (its samples already
//! are `x_total`), an info family `x` becomes the gauge `x_info`, `# UNIT` and `# EOF` lines
//! go, and exemplars are dropped. Every sample line stays as it is. See `docs/observability.md`.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic Prometheus text format.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A text format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0.
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4.
    Classic,
}

impl Format {
    /// The format to answer an `Accept` header with (none: classic).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Classic;
        };
        let mut open_metrics: Option<f32> = None;
        let mut plain: Option<f32> = None;
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let quality = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .filter(|q| q.is_finite())
                .unwrap_or(1.0);
            let slot = match media.as_str() {
                "application/openmetrics-text" => &mut open_metrics,
                "text/plain" => &mut plain,
                _ => continue,
            };
            *slot = Some(slot.map_or(quality, |q: f32| q.max(quality)));
        }
        match (open_metrics, plain) {
            (Some(om), plain) if om > 0.0 && om >= plain.unwrap_or(0.0) => Format::OpenMetrics,
            _ => Format::Classic,
        }
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Classic => CLASSIC_CONTENT_TYPE,
        }
    }
}

/// The OpenMetrics text of `registry`.
pub fn encode_open_metrics(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::error!(%error, "encoding metrics failed");
    }
    out
}

/// Rewrites OpenMetrics text (as `prometheus-client` writes it) into the classic text format.
pub fn to_classic_text(open_metrics: &str) -> String {
    let mut out = String::with_capacity(open_metrics.len());
    // HELP comes before TYPE; it is written once the TYPE says what the family is called.
    let mut pending_help: Option<(&str, &str)> = None;
    for line in open_metrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            pending_help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (classic_name, classic_kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                _ => (name.to_owned(), "untyped"),
            };
            if let Some((help_name, text)) = pending_help.take()
                && help_name == name
            {
                out.push_str(&format!("# HELP {classic_name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {classic_name} {classic_kind}\n"));
        } else if line.starts_with('#') || line.is_empty() {
            // `# UNIT`, `# EOF` and any other comment have no classic counterpart.
            continue;
        } else {
            // An exemplar follows the value after " # ".
            let sample = line.split_once(" # ").map_or(line, |(sample, _)| sample);
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

/// The text of `registry` in `format`.
pub fn encode(registry: &Registry, format: Format) -> String {
    let text = encode_open_metrics(registry);
    match format {
        Format::OpenMetrics => text,
        Format::Classic => to_classic_text(&text),
    }
}

/// The `/metrics` answer for a request with `headers`: the registry in the negotiated format.
pub fn respond(registry: &Registry, headers: &HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let mut response = encode(registry, format).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::metrics::info::Info;
    use proptest::prelude::*;

    #[test]
    fn negotiation_follows_what_the_scraper_prefers() {
        assert_eq!(Format::negotiate(None), Format::Classic);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Classic);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Classic);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        // What Prometheus 2.x sends.
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;q=0.2, text/plain;version=0.0.4"
            )),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Classic
        );
    }

    fn sample_registry() -> Registry {
        let mut registry = Registry::default();
        let counter = Family::<Vec<(String, String)>, Counter>::default();
        counter
            .get_or_create(&vec![("action".into(), "drain".into())])
            .inc();
        registry.register("actions", "Actions taken", counter);
        let gauge = Gauge::<i64>::default();
        gauge.set(3);
        registry.register("ready", "Ready nodes", gauge);
        let histogram = Histogram::new([0.1, 1.0]);
        histogram.observe(0.5);
        registry.register("duration_seconds", "Durations", histogram);
        registry.register(
            "build",
            "Build of the binary",
            Info::new(vec![("version".to_owned(), "1.2.3".to_owned())]),
        );
        registry
    }

    #[test]
    fn classic_text_renames_counter_and_info_families() {
        let classic = encode(&sample_registry(), Format::Classic);
        assert!(
            classic.contains("# TYPE actions_total counter\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# HELP actions_total Actions taken"),
            "{classic}"
        );
        assert!(
            classic.contains("actions_total{action=\"drain\"} 1\n"),
            "{classic}"
        );
        assert!(classic.contains("# TYPE build_info gauge\n"), "{classic}");
        assert!(
            classic.contains("build_info{version=\"1.2.3\"} 1\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE ready gauge\nready 3\n"),
            "{classic}"
        );
        assert!(
            classic.contains("duration_seconds_bucket{le=\"+Inf\"} 1\n"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"), "{classic}");
        assert!(!classic.contains("# UNIT"), "{classic}");
        let open = encode(&sample_registry(), Format::OpenMetrics);
        assert!(open.ends_with("# EOF\n"), "{open}");
    }

    proptest! {
        /// Every sample of the OpenMetrics text is in the classic text, and every sample of the
        /// classic text belongs to the family its latest `# TYPE` names.
        #[test]
        fn classic_text_keeps_every_sample_under_its_family(
            counters in proptest::collection::btree_map("[a-z]{1,8}", 0u64..1000, 0..6),
            gauges in proptest::collection::btree_map("[a-z]{1,8}", -1000i64..1000, 0..6),
        ) {
            let mut registry = Registry::default();
            let counter = Family::<Vec<(String, String)>, Counter>::default();
            for (label, value) in &counters {
                counter.get_or_create(&vec![("k".into(), label.clone())]).inc_by(*value);
            }
            registry.register("things", "Things", counter);
            let gauge = Family::<Vec<(String, String)>, Gauge>::default();
            for (label, value) in &gauges {
                gauge.get_or_create(&vec![("k".into(), label.clone())]).set(*value);
            }
            registry.register("levels", "Levels", gauge);
            let open = encode(&registry, Format::OpenMetrics);
            let classic = to_classic_text(&open);
            for line in open.lines().filter(|l| !l.starts_with('#')) {
                prop_assert!(classic.lines().any(|c| c == line), "{line} missing:\n{classic}");
            }
            let mut family = String::new();
            for line in classic.lines() {
                if let Some(rest) = line.strip_prefix("# TYPE ") {
                    family = rest.split(' ').next().unwrap_or_default().to_owned();
                } else if !line.starts_with('#') {
                    prop_assert!(!family.is_empty() && line.starts_with(&family), "{line} not under {family}");
                }
            }
            prop_assert_eq!(
                classic.lines().filter(|l| l.starts_with("things_total{")).count(),
                counters.len()
            );
        }
    }
}
