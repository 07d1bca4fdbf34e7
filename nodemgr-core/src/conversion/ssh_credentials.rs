//! SSHCredentials `v1alpha1` ↔ `v1alpha2`, as Cluster API Provider Static converts them:
//! `v1alpha1`'s clear `sudoPassword` becomes `v1alpha2`'s base64 `sudoPasswordEncoded`, and
//! back. Lossless both ways for a password that is UTF-8 text; a `sudoPasswordEncoded` that
//! is not base64 of UTF-8 text cannot be written as `v1alpha1` and fails the conversion.

use serde_json::{Map, Value};

use super::{ConversionError, decode_base64, encode_base64, spec_mut};

/// The served versions, oldest first.
pub const SSH_CREDENTIALS_VERSIONS: &[&str] = &["v1alpha1", "v1alpha2"];

/// Converts `object` (an SSHCredentials of version `from`) to `to` in place, except
/// `apiVersion`.
///
/// # Errors
/// [`ConversionError::Field`] when going down and `sudoPasswordEncoded` is not base64 text.
pub(super) fn convert(
    object: &mut Map<String, Value>,
    from: &str,
    to: &str,
) -> Result<(), ConversionError> {
    let Some(spec) = spec_mut(object) else {
        return Ok(());
    };
    match (from, to) {
        ("v1alpha1", "v1alpha2") => {
            if let Some(clear) = spec.remove("sudoPassword") {
                let encoded = match clear.as_str() {
                    Some(text) => Value::String(encode_base64(text.as_bytes())),
                    None => clear,
                };
                spec.insert("sudoPasswordEncoded".into(), encoded);
            }
        }
        ("v1alpha2", "v1alpha1") => {
            if let Some(encoded) = spec.get("sudoPasswordEncoded") {
                let clear = match encoded.as_str() {
                    Some(text) => Value::String(decode_base64(text).map_err(|message| {
                        ConversionError::Field {
                            path: "spec.sudoPasswordEncoded".into(),
                            message: format!("{message}; write the password base64-encoded"),
                        }
                    })?),
                    None => encoded.clone(),
                };
                spec.remove("sudoPasswordEncoded");
                spec.insert("sudoPassword".into(), clear);
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{ConversionContext, ConversionError, convert as convert_to};

    fn creds(version: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": format!("deckhouse.io/{version}"), "kind": "SSHCredentials",
            "metadata": {"name": "c"}, "spec": spec})
    }

    #[test]
    fn the_password_is_encoded_going_up() {
        let ctx = ConversionContext::default();
        let old = creds("v1alpha1", json!({"user": "u", "sudoPassword": "foobar"}));
        let new = convert_to(&old, "deckhouse.io/v1alpha2", &ctx).unwrap();
        assert_eq!(
            new["spec"],
            json!({"user": "u", "sudoPasswordEncoded": "Zm9vYmFy"})
        );
        let bad = creds("v1alpha2", json!({"sudoPasswordEncoded": "not base64!"}));
        let err = convert_to(&bad, "deckhouse.io/v1alpha1", &ctx).unwrap_err();
        assert!(
            matches!(&err, ConversionError::Field { path, .. } if path == "spec.sudoPasswordEncoded"),
            "{err}"
        );
    }

    proptest! {
        /// `v1alpha2` → `v1alpha1` → `v1alpha2` and the reverse are lossless for text passwords.
        #[test]
        fn passwords_round_trip(password in ".{0,30}", user in "[a-z]{1,8}") {
            let ctx = ConversionContext::default();
            let old = creds("v1alpha1", json!({"user": user, "sudoPassword": password}));
            let new = convert_to(&old, "deckhouse.io/v1alpha2", &ctx).unwrap();
            let back = convert_to(&new, "deckhouse.io/v1alpha1", &ctx).unwrap();
            prop_assert_eq!(&back, &old);
            prop_assert_eq!(convert_to(&back, "deckhouse.io/v1alpha2", &ctx).unwrap(), new);
        }
    }
}
