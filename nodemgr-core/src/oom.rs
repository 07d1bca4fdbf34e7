//! Decides when memory pressure warrants killing a pod and which one (docs/deckhouse.md §6, docs/peers.md §5):
//! PSI parsing (`/proc/pressure/memory`, cgroup v2 `memory.pressure`), thresholds, one kill per
//! pressure episode, the victim rule, and the text of a kernel PSI trigger.
//!
//! # Thresholds
//!
//! [`OomConfig`] holds optional thresholds on `some`/`full` `avg10`, `avg60` and on the stall rate
//! (µs stalled per second of wall time, from the `total` counters of two consecutive samples). A
//! sample *breaches* when any configured value is strictly above its threshold (Deckhouse:
//! `full avg10 > 30`). `full` thresholds are not evaluated on kernels without a `full` line:
//! configure a `some` threshold there.
//!
//! # Episodes
//!
//! A pressure episode is a run of breaching samples. One episode kills one pod: after a kill the
//! monitor is disarmed, and re-armed only when
//! 1. a sample no longer breaches (the episode is over), or
//! 2. the cooldown (Deckhouse: 15 s pause after a kill) has passed **and** the signal that caused
//!    the kill is now higher than at the kill (pressure still rises: the kill did not help, or
//!    something else is growing).
//!
//! In addition no kill happens within the cooldown of the previous one, even in a new episode
//! (averages lag the kill by several seconds).
//!
//! # Victim
//!
//! [`plan_victim`]: never a pod of priority class `system-node-critical` or
//! `system-cluster-critical` (or any priority in the system range ≥ 2 000 000 000), never a
//! DaemonSet pod, never a mirror pod; among the rest the lowest priority first, then the largest
//! working set, then `namespace/name` ascending so that the choice is deterministic.

use std::fmt;
use std::time::Duration;

use crate::model::{Pod, Timestamp};

/// Priority value from which Kubernetes reserves priorities for system classes.
pub const SYSTEM_PRIORITY_FLOOR: i32 = 2_000_000_000;
/// Priority classes that are never killed.
pub const CRITICAL_PRIORITY_CLASSES: [&str; 2] =
    ["system-node-critical", "system-cluster-critical"];

/// Errors of PSI parsing and trigger building.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PsiError {
    /// The text has no `some` line.
    #[error("failed to parse psi: no \"some\" line")]
    MissingSome,
    /// A line starts with something other than `some` or `full`.
    #[error("failed to parse psi: unknown line {0:?}")]
    UnknownLine(String),
    /// The same kind appears twice.
    #[error("failed to parse psi: duplicate {0:?} line")]
    DuplicateLine(String),
    /// A field is missing from a line.
    #[error("failed to parse psi: {line:?} line lacks {field}")]
    MissingField {
        /// `some` or `full`.
        line: String,
        /// `avg10`, `avg60`, `avg300` or `total`.
        field: &'static str,
    },
    /// A field's value is not a number.
    #[error("failed to parse psi: {field} has value {value:?}, not a number")]
    BadValue {
        /// The field.
        field: String,
        /// Its text.
        value: String,
    },
    /// A trigger window outside 500 ms..=10 s.
    #[error("failed to build psi trigger: window {0:?} is outside 500ms..=10s")]
    TriggerWindow(Duration),
    /// A trigger stall of zero or not below the window.
    #[error(
        "failed to build psi trigger: stall {stall:?} must be above zero and below the window {window:?}"
    )]
    TriggerStall {
        /// The stall.
        stall: Duration,
        /// The window.
        window: Duration,
    },
}

/// `some` (at least one task stalled) or `full` (all non-idle tasks stalled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PsiKind {
    /// `some`.
    Some,
    /// `full`.
    Full,
}

impl fmt::Display for PsiKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Some => "some",
            Self::Full => "full",
        })
    }
}

/// One PSI line.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PsiLine {
    /// Share of time stalled over 10 s, in percent.
    pub avg10: f64,
    /// Over 60 s, in percent.
    pub avg60: f64,
    /// Over 300 s, in percent.
    pub avg300: f64,
    /// Total stall time in µs since boot (or cgroup creation).
    pub total: u64,
}

