//! Every parser of outside input, fed extreme values: huge digit strings, the i64/u64 bounds
//! and one past them, exponents, signs, fractions, empty text, non-ASCII digits and arbitrary
//! unicode, bare and with every suffix the parsers know. Each answers with a value it can
//! stand behind or an error naming the text; none panics (debug builds check overflow) and none
//! wraps (the values are checked against an independent computation where one is cheap).
//! The same values also go into every numeric field of a NodeGroup, which is then validated,
//! rendered into a bashible bundle and planned for updates and fencing.
//!
//! `PROPTEST_CASES=10000 cargo test -p nodemgr-core --test extreme_inputs` runs more cases.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test set-up: a broken fixture should panic

use nodemgr_core::bashible::{ClusterContext, Renderer};
use nodemgr_core::fencing::watchdog_timeout;
use nodemgr_core::model::{
    Amount, IntOrString, MAX_DURATION, Quantity, QuantityError, Timestamp, parse_duration_checked,
    parse_node_group,
};
use nodemgr_core::oom::parse_psi;
use nodemgr_core::update::max_concurrent;
use nodemgr_core::validate::{ValidationContext, validate_node_group};
use nodemgr_core::window::parse_time_of_day;
use proptest::prelude::*;
use serde_json::json;

/// A number as text, from the ordinary to the absurd.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            i64::MAX.to_string(),
            i64::MIN.to_string(),
            u64::MAX.to_string(),
            "9223372036854775808".to_owned(),
            "18446744073709551616".to_owned(),
            "-9223372036854775809".to_owned(),
            u128::MAX.to_string(),
            "0".to_owned(),
            "-0".to_owned(),
            "00000000000000000000000000000000000000000000001".to_owned(),
            ".".to_owned(),
            "1.".to_owned(),
            ".5".to_owned(),
            "NaN".to_owned(),
            "inf".to_owned(),
            "-inf".to_owned(),
            "1e308".to_owned(),
            "1e309".to_owned(),
        ]),
        "[0-9]{20,400}",
        "[+-]?[0-9]{0,30}\\.[0-9]{0,60}",
        "[0-9]{1,5}[eE][+-]?[0-9]{1,25}",
        "[+-]{1,3}[0-9]{1,5}",
        "[٠-٩０-９]{1,5}",
        "\\PC{0,24}",
    ]
}

/// What may follow a number in the formats the parsers read.
fn suffix() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "",
        "m",
        "n",
        "u",
        "k",
        "M",
        "G",
        "T",
        "P",
        "E",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "e3",
        "e-3",
        "E+18",
        "e99999999999999999999",
        "%",
        "%%",
        "s",
        "ms",
        "h",
        "m30s",
        "h59m",
        ":00",
        ":",
        "G",
        " ",
        "\u{0}",
        "Gi ",
        "µs",
    ])
}

/// A value as text: a number and a suffix, sometimes twice (`1h30m` shapes).
fn text() -> impl Strategy<Value = String> {
    (
        number(),
        suffix(),
        proptest::option::of((number(), suffix())),
    )
        .prop_map(|(n, s, more)| match more {
            Some((n2, s2)) => format!("{n}{s}{n2}{s2}"),
            None => format!("{n}{s}"),
        })
}

/// An integer field's value: the bounds, around zero, or anything.
fn integer() -> impl Strategy<Value = i64> {
    prop_oneof![
        prop::sample::select(vec![
            i64::MIN,
            i64::MIN + 1,
            -1,
            0,
            1,
            i64::MAX - 1,
            i64::MAX
        ]),
        any::<i64>(),
        -1000i64..1000,
    ]
}

/// The text's digits when it is a plain non-negative integer (leading zeros allowed).
fn plain_integer(text: &str) -> Option<u128> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse::<u128>().ok())
        .flatten()
}

/// Sane values of the text fields a group takes (in [`group_json`]'s order): each is replaced
/// by an extreme text now and then, so that rendering gets past the other fields.
const SANE_TEXT: [&str; 11] = [
    "100m", "512Mi", "1Gi", "50Mi", "4G", "8:00", "15:00", "25%", "10%", "2m", "1h30m",
];

/// Text fields: mostly sane, a quarter of them extreme.
fn text_fields() -> impl Strategy<Value = Vec<String>> {
    SANE_TEXT
        .iter()
        .map(|sane| prop_oneof![3 => Just((*sane).to_owned()), 1 => text()].boxed())
        .collect::<Vec<_>>()
}

