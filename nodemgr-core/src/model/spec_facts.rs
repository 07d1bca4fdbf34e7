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
//! - `fencing.watchdog.timeout` (a number and one unit, `60s`) and `cloudInstances.standby` (a
//!   count or a percentage): one parser each, which both validation and the policy that uses
//!   the value call, so nothing the webhook refuses is quietly read another way by a policy.
//!   `chaos.period` has its grammar (hours and/or minutes, `6h`; validation) and its reading
//!   (any positive duration, as Deckhouse's hook reads it; the chaos policy) side by side. A
//!   zero period or timeout is refused by both (a victim at every instant, a watchdog that
//!   fires at once). A disruption window's times are
//!   read by `window::parse_time_of_day`, for validation as for the window check.
//! - Every other field with a constant default: one `*_DEFAULT` constant each, gathered by
//!   [`defaults`]. The model's accessors (`NodeGroupSpec::approval_mode`, `cri_type`, …), the
//!   bundle renderer, the scaling policies, the fencing agent and validation read the
//!   constants; the impact comparison fills [`defaults`] into absent fields, and the CRD schema
//!   publishes them as API-server defaults, so what the API server writes and what nodemgr
//!   assumes for an absent field cannot drift apart.

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
            let grammatical = unsigned(digits).is_some() && !digits.starts_with('0');
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

/// Why a `chaos.period` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a period; use hours and/or minutes such as \"6h\", \"1h30m\" or \"45m\", \
     longer than 0 (pattern {pattern})",
    pattern = CHAOS_PERIOD_PATTERN
)]
pub struct ChaosPeriodError(pub String);

/// Reads `chaos.period` by its grammar ([`CHAOS_PERIOD_PATTERN`]); a zero period (`0m`) is
/// refused too, since it would ask for a victim at every instant.
///
/// # Errors
/// [`ChaosPeriodError`] for anything else.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodemgr_core::model::spec_facts::parse_chaos_period;
///
/// assert_eq!(parse_chaos_period("1h30m"), Ok(Duration::from_secs(5400)));
/// assert!(parse_chaos_period("30s").is_err());
/// assert!(parse_chaos_period("0m").is_err());
/// ```
pub fn parse_chaos_period(text: &str) -> Result<Duration, ChaosPeriodError> {
    let refused = || ChaosPeriodError(text.to_owned());
    let (hours, minutes) = match text.split_once('h') {
        Some((hours, "")) => (hours, "0"),
        Some((hours, rest)) => (hours, rest.strip_suffix('m').ok_or_else(refused)?),
        None => ("0", text.strip_suffix('m').ok_or_else(refused)?),
    };
    let hours = unsigned(hours).and_then(|h| h.checked_mul(3600));
    let minutes = unsigned(minutes).and_then(|m| m.checked_mul(60));
    hours
        .zip(minutes)
        .and_then(|(h, m)| h.checked_add(m))
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs)
        .ok_or_else(refused)
}

/// Reads `chaos.period` as the chaos policy does: any positive duration (`6h`, `45m`, also
/// `30s`), as Deckhouse's hook reads it. In a cluster admission has already refused what
/// [`parse_chaos_period`]'s grammar refuses, so the two agree; a controller embedding the core
/// with a spec it built itself (a test with a 2-second period) is not held to the minute grain.
///
/// # Errors
/// [`ChaosPeriodError`] for text that is no duration, or a zero one.
pub fn read_chaos_period(text: &str) -> Result<Duration, ChaosPeriodError> {
    super::parse_duration(text)
        .filter(|period| !period.is_zero())
        .ok_or_else(|| ChaosPeriodError(text.to_owned()))
}

