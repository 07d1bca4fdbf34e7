//! Content negotiation: the emulator speaks JSON (and reads YAML bodies); Kubernetes protobuf
//! bodies are decoded for the few kinds `crate::protobuf` knows. Any other protobuf or CBOR
//! body gets 415 UnsupportedMediaType with a Status saying to send JSON (kube-apiserver's own wording for a media type it does not
//! decode, plus what to do); an `Accept` that allows only protobuf gets 406 NotAcceptable. An
//! `Accept` listing JSON anywhere (`application/vnd.kubernetes.protobuf,application/json`, what
//! client-go sends) is answered in JSON. See `docs/api-emulator.md`.

use crate::status::ApiError;

/// The media types a request body may have on the main verbs (patch types are checked by the
/// patch handler).
pub const BODY_TYPES: &[&str] = &["application/json", "application/yaml"];

/// The media types the emulator answers in.
pub const RESPONSE_TYPES: &[&str] = &["application/json", "application/yaml"];

fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether a body of `content_type` cannot be decoded at all (protobuf, CBOR).
fn undecodable(content_type: &str) -> bool {
    matches!(
        essence(content_type).as_str(),
        "application/vnd.kubernetes.protobuf" | "application/cbor" | "application/cbor-seq"
    )
}

/// Whether a `Content-Type` is Kubernetes protobuf.
pub fn is_protobuf(content_type: &str) -> bool {
    essence(content_type) == "application/vnd.kubernetes.protobuf"
}

/// The 415 for a protobuf body the emulator's subset could not decode.
pub fn undecoded_protobuf(why: &str) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {} \
             (got application/vnd.kubernetes.protobuf: {why}): this API emulator decodes protobuf \
             only for Namespace, ConfigMap, Secret and ServiceAccount, send the object as JSON \
             (`kubectl create -f`, `apply` and `replace` do; client-go: set \
             rest.Config.ContentType to application/json)",
            BODY_TYPES.join(", ")
        ),
    )
}

/// Checks the body's `Content-Type` (when there is a body) and the `Accept` header.
///
/// # Errors
/// 415 for a protobuf or CBOR body; 406 when `Accept` allows no media type the emulator
/// produces.
pub fn negotiate(content_type: &str, accept: &str, has_body: bool) -> Result<(), ApiError> {
    if has_body && undecodable(content_type) {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} \
                 (got {}): this API emulator does not decode Kubernetes protobuf or CBOR, send the \
                 object as JSON (`kubectl create -f`, `apply` and `replace` do; client-go: set \
                 rest.Config.ContentType to application/json)",
                BODY_TYPES.join(", "),
                essence(content_type)
            ),
        ));
    }
    if accept.trim().is_empty() {
        return Ok(());
    }
    let acceptable = accept.split(',').map(essence).any(|range| {
        matches!(
            range.as_str(),
            "*/*" | "application/*" | "application/json" | "application/yaml" | "text/plain" | ""
        )
    });
    if acceptable {
        Ok(())
    } else {
        Err(ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {} (asked for {accept:?}): this API \
                 emulator answers in JSON only, add application/json to Accept",
                RESPONSE_TYPES.join(", ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_bodies_are_refused_with_advice() {
        let e = negotiate(
            "application/vnd.kubernetes.protobuf",
            "application/vnd.kubernetes.protobuf,application/json",
            true,
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
        assert!(e.message.contains("as JSON"), "{}", e.message);
        assert_eq!(
            negotiate("application/cbor", "", true).unwrap_err().code,
            415
        );
        // No body: the Content-Type does not matter.
        assert!(negotiate("application/vnd.kubernetes.protobuf", "", false).is_ok());
    }

    #[test]
    fn accept_needs_json_somewhere() {
        assert!(
            negotiate(
                "",
                "application/vnd.kubernetes.protobuf, application/json",
                false
            )
            .is_ok()
        );
        assert!(negotiate("", "application/json;as=Table;v=v1;g=meta.k8s.io", false).is_ok());
        assert!(negotiate("", "*/*", false).is_ok());
        let e = negotiate("", "application/vnd.kubernetes.protobuf", false).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (406, "NotAcceptable"));
        let e = negotiate(
            "",
            "application/vnd.kubernetes.protobuf;stream=watch",
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, 406);
    }
}
