//! The timeline a simulation produces: one event per line, in virtual time, as text for people
//! ([`Timeline::to_text`]) or JSON Lines for tools ([`Timeline::to_jsonl`]).

use std::borrow::Cow;
use std::fmt::Write as _;

use nodemgr_core::model::Timestamp;
use serde::Serialize;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEvent {
    /// Virtual milliseconds since the scenario's start.
    #[serde(skip)]
    pub at_ms: i64,
    /// Dotted kind: `update.approved`, `drain.force-deleted`, `node.not-ready`, … (the README
    /// lists them). The built-in kinds are static strings, recorded without a copy.
    pub kind: Cow<'static, str>,
    /// The node, when the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The node's group, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The pod (`namespace/name`), when the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What happened, for people.
    pub message: String,
}

impl TimelineEvent {
    /// Seconds since the start.
    pub fn t(&self) -> f64 {
        self.at_ms as f64 / 1000.0
    }
}

/// Everything that happened in a run, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timeline {
    /// The virtual start time.
    pub start: Timestamp,
    /// The events, in the order they happened (non-decreasing `at_ms`).
    pub events: Vec<TimelineEvent>,
}

impl Timeline {
    /// Events of `kind`.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a TimelineEvent> {
        self.events.iter().filter(move |e| e.kind == kind)
    }

    /// The first event of `kind` about `node`.
    pub fn first(&self, kind: &str, node: &str) -> Option<&TimelineEvent> {
        self.events
            .iter()
            .find(|e| e.kind == kind && e.node.as_deref() == Some(node))
    }

    /// One line per event: `HH:MM:SS.mmm  kind  group/node  message`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for e in &self.events {
            let ms = e.at_ms.max(0);
            let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
            let subject = match (&e.group, &e.node) {
                (Some(g), Some(n)) => format!("{g}/{n}"),
                (None, Some(n)) => n.clone(),
                (Some(g), None) => format!("{g}/*"),
                (None, None) => "-".to_owned(),
            };
            let _ = writeln!(
                out,
                "{h:02}:{m:02}:{s:02}.{milli:03}  {:<26} {:<20} {}",
                e.kind, subject, e.message
            );
        }
        out
    }

    /// One JSON object per line: `t` (seconds since the start), `kind`, `node`, `group`,
    /// `pod` (when set) and `message`.
    pub fn to_jsonl(&self) -> String {
        #[derive(Serialize)]
        struct Line<'a> {
            t: f64,
            #[serde(flatten)]
            event: &'a TimelineEvent,
        }
        let mut out = String::new();
        for e in &self.events {
            let line = Line { t: e.t(), event: e };
            match serde_json::to_string(&line) {
                Ok(json) => {
                    out.push_str(&json);
                    out.push('\n');
                }
                Err(error) => tracing::warn!(%error, "timeline event not serialisable"),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_text_and_jsonl() {
        let timeline = Timeline {
            start: Timestamp::EPOCH,
            events: vec![TimelineEvent {
                at_ms: 3_723_500,
                kind: "update.approved".into(),
                node: Some("w-0".into()),
                group: Some("w".into()),
                pod: None,
                message: "approve update of node w-0".into(),
            }],
        };
        let text = timeline.to_text();
        assert!(text.starts_with("01:02:03.500  update.approved"), "{text}");
        assert!(text.contains("w/w-0"));
        let json: serde_json::Value =
            serde_json::from_str(timeline.to_jsonl().lines().next().unwrap()).unwrap();
        assert_eq!(json["t"], 3723.5);
        assert_eq!(json["kind"], "update.approved");
        assert_eq!(json["node"], "w-0");
        assert_eq!(json["group"], "w");
        assert!(json.get("pod").is_none());
    }
}
