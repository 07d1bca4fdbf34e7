//! Time as the core sees it: a [`Timestamp`] handed in by the caller (milliseconds since the
//! Unix epoch). The core never reads a clock; the simulator and the adapters pass `now`.
//!
//! This is the workspace's one home for turning times into text and back: RFC 3339 as
//! Kubernetes writes `metav1.Time` ([`Timestamp::to_rfc3339`], [`Timestamp::parse_rfc3339`]),
//! the conversion of a wall-clock reading ([`Timestamp::from_system_time`], which the adapters
//! call right after their one `SystemTime::now()`), and Go-style durations. The emulator, the
//! simulator and the adapters call these instead of keeping calendars of their own.
//!
//! The RFC 3339 code is our own rather than `jiff`'s (which `k8s-openapi` brings into the
//! adapters): the core, and with it the simulator and every embedder, would otherwise compile a
//! full time-zone library for one narrow form, and `jiff`'s parser accepts more than the wire
//! form (ISO 8601 basic format, a space for `T`, leap seconds clamped) where the core's readers
//! should refuse what Kubernetes never writes. The adapters convert at the boundary
//! (`nodemgr_k8s::convert::timestamp`).

use std::ops::{Add, Sub};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time, in milliseconds since the Unix epoch (UTC).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The Unix epoch; the simulator starts its virtual clock here unless told otherwise.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp `secs` seconds after the epoch.
    pub const fn from_secs(secs: i64) -> Self {
        Self(secs.saturating_mul(1000))
    }

    /// A timestamp `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch, rounded toward the past.
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// A wall-clock reading as a timestamp (milliseconds truncated). Times before the epoch
    /// become the epoch; times past `i64::MAX` milliseconds saturate. Pure: the caller reads
    /// the clock.
    pub fn from_system_time(t: std::time::SystemTime) -> Self {
        let millis = t
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self(millis)
    }

    /// Seconds since the epoch, as a float (for timelines and metrics).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// How long after `earlier` this is; zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// Day of the week (0 = Monday … 6 = Sunday) and minute of the day, in UTC.
    pub fn weekday_and_minute(self) -> (u8, u16) {
        let minutes = self.0.div_euclid(60_000);
        let minute_of_day = minutes.rem_euclid(24 * 60) as u16;
        let days = minutes.div_euclid(24 * 60);
        // 1970-01-01 was a Thursday (index 3 when Monday is 0).
        let weekday = (days + 3).rem_euclid(7) as u8;
        (weekday, minute_of_day)
    }

    /// The time as RFC 3339 in UTC with whole seconds (`2026-11-22T13:45:00Z`), as Kubernetes
    /// writes `lastTransitionTime`. Milliseconds are truncated toward the past.
    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let second_of_day = secs.rem_euclid(86_400);
        // Civil date from days since 1970-01-01 (proleptic Gregorian, H. Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            second_of_day / 3600,
            second_of_day % 3600 / 60,
            second_of_day % 60
        )
    }
}

impl Timestamp {
    /// Reads an RFC 3339 UTC time as Kubernetes writes it (`2026-11-24T08:00:00Z`, optionally
    /// with fractional seconds or a `+hh:mm` offset). `None` for anything else.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = text.get(range)?;
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&month) || !(1..=31).contains(&day)
        {
            return None;
        }
        if hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        let mut rest = &text[19..];
        let mut millis = 0;
        if let Some(fraction) = rest.strip_prefix('.') {
            let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
            millis = padded.parse::<i64>().ok()?;
            rest = &fraction[digits..];
        }
        let offset = match rest {
            "Z" | "z" => 0,
            _ => {
                let sign = match rest.as_bytes().first()? {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return None,
                };
                if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                    return None;
                }
                let h: i64 = rest.get(1..3)?.parse().ok()?;
                let m: i64 = rest.get(4..6)?.parse().ok()?;
                sign * (h * 3600 + m * 60)
            }
        };
        // Days since 1970-01-01 from a civil date (H. Hinnant's algorithm).
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
        Some(Self(secs * 1000 + millis))
    }
}

fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_millis(rhs)))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_millis(rhs)))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

/// Longest duration accepted, as Go's `time.Duration` (2^63 − 1 ns, about 292 years).
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the form number + unit, repeated.
    #[error("{0:?} is not a duration (like 30s, 5m, 1h30m, 1.5s, 250ms)")]
    Malformed(String),
    /// Longer than [`MAX_DURATION`].
    #[error("{0:?} is too long: durations up to about 292 years (2562047h) are accepted")]
    TooLong(String),
}

