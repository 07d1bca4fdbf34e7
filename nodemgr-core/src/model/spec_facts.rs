//! NodeGroup spec fields whose grammar, default and meaning several policies share, each
//! declared once here (the `*_PATTERN` constants are the grammars the CRD schema publishes and
//! validation's messages quote): validation reports against the grammar, the impact matrix fills in the
//! default, the update and drain policies apply the meaning, and the CRD schema
//! (`nodemgr_k8s::crd`) prints the same pattern. docs/deckhouse.md §1.1 lists the fields;
//! §3.2 (approvals) and §3.3 (draining) say what they do.
//!
//! - `spec.update.maxConcurrent`: an integer >= 1 or a percentage of the group
//!   (`^[1-9][0-9]*%?$`); unset means 1. A percentage is `floor(size × pct / 100)` and never
//!   less than 1, so a small group still updates. A value the grammar refuses (0, `0%`, `05`,
//!   a negative number) is reported by validation and, should one reach the policies anyway,
//!   treated as unset.
//! - `spec.nodeDrainTimeoutSecond`: seconds >= 0 a drain may take before the remaining pods
//!   are deleted; unset **or 0** means the default, 5 minutes (the documented value; Deckhouse's
//!   hook code uses 10, docs/deckhouse.md §3.3). 0 does not mean "delete at once": nobody writes
//!   it to ask for that, and Deckhouse's schema has no default, so an explicit 0 is how tools
//!   spell "unset". A negative value is refused by validation and treated as unset.

use std::time::Duration;

use super::node_group::{Amount, IntOrString};

/// The path of `update.maxConcurrent` in validation reports.
pub const MAX_CONCURRENT_PATH: &str = "spec.update.maxConcurrent";
/// `update.maxConcurrent` when unset: one node at a time.
pub const MAX_CONCURRENT_DEFAULT: u32 = 1;
/// The grammar of `update.maxConcurrent` as a string (the CRD's `pattern`).
pub const MAX_CONCURRENT_PATTERN: &str = "^[1-9][0-9]*%?$";

/// Why an `update.maxConcurrent` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not accepted; use an integer >= 1 or a percentage such as \"25%\" (pattern {pattern})",
    pattern = MAX_CONCURRENT_PATTERN
)]
pub struct MaxConcurrentError(pub String);

/// Reads `update.maxConcurrent` by its grammar: an integer >= 1, or a string of digits not
/// starting with 0, optionally followed by `%`.
///
/// # Errors
/// [`MaxConcurrentError`] for anything else.
///
/// # Examples
/// ```
/// use nodemgr_core::model::{Amount, IntOrString, spec_facts::parse_max_concurrent};
///
/// assert_eq!(parse_max_concurrent(&IntOrString::Int(3)), Ok(Amount::Absolute(3)));
/// assert_eq!(parse_max_concurrent(&IntOrString::String("25%".into())), Ok(Amount::Percent(25)));
/// assert!(parse_max_concurrent(&IntOrString::Int(0)).is_err());
/// assert!(parse_max_concurrent(&IntOrString::String("05".into())).is_err());
/// ```
pub fn parse_max_concurrent(value: &IntOrString) -> Result<Amount, MaxConcurrentError> {
    let refused = || MaxConcurrentError(value.to_string());
    match value {
        IntOrString::Int(n) if *n >= 1 => value.amount().map_err(|_| refused()),
        IntOrString::Int(_) => Err(refused()),
        IntOrString::String(s) => {
            let digits = s.strip_suffix('%').unwrap_or(s);
            let grammatical = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && !digits.starts_with('0');
            if grammatical {
                value.amount().map_err(|_| refused())
            } else {
                Err(refused())
            }
        }
    }
}

/// How many nodes of a group of `group_size` may update at once under `value`
/// (`update.maxConcurrent`): the integer, or `floor(group_size × pct / 100)`, at least 1;
/// [`MAX_CONCURRENT_DEFAULT`] when unset or refused by [`parse_max_concurrent`].
pub fn max_concurrent_limit(value: Option<&IntOrString>, group_size: usize) -> usize {
    let size = u64::try_from(group_size).unwrap_or(u64::MAX);
    let limit = value
        .and_then(|v| parse_max_concurrent(v).ok())
        .map(|amount| match amount {
            Amount::Absolute(n) => n,
            Amount::Percent(p) => {
                u64::try_from(u128::from(size) * u128::from(p) / 100).unwrap_or(u64::MAX)
            }
        })
        .unwrap_or(u64::from(MAX_CONCURRENT_DEFAULT));
    usize::try_from(limit).unwrap_or(usize::MAX).max(1)
}

/// The grammar of `chaos.period`: hours and/or minutes (`6h`, `1h30m`, `45m`).
pub const CHAOS_PERIOD_PATTERN: &str = "^([0-9]+h([0-9]+m)?|[0-9]+m)$";
/// The grammar of a disruption window's `from` and `to`: a UTC time of day, `H:MM` or `HH:MM`.
pub const WINDOW_TIME_PATTERN: &str = "^(?:\\d|[01]\\d|2[0-3]):[0-5]\\d$";
/// The grammar of `fencing.watchdog.timeout`: a number and one unit (`60s`).
pub const WATCHDOG_TIMEOUT_PATTERN: &str = "^[0-9]+[smh]{1}$";
/// The grammar of a MIG profile (`gpu.mig.customConfigs[].profile`): `1g.5gb`, `1g.5gb.me`.
pub const MIG_PROFILE_PATTERN: &str = "^[0-9]+g\\.[0-9]+gb(\\.me)?$";
/// The grammar of `cloudInstances.standby` as a string: a count or a percentage.
pub const STANDBY_PATTERN: &str = "^[0-9]+%?$";
/// The grammar of `kubelet.memorySwap.limitedSwap.size`: whole gigabytes (`4G`).
pub const SWAP_SIZE_PATTERN: &str = "^\\d+G$";

