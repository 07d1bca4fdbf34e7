//! The string patterns of Deckhouse's CRD schemas (docs/deckhouse.md §1.1, §2) and of Kubernetes object
//! names, written out by hand so that `nodemgr-core` needs no regex engine. Each function says
//! which pattern it implements; each returns `Ok(())` or a message that says what would be
//! accepted.

use std::net::Ipv4Addr;

/// Longest NodeGroup name: a 63-character label minus the 21 characters of the machine hash.
pub const NODE_GROUP_NAME_MAX: usize = 42;
/// Longest DNS-1123 subdomain (a label key prefix, an object name).
pub const DNS_SUBDOMAIN_MAX: usize = 253;
/// Longest DNS-1123 label, label name part or label value.
pub const LABEL_MAX: usize = 63;

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`: a DNS-1123 label without the length limit.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            lower_alnum(first)
                && lower_alnum(last)
                && bytes.iter().all(|&b| lower_alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// A DNS-1123 subdomain: dot-separated DNS labels, at most 253 characters.
pub fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > DNS_SUBDOMAIN_MAX {
        return Err(format!(
            "is {} characters long; at most {DNS_SUBDOMAIN_MAX} are allowed",
            s.len()
        ));
    }
    if !s.split('.').all(is_dns_label) {
        return Err(format!(
            "{s:?} is not a DNS-1123 subdomain: use lowercase letters, digits, '-' and '.', \
             starting and ending every part with a letter or digit (e.g. \"example.com\")"
        ));
    }
    Ok(())
}

/// A NodeGroup name: `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, at most 42 characters (docs/deckhouse.md §1).
pub fn check_node_group_name(s: &str) -> Result<(), String> {
    if !is_dns_label(s) {
        return Err(format!(
            "{s:?} is not a valid NodeGroup name: use lowercase letters, digits and '-', \
             starting and ending with a letter or digit (pattern ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)"
        ));
    }
    if s.len() > NODE_GROUP_NAME_MAX {
        return Err(format!(
            "{s:?} is {} characters long; at most {NODE_GROUP_NAME_MAX} are allowed \
             (63-character label limit minus the 21-character machine hash)",
            s.len()
        ));
    }
    Ok(())
}

fn name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`: the charset of label names and label values.
pub fn is_label_charset(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|&b| name_char(b))
        }
        _ => false,
    }
}

/// A Kubernetes qualified name (label, annotation and taint keys): an optional DNS-1123
/// subdomain prefix of at most 253 characters and `/`, then a name of 1..63 characters
/// matching `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        check_dns_subdomain(prefix).map_err(|e| format!("prefix of key {key:?} {e}"))?;
    }
    if name.is_empty() {
        return Err(format!("key {key:?} has an empty name part"));
    }
    if name.len() > LABEL_MAX {
        return Err(format!(
            "name part of key {key:?} is {} characters long; at most {LABEL_MAX} are allowed",
            name.len()
        ));
    }
    if !is_label_charset(name) {
        return Err(format!(
            "key {key:?} is not a qualified name: the name part must use letters, digits, \
             '-', '_' and '.', starting and ending with a letter or digit, after an optional \
             DNS subdomain prefix and '/' (e.g. \"example.com/my-key\")"
        ));
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of the label charset.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > LABEL_MAX {
        return Err(format!(
            "value is {} characters long; at most {LABEL_MAX} are allowed",
            value.len()
        ));
    }
    if !is_label_charset(value) {
        return Err(format!(
            "value {value:?} is not a valid label value: use letters, digits, '-', '_' and \
             '.', starting and ending with a letter or digit, or leave it empty"
        ));
    }
    Ok(())
}

/// The domain of a key's prefix when it is `deckhouse.io` or one of its subdomains.
pub fn deckhouse_domain_prefix(key: &str) -> Option<&str> {
    let (prefix, _) = key.split_once('/')?;
    (prefix == "deckhouse.io" || prefix.ends_with(".deckhouse.io")).then_some(prefix)
}

/// `kubelet.memorySwap.limitedSwap.size`: `^\d+G$`.
pub fn is_swap_size(s: &str) -> bool {
    s.strip_suffix('G').is_some_and(all_digits)
}

/// A MIG slice profile: `^[0-9]+g\.[0-9]+gb(\.me)?$` (`1g.5gb`, `1g.10gb.me`).
pub fn is_mig_profile(s: &str) -> bool {
    let s = s.strip_suffix(".me").unwrap_or(s);
    let Some((compute, memory)) = s.split_once("g.") else {
        return false;
    };
    all_digits(compute) && memory.strip_suffix("gb").is_some_and(all_digits)
}

/// `gpu.mig.partedConfig`: `custom`, or `all-` and a non-empty profile name (`all-1g.5gb`,
/// `all-balanced`).
pub fn is_mig_parted_config(s: &str) -> bool {
    s == "custom"
        || s.strip_prefix("all-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| lower_alnum(b) || b == b'.' || b == b'-')
        })
}