/// A non-empty run of ASCII digits as a number (`None` for anything else, or past `u64`).
fn unsigned(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The grammar of a disruption window's `from` and `to`: a UTC time of day, `H:MM` or `HH:MM`.
pub const WINDOW_TIME_PATTERN: &str = "^(?:\\d|[01]\\d|2[0-3]):[0-5]\\d$";
/// The grammar of `fencing.watchdog.timeout`: a number and one unit (`60s`).
pub const WATCHDOG_TIMEOUT_PATTERN: &str = "^[0-9]+[smh]{1}$";

/// Why a `fencing.watchdog.timeout` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a timeout; use a number and one unit s, m or h such as \"60s\", longer \
     than 0 (pattern {pattern})",
    pattern = WATCHDOG_TIMEOUT_PATTERN
)]
pub struct WatchdogTimeoutError(pub String);

/// Reads `fencing.watchdog.timeout` by its grammar ([`WATCHDOG_TIMEOUT_PATTERN`]); zero is
/// refused too (a watchdog that fires at once would reboot the node in a loop).
///
/// # Errors
/// [`WatchdogTimeoutError`] for anything else.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodemgr_core::model::spec_facts::parse_watchdog_timeout;
///
/// assert_eq!(parse_watchdog_timeout("2m"), Ok(Duration::from_secs(120)));
/// assert!(parse_watchdog_timeout("60").is_err());
/// assert!(parse_watchdog_timeout("0s").is_err());
/// ```
pub fn parse_watchdog_timeout(text: &str) -> Result<Duration, WatchdogTimeoutError> {
    let refused = || WatchdogTimeoutError(text.to_owned());
    let (digits, unit) = [('s', 1), ('m', 60), ('h', 3600)]
        .into_iter()
        .find_map(|(suffix, unit)| Some((text.strip_suffix(suffix)?, unit)))
        .ok_or_else(refused)?;
    unsigned(digits)
        .and_then(|n| n.checked_mul(unit))
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs)
        .ok_or_else(refused)
}
/// The grammar of a MIG profile (`gpu.mig.customConfigs[].profile`): `1g.5gb`, `1g.5gb.me`.
pub const MIG_PROFILE_PATTERN: &str = "^[0-9]+g\\.[0-9]+gb(\\.me)?$";
/// The grammar of `cloudInstances.standby` as a string: a count or a percentage.
pub const STANDBY_PATTERN: &str = "^[0-9]+%?$";

/// Why a `cloudInstances.standby` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not accepted; use a node count >= 0 or a percentage such as \"10%\" (pattern \
     {pattern})",
    pattern = STANDBY_PATTERN
)]
pub struct StandbyError(pub String);

/// Reads `cloudInstances.standby`: an integer >= 0, or digits with an optional `%`
/// ([`STANDBY_PATTERN`]).
///
/// # Errors
/// [`StandbyError`] for anything else.
pub fn parse_standby(value: &IntOrString) -> Result<Amount, StandbyError> {
    value.amount().map_err(|_| StandbyError(value.to_string()))
}
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

// ---------------------------------------------------------------------------------------------
// Defaults: the value a field takes when the manifest leaves it out. Each is declared once
// here; the model's accessors, the bundle renderer, the scaling policies and validation read
// these constants, the impact matrix compares specs with [`defaults`] filled in, and the CRD
// schema publishes [`defaults`] as API-server defaults (docs/deckhouse.md §1.1).
// ---------------------------------------------------------------------------------------------

