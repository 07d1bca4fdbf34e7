//! Wall-clock helpers of the emulator: RFC 3339 timestamps (`metav1.Time`, whole seconds, UTC)
//! and kubectl-style ages ("5s", "3m", "2d4h") for Table cells.
//!
//! The emulator is an I/O adapter, so it reads the system clock here and nowhere else.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`, the wire form of `metav1.Time`.
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs_of_day = unix.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs_of_day / 3600,
        (secs_of_day / 60) % 60,
        secs_of_day % 60
    )
}

/// The current time as an RFC 3339 string.
pub fn now_rfc3339() -> String {
    format_rfc3339(now_unix())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds; `None` when malformed.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> { text.get(range)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (hours * 3600 + minutes * 60)
        }
        _ => return None,
    };
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset)
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

/// Howard Hinnant's days-to-civil conversion (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
