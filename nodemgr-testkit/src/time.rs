//! Wall-clock helpers of the emulator: RFC 3339 timestamps (`metav1.Time`, whole seconds, UTC)
//! and kubectl-style ages ("5s", "3m", "2d4h") for Table cells.
//!
//! The emulator is an I/O adapter, so it reads the system clock here and nowhere else. The
//! calendar itself is the core's ([`Timestamp`], `nodemgr_core::model::time`): this module only
//! speaks in Unix seconds on top of it.

use std::time::SystemTime;

use nodemgr_core::model::Timestamp;

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> i64 {
    Timestamp::from_system_time(SystemTime::now()).as_secs()
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`, the wire form of `metav1.Time`.
pub fn format_rfc3339(unix: i64) -> String {
    Timestamp::from_secs(unix).to_rfc3339()
}

/// The current time as an RFC 3339 string.
pub fn now_rfc3339() -> String {
    format_rfc3339(now_unix())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds (a fraction is dropped);
/// `None` when malformed.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    Timestamp::parse_rfc3339(text).map(Timestamp::as_secs)
}

/// kubectl's short human duration ("45s", "12m", "3h20m", "5d"), as `kubectl get` shows ages.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        let rem = s % 60;
        return if rem == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rem}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        let rem = minutes % 60;
        return if rem == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rem}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if days < 8 {
        let rem = hours % 24;
        return if rem == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{rem}h")
        };
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    format!("{}y", days / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20.123+01:00"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600 * 3 + 60 * 20), "3h20m");
        assert_eq!(human_duration(86_400 * 3), "3d");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(unix in 0i64..8_000_000_000) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(unix)), Some(unix));
        }
    }
}