/// A parsed pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Psi {
    /// The `some` line.
    pub some: PsiLine,
    /// The `full` line; absent on old kernels.
    pub full: Option<PsiLine>,
}

impl Psi {
    /// The line of `kind`, if present.
    pub fn line(&self, kind: PsiKind) -> Option<&PsiLine> {
        match kind {
            PsiKind::Some => Some(&self.some),
            PsiKind::Full => self.full.as_ref(),
        }
    }
}

fn parse_line(kind: &str, rest: &str) -> Result<PsiLine, PsiError> {
    let (mut avg10, mut avg60, mut avg300, mut total) = (None, None, None, None);
    for field in rest.split_whitespace() {
        let (key, value) = field.split_once('=').ok_or_else(|| PsiError::BadValue {
            field: field.to_owned(),
            value: String::new(),
        })?;
        let bad = || PsiError::BadValue {
            field: key.to_owned(),
            value: value.to_owned(),
        };
        let float = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(bad)
        };
        match key {
            "avg10" => avg10 = Some(float()?),
            "avg60" => avg60 = Some(float()?),
            "avg300" => avg300 = Some(float()?),
            "total" => total = Some(value.parse::<u64>().map_err(|_| bad())?),
            // Unknown fields are ignored: newer kernels may add some.
            _ => {}
        }
    }
    let missing = |field| PsiError::MissingField {
        line: kind.to_owned(),
        field,
    };
    Ok(PsiLine {
        avg10: avg10.ok_or_else(|| missing("avg10"))?,
        avg60: avg60.ok_or_else(|| missing("avg60"))?,
        avg300: avg300.ok_or_else(|| missing("avg300"))?,
        total: total.ok_or_else(|| missing("total"))?,
    })
}

/// Parses `/proc/pressure/memory` or a cgroup v2 `memory.pressure` file.
///
/// # Errors
///
/// [`PsiError`] when the `some` line is missing, a line or value is not PSI, or a kind repeats.
pub fn parse_psi(text: &str) -> Result<Psi, PsiError> {
    let mut some = None;
    let mut full = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (kind, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let slot = match kind {
            "some" => &mut some,
            "full" => &mut full,
            _ => return Err(PsiError::UnknownLine(line.to_owned())),
        };
        if slot.is_some() {
            return Err(PsiError::DuplicateLine(kind.to_owned()));
        }
        *slot = Some(parse_line(kind, rest)?);
    }
    Ok(Psi {
        some: some.ok_or(PsiError::MissingSome)?,
        full,
    })
}

/// The line to write into a pressure file to arm a kernel PSI trigger: `<some|full> <stall µs>
/// <window µs>` (e.g. `some 150000 1000000`), woken with POLLPRI when the tasks stalled at least
/// `stall` within `window`.
///
/// # Errors
///
/// [`PsiError::TriggerWindow`] outside 500 ms..=10 s; [`PsiError::TriggerStall`] when `stall` is
/// zero or not below `window`. (Unprivileged users also need a window that is a multiple of 2 s
/// on newer kernels; that is the caller's business.)
pub fn trigger_line(kind: PsiKind, stall: Duration, window: Duration) -> Result<String, PsiError> {
    if window < Duration::from_millis(500) || window > Duration::from_secs(10) {
        return Err(PsiError::TriggerWindow(window));
    }
    if stall.as_micros() == 0 || stall >= window {
        return Err(PsiError::TriggerStall { stall, window });
    }
    Ok(format!(
        "{kind} {} {}",
        stall.as_micros(),
        window.as_micros()
    ))
}

/// A pressure value a threshold applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `avg10` of a line (percent).
    Avg10(PsiKind),
    /// `avg60` of a line (percent).
    Avg60(PsiKind),
    /// µs stalled per second between two samples, from `total`.
    StallRate(PsiKind),
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Avg10(k) => write!(f, "{k} avg10"),
            Self::Avg60(k) => write!(f, "{k} avg60"),
            Self::StallRate(k) => write!(f, "{k} stall rate"),
        }
    }
}

