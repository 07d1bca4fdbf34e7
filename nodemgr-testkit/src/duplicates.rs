//! Duplicate keys in a JSON request body, found as kube-apiserver's strict decoder finds them:
//! serde (like Go's encoding/json) keeps the last value silently, so the body is walked once
//! more and every key that repeats in one object is reported by its path (`spec.replicas`).
//! `fieldValidation` decides what happens to them (see `crate::write`).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

struct Walk<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let walk = Walk {
                path: format!("{}[{i}]", self.path),
                out: &mut *self.out,
            };
            if seq.next_element_seed(walk)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if seen.contains(&key) {
                if !self.out.contains(&path) {
                    self.out.push(path);
                }
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            seen.push(key);
            map.next_value_seed(Walk {
                path,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }
}

/// The paths of keys that repeat within one object of a JSON body (empty for bodies that are
/// not JSON: YAML parsers refuse duplicate keys themselves).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        path: String::new(),
        out: &mut out,
    };
    if walk.deserialize(&mut deserializer).is_err() {
        return Vec::new();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repeated_keys_are_named_by_path() {
        let body = br#"{"spec": {"replicas": 1, "replicas": 2, "taints": [{"key": "a", "key": "b"}]}, "kind": "X"}"#;
        assert_eq!(
            duplicate_fields(body),
            ["spec.replicas", "spec.taints[0].key"]
        );
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": {"b": 2}}"#).is_empty());
        assert!(duplicate_fields(b"kind: X\n").is_empty());
    }

    proptest! {
        /// A body serde_json produced never has duplicates.
        #[test]
        fn serialized_maps_have_none(keys in proptest::collection::btree_map("[a-z]{1,4}", 0i32..9, 0..6)) {
            let body = serde_json::to_vec(&serde_json::json!({"spec": keys})).unwrap();
            prop_assert!(duplicate_fields(&body).is_empty());
        }
    }
}
