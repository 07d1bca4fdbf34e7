//! Query strings as kube-apiserver reads them: percent-decoding (`+` is a space), and boolean
//! parameters (`watch`, `allowWatchBookmarks`, `sendInitialEvents`, `force`…) converted the way
//! apimachinery converts a query value to a bool — present and anything but `0` or `false`
//! (any letter case) is true, so `?watch=True` (what the official Python client sends),
//! `?watch=1`, `?watch=yes` and a bare `?watch` all start a watch. See `docs/api-emulator.md`.

use std::collections::BTreeMap;

/// Decodes `a=b&c=d` with percent-decoding (`+` is a space). A repeated key keeps its first
/// value, as apimachinery's conversion reads `values[0]`.
pub fn parse_query(query: Option<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        };
        out.entry(k).or_insert(v);
    }
    out
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The boolean a query parameter means: `None` (absent) is false; otherwise true unless the
/// value is `0` or `false` in any letter case.
pub fn bool_flag(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decoding() {
        let q = parse_query(Some(
            "labelSelector=app%20in%20(a%2Cb)&fieldSelector=spec.nodeName%3Dw1&watch=1&x&watch=0&p=%4",
        ));
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert_eq!(q["fieldSelector"], "spec.nodeName=w1");
        assert_eq!(q["x"], "");
        assert_eq!(q["watch"], "1");
        assert_eq!(q["p"], "%4");
    }

    #[test]
    fn booleans_as_apimachinery_converts_them() {
        for yes in ["true", "True", "TRUE", "1", "yes", "t", ""] {
            assert!(bool_flag(Some(yes)), "{yes:?}");
        }
        for no in ["false", "False", "FALSE", "0"] {
            assert!(!bool_flag(Some(no)), "{no:?}");
        }
        assert!(!bool_flag(None));
    }

    proptest! {
        /// Every value but `0` and the spellings of `false` turns a flag on.
        #[test]
        fn only_zero_and_false_turn_a_present_flag_off(value in ".{0,8}") {
            let off = matches!(value.to_ascii_lowercase().as_str(), "0" | "false");
            prop_assert_eq!(bool_flag(Some(&value)), !off);
        }

        /// Decoding never panics and a percent-encoded byte string decodes to itself.
        #[test]
        fn percent_encoding_round_trips(value in "[a-zA-Z0-9 ,=()!]{0,16}") {
            let encoded: String = value.bytes().map(|b| format!("%{b:02X}")).collect();
            let q = parse_query(Some(&format!("k={encoded}")));
            prop_assert_eq!(&q["k"], &value);
        }
    }
}
