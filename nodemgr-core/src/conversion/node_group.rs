//! NodeGroup `v1alpha1` ↔ `v1alpha2` ↔ `v1`, as Deckhouse converts them
//! (docs/admission-and-conversion.md):
//!
//! | step | up | down |
//! |---|---|---|
//! | `v1alpha1` ↔ `v1alpha2` | `spec.docker` → `spec.cri.docker` | `spec.cri.docker` → `spec.docker` (an emptied `cri` is removed) |
//! | `v1alpha2` ↔ `v1` | `Cloud` → `CloudEphemeral`; `Hybrid` → `CloudPermanent` for `master` and the provider configuration's groups, else `CloudStatic`; `kubernetesVersion` and `static` dropped | `CloudEphemeral` → `Cloud`; `CloudPermanent`, `CloudStatic` → `Hybrid` |
//!
//! Losses, all Deckhouse's too: `kubernetesVersion` and `static` (the old versions' fields)
//! do not survive into `v1`; a `CloudStatic` group named like a provider group (or `master`)
//! comes back from an old version as `CloudPermanent`, and a `CloudPermanent` group of another
//! name comes back as `CloudStatic`. Node types this table does not name pass unchanged, for
//! validation to report.

use serde_json::{Map, Value};

use super::{ConversionContext, spec_mut};

/// The served versions, oldest first.
pub const NODE_GROUP_VERSIONS: &[&str] = &["v1alpha1", "v1alpha2", "v1"];

fn rank(version: &str) -> usize {
    NODE_GROUP_VERSIONS
        .iter()
        .position(|v| *v == version)
        .unwrap_or(0)
}

/// The `v1` node type of an old (`v1alpha1`/`v1alpha2`) one for the group `name`, or `None`
/// when `old` is not an old node type name.
pub fn node_type_to_v1(old: &str, name: &str, ctx: &ConversionContext) -> Option<&'static str> {
    match old {
        "Cloud" => Some("CloudEphemeral"),
        "Static" => Some("Static"),
        "Hybrid" if name == "master" || ctx.provider_node_groups.contains(name) => {
            Some("CloudPermanent")
        }
        "Hybrid" => Some("CloudStatic"),
        _ => None,
    }
}

fn node_type_from_v1(new: &str) -> Option<&'static str> {
    match new {
        "CloudEphemeral" => Some("Cloud"),
        "CloudPermanent" | "CloudStatic" => Some("Hybrid"),
        "Static" => Some("Static"),
        _ => None,
    }
}

/// Converts `object` (a NodeGroup of served version `from`) to served version `to` in place,
/// except `apiVersion`, which the caller sets.
pub(super) fn convert(
    object: &mut Map<String, Value>,
    from: &str,
    to: &str,
    ctx: &ConversionContext,
) {
    let name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let (mut at, target) = (rank(from), rank(to));
    let Some(spec) = spec_mut(object) else {
        return;
    };
    while at < target {
        match at {
            0 => docker_into_cri(spec),
            _ => to_v1(spec, &name, ctx),
        }
        at += 1;
    }
    while at > target {
        match at {
            2 => from_v1(spec),
            _ => docker_out_of_cri(spec),
        }
        at -= 1;
    }
}

fn docker_into_cri(spec: &mut Map<String, Value>) {
    let Some(docker) = spec.remove("docker") else {
        return;
    };
    let cri = spec
        .entry("cri")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(cri) = cri.as_object_mut() {
        cri.entry("docker").or_insert(docker);
    }
}

fn docker_out_of_cri(spec: &mut Map<String, Value>) {
    let Some(cri) = spec.get_mut("cri").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(docker) = cri.remove("docker") else {
        return;
    };
    if cri.is_empty() {
        spec.remove("cri");
    }
    spec.insert("docker".into(), docker);
}

fn to_v1(spec: &mut Map<String, Value>, name: &str, ctx: &ConversionContext) {
    if let Some(Value::String(t)) = spec.get_mut("nodeType")
        && let Some(new) = node_type_to_v1(t, name, ctx)
    {
        *t = new.to_owned();
    }
    spec.remove("kubernetesVersion");
    spec.remove("static");
}

