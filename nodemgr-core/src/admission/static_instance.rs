//! The StaticInstance review: [`validate_static_instance`], and the address may not be one
//! another StaticInstance already has (two instances of one machine could both be bootstrapped
//! and cleaned up under each other).

use crate::model::StaticInstance;
use crate::validate::{FieldError, validate_static_instance};

use super::{ClusterInputs, Verdict};

/// Decides a StaticInstance review.
pub(super) fn admit(si: &StaticInstance, inputs: &ClusterInputs) -> Verdict {
    let name = si.metadata.name.clone().unwrap_or_default();
    let mut errors = validate_static_instance(si);
    if let Some(address) = si.spec.address.as_deref() {
        let mut holders: Vec<&str> = inputs
            .static_instance_addresses
            .iter()
            .filter(|(other, a)| **other != name && a.as_str() == address)
            .map(|(other, _)| other.as_str())
            .collect();
        holders.sort_unstable();
        if !holders.is_empty() {
            errors.push(FieldError::new(
                "spec.address",
                format!(
                    "{address} is already the address of StaticInstance {}; one machine is one \
                     StaticInstance: delete the other one first or fix the address",
                    holders.join(", ")
                ),
            ));
        }
    }
    Verdict::from_errors("StaticInstance", &name, &errors, Vec::new())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{Operation, Review, admit as admit_review};
    use super::*;

    fn si(name: &str, address: &str) -> serde_json::Value {
        json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "StaticInstance",
            "metadata": {"name": name},
            "spec": {"address": address, "credentialsRef": {"kind": "SSHCredentials", "name": "c"}}})
    }

    proptest! {
        /// An address is refused exactly when another StaticInstance has it; the instance's
        /// own entry (an UPDATE) never counts.
        #[test]
        fn addresses_are_unique(
            others in proptest::collection::btree_map("[a-c]", 1u8..4, 0..3),
            mine in 1u8..4,
            update in any::<bool>(),
        ) {
            let address = |n: u8| format!("10.0.0.{n}");
            let inputs = ClusterInputs {
                static_instance_addresses: others.iter().map(|(k, v)| (k.clone(), address(*v))).collect::<BTreeMap<_, _>>(),
                ..ClusterInputs::default()
            };
            let new = si("b", &address(mine));
            let verdict = admit_review(&Review {
                kind: "StaticInstance",
                operation: if update { Operation::Update } else { Operation::Create },
                old: update.then_some(&new),
                new: Some(&new),
            }, &inputs);
            let taken = others.iter().any(|(k, v)| k != "b" && *v == mine);
            prop_assert_eq!(verdict.allowed, !taken, "{:?}", verdict);
            if taken {
                prop_assert!(verdict.message.unwrap_or_default().contains("is already the address of StaticInstance"));
            }
        }
    }
}
