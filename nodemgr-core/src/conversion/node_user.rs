//! NodeUser `v1alpha1` ↔ `v1`: `v1alpha1`'s single `sshPublicKey` is appended to
//! `sshPublicKeys` on the way up (unless already listed) and removed; on the way down the
//! list stays as it is (`v1alpha1` serves `sshPublicKeys` too). Nothing is lost either way.

use serde_json::{Map, Value};

use super::spec_mut;

/// The served versions, oldest first.
pub const NODE_USER_VERSIONS: &[&str] = &["v1alpha1", "v1"];

/// Converts `object` (a NodeUser of version `from`) to `to` in place, except `apiVersion`.
pub(super) fn convert(object: &mut Map<String, Value>, from: &str, to: &str) {
    if !(from == "v1alpha1" && to == "v1") {
        return;
    }
    let Some(spec) = spec_mut(object) else {
        return;
    };
    let Some(key) = spec.remove("sshPublicKey") else {
        return;
    };
    if key.as_str().is_none_or(str::is_empty) {
        return;
    }
    let keys = spec
        .entry("sshPublicKeys")
        .or_insert_with(|| Value::Array(Vec::new()));
    match keys {
        Value::Array(list) => {
            if !list.contains(&key) {
                list.push(key);
            }
        }
        _ => *keys = Value::Array(vec![key]),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{ConversionContext, convert as convert_to};

    fn user(version: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": format!("deckhouse.io/{version}"), "kind": "NodeUser",
            "metadata": {"name": "ops"}, "spec": spec})
    }

    #[test]
    fn the_single_key_joins_the_list() {
        let ctx = ConversionContext::default();
        let old = user(
            "v1alpha1",
            json!({"uid": 1001, "sshPublicKey": "ssh-ed25519 B",
            "sshPublicKeys": ["ssh-ed25519 A"]}),
        );
        let new = convert_to(&old, "deckhouse.io/v1", &ctx).unwrap();
        assert_eq!(
            new["spec"],
            json!({"uid": 1001, "sshPublicKeys": ["ssh-ed25519 A", "ssh-ed25519 B"]})
        );
        let dup = user(
            "v1alpha1",
            json!({"sshPublicKey": "k", "sshPublicKeys": ["k"]}),
        );
        assert_eq!(
            convert_to(&dup, "deckhouse.io/v1", &ctx).unwrap()["spec"],
            json!({"sshPublicKeys": ["k"]})
        );
    }

    proptest! {
        /// `v1` → `v1alpha1` → `v1` is lossless.
        #[test]
        fn v1_round_trips(keys in proptest::collection::vec("[a-z]{1,5}", 0..4), uid in 1001i64..5000) {
            let ctx = ConversionContext::default();
            let object = user("v1", json!({"uid": uid, "sshPublicKeys": keys}));
            let down = convert_to(&object, "deckhouse.io/v1alpha1", &ctx).unwrap();
            prop_assert_eq!(convert_to(&down, "deckhouse.io/v1", &ctx).unwrap(), object);
        }
    }
}