/// `chaos.mode` when unset.
pub const CHAOS_MODE_DEFAULT: &str = "Disabled";
/// `chaos.period` when unset: one victim every 6 hours.
pub const CHAOS_PERIOD_DEFAULT: &str = "6h";
/// [`CHAOS_PERIOD_DEFAULT`] as a duration (a test checks that they agree).
pub const CHAOS_PERIOD_DEFAULT_DURATION: Duration = Duration::from_secs(6 * 3600);
/// `cloudInstances.maxSurgePerZone` when unset: one extra machine per zone during a
/// replacement.
pub const MAX_SURGE_PER_ZONE_DEFAULT: i64 = 1;
/// `cloudInstances.maxUnavailablePerZone` when unset: no zone goes below its desired count.
pub const MAX_UNAVAILABLE_PER_ZONE_DEFAULT: i64 = 0;
/// `cloudInstances.standbyHolder.overprovisioningRate` when unset (or outside 1..=100): a
/// standby holder requests half of a node.
pub const OVERPROVISIONING_RATE_DEFAULT: i64 = 50;
/// `cri.{containerd,containerdV2,docker}.maxConcurrentDownloads` when unset.
pub const MAX_CONCURRENT_DOWNLOADS_DEFAULT: i64 = 3;
/// `cri.docker.manage` when unset.
pub const DOCKER_MANAGE_DEFAULT: bool = true;
/// `cri.type` when unset: the cluster's default CRI, taken as Containerd.
pub const CRI_TYPE_DEFAULT: &str = "Containerd";
/// `disruptions.approvalMode` when unset.
pub const APPROVAL_MODE_DEFAULT: &str = "Automatic";
/// `disruptions.automatic.drainBeforeApproval` when unset.
pub const DRAIN_BEFORE_APPROVAL_DEFAULT: bool = true;
/// `fencing.watchdog.timeout` when unset.
pub const WATCHDOG_TIMEOUT_DEFAULT: &str = "60s";
/// [`WATCHDOG_TIMEOUT_DEFAULT`] as a duration (a test checks that they agree).
pub const WATCHDOG_TIMEOUT_DEFAULT_DURATION: Duration = Duration::from_secs(60);
/// `gpu.mig.partedConfig` when unset.
pub const MIG_PARTED_CONFIG_DEFAULT: &str = "all-1g.5gb";
/// `gpu.timeSlicing.partitionCount` when unset.
pub const TIME_SLICING_PARTITION_COUNT_DEFAULT: i64 = 4;
/// `kubelet.containerLogMaxFiles` when unset.
pub const CONTAINER_LOG_MAX_FILES_DEFAULT: i64 = 4;
/// `kubelet.containerLogMaxSize` when unset.
pub const CONTAINER_LOG_MAX_SIZE_DEFAULT: &str = "50Mi";
/// `kubelet.memorySwap.swappiness` when unset.
pub const SWAPPINESS_DEFAULT: i64 = 60;
/// `kubelet.resourceReservation.mode` when unset.
pub const RESOURCE_RESERVATION_MODE_DEFAULT: &str = "Auto";
/// `kubelet.rootDir` when unset.
pub const KUBELET_ROOT_DIR_DEFAULT: &str = "/var/lib/kubelet";
/// `kubelet.seccompDefault` when unset: not in the CRD; the kubelet's own default, which
/// nodemgr keeps by writing nothing.
pub const SECCOMP_DEFAULT_DEFAULT: bool = false;
/// `kubelet.topologyManager.enabled` when unset.
pub const TOPOLOGY_MANAGER_ENABLED_DEFAULT: bool = false;
/// `kubelet.topologyManager.policy` when unset.
pub const TOPOLOGY_MANAGER_POLICY_DEFAULT: &str = "None";
/// `kubelet.topologyManager.scope` when unset.
pub const TOPOLOGY_MANAGER_SCOPE_DEFAULT: &str = "Container";
/// `operatingSystem.manageKernel` when unset.
pub const MANAGE_KERNEL_DEFAULT: bool = true;
/// `staticInstances.count` when unset.
pub const STATIC_INSTANCES_COUNT_DEFAULT: i64 = 0;

/// A scalar default value, as the API documents it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(untagged)]
pub enum Literal {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    Str(&'static str),
}

impl Literal {
    /// The JSON value of the literal.
    pub fn to_value(self) -> serde_json::Value {
        match self {
            Self::Bool(b) => serde_json::Value::Bool(b),
            Self::Int(n) => serde_json::Value::from(n),
            Self::Str(s) => serde_json::Value::from(s),
        }
    }
}

/// A documented default: an absent field at `path` takes `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct FieldDefault {
    /// Dotted path without the `spec.` prefix.
    pub path: &'static str,
    /// The value the field takes when absent.
    pub value: Literal,
}