fn from_v1(spec: &mut Map<String, Value>) {
    if let Some(Value::String(t)) = spec.get_mut("nodeType")
        && let Some(old) = node_type_from_v1(t)
    {
        *t = old.to_owned();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::json;

    use super::super::convert as convert_to;
    use super::*;

    fn ng(version: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": format!("deckhouse.io/{version}"), "kind": "NodeGroup",
            "metadata": {"name": name}, "spec": spec})
    }

    fn ctx(groups: &[&str]) -> ConversionContext {
        ConversionContext {
            provider_node_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn hybrid_becomes_cloud_permanent_for_master_and_provider_groups() {
        let c = ctx(&["front"]);
        for (name, expected) in [
            ("master", "CloudPermanent"),
            ("front", "CloudPermanent"),
            ("other", "CloudStatic"),
        ] {
            let old = ng("v1alpha2", name, json!({"nodeType": "Hybrid"}));
            let new = convert_to(&old, "deckhouse.io/v1", &c).unwrap();
            assert_eq!(new["spec"]["nodeType"], expected, "{name}");
            assert_eq!(new["apiVersion"], "deckhouse.io/v1");
        }
        let cloud = ng("v1alpha1", "w", json!({"nodeType": "Cloud"}));
        assert_eq!(
            convert_to(&cloud, "deckhouse.io/v1", &c).unwrap()["spec"]["nodeType"],
            "CloudEphemeral"
        );
    }

    #[test]
    fn v1alpha1_docker_moves_into_cri_and_back() {
        let old = ng(
            "v1alpha1",
            "w",
            json!({"nodeType": "Static", "docker": {"maxConcurrentDownloads": 5},
                "kubernetesVersion": "1.32", "static": {"internalNetworkCIDRs": ["10.0.0.0/24"]}}),
        );
        let new = convert_to(&old, "deckhouse.io/v1", &ctx(&[])).unwrap();
        assert_eq!(
            new["spec"],
            json!({"nodeType": "Static", "cri": {"docker": {"maxConcurrentDownloads": 5}}})
        );
        let back = convert_to(&new, "deckhouse.io/v1alpha1", &ctx(&[])).unwrap();
        assert_eq!(
            back["spec"],
            json!({"nodeType": "Static", "docker": {"maxConcurrentDownloads": 5}})
        );
        let v1alpha2 = convert_to(&new, "deckhouse.io/v1alpha2", &ctx(&[])).unwrap();
        assert_eq!(
            v1alpha2["spec"]["cri"]["docker"]["maxConcurrentDownloads"],
            5
        );
    }

    #[test]
    fn v1_node_types_go_down_to_the_old_names() {
        for (new, old) in [
            ("CloudEphemeral", "Cloud"),
            ("CloudPermanent", "Hybrid"),
            ("CloudStatic", "Hybrid"),
            ("Static", "Static"),
            ("Metal", "Metal"),
        ] {
            let out = convert_to(
                &ng("v1", "w", json!({"nodeType": new})),
                "deckhouse.io/v1alpha2",
                &ctx(&[]),
            )
            .unwrap();
            assert_eq!(out["spec"]["nodeType"], old);
        }
    }

    const V1_TYPES: &[&str] = &["CloudEphemeral", "CloudPermanent", "CloudStatic", "Static"];
    const OLD_TYPES: &[&str] = &["Cloud", "Hybrid", "Static"];
    const NAMES: &[&str] = &["master", "front", "worker", "db"];

    fn arb_extra() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!({})),
            (1i64..10).prop_map(|n| json!({"cri": {"docker": {"maxConcurrentDownloads": n}}})),
            Just(
                json!({"cri": {"type": "Containerd", "containerd": {"maxConcurrentDownloads": 2}}})
            ),
            Just(json!({"cri": {"type": "Docker", "docker": {"manage": false}}})),
            Just(json!({"cri": {}})),
            Just(json!({"nodeTemplate": {"labels": {"a": "b"}}, "chaos": {"mode": "Disabled"}})),
        ]
    }

    fn arb_provider() -> impl Strategy<Value = ConversionContext> {
        proptest::sample::subsequence(NAMES.to_vec(), 0..=NAMES.len()).prop_map(|names| {
            ConversionContext {
                provider_node_groups: names
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<BTreeSet<_>>(),
            }
        })
    }

    fn arb_v1() -> impl Strategy<Value = (Value, ConversionContext)> {
        (
            proptest::sample::select(NAMES),
            proptest::sample::select(V1_TYPES),
            arb_extra(),
            arb_provider(),
        )
            .prop_map(|(name, node_type, extra, provider)| {
                let mut spec = extra;
                spec["nodeType"] = json!(node_type);
                (ng("v1", name, spec), provider)
            })
    }

    fn arb_any() -> impl Strategy<Value = (Value, ConversionContext)> {
        (
            proptest::sample::select(NODE_GROUP_VERSIONS),
            proptest::sample::select(NAMES),
            prop_oneof![
                proptest::sample::select(V1_TYPES),
                proptest::sample::select(OLD_TYPES)
            ],
            arb_extra(),
            any::<bool>(),
            arb_provider(),
        )
            .prop_map(|(version, name, node_type, extra, docker, provider)| {
                let mut spec = extra;
                spec["nodeType"] = json!(node_type);
                if docker {
                    spec["docker"] = json!({"manage": true});
                    spec["kubernetesVersion"] = json!("1.33");
                }
                (ng(version, name, spec), provider)
            })
    }

    proptest! {
        /// A `v1` group whose node type agrees with its name (CloudPermanent exactly for
        /// `master` and the provider's groups, as Deckhouse's Hybrid mapping assumes) comes
        /// back from every old version unchanged.
        #[test]
        fn v1_round_trips_through_old_versions_when_the_type_matches_the_name(
            (object, c) in arb_v1(),
            old in proptest::sample::select(&NODE_GROUP_VERSIONS[..2]),
        ) {
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let permanent_by_name = name == "master" || c.provider_node_groups.contains(&name);
            let node_type = object["spec"]["nodeType"].as_str().unwrap_or_default();
            let hybrid = matches!(node_type, "CloudPermanent" | "CloudStatic");
            prop_assume!(!hybrid || (node_type == "CloudPermanent") == permanent_by_name);
            let down = convert_to(&object, &format!("deckhouse.io/{old}"), &c).unwrap();
            let up = convert_to(&down, "deckhouse.io/v1", &c).unwrap();
            prop_assert_eq!(up, object);
        }

        /// Converting twice to one version gives what converting once gave, from any version
        /// to any version, and converting to the object's own version changes nothing.
        #[test]
        fn conversion_is_idempotent(
            (object, c) in arb_any(),
            to in proptest::sample::select(NODE_GROUP_VERSIONS),
        ) {
            let to = format!("deckhouse.io/{to}");
            let once = convert_to(&object, &to, &c).unwrap();
            let twice = convert_to(&once, &to, &c).unwrap();
            prop_assert_eq!(&twice, &once);
            let own = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            prop_assert_eq!(convert_to(&object, &own, &c).unwrap(), object);
        }

        /// Going up to `v1` directly or through every version in between gives one result.
        #[test]
        fn steps_compose(
            (object, c) in arb_any(),
        ) {
            let direct = convert_to(&object, "deckhouse.io/v1", &c).unwrap();
            let mut stepwise = object.clone();
            for v in NODE_GROUP_VERSIONS {
                let from = stepwise["apiVersion"].as_str().unwrap_or_default().to_owned();
                if super::rank(from.trim_start_matches("deckhouse.io/")) <= super::rank(v) {
                    stepwise = convert_to(&stepwise, &format!("deckhouse.io/{v}"), &c).unwrap();
                }
            }
            prop_assert_eq!(stepwise, direct);
        }
    }
}
