//! One store of Events served through both APIs, as kube-apiserver does: objects are kept in
//! the core `v1` shape, and `events.k8s.io/v1` reads and writes are converted field by field
//! (`regarding`↔`involvedObject`, `note`↔`message`, `reportingController`↔
//! `reportingComponent`, `deprecatedSource`/`deprecatedFirstTimestamp`/
//! `deprecatedLastTimestamp`/`deprecatedCount`↔`source`/`firstTimestamp`/`lastTimestamp`/
//! `count`; `series`, `eventTime`, `action`, `reason`, `related`, `type`,
//! `reportingInstance` are the same). Field selectors of `events.k8s.io` name the core fields'
//! new names and are translated. See `docs/api-emulator.md`.

use serde_json::{Map, Value};

/// `(events.k8s.io/v1 field, core v1 field)` pairs that differ.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether a type is the `events.k8s.io` view of core Events.
pub fn is_events_v1(group: &str, plural: &str) -> bool {
    group == "events.k8s.io" && plural == "events"
}

fn rename(object: &Value, api_version: &str, from_new: bool) -> Value {
    let Some(map) = object.as_object() else {
        return object.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let renamed = RENAMED
            .iter()
            .find(|(new, old)| if from_new { new == key } else { old == key })
            .map(|(new, old)| if from_new { *old } else { *new })
            .unwrap_or(key);
        out.insert(renamed.to_owned(), value.clone());
    }
    out.insert(
        "apiVersion".to_owned(),
        Value::String(api_version.to_owned()),
    );
    out.insert("kind".to_owned(), Value::String("Event".to_owned()));
    Value::Object(out)
}

/// A stored (core `v1`) Event as `events.k8s.io/v1` serves it.
pub fn to_events_v1(core: &Value) -> Value {
    rename(core, "events.k8s.io/v1", false)
}

/// An `events.k8s.io/v1` Event in the stored core `v1` shape.
pub fn to_core(event: &Value) -> Value {
    rename(event, "v1", true)
}

/// The core field a field selector of `events.k8s.io/v1` names (`regarding.name` →
/// `involvedObject.name`).
pub fn core_field(field: &str) -> String {
    for (new, old) in RENAMED {
        if field == *new {
            return (*old).to_owned();
        }
        if let Some(rest) = field.strip_prefix(new).and_then(|r| r.strip_prefix('.')) {
            return format!("{old}.{rest}");
        }
    }
    field.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn shapes_convert_both_ways() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Node", "name": "w1"}, "note": "drained", "reason": "Drain", "type": "Normal",
            "reportingController": "nodemgr", "reportingInstance": "nm-0", "eventTime": "2025-01-01T00:00:00.000000Z",
            "deprecatedCount": 2});
        let core = to_core(&new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "w1");
        assert_eq!(core["message"], "drained");
        assert_eq!(core["reportingComponent"], "nodemgr");
        assert_eq!(core["count"], 2);
        assert_eq!(core["reason"], "Drain");
        assert_eq!(to_events_v1(&core), new);
        assert_eq!(core_field("regarding.name"), "involvedObject.name");
        assert_eq!(core_field("reportingController"), "reportingComponent");
        assert_eq!(core_field("type"), "type");
        assert_eq!(core_field("metadata.name"), "metadata.name");
    }

    proptest! {
        /// Going to the core shape and back loses nothing.
        #[test]
        fn round_trip(keys in proptest::collection::btree_set(prop_oneof![
            Just("regarding"), Just("note"), Just("reason"), Just("deprecatedCount"), Just("series"),
            Just("reportingController"), Just("deprecatedSource"), Just("related")], 0..8), value in "[a-z]{0,5}") {
            let mut event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}});
            for k in keys {
                event[k] = json!(value);
            }
            prop_assert_eq!(to_events_v1(&to_core(&event)), event);
        }
    }
}