const fn default(path: &'static str, value: Literal) -> FieldDefault {
    FieldDefault { path, value }
}

/// The constants above by path. Fields whose default is not a constant (`kubelet.maxPods`,
/// derived from the pod subnet) or that have none are not listed.
const DEFAULTS: &[FieldDefault] = &[
    default("chaos.mode", Literal::Str(CHAOS_MODE_DEFAULT)),
    default("chaos.period", Literal::Str(CHAOS_PERIOD_DEFAULT)),
    default(
        "cloudInstances.maxSurgePerZone",
        Literal::Int(MAX_SURGE_PER_ZONE_DEFAULT),
    ),
    default(
        "cloudInstances.maxUnavailablePerZone",
        Literal::Int(MAX_UNAVAILABLE_PER_ZONE_DEFAULT),
    ),
    default(
        "cloudInstances.standbyHolder.overprovisioningRate",
        Literal::Int(OVERPROVISIONING_RATE_DEFAULT),
    ),
    default(
        "cri.containerd.maxConcurrentDownloads",
        Literal::Int(MAX_CONCURRENT_DOWNLOADS_DEFAULT),
    ),
    default(
        "cri.containerdV2.maxConcurrentDownloads",
        Literal::Int(MAX_CONCURRENT_DOWNLOADS_DEFAULT),
    ),
    default("cri.docker.manage", Literal::Bool(DOCKER_MANAGE_DEFAULT)),
    default(
        "cri.docker.maxConcurrentDownloads",
        Literal::Int(MAX_CONCURRENT_DOWNLOADS_DEFAULT),
    ),
    default("cri.type", Literal::Str(CRI_TYPE_DEFAULT)),
    default(
        "disruptions.approvalMode",
        Literal::Str(APPROVAL_MODE_DEFAULT),
    ),
    default(
        "disruptions.automatic.drainBeforeApproval",
        Literal::Bool(DRAIN_BEFORE_APPROVAL_DEFAULT),
    ),
    default(
        "fencing.watchdog.timeout",
        Literal::Str(WATCHDOG_TIMEOUT_DEFAULT),
    ),
    default(
        "gpu.mig.partedConfig",
        Literal::Str(MIG_PARTED_CONFIG_DEFAULT),
    ),
    default(
        "gpu.timeSlicing.partitionCount",
        Literal::Int(TIME_SLICING_PARTITION_COUNT_DEFAULT),
    ),
    default(
        "kubelet.containerLogMaxFiles",
        Literal::Int(CONTAINER_LOG_MAX_FILES_DEFAULT),
    ),
    default(
        "kubelet.containerLogMaxSize",
        Literal::Str(CONTAINER_LOG_MAX_SIZE_DEFAULT),
    ),
    default(
        "kubelet.memorySwap.swappiness",
        Literal::Int(SWAPPINESS_DEFAULT),
    ),
    default(
        "kubelet.resourceReservation.mode",
        Literal::Str(RESOURCE_RESERVATION_MODE_DEFAULT),
    ),
    default("kubelet.rootDir", Literal::Str(KUBELET_ROOT_DIR_DEFAULT)),
    default(
        "kubelet.seccompDefault",
        Literal::Bool(SECCOMP_DEFAULT_DEFAULT),
    ),
    default(
        "kubelet.topologyManager.enabled",
        Literal::Bool(TOPOLOGY_MANAGER_ENABLED_DEFAULT),
    ),
    default(
        "kubelet.topologyManager.policy",
        Literal::Str(TOPOLOGY_MANAGER_POLICY_DEFAULT),
    ),
    default(
        "kubelet.topologyManager.scope",
        Literal::Str(TOPOLOGY_MANAGER_SCOPE_DEFAULT),
    ),
    default(
        "operatingSystem.manageKernel",
        Literal::Bool(MANAGE_KERNEL_DEFAULT),
    ),
    default(
        "staticInstances.count",
        Literal::Int(STATIC_INSTANCES_COUNT_DEFAULT),
    ),
    default(
        "update.maxConcurrent",
        Literal::Int(MAX_CONCURRENT_DEFAULT as i64),
    ),
];