/// Integer fields (9 of them): mostly small and valid, a quarter of them extreme.
fn integer_fields() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(prop_oneof![3 => 1i64..=10, 1 => integer()], 9)
}

/// A group using every numeric field: `t` where the API takes text (quantities, durations,
/// times, int-or-percent, in [`SANE_TEXT`]'s order), `n` where it takes integers.
fn group_json(t: &[String], n: &[i64]) -> String {
    json!({
        "apiVersion": "deckhouse.io/v1",
        "kind": "NodeGroup",
        "metadata": {"name": "extreme"},
        "spec": {
            "nodeType": "CloudEphemeral",
            "cloudInstances": {
                "classReference": {"kind": "AWSInstanceClass", "name": "worker"},
                "minPerZone": n[0],
                "maxPerZone": n[1],
                "maxSurgePerZone": n[2],
                "maxUnavailablePerZone": n[3],
                "priority": n[4],
                "standby": t[8],
                "standbyHolder": {"overprovisioningRate": n[5]},
            },
            "kubelet": {
                "maxPods": n[6],
                "containerLogMaxSize": t[3],
                "containerLogMaxFiles": n[7],
                "resourceReservation": {
                    "mode": "Static",
                    "static": {"cpu": t[0], "memory": t[1], "ephemeralStorage": t[2]},
                },
                "memorySwap": {
                    "swapBehavior": "LimitedSwap",
                    "swappiness": n[5],
                    "limitedSwap": {"size": t[4]},
                },
            },
            "cri": {"type": "ContainerdV2", "containerdV2": {"maxConcurrentDownloads": n[8]}},
            "disruptions": {
                "approvalMode": "Automatic",
                "automatic": {"windows": [{"from": t[5], "to": t[6]}]},
            },
            "update": {"maxConcurrent": t[7]},
            "nodeDrainTimeoutSecond": n[4],
            "fencing": {"mode": "Watchdog", "watchdog": {"timeout": t[9]}},
            "chaos": {"mode": "DrainAndDelete", "period": t[10]},
        },
    })
    .to_string()
}

