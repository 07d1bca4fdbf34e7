//! The timeline a simulation produces: one event per line, in virtual time, as text for people
//! ([`Timeline::to_text`]) or JSON Lines for tools ([`Timeline::to_jsonl`]).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

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
    pub node: Option<Name>,
    /// The node's group, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<Name>,
    /// The pod (`namespace/name`), when the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What happened, for people.
    pub message: String,
}

/// A node's or a group's name in an event ([`TimelineEvent::node`], [`TimelineEvent::group`]):
/// the string it reads as (it dereferences to `str`, compares, prints and serialises as one).
/// The events about a node share its name and its group's when the recorder has them at hand
/// rather than each carrying a copy; which one an event holds makes no difference to it.
#[derive(Clone)]
pub struct Name(NameText);

/// Where a [`Name`]'s text is.
#[derive(Clone)]
enum NameText {
    /// Shared with other events.
    Shared(Arc<str>),
    /// The event's own.
    Owned(String),
}

impl Name {
    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            NameText::Shared(text) => text,
            NameText::Owned(text) => text,
        }
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Default for Name {
    fn default() -> Self {
        Self(NameText::Owned(String::new()))
    }
}

impl From<String> for Name {
    fn from(text: String) -> Self {
        Self(NameText::Owned(text))
    }
}

impl From<&str> for Name {
    fn from(text: &str) -> Self {
        Self(NameText::Owned(text.to_owned()))
    }
}

impl From<Arc<str>> for Name {
    fn from(text: Arc<str>) -> Self {
        Self(NameText::Shared(text))
    }
}

impl From<Name> for String {
    fn from(name: Name) -> Self {
        match name.0 {
            NameText::Shared(text) => text.as_ref().to_owned(),
            NameText::Owned(text) => text,
        }
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
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
                (None, Some(n)) => n.as_str().to_owned(),
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
    use proptest::prelude::*;

    /// An event about `node` of `group`, its names made by `name`.
    fn event(node: &str, group: &str, name: impl Fn(&str) -> Name) -> TimelineEvent {
        TimelineEvent {
            at_ms: 1_500,
            kind: "update.approved".into(),
            node: Some(name(node)),
            group: Some(name(group)),
            pod: None,
            message: format!("approve update of node {node}"),
        }
    }

    proptest! {
        /// An event whose names are shared with other events reads, compares, prints and
        /// serialises as one with its own copies of them.
        #[test]
        fn shared_names_read_as_own_ones(node in "[a-z0-9 \\\"/-]{0,12}", group in "[a-z0-9\\\"-]{0,8}") {
            let own = event(&node, &group, |text| Name::from(text));
            let shared = event(&node, &group, |text| Name::from(Arc::<str>::from(text)));
            prop_assert_eq!(&own, &shared);
            prop_assert_eq!(format!("{own:?}"), format!("{shared:?}"));
            prop_assert_eq!(
                format!("{:?}", own.node),
                format!("{:?}", Some(node.clone()))
            );
            let (own, shared) = (
                Timeline { start: Timestamp::EPOCH, events: vec![own] },
                Timeline { start: Timestamp::EPOCH, events: vec![shared] },
            );
            prop_assert_eq!(own.to_text(), shared.to_text());
            prop_assert_eq!(own.to_jsonl(), shared.to_jsonl());
            let json: serde_json::Value = serde_json::from_str(shared.to_jsonl().trim_end()).unwrap();
            prop_assert_eq!(json["node"].as_str(), Some(node.as_str()));
            prop_assert_eq!(json["group"].as_str(), Some(group.as_str()));
        }
    }

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