/// The path of `nodeDrainTimeoutSecond` in validation reports.
pub const DRAIN_TIMEOUT_PATH: &str = "spec.nodeDrainTimeoutSecond";
/// The drain timeout when `nodeDrainTimeoutSecond` is unset or 0: 5 minutes.
pub const DRAIN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(300);

/// Why a `nodeDrainTimeoutSecond` value is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is negative; must be >= 0 (seconds; unset or 0 means the 5-minute default)")]
pub struct DrainTimeoutError(pub i64);

/// Checks `nodeDrainTimeoutSecond`: seconds, >= 0.
///
/// # Errors
/// [`DrainTimeoutError`] for a negative value.
pub fn check_drain_timeout(seconds: i64) -> Result<(), DrainTimeoutError> {
    if seconds < 0 {
        Err(DrainTimeoutError(seconds))
    } else {
        Ok(())
    }
}

/// The drain timeout `nodeDrainTimeoutSecond` asks for: that many seconds when positive,
/// [`DRAIN_TIMEOUT_DEFAULT`] when unset, 0 or negative (see the module docs for why 0 is the
/// default).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodemgr_core::model::spec_facts::{DRAIN_TIMEOUT_DEFAULT, drain_timeout};
///
/// assert_eq!(drain_timeout(Some(42)), Duration::from_secs(42));
/// assert_eq!(drain_timeout(Some(0)), DRAIN_TIMEOUT_DEFAULT);
/// assert_eq!(drain_timeout(None), Duration::from_secs(300));
/// ```
pub fn drain_timeout(seconds: Option<i64>) -> Duration {
    seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DRAIN_TIMEOUT_DEFAULT, Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(text: &str) -> IntOrString {
        IntOrString::String(text.into())
    }

    #[test]
    fn max_concurrent_grammar_is_the_crd_pattern() {
        for ok in ["1", "25%", "10", "100%", "3"] {
            assert!(parse_max_concurrent(&s(ok)).is_ok(), "{ok}");
        }
        for bad in ["0", "05", "0%", "", "%", "x%", "-1", "1.5", " 1"] {
            assert!(parse_max_concurrent(&s(bad)).is_err(), "{bad}");
        }
        assert!(parse_max_concurrent(&IntOrString::Int(0)).is_err());
        assert!(parse_max_concurrent(&IntOrString::Int(-2)).is_err());
        assert_eq!(
            parse_max_concurrent(&IntOrString::Int(0))
                .map_err(|e| e.to_string())
                .unwrap_err(),
            "\"0\" is not accepted; use an integer >= 1 or a percentage such as \"25%\" (pattern ^[1-9][0-9]*%?$)"
        );
    }

    #[test]
    fn max_concurrent_limit_resolves_and_defaults() {
        assert_eq!(max_concurrent_limit(None, 10), 1);
        assert_eq!(max_concurrent_limit(Some(&IntOrString::Int(3)), 10), 3);
        assert_eq!(max_concurrent_limit(Some(&s("3")), 10), 3);
        assert_eq!(max_concurrent_limit(Some(&s("25%")), 10), 2);
        assert_eq!(max_concurrent_limit(Some(&s("10%")), 5), 1);
        assert_eq!(max_concurrent_limit(Some(&s("50%")), 0), 1);
        assert_eq!(max_concurrent_limit(Some(&IntOrString::Int(0)), 4), 1);
        assert_eq!(max_concurrent_limit(Some(&s("05")), 4), 1);
    }

    #[test]
    fn drain_timeout_zero_and_unset_mean_the_default() {
        assert_eq!(drain_timeout(None), DRAIN_TIMEOUT_DEFAULT);
        assert_eq!(drain_timeout(Some(0)), DRAIN_TIMEOUT_DEFAULT);
        assert_eq!(drain_timeout(Some(-1)), DRAIN_TIMEOUT_DEFAULT);
        assert_eq!(drain_timeout(Some(42)), Duration::from_secs(42));
        assert!(check_drain_timeout(0).is_ok());
        assert_eq!(
            check_drain_timeout(-5).map_err(|e| e.to_string()),
            Err(
                "-5 is negative; must be >= 0 (seconds; unset or 0 means the 5-minute default)"
                    .into()
            )
        );
    }

    proptest! {
        /// Whatever the value, at least one node may update and never more than the group
        /// has (or the absolute number asked for, when that is smaller).
        #[test]
        fn limit_is_at_least_one_and_accepted_values_resolve(
            n in -5i64..1000, pct in 0u32..300, size in 0usize..10_000, text in "[0-9%x-]{0,5}"
        ) {
            let values = [IntOrString::Int(n), s(&format!("{pct}%")), s(&text)];
            for v in &values {
                let limit = max_concurrent_limit(Some(v), size);
                prop_assert!(limit >= 1);
                match parse_max_concurrent(v) {
                    Ok(Amount::Absolute(a)) => {
                        prop_assert_eq!(limit as u64, a);
                    }
                    Ok(Amount::Percent(p)) => {
                        prop_assert_eq!(limit as u64, (size as u64 * p / 100).max(1));
                    }
                    Err(_) => prop_assert_eq!(limit, MAX_CONCURRENT_DEFAULT as usize),
                }
            }
        }
    }
}