/// Parses a Go-style duration of the forms Deckhouse's fields use: `60s`, `5m`, `6h`, `1h30m`,
/// `1.5s`, `250ms`. Returns `None` for anything else (an empty string and durations past
/// [`MAX_DURATION`] included); [`parse_duration_checked`] says which.
pub fn parse_duration(text: &str) -> Option<Duration> {
    parse_duration_checked(text).ok()
}

/// [`parse_duration`] with the reason of a failure.
///
/// # Errors
/// [`DurationError::Malformed`] for anything but number + unit pairs (units `ms`, `s`, `m`,
/// `h`), [`DurationError::TooLong`] past [`MAX_DURATION`].
pub fn parse_duration_checked(text: &str) -> Result<Duration, DurationError> {
    let malformed = || DurationError::Malformed(text.to_owned());
    if text.is_empty() {
        return Err(malformed());
    }
    let mut rest = text;
    let mut total_ms: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(malformed());
        }
        let number: f64 = rest[..num_len].parse().map_err(|_| malformed())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return Err(malformed()),
        };
        rest = &rest[unit_len..];
        total_ms += number * factor;
    }
    if !total_ms.is_finite() || total_ms > MAX_DURATION.as_millis() as f64 {
        return Err(DurationError::TooLong(text.to_owned()));
    }
    // 0 ≤ total_ms ≤ MAX_DURATION in ms (< 2^63): the conversion is exact enough and in range.
    Ok(Duration::from_millis(total_ms.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_past_292_years_are_too_long_and_say_so() {
        assert_eq!(
            parse_duration_checked("2562047h"),
            Ok(Duration::from_secs(2_562_047 * 3600))
        );
        for long in [
            "2562048h",
            "99999999999999999999h",
            "1e400s",
            &format!("{}h", "9".repeat(400)),
        ] {
            let result = parse_duration_checked(long);
            assert!(
                matches!(
                    result,
                    Err(DurationError::TooLong(_)) | Err(DurationError::Malformed(_))
                ),
                "{long}: {result:?}"
            );
        }
        let e = parse_duration_checked("99999999999999999999h").unwrap_err();
        assert_eq!(e, DurationError::TooLong("99999999999999999999h".into()));
        assert!(e.to_string().contains("too long"), "{e}");
        for bad in ["", "-5s", "5", "s", "5x", "1.2.3s", "５s", "5 s"] {
            assert_eq!(
                parse_duration_checked(bad),
                Err(DurationError::Malformed(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn weekday_of_known_dates() {
        // 1970-01-01 00:00 UTC, a Thursday.
        assert_eq!(Timestamp::EPOCH.weekday_and_minute(), (3, 0));
        // 2026-11-22 13:45 UTC is a Sunday: 20779 days after the epoch.
        let t = Timestamp::from_secs(20_779 * 86_400 + 13 * 3600 + 45 * 60);
        assert_eq!(t.weekday_and_minute(), (6, 13 * 60 + 45));
    }

    #[test]
    fn rfc3339_parses_what_it_prints_and_what_kubernetes_writes() {
        for secs in [0_i64, 951_782_400, 1_795_478_400, 4_102_444_799, -86_400] {
            let t = Timestamp::from_secs(secs);
            assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t), "{secs}");
        }
        assert_eq!(
            Timestamp::parse_rfc3339("1970-01-01T00:00:01.5Z"),
            Some(Timestamp::from_millis(1500))
        );
        assert_eq!(
            Timestamp::parse_rfc3339("1970-01-01T01:00:00+01:00"),
            Some(Timestamp::EPOCH)
        );
        for bad in [
            "",
            "1970-01-01",
            "1970-13-01T00:00:00Z",
            "1970-01-01T00:00:00",
            "1970-01-01T00:00:00.Z",
            "abcd-01-01T00:00:00Z",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_of_known_dates() {
        assert_eq!(Timestamp::EPOCH.to_rfc3339(), "1970-01-01T00:00:00Z");
        let t = Timestamp::from_secs(20_779 * 86_400 + 13 * 3600 + 45 * 60 + 7);
        assert_eq!(t.to_rfc3339(), "2026-11-22T13:45:07Z");
        assert_eq!(
            Timestamp::from_millis(-1).to_rfc3339(),
            "1969-12-31T23:59:59Z"
        );
        assert_eq!(
            Timestamp::from_secs(951_782_400).to_rfc3339(),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("m"), None);
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_secs(10);
        assert_eq!(t + Duration::from_secs(5), Timestamp::from_secs(15));
        assert_eq!(t.saturating_since(Timestamp::from_secs(20)), Duration::ZERO);
        assert_eq!(
            Timestamp::from_secs(20).saturating_since(t),
            Duration::from_secs(10)
        );
    }
}