/// Thresholds and timing of the early OOM policy; `Default` = Deckhouse's psi-monitor
/// (`full avg10 > 30`, a sample every 5 s, 15 s pause after a kill).
#[derive(Debug, Clone, PartialEq)]
pub struct OomConfig {
    /// `full avg10` threshold in percent (30).
    pub full_avg10: Option<f64>,
    /// `some avg10` threshold in percent (off).
    pub some_avg10: Option<f64>,
    /// `full avg60` threshold in percent (off).
    pub full_avg60: Option<f64>,
    /// `some avg60` threshold in percent (off).
    pub some_avg60: Option<f64>,
    /// `full` stall rate threshold in µs per second (off).
    pub full_stall_rate: Option<f64>,
    /// `some` stall rate threshold in µs per second (off).
    pub some_stall_rate: Option<f64>,
    /// No kill within this time after the previous one (15 s).
    pub cooldown: Duration,
    /// How often the binary reads PSI when it polls (5 s).
    pub sample_interval: Duration,
}

impl Default for OomConfig {
    fn default() -> Self {
        Self {
            full_avg10: Some(30.0),
            some_avg10: None,
            full_avg60: None,
            some_avg60: None,
            full_stall_rate: None,
            some_stall_rate: None,
            cooldown: Duration::from_secs(15),
            sample_interval: Duration::from_secs(5),
        }
    }
}

impl OomConfig {
    /// Every configured threshold, in the order they are checked.
    pub fn thresholds(&self) -> Vec<(Signal, f64)> {
        [
            (Signal::Avg10(PsiKind::Full), self.full_avg10),
            (Signal::Avg10(PsiKind::Some), self.some_avg10),
            (Signal::Avg60(PsiKind::Full), self.full_avg60),
            (Signal::Avg60(PsiKind::Some), self.some_avg60),
            (Signal::StallRate(PsiKind::Full), self.full_stall_rate),
            (Signal::StallRate(PsiKind::Some), self.some_stall_rate),
        ]
        .into_iter()
        .filter_map(|(s, t)| t.map(|t| (s, t)))
        .collect()
    }
}

/// Why the policy acts: a signal above its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PressureReason {
    /// The signal.
    pub signal: Signal,
    /// Its value in the sample.
    pub value: f64,
    /// The threshold it exceeded.
    pub threshold: f64,
}

impl fmt::Display for PressureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:.2} > {:.2}",
            self.signal, self.value, self.threshold
        )
    }
}

/// A pod that could be killed, with what the victim rule looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCandidate {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pod priority.
    pub priority: i32,
    /// Priority class name.
    pub priority_class: Option<String>,
    /// Memory working set in bytes.
    pub working_set_bytes: u64,
    /// Owned by a DaemonSet.
    pub daemonset: bool,
    /// Mirror pod of a static pod.
    pub mirror: bool,
}

impl OomCandidate {
    /// The candidate view of `pod` using `working_set_bytes` of memory.
    pub fn from_pod(pod: &Pod, working_set_bytes: u64) -> Self {
        Self {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            priority: pod.priority,
            priority_class: pod.priority_class.clone(),
            working_set_bytes,
            daemonset: pod.is_daemonset(),
            mirror: pod.is_mirror(),
        }
    }

    /// Never killed: a critical priority class or priority, a DaemonSet pod or a mirror pod.
    pub fn is_protected(&self) -> bool {
        self.daemonset
            || self.mirror
            || self.priority >= SYSTEM_PRIORITY_FLOOR
            || self
                .priority_class
                .as_deref()
                .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
    }
}

/// The victim among `pods` (see the module doc for the rule); `None` when all are protected.
pub fn plan_victim(pods: &[OomCandidate]) -> Option<&OomCandidate> {
    pods.iter().filter(|p| !p.is_protected()).min_by(|a, b| {
        a.priority
            .cmp(&b.priority)
            .then(b.working_set_bytes.cmp(&a.working_set_bytes))
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    })
}

/// A decision of the early OOM policy.
#[derive(Debug, Clone, PartialEq)]
pub enum OomDecision {
    /// Kill this pod's containers now.
    Kill {
        /// The victim.
        victim: OomCandidate,
        /// The breached threshold.
        reason: PressureReason,
    },
    /// Pressure warrants a kill but every candidate is protected.
    NoVictim {
        /// The breached threshold.
        reason: PressureReason,
    },
}