/// A dotted-quad IPv4 address as the StaticInstance schema accepts it (no leading zeros).
pub fn is_ipv4(s: &str) -> bool {
    s.parse::<Ipv4Addr>().is_ok()
}

/// An IPv4 CIDR such as `10.0.0.0/24`.
pub fn is_ipv4_cidr(s: &str) -> bool {
    s.split_once('/').is_some_and(|(ip, len)| {
        is_ipv4(ip) && all_digits(len) && len.len() <= 2 && len.parse::<u8>().is_ok_and(|l| l <= 32)
    })
}

/// Standard base64 (RFC 4648 alphabet, `=` padding); line breaks and spaces are ignored as
/// Kubernetes tools wrap long values.
///
/// # Errors
/// A message naming the first offending character or the bad length.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    fn sextet(c: u8) -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let clean: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if clean.is_empty() {
        return Err("is empty".into());
    }
    if !clean.len().is_multiple_of(4) {
        return Err(format!(
            "is not valid base64: {} characters is not a multiple of 4",
            clean.len()
        ));
    }
    let padding = clean.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return Err("is not valid base64: too much '=' padding".into());
    }
    let body = &clean[..clean.len() - padding];
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for (i, &c) in body.iter().enumerate() {
        let Some(v) = sextet(c) else {
            return Err(format!(
                "is not valid base64: character {:?} at position {i} is outside A-Z, a-z, 0-9, '+', '/'",
                char::from(c)
            ));
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn node_group_names() {
        assert!(check_node_group_name("worker").is_ok());
        assert!(check_node_group_name("a").is_ok());
        assert!(check_node_group_name("front-1").is_ok());
        assert!(check_node_group_name(&"a".repeat(42)).is_ok());
        for bad in ["", "-a", "a-", "Worker", "a_b", "a.b", &"a".repeat(43)] {
            assert!(check_node_group_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names_follow_kubernetes() {
        for good in [
            "dedicated",
            "node-role.kubernetes.io/control-plane",
            "example.com/My_Key.1",
            "a",
        ] {
            assert!(check_qualified_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "Example.com/a",
            "a/b/c",
            "-a",
            "a b",
            &"k".repeat(64),
            &format!("{}/a", "p".repeat(254)),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("v1.2_x-Y").is_ok());
        assert!(check_label_value("-x").is_err());
        assert!(check_label_value(&"v".repeat(64)).is_err());
    }

    #[test]
    fn deckhouse_domain_is_detected() {
        assert_eq!(
            deckhouse_domain_prefix("node.deckhouse.io/group"),
            Some("node.deckhouse.io")
        );
        assert_eq!(
            deckhouse_domain_prefix("deckhouse.io/x"),
            Some("deckhouse.io")
        );
        assert_eq!(deckhouse_domain_prefix("notdeckhouse.io/x"), None);
        assert_eq!(deckhouse_domain_prefix("deckhouse.io"), None);
    }

    #[test]
    fn small_patterns() {
        assert!(is_swap_size("4G") && !is_swap_size("4Gi") && !is_swap_size("G"));
        assert!(is_mig_profile("1g.5gb") && is_mig_profile("3g.20gb.me"));
        assert!(!is_mig_profile("1g5gb") && !is_mig_profile("g.5gb") && !is_mig_profile("1g.5g"));
        assert!(is_mig_parted_config("all-1g.5gb") && is_mig_parted_config("custom"));
        assert!(!is_mig_parted_config("all-") && !is_mig_parted_config("some"));
        assert!(is_ipv4("192.168.1.10") && !is_ipv4("192.168.1") && !is_ipv4("300.1.1.1"));
        assert!(
            is_ipv4_cidr("10.0.0.0/8") && !is_ipv4_cidr("10.0.0.0/33") && !is_ipv4_cidr("10.0.0.0")
        );
    }

    #[test]
    fn base64_decodes_and_rejects() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVs\nbG8h").unwrap(), b"hello!");
        assert!(decode_base64("aGVsbG8").is_err());
        assert!(decode_base64("aGV*bG8=").is_err());
        assert!(decode_base64("").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn generated_names_are_valid(name in "[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?") {
            prop_assert!(check_node_group_name(&name).is_ok());
        }

        #[test]
        fn uppercase_or_underscore_breaks_a_name(name in "[a-z]{1,10}", bad in "[A-Z_.]") {
            let broken = format!("{name}{bad}{name}");
            prop_assert!(check_node_group_name(&broken).is_err());
        }

        #[test]
        fn base64_decodes_what_an_encoder_writes(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut text = String::new();
            for chunk in data.chunks(3) {
                let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
                let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
                for i in 0..4 {
                    if i <= chunk.len() {
                        text.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                    } else {
                        text.push('=');
                    }
                }
            }
            if data.is_empty() {
                prop_assert!(decode_base64(&text).is_err());
            } else {
                prop_assert_eq!(decode_base64(&text).unwrap(), data);
            }
        }
    }
}
