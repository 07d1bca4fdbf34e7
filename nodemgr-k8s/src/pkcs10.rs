//! Reads what a PEM PKCS#10 certificate request (a CSR's `spec.request`) asks for: the
//! subject's common names and organizations and the subject alternative names of its
//! `extensionRequest` attribute. The signature is not checked here: the API server checks it
//! when the CertificateSigningRequest is created.

use std::net::IpAddr;

use der::{AnyRef, Decode, Reader, SliceReader, Tag, TagNumber, Tagged};
use nodemgr_core::serving_certificates::CertificateRequest;

/// `2.5.4.3` commonName.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// `2.5.4.10` organizationName.
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
/// `1.2.840.113549.1.9.14` extensionRequest.
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
/// `2.5.29.17` subjectAltName.
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// A request that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Pkcs10Error {
    /// Not PEM at all.
    #[error("not a PEM CERTIFICATE REQUEST block: {0}")]
    Pem(#[source] der::pem::Error),
    /// A PEM block of another kind.
    #[error("not a PEM CERTIFICATE REQUEST block: the block is a {label:?}")]
    Label {
        /// The block's label.
        label: String,
    },
    /// The DER inside does not have the PKCS#10 shape.
    #[error("not a PKCS#10 request: {what}")]
    Shape {
        /// What was expected.
        what: &'static str,
    },
    /// The DER encoding is broken.
    #[error("broken DER: {0}")]
    Der(#[source] der::Error),
}

impl From<der::Error> for Pkcs10Error {
    fn from(e: der::Error) -> Self {
        Pkcs10Error::Der(e)
    }
}

fn shape(what: &'static str) -> Pkcs10Error {
    Pkcs10Error::Shape { what }
}

/// The elements of a constructed value, in order.
fn elements(value: &[u8]) -> Result<Vec<AnyRef<'_>>, Pkcs10Error> {
    let mut reader = SliceReader::new(value)?;
    let mut out = Vec::new();
    while !reader.is_finished() {
        out.push(AnyRef::decode(&mut reader)?);
    }
    Ok(out)
}

fn expect<'a>(
    any: Option<&AnyRef<'a>>,
    tag: Tag,
    what: &'static str,
) -> Result<&'a [u8], Pkcs10Error> {
    match any {
        Some(a) if a.tag() == tag => Ok(a.value()),
        _ => Err(shape(what)),
    }
}

fn text(any: &AnyRef<'_>) -> String {
    String::from_utf8_lossy(any.value()).into_owned()
}

/// Parses a PEM-encoded PKCS#10 request (`spec.request` of a CertificateSigningRequest,
/// base64-decoded).
///
/// # Errors
/// Not PEM, not a `CERTIFICATE REQUEST`, or not PKCS#10-shaped DER.
pub fn parse_pem(pem: &[u8]) -> Result<CertificateRequest, Pkcs10Error> {
    let (label, der) = der::pem::decode_vec(pem).map_err(Pkcs10Error::Pem)?;
    if label != "CERTIFICATE REQUEST" && label != "NEW CERTIFICATE REQUEST" {
        return Err(Pkcs10Error::Label {
            label: label.to_owned(),
        });
    }
    parse_der(&der)
}

/// Parses a DER-encoded PKCS#10 request.
///
/// # Errors
/// Not PKCS#10-shaped DER.
pub fn parse_der(der: &[u8]) -> Result<CertificateRequest, Pkcs10Error> {
    let outer = AnyRef::from_der(der)?;
    let top = elements(expect(Some(&outer), Tag::Sequence, "a SEQUENCE")?)?;
    let info = elements(expect(
        top.first(),
        Tag::Sequence,
        "certificationRequestInfo SEQUENCE",
    )?)?;
    expect(info.first(), Tag::Integer, "a version INTEGER")?;
    let mut out = CertificateRequest::default();
    for rdn in elements(expect(info.get(1), Tag::Sequence, "a subject Name")?)? {
        for attribute in elements(expect(
            Some(&rdn),
            Tag::Set,
            "a RelativeDistinguishedName SET",
        )?)? {
            let parts = elements(expect(
                Some(&attribute),
                Tag::Sequence,
                "an AttributeTypeAndValue",
            )?)?;
            let oid = expect(parts.first(), Tag::ObjectIdentifier, "an attribute type")?;
            let value = parts.get(1).ok_or_else(|| shape("an attribute value"))?;
            if oid == OID_COMMON_NAME {
                out.common_names.push(text(value));
            } else if oid == OID_ORGANIZATION {
                out.organizations.push(text(value));
            }
        }
    }
    expect(info.get(2), Tag::Sequence, "a subjectPKInfo SEQUENCE")?;
    let attributes_tag = Tag::ContextSpecific {
        constructed: true,
        number: TagNumber(0),
    };
    let attributes = match info.get(3) {
        Some(a) if a.tag() == attributes_tag => elements(a.value())?,
        Some(_) => return Err(shape("[0] attributes")),
        None => Vec::new(),
    };
    for attribute in attributes {
        let parts = elements(expect(Some(&attribute), Tag::Sequence, "an Attribute")?)?;
        let oid = expect(parts.first(), Tag::ObjectIdentifier, "an attribute type")?;
        if oid != OID_EXTENSION_REQUEST {
            continue;
        }
        for extensions in elements(expect(parts.get(1), Tag::Set, "attribute values SET")?)? {
            for extension in elements(expect(Some(&extensions), Tag::Sequence, "Extensions")?)? {
                let fields = elements(expect(Some(&extension), Tag::Sequence, "an Extension")?)?;
                let id = expect(fields.first(), Tag::ObjectIdentifier, "an extnID")?;
                if id != OID_SUBJECT_ALT_NAME {
                    continue;
                }
                let value = expect(fields.last(), Tag::OctetString, "an extnValue")?;
                read_general_names(value, &mut out)?;
            }
        }
    }
    Ok(out)
}