impl fmt::Display for OomDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kill { victim, reason } => {
                write!(
                    f,
                    "kill pod {}/{} ({reason})",
                    victim.namespace, victim.name
                )
            }
            Self::NoVictim { reason } => write!(f, "no pod may be killed ({reason})"),
        }
    }
}

/// The early OOM state machine: samples in, at most one kill per episode out.
///
/// Call [`Self::handle_sample`] with each PSI reading (every `sample_interval`, or when a PSI
/// trigger fires), then [`Self::poll_decision`] with the node's pods.
#[derive(Debug, Clone)]
pub struct PressureMonitor {
    cfg: OomConfig,
    thresholds: Vec<(Signal, f64)>,
    prev: Option<(Psi, Timestamp)>,
    breach: Option<PressureReason>,
    undecided: bool,
    armed: bool,
    last_kill: Option<(Timestamp, PressureReason)>,
}

impl PressureMonitor {
    /// An armed monitor with no sample yet.
    pub fn new(cfg: OomConfig) -> Self {
        Self {
            thresholds: cfg.thresholds(),
            cfg,
            prev: None,
            breach: None,
            undecided: false,
            armed: true,
            last_kill: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OomConfig {
        &self.cfg
    }

    /// Whether the next breaching sample may lead to a kill (no kill yet in this episode).
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// The breach in the latest sample, if any.
    pub fn current_breach(&self) -> Option<PressureReason> {
        self.breach
    }

    fn value(&self, signal: Signal, psi: &Psi, now: Timestamp) -> Option<f64> {
        match signal {
            Signal::Avg10(kind) => psi.line(kind).map(|l| l.avg10),
            Signal::Avg60(kind) => psi.line(kind).map(|l| l.avg60),
            Signal::StallRate(kind) => {
                let (prev, at) = self.prev.as_ref()?;
                let secs = now.saturating_since(*at).as_secs_f64();
                let before = prev.line(kind)?.total;
                let after = psi.line(kind)?.total;
                (secs > 0.0 && after >= before).then(|| (after - before) as f64 / secs)
            }
        }
    }

    /// A PSI reading taken at `now`. Then call [`Self::poll_decision`].
    pub fn handle_sample(&mut self, psi: Psi, now: Timestamp) {
        let breach = self.thresholds.iter().find_map(|(signal, threshold)| {
            self.value(*signal, &psi, now)
                .filter(|v| v > threshold)
                .map(|value| PressureReason {
                    signal: *signal,
                    value,
                    threshold: *threshold,
                })
        });
        let in_cooldown = self
            .last_kill
            .is_some_and(|(at, _)| now < at + self.cfg.cooldown);
        match breach {
            None => {
                if !self.armed {
                    tracing::info!("memory pressure episode over");
                }
                self.armed = true;
            }
            Some(_) if !self.armed && !in_cooldown => {
                if let Some((_, at_kill)) = self.last_kill
                    && self
                        .value(at_kill.signal, &psi, now)
                        .is_some_and(|v| v > at_kill.value)
                {
                    tracing::warn!(reason = %at_kill, "memory pressure still rising after a kill");
                    self.armed = true;
                }
            }
            Some(_) => {}
        }
        self.breach = breach;
        self.undecided = breach.is_some() && self.armed && !in_cooldown;
        self.prev = Some((psi, now));
    }

    /// The decision for the latest sample, at most once per sample: [`OomDecision::Kill`] (the
    /// monitor disarms until the episode ends or pressure still rises after the cooldown) or
    /// [`OomDecision::NoVictim`]. `candidates` are the node's pods.
    #[must_use]
    pub fn poll_decision(
        &mut self,
        now: Timestamp,
        candidates: &[OomCandidate],
    ) -> Option<OomDecision> {
        if !self.undecided {
            return None;
        }
        self.undecided = false;
        let reason = self.breach?;
        match plan_victim(candidates) {
            Some(victim) => {
                self.armed = false;
                self.last_kill = Some((now, reason));
                tracing::warn!(victim = %victim.name, %reason, "killing pod under memory pressure");
                Some(OomDecision::Kill {
                    victim: victim.clone(),
                    reason,
                })
            }
            None => Some(OomDecision::NoVictim { reason }),
        }
    }

    /// When to take the next sample when polling: `sample_interval` after the last one
    /// ([`Timestamp::EPOCH`], i.e. at once, before the first).
    pub fn next_deadline(&self) -> Option<Timestamp> {
        Some(
            self.prev
                .as_ref()
                .map_or(Timestamp::EPOCH, |(_, at)| *at + self.cfg.sample_interval),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const IDLE: &str = include_str!("../tests/fixtures/psi/idle.txt");
    const SOME_ONLY: &str = include_str!("../tests/fixtures/psi/some-only.txt");
    const FULL10: &str = include_str!("../tests/fixtures/psi/full-avg10-breach.txt");
    const SOME10: &str = include_str!("../tests/fixtures/psi/some-avg10-breach.txt");
    const AVG60: &str = include_str!("../tests/fixtures/psi/avg60-breach.txt");
    const RATE_BEFORE: &str = include_str!("../tests/fixtures/psi/stall-rate-before.txt");
    const RATE_AFTER: &str = include_str!("../tests/fixtures/psi/stall-rate-after.txt");
    const MALFORMED: &str = include_str!("../tests/fixtures/psi/malformed.txt");
    const MISSING: &str = include_str!("../tests/fixtures/psi/malformed-missing-field.txt");

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn psi(text: &str) -> Psi {
        match parse_psi(text) {
            Ok(p) => p,
            Err(e) => panic!("fixture does not parse: {e}"),
        }
    }

    fn pod(name: &str, priority: i32, ws: u64) -> OomCandidate {
        OomCandidate {
            namespace: "default".into(),
            name: name.into(),
            priority,
            priority_class: None,
            working_set_bytes: ws,
            daemonset: false,
            mirror: false,
        }
    }

    fn with_full10(v: f64) -> Psi {
        Psi {
            some: PsiLine {
                avg10: v,
                ..PsiLine::default()
            },
            full: Some(PsiLine {
                avg10: v,
                ..PsiLine::default()
            }),
        }
    }

    #[test]
    fn parses_fixtures() {
        assert_eq!(
            psi(IDLE),
            Psi {
                some: PsiLine::default(),
                full: Some(PsiLine::default())
            }
        );
        let p = psi(SOME_ONLY);
        assert_eq!(p.full, None);
        assert_eq!(p.some.total, 1_234_567);
        assert!((p.some.avg10 - 0.12).abs() < 1e-9);
        let p = psi(FULL10);
        assert!(
            p.full
                .is_some_and(|f| (f.avg10 - 35.4).abs() < 1e-9 && f.total == 54_321_098)
        );
        assert_eq!(
            parse_psi(MALFORMED),
            Err(PsiError::BadValue {
                field: "avg60".into(),
                value: "zero".into()
            })
        );
        assert_eq!(
            parse_psi(MISSING),
            Err(PsiError::MissingField {
                line: "some".into(),
                field: "avg300"
            })
        );
        assert_eq!(parse_psi(""), Err(PsiError::MissingSome));
        assert!(matches!(
            parse_psi("cpu avg10=0"),
            Err(PsiError::UnknownLine(_))
        ));
        assert!(matches!(
            parse_psi(&format!("{IDLE}{IDLE}")),
            Err(PsiError::DuplicateLine(_))
        ));
    }

    fn breach_of(cfg: OomConfig, samples: &[(&str, i64)]) -> Option<PressureReason> {
        let mut m = PressureMonitor::new(cfg);
        for (text, at) in samples {
            m.handle_sample(psi(text), t(*at));
        }
        m.current_breach()
    }

    #[test]
    fn each_threshold_breaches_on_its_fixture() {
        let default = OomConfig::default;
        assert_eq!(breach_of(default(), &[(IDLE, 0)]), None);
        assert_eq!(breach_of(default(), &[(SOME_ONLY, 0)]), None);
        assert_eq!(
            breach_of(default(), &[(FULL10, 0)]).map(|r| r.signal),
            Some(Signal::Avg10(PsiKind::Full))
        );
        assert_eq!(breach_of(default(), &[(SOME10, 0)]), None);
        let some10 = OomConfig {
            some_avg10: Some(50.0),
            ..default()
        };
        assert_eq!(
            breach_of(some10, &[(SOME10, 0)]).map(|r| r.signal),
            Some(Signal::Avg10(PsiKind::Some))
        );
        assert_eq!(breach_of(default(), &[(AVG60, 0)]), None);
        let avg60 = OomConfig {
            full_avg60: Some(25.0),
            ..default()
        };
        assert_eq!(
            breach_of(avg60, &[(AVG60, 0)]).map(|r| r.signal),
            Some(Signal::Avg60(PsiKind::Full))
        );
        let rate = OomConfig {
            full_stall_rate: Some(500_000.0),
            ..default()
        };
        let r = breach_of(rate.clone(), &[(RATE_BEFORE, 0), (RATE_AFTER, 2)]);
        assert_eq!(r.map(|r| r.signal), Some(Signal::StallRate(PsiKind::Full)));
        assert!(r.is_some_and(|r| (r.value - 800_000.0).abs() < 1e-6));
        // Over 4 s the same delta is 400 000 µs/s: below.
        assert_eq!(
            breach_of(rate.clone(), &[(RATE_BEFORE, 0), (RATE_AFTER, 4)]),
            None
        );
        // One sample has no rate.
        assert_eq!(breach_of(rate, &[(RATE_AFTER, 0)]), None);
    }

    #[test]
    fn trigger_lines() {
        assert_eq!(
            trigger_line(
                PsiKind::Some,
                Duration::from_millis(150),
                Duration::from_secs(1)
            ),
            Ok("some 150000 1000000".to_owned())
        );
        assert_eq!(
            trigger_line(
                PsiKind::Full,
                Duration::from_millis(100),
                Duration::from_millis(500)
            ),
            Ok("full 100000 500000".to_owned())
        );
        assert!(
            trigger_line(
                PsiKind::Some,
                Duration::from_millis(1),
                Duration::from_millis(499)
            )
            .is_err()
        );
        assert!(
            trigger_line(
                PsiKind::Some,
                Duration::from_secs(1),
                Duration::from_millis(10_001)
            )
            .is_err()
        );
        assert!(
            trigger_line(
                PsiKind::Some,
                Duration::from_secs(1),
                Duration::from_secs(1)
            )
            .is_err()
        );
        assert!(trigger_line(PsiKind::Some, Duration::ZERO, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn victim_rule() {
        let mut pods = vec![
            pod("big-high", 100, 9_000),
            pod("small-low", 0, 10),
            pod("big-low", 0, 5_000),
            pod("big-low-b", 0, 5_000),
        ];
        pods.push(OomCandidate {
            priority_class: Some("system-node-critical".into()),
            priority: -5,
            ..pod("critical", -5, 1 << 40)
        });
        pods.push(OomCandidate {
            daemonset: true,
            ..pod("ds", -10, 1 << 40)
        });
        pods.push(OomCandidate {
            mirror: true,
            ..pod("mirror", -10, 1 << 40)
        });
        pods.push(pod("sys", SYSTEM_PRIORITY_FLOOR, 1 << 40));
        assert_eq!(plan_victim(&pods).map(|p| p.name.as_str()), Some("big-low"));
        pods.retain(|p| p.is_protected());
        assert_eq!(plan_victim(&pods), None);
    }

    #[test]
    fn one_kill_per_episode_then_cooldown_and_rise() {
        let pods = vec![pod("a", 0, 10), pod("b", 0, 5)];
        let mut m = PressureMonitor::new(OomConfig::default());
        m.handle_sample(with_full10(10.0), t(0));
        assert_eq!(m.poll_decision(t(0), &pods), None);
        m.handle_sample(with_full10(40.0), t(5));
        assert!(
            matches!(m.poll_decision(t(5), &pods), Some(OomDecision::Kill { ref victim, .. }) if victim.name == "a")
        );
        assert_eq!(m.poll_decision(t(5), &pods), None, "once per sample");
        // Still above, not rising: no more kills, even after the cooldown.
        for s in [10, 15, 20, 25, 30] {
            m.handle_sample(with_full10(39.0), t(s));
            assert_eq!(m.poll_decision(t(s), &pods), None);
        }
        // Rising above the value at the kill after the cooldown: a second kill.
        m.handle_sample(with_full10(45.0), t(35));
        assert!(matches!(
            m.poll_decision(t(35), &pods),
            Some(OomDecision::Kill { .. })
        ));
        // Episode ends; a new one kills again, but not within the cooldown.
        m.handle_sample(with_full10(5.0), t(40));
        m.handle_sample(with_full10(50.0), t(45));
        assert_eq!(m.poll_decision(t(45), &pods), None, "within cooldown");
        m.handle_sample(with_full10(50.0), t(50));
        assert!(matches!(
            m.poll_decision(t(50), &pods),
            Some(OomDecision::Kill { .. })
        ));
        // Nobody to kill.
        let mut m = PressureMonitor::new(OomConfig::default());
        m.handle_sample(with_full10(40.0), t(0));
        let ds = vec![OomCandidate {
            daemonset: true,
            ..pod("ds", 0, 1)
        }];
        assert!(matches!(
            m.poll_decision(t(0), &ds),
            Some(OomDecision::NoVictim { .. })
        ));
        assert!(m.is_armed());
        assert_eq!(m.next_deadline(), Some(t(5)));
    }

    fn arb_candidate() -> impl Strategy<Value = OomCandidate> {
        (0u8..20, -3i32..3, 0u64..4, 0u8..6).prop_map(|(n, prio, ws, flag)| OomCandidate {
            namespace: "ns".into(),
            name: format!("p{n}"),
            priority: prio,
            priority_class: match flag {
                0 => Some("system-node-critical".into()),
                1 => Some("system-cluster-critical".into()),
                _ => None,
            },
            working_set_bytes: ws * 1000,
            daemonset: flag == 2,
            mirror: flag == 3,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn victim_is_never_protected_and_order_free(mut pods in prop::collection::vec(arb_candidate(), 0..12), rot in 0usize..12) {
            let first = plan_victim(&pods).cloned();
            if let Some(v) = &first {
                prop_assert!(!v.is_protected());
                for p in pods.iter().filter(|p| !p.is_protected()) {
                    prop_assert!(v.priority <= p.priority);
                    if v.priority == p.priority {
                        prop_assert!(v.working_set_bytes >= p.working_set_bytes);
                    }
                }
            } else {
                prop_assert!(pods.iter().all(OomCandidate::is_protected));
            }
            if !pods.is_empty() {
                let k = rot % pods.len();
                pods.rotate_left(k);
                pods.reverse();
            }
            prop_assert_eq!(plan_victim(&pods).cloned(), first);
        }

        #[test]
        fn kills_respect_threshold_episode_and_cooldown(values in prop::collection::vec(0u8..100, 1..80)) {
            let cfg = OomConfig::default();
            let pods = vec![pod("a", 0, 1)];
            let mut m = PressureMonitor::new(cfg.clone());
            let mut last_kill: Option<(Timestamp, f64)> = None;
            let mut below_since_kill = true;
            for (i, v) in values.iter().enumerate() {
                let now = t(i as i64 * 5);
                let v = f64::from(*v);
                m.handle_sample(with_full10(v), now);
                if v <= 30.0 { below_since_kill = true; }
                if let Some(OomDecision::Kill { reason, .. }) = m.poll_decision(now, &pods) {
                    // No kill below the threshold.
                    prop_assert!(v > 30.0 && reason.value > reason.threshold);
                    if let Some((at, value_at_kill)) = last_kill {
                        prop_assert!(now >= at + cfg.cooldown);
                        // Same episode ⇒ pressure rose above the value at the previous kill.
                        prop_assert!(below_since_kill || v > value_at_kill);
                    }
                    last_kill = Some((now, v));
                    below_since_kill = false;
                }
            }
        }

        #[test]
        fn non_rising_episode_kills_once(start in 31u8..100, drops in prop::collection::vec(0u8..3, 1..40)) {
            let pods = vec![pod("a", 0, 1)];
            let mut m = PressureMonitor::new(OomConfig::default());
            let mut v = f64::from(start);
            let mut kills = 0;
            for (i, d) in drops.iter().enumerate() {
                let now = t(i as i64 * 5);
                m.handle_sample(with_full10(v.max(30.5)), now);
                if let Some(OomDecision::Kill { .. }) = m.poll_decision(now, &pods) { kills += 1; }
                v -= f64::from(*d);
            }
            prop_assert_eq!(kills, 1);
        }
    }
}