/// Every documented constant default, by dotted path without `spec.`: what the impact
/// comparison fills in for absent fields and what the CRD schema publishes.
pub fn defaults() -> &'static [FieldDefault] {
    DEFAULTS
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

    #[test]
    fn chaos_periods_follow_the_crd_pattern() {
        assert_eq!(parse_chaos_period("6h"), Ok(Duration::from_secs(6 * 3600)));
        assert_eq!(parse_chaos_period("45m"), Ok(Duration::from_secs(45 * 60)));
        for bad in [
            "", "h", "m", "1h30", "30s", "1d", "1h30m5s", "1m30m", "0m", "0h0m", "h30m",
        ] {
            assert!(parse_chaos_period(bad).is_err(), "{bad}");
        }
        assert!(parse_chaos_period("99999999999999999999h").is_err());
    }

    #[test]
    fn the_policy_reads_any_positive_period_the_grammar_a_narrower_set() {
        assert_eq!(read_chaos_period("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(read_chaos_period("6h"), parse_chaos_period("6h"));
        assert!(read_chaos_period("0m").is_err() && read_chaos_period("soon").is_err());
        assert!(parse_chaos_period("2s").is_err());
    }

    #[test]
    fn watchdog_timeouts_follow_the_crd_pattern() {
        assert_eq!(parse_watchdog_timeout("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_watchdog_timeout("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "60",
            "s",
            "1ms",
            "",
            "0s",
            "-1s",
            "1.5m",
            "99999999999999999999h",
        ] {
            assert!(parse_watchdog_timeout(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn standby_follows_the_crd_pattern() {
        assert_eq!(parse_standby(&s("0")), Ok(Amount::Absolute(0)));
        assert_eq!(parse_standby(&s("10%")), Ok(Amount::Percent(10)));
        assert_eq!(parse_standby(&IntOrString::Int(3)), Ok(Amount::Absolute(3)));
        for bad in ["%", "-1", "x", ""] {
            assert!(parse_standby(&s(bad)).is_err(), "{bad}");
        }
        assert!(parse_standby(&IntOrString::Int(-1)).is_err());
    }

    #[test]
    fn duration_defaults_agree_with_their_spelling() {
        assert_eq!(
            parse_chaos_period(CHAOS_PERIOD_DEFAULT),
            Ok(CHAOS_PERIOD_DEFAULT_DURATION)
        );
        assert_eq!(
            parse_watchdog_timeout(WATCHDOG_TIMEOUT_DEFAULT),
            Ok(WATCHDOG_TIMEOUT_DEFAULT_DURATION)
        );
    }

    #[test]
    fn enum_defaults_are_spellings_the_model_knows() {
        use crate::model::{
            ApprovalMode, ChaosMode, CriType, ResourceReservationMode, TopologyManagerPolicy,
            TopologyManagerScope,
        };
        assert!(ApprovalMode::from_spelling(APPROVAL_MODE_DEFAULT).is_known());
        assert!(ChaosMode::from_spelling(CHAOS_MODE_DEFAULT).is_known());
        assert!(CriType::from_spelling(CRI_TYPE_DEFAULT).is_known());
        assert!(
            ResourceReservationMode::from_spelling(RESOURCE_RESERVATION_MODE_DEFAULT).is_known()
        );
        assert!(TopologyManagerPolicy::from_spelling(TOPOLOGY_MANAGER_POLICY_DEFAULT).is_known());
        assert!(TopologyManagerScope::from_spelling(TOPOLOGY_MANAGER_SCOPE_DEFAULT).is_known());
    }

    #[test]
    fn every_default_has_one_path() {
        let mut paths: Vec<_> = defaults().iter().map(|d| d.path).collect();
        paths.sort_unstable();
        let before = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), before);
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