proptest! {
    /// Quantities: a value that matches an exact computation, or an error naming the text.
    #[test]
    fn quantities(text in text()) {
        match Quantity::parse(&text) {
            Ok(q) => {
                if let Some(n) = plain_integer(&text) {
                    prop_assert_eq!(Some(i128::from(q.0)), n.checked_mul(1000).and_then(|v| i128::try_from(v).ok()));
                }
                if let Some(n) = text.strip_suffix('m').and_then(plain_integer) {
                    prop_assert_eq!(u128::try_from(q.0).ok(), Some(n));
                }
            }
            Err(e) => {
                prop_assert_eq!(e.text(), text.as_str());
                let quoted = format!("{text:?}");
                prop_assert!(e.to_string().contains(&quoted));
                if let Some(n) = plain_integer(&text) {
                    // A plain integer fails only for being too large.
                    prop_assert!(matches!(e, QuantityError::TooLarge(_)), "{}", e);
                    prop_assert!(n.checked_mul(1000).is_none_or(|v| v > i64::MAX as u128));
                }
            }
        }
    }

    /// Durations: at most 292 years, exact for whole seconds; or an error naming the text.
    #[test]
    fn durations(text in text()) {
        match parse_duration_checked(&text) {
            Ok(d) => {
                prop_assert!(d <= MAX_DURATION);
                if let Some(n) = text.strip_suffix('s').and_then(plain_integer).filter(|n| *n < 1 << 40) {
                    prop_assert_eq!(u128::from(d.as_secs()), n);
                }
            }
            Err(e) => {
                let quoted = format!("{text:?}");
                prop_assert!(e.to_string().contains(&quoted));
            }
        }
    }

    /// Counts and percentages (`maxConcurrent`, `standby`): exact, or an error naming the
    /// text; resolving never wraps.
    #[test]
    fn counts_and_percentages(text in text(), int in any::<i64>(), total in any::<u64>()) {
        let value = IntOrString::String(text.clone());
        match value.amount() {
            Ok(Amount::Absolute(n)) => prop_assert_eq!(Some(u128::from(n)), plain_integer(&text)),
            Ok(Amount::Percent(p)) => {
                prop_assert_eq!(Some(u128::from(p)), text.strip_suffix('%').and_then(plain_integer));
                let resolved = value.resolve(total).map(u128::from);
                let exact = (u128::from(total) * u128::from(p) / 100).min(u128::from(u64::MAX));
                prop_assert_eq!(resolved, Ok(exact));
            }
            Err(e) => {
                let quoted = format!("{text:?}");
                prop_assert!(e.to_string().contains(&quoted));
            }
        }
        match IntOrString::Int(int).resolve(total) {
            Ok(n) => prop_assert_eq!(i128::from(n), i128::from(int)),
            Err(_) => prop_assert!(int < 0),
        }
    }

    /// Times of day, RFC 3339 timestamps and PSI files: a value in range or an error.
    #[test]
    fn times_and_pressure(text in text(), other in text()) {
        if let Ok(minute) = parse_time_of_day(&text) {
            prop_assert!(minute < 24 * 60);
        }
        let _ = parse_time_of_day(&format!("{text}:{other}"));
        let _ = Timestamp::parse_rfc3339(&text);
        let _ = Timestamp::parse_rfc3339(&format!("2026-01-01T00:00:00.{text}Z"));
        let _ = Timestamp::parse_rfc3339(&format!("{text}-01-01T00:00:00+{other}"));
        let psi = format!("some avg10={text} avg60=0.00 avg300=0.00 total={other}\nfull avg10=0.00 avg60={text} avg300=0.00 total=0");
        if let Ok(psi) = parse_psi(&psi) {
            prop_assert!(psi.some.avg10.is_finite() && psi.some.avg10 >= 0.0);
        }
    }

    /// A NodeGroup with extreme values in every numeric field: parsing, validation (with an
    /// extreme cluster prefix), rendering and update / fencing planning never panic.
    #[test]
    fn node_groups(texts in text_fields(), integers in integer_fields(), prefix in any::<usize>()) {
        let group = parse_node_group(&group_json(&texts, &integers));
        // Every field has the type the API gives it: the group must parse.
        prop_assert!(group.is_ok(), "{:?}", group.err());
        let Ok(group) = group else {
            return Ok(());
        };
        let ctx = ValidationContext { cluster_prefix_len: Some(prefix), ..ValidationContext::default() };
        let errors = validate_node_group(&group, &ctx);
        // Extreme text is refused by name (the fixed fields are valid).
        for e in &errors {
            prop_assert!(!e.message.is_empty(), "{}", e);
        }
        let _ = validate_node_group(&group, &ValidationContext::default());
        let cluster = ClusterContext {
            api_endpoints: vec!["10.0.0.1:6443".into()],
            ca_cert: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            ..ClusterContext::default()
        };
        let _ = Renderer::new().bundle(&group, &cluster);
        for size in [0, 1, 7, usize::MAX] {
            let n = max_concurrent(&group, size);
            prop_assert!(n >= 1);
        }
        if let Some(fencing) = group.spec.fencing.as_ref() {
            let _ = watchdog_timeout(fencing);
        }
    }
}

#[test]
fn the_measured_overflows_are_errors_now() {
    // A reserved-memory quantity that crashed bashible-apiserver at start.
    let e = Quantity::parse("99999999999999999999Ei").unwrap_err();
    assert!(matches!(e, QuantityError::TooLarge(_)), "{e}");
    let group = parse_node_group(
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: huge}\nspec:\n  \
         nodeType: Static\n  kubelet:\n    resourceReservation:\n      mode: Static\n      \
         static: {memory: 99999999999999999999Ei}\n",
    )
    .expect("the group parses; the quantity is checked when rendering");
    let cluster = ClusterContext {
        api_endpoints: vec!["10.0.0.1:6443".into()],
        ca_cert: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
        ..ClusterContext::default()
    };
    let rendered = Renderer::new().bundle(&group, &cluster);
    let message = rendered.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("too large"), "{message}");
    assert!(
        message.contains("spec.kubelet.resourceReservation.static.memory"),
        "{message}"
    );
    // A huge cluster prefix.
    let ctx = ValidationContext {
        cluster_prefix_len: Some(usize::MAX),
        ..ValidationContext::default()
    };
    let errors = validate_node_group(&group, &ctx);
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("no NodeGroup name fits")),
        "{errors:?}"
    );
}
