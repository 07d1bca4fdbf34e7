//! Disruption windows: whether `disruptions.automatic.windows` / `disruptions.rollingUpdate.windows`
//! allow a disruptive step at `now` (docs/deckhouse.md §1.1 `windows[]`, §3.2 phase 2).
//!
//! Semantics, all in UTC:
//! - no windows at all: always open;
//! - a window is the half-open minute range `[from, to)` on each of its `days` (every day when
//!   `days` is unset or empty);
//! - `to` before `from` crosses midnight: the window opens at `from` on a listed day and closes at
//!   `to` on the *next* day (the day listed is the day the window starts);
//! - `from == to` is an empty window (never open);
//! - a window whose times do not parse (`validate` reports them) never opens, so a typo cannot
//!   widen what the operator allowed. Unknown day names are ignored for the same reason.

use crate::model::{DisruptionWindow, Timestamp, Weekday};

/// Why a window could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// `from` or `to` is not `H:MM`/`HH:MM` within a day.
    #[error("failed to parse window time {0:?}: expected HH:MM between 00:00 and 23:59")]
    BadTime(String),
}

/// Minutes in a day.
const DAY_MINUTES: u16 = 24 * 60;

/// Parses `H:MM` or `HH:MM` (00:00–23:59) into the minute of the day.
///
/// # Errors
/// [`WindowError::BadTime`] for anything else.
pub fn parse_time_of_day(text: &str) -> Result<u16, WindowError> {
    let bad = || WindowError::BadTime(text.to_owned());
    let (hours, minutes) = text.split_once(':').ok_or_else(bad)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(hours) || hours.len() > 2 || !digits(minutes) || minutes.len() != 2 {
        return Err(bad());
    }
    let h: u16 = hours.parse().map_err(|_| bad())?;
    let m: u16 = minutes.parse().map_err(|_| bad())?;
    if h > 23 || m > 59 {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// Index of a known weekday (0 = Monday … 6 = Sunday), as [`Timestamp::weekday_and_minute`].
fn weekday_index(day: &Weekday) -> Option<u8> {
    Some(match day {
        Weekday::Mon => 0,
        Weekday::Tue => 1,
        Weekday::Wed => 2,
        Weekday::Thu => 3,
        Weekday::Fri => 4,
        Weekday::Sat => 5,
        Weekday::Sun => 6,
        Weekday::Unknown(_) => return None,
    })
}

/// Whether the window lists `weekday` (every day when `days` is unset or empty).
fn lists_day(window: &DisruptionWindow, weekday: u8) -> bool {
    match window.days.as_deref() {
        None | Some([]) => true,
        Some(days) => days.iter().any(|d| weekday_index(d) == Some(weekday)),
    }
}

/// Whether one window is open at `now`.
///
/// # Errors
/// [`WindowError::BadTime`] when `from` or `to` does not parse.
pub fn window_contains(window: &DisruptionWindow, now: Timestamp) -> Result<bool, WindowError> {
    let from = parse_time_of_day(&window.from)?;
    let to = parse_time_of_day(&window.to)?;
    let (weekday, minute) = now.weekday_and_minute();
    let yesterday = (weekday + 6) % 7;
    Ok(match from.cmp(&to) {
        std::cmp::Ordering::Equal => false,
        std::cmp::Ordering::Less => from <= minute && minute < to && lists_day(window, weekday),
        std::cmp::Ordering::Greater => {
            // Crosses midnight: the evening part belongs to today, the morning part to the
            // window that started yesterday.
            (minute >= from && lists_day(window, weekday))
                || (minute < to && lists_day(window, yesterday))
        }
    })
}

/// Whether a disruptive step may run at `now` under `windows`: open when the list is empty or
/// any window contains `now` (windows that do not parse never open).
pub fn window_open(windows: &[DisruptionWindow], now: Timestamp) -> bool {
    windows.is_empty()
        || windows
            .iter()
            .any(|w| window_contains(w, now).unwrap_or(false))
}

/// The first minute at or after `now` (rounded up to a whole minute) at which `windows` are open,
/// looking at most eight days ahead; `None` when they never open. Executors use it to sleep
/// until a window opens instead of polling.
pub fn next_window_open(windows: &[DisruptionWindow], now: Timestamp) -> Option<Timestamp> {
    if window_open(windows, now) {
        return Some(now);
    }
    let minute_ms = 60_000;
    let first = Timestamp(now.0.div_euclid(minute_ms).saturating_add(1) * minute_ms);
    (0..i64::from(DAY_MINUTES) * 8)
        .map(|i| Timestamp(first.0.saturating_add(i * minute_ms)))
        .find(|t| window_open(windows, *t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 2026-11-23 00:00 UTC, a Monday (20780 days after the epoch).
    const MONDAY: i64 = 20_780 * 86_400;

    fn at(day: i64, hour: i64, minute: i64) -> Timestamp {
        Timestamp::from_secs(MONDAY + day * 86_400 + hour * 3600 + minute * 60)
    }

    fn window(from: &str, to: &str, days: Option<Vec<Weekday>>) -> DisruptionWindow {
        DisruptionWindow {
            from: from.into(),
            to: to.into(),
            days,
        }
    }

    #[test]
    fn monday_constant_is_a_monday() {
        assert_eq!(at(0, 0, 0).weekday_and_minute(), (0, 0));
    }

    #[test]
    fn no_windows_means_always_open() {
        assert!(window_open(&[], at(3, 4, 5)));
    }

    #[test]
    fn plain_window_is_half_open() {
        let w = [window("8:00", "10:00", None)];
        assert!(!window_open(&w, at(0, 7, 59)));
        assert!(window_open(&w, at(0, 8, 0)));
        assert!(window_open(&w, at(2, 9, 59)));
        assert!(!window_open(&w, at(0, 10, 0)));
    }

    #[test]
    fn days_restrict_the_window() {
        let w = [window(
            "18:00",
            "20:00",
            Some(vec![Weekday::Tue, Weekday::Sat]),
        )];
        assert!(!window_open(&w, at(0, 19, 0)));
        assert!(window_open(&w, at(1, 19, 0)));
        assert!(window_open(&w, at(5, 18, 0)));
    }

    #[test]
    fn crossing_midnight_belongs_to_the_start_day() {
        let w = [window("22:00", "02:00", Some(vec![Weekday::Fri]))];
        assert!(window_open(&w, at(4, 23, 0)), "Friday evening");
        assert!(window_open(&w, at(5, 1, 59)), "Saturday early morning");
        assert!(!window_open(&w, at(5, 2, 0)));
        assert!(
            !window_open(&w, at(4, 1, 0)),
            "Friday early morning is Thursday's window"
        );
        assert!(!window_open(&w, at(5, 23, 0)), "Saturday evening");
    }

    #[test]
    fn sunday_window_crossing_into_monday() {
        let w = [window("23:30", "00:30", Some(vec![Weekday::Sun]))];
        assert!(window_open(&w, at(7, 0, 10)), "next Monday 00:10");
        assert!(window_open(&w, at(6, 23, 45)));
        assert!(!window_open(&w, at(0, 23, 45)));
    }

    #[test]
    fn bad_windows_never_open() {
        for (from, to) in [
            ("25:00", "26:00"),
            ("8", "9:00"),
            ("08:0", "09:00"),
            ("", ""),
        ] {
            let w = [window(from, to, None)];
            assert!(!window_open(&w, at(0, 8, 30)), "{from}-{to}");
        }
        assert!(window_contains(&window("x", "1:00", None), at(0, 0, 0)).is_err());
        let unknown_day = [window(
            "0:00",
            "23:59",
            Some(vec![Weekday::Unknown("Funday".into())]),
        )];
        assert!(!window_open(&unknown_day, at(0, 12, 0)));
    }

    #[test]
    fn empty_window_never_opens() {
        let w = [window("10:00", "10:00", None)];
        assert!(!window_open(&w, at(0, 10, 0)));
        assert_eq!(next_window_open(&w, at(0, 0, 0)), None);
    }

    #[test]
    fn next_open_finds_the_next_start() {
        let w = [window("08:00", "10:00", Some(vec![Weekday::Wed]))];
        assert_eq!(next_window_open(&w, at(0, 12, 0)), Some(at(2, 8, 0)));
        assert_eq!(next_window_open(&w, at(2, 9, 0)), Some(at(2, 9, 0)));
    }

    fn day_strategy() -> impl Strategy<Value = Weekday> {
        (0u8..7).prop_map(|d| match d {
            0 => Weekday::Mon,
            1 => Weekday::Tue,
            2 => Weekday::Wed,
            3 => Weekday::Thu,
            4 => Weekday::Fri,
            5 => Weekday::Sat,
            _ => Weekday::Sun,
        })
    }

    fn window_strategy() -> impl Strategy<Value = (u16, u16, Option<Vec<Weekday>>)> {
        (
            0u16..DAY_MINUTES,
            0u16..DAY_MINUTES,
            proptest::option::of(proptest::collection::vec(day_strategy(), 0..4)),
        )
    }

    /// Brute force: walk minute by minute from each window's start on each listed day of the
    /// week before, and mark the minutes it covers.
    fn brute_force_open(windows: &[(u16, u16, Option<Vec<Weekday>>)], now: Timestamp) -> bool {
        if windows.is_empty() {
            return true;
        }
        let now_minute = now.0.div_euclid(60_000);
        windows.iter().any(|(from, to, days)| {
            let length = (i64::from(*to) - i64::from(*from)).rem_euclid(i64::from(DAY_MINUTES));
            // Every start at most one day before `now` that the window lists.
            let today_start = now_minute - now_minute.rem_euclid(1440);
            [today_start - 1440, today_start]
                .into_iter()
                .any(|day_start| {
                    let start = day_start + i64::from(*from);
                    let weekday = Timestamp(day_start * 60_000).weekday_and_minute().0;
                    let listed = match days.as_deref() {
                        None | Some([]) => true,
                        Some(ds) => ds.iter().any(|d| weekday_index(d) == Some(weekday)),
                    };
                    listed && (start..start + length).contains(&now_minute)
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The one parser of window times, used by validation too, accepts exactly the clock
        /// times (`H:MM` and `HH:MM`, 0:00 to 23:59).
        #[test]
        fn window_times_accept_exactly_the_clock(h in 0u32..30, m in 0u32..70, pad in any::<bool>()) {
            let text = if pad || h >= 10 { format!("{h:02}:{m:02}") } else { format!("{h}:{m:02}") };
            prop_assert_eq!(parse_time_of_day(&text).is_ok(), h < 24 && m < 60);
        }

        #[test]
        fn window_open_matches_brute_force(
            specs in proptest::collection::vec(window_strategy(), 0..3),
            minute in 0i64..(14 * 1440),
            second in 0i64..60,
        ) {
            let windows: Vec<DisruptionWindow> = specs
                .iter()
                .map(|(f, t, d)| window(
                    &format!("{:02}:{:02}", f / 60, f % 60),
                    &format!("{}:{:02}", t / 60, t % 60),
                    d.clone(),
                ))
                .collect();
            let now = Timestamp((MONDAY / 60 + minute) * 60_000 + second * 1000);
            prop_assert_eq!(window_open(&windows, now), brute_force_open(&specs, now));
        }

        #[test]
        fn next_window_open_is_open_and_earliest(
            specs in proptest::collection::vec(window_strategy(), 1..3),
            minute in 0i64..(7 * 1440),
        ) {
            let windows: Vec<DisruptionWindow> = specs
                .iter()
                .map(|(f, t, d)| window(
                    &format!("{:02}:{:02}", f / 60, f % 60),
                    &format!("{:02}:{:02}", t / 60, t % 60),
                    d.clone(),
                ))
                .collect();
            let now = Timestamp((MONDAY / 60 + minute) * 60_000);
            if let Some(next) = next_window_open(&windows, now) {
                prop_assert!(window_open(&windows, next));
                let mut t = now;
                while t < next {
                    prop_assert!(!window_open(&windows, t));
                    t = Timestamp(t.0 + 60_000);
                }
            }
        }
    }
}