fn read_general_names(value: &[u8], out: &mut CertificateRequest) -> Result<(), Pkcs10Error> {
    let names = AnyRef::from_der(value)?;
    for name in elements(expect(Some(&names), Tag::Sequence, "GeneralNames")?)? {
        let Tag::ContextSpecific { number, .. } = name.tag() else {
            return Err(shape("a GeneralName"));
        };
        match number.0 {
            2 => out.dns_names.push(text(&name)),
            7 => {
                let bytes = name.value();
                let ip = if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
                    IpAddr::from(v4)
                } else if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
                    IpAddr::from(v6)
                } else {
                    return Err(shape("an IP address of 4 or 16 bytes"));
                };
                out.ip_addresses.push(ip);
            }
            1 => out.other_names.push(format!("email:{}", text(&name))),
            6 => out.other_names.push(format!("URI:{}", text(&name))),
            n => out.other_names.push(format!("GeneralName [{n}]")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Makes a CSR with `openssl req` (on the test machine's PATH).
    pub(crate) fn openssl_csr(subject: &str, sans: &str) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = dir.path().join("key.pem");
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ])
            .arg("-keyout")
            .arg(&key)
            .args(["-subj", subject])
            .args(if sans.is_empty() {
                Vec::new()
            } else {
                vec!["-addext".to_owned(), format!("subjectAltName={sans}")]
            })
            .output()
            .expect("openssl req runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    #[test]
    fn reads_what_openssl_asks_for() {
        let pem = openssl_csr(
            "/O=system:nodes/CN=system:node:w1",
            "DNS:w1,DNS:w1.internal,IP:10.0.0.5,IP:2001:db8::5,email:a@b.c",
        );
        let r = parse_pem(&pem).expect("parses");
        assert_eq!(r.common_names, ["system:node:w1"]);
        assert_eq!(r.organizations, ["system:nodes"]);
        assert_eq!(r.dns_names, ["w1", "w1.internal"]);
        assert_eq!(
            r.ip_addresses,
            [
                "10.0.0.5".parse::<IpAddr>().expect("ip"),
                "2001:db8::5".parse().expect("ip")
            ]
        );
        assert_eq!(r.other_names, ["email:a@b.c"]);
        let bare = parse_pem(&openssl_csr("/CN=x", "")).expect("parses");
        assert!(bare.dns_names.is_empty() && bare.organizations.is_empty());
    }

    #[test]
    fn garbage_is_an_error_naming_what_is_wrong() {
        let e = parse_pem(b"hello").unwrap_err();
        assert!(e.to_string().contains("PEM"), "{e}");
        // The PEM decoder's error is the source.
        assert!(matches!(e, Pkcs10Error::Pem(_)), "{e:?}");
        assert!(std::error::Error::source(&e).is_some(), "{e:?}");
        let e = parse_pem(b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n")
            .unwrap_err();
        assert!(e.to_string().contains("CERTIFICATE"), "{e}");
        assert!(parse_der(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_err());
    }

    proptest! {
        /// Arbitrary bytes, and a real request with bytes changed, never panic the parser.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8)) {
            let _ = parse_der(&bytes);
            let mut der = sample().to_vec();
            for (i, b) in flips {
                let at = i.index(der.len());
                der[at] = b;
            }
            let _ = parse_der(&der);
        }
    }

    /// A real CSR (CN=system:node:w1, O=system:nodes, DNS:w1, IP:10.0.0.5) in DER, made once.
    fn sample() -> &'static [u8] {
        static SAMPLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        SAMPLE.get_or_init(|| {
            let pem = openssl_csr("/O=system:nodes/CN=system:node:w1", "DNS:w1,IP:10.0.0.5");
            der::pem::decode_vec(&pem).expect("openssl writes PEM").1
        })
    }
}
