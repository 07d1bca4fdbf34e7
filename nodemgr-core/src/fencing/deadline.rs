//! Decides how long the controller waits before it fences a silent node: long enough that the
//! node's watchdog has fired, whatever happened on the node (see `docs/fencing.md`).
//!
//! # The formula
//!
//! ```text
//! deadline ≥ watchdog timeout (W) + kubelet staleness (S) + margin (M)
//! ```
//!
//! measured by the controller on its own clock from the moment it **observed** the node's
//! last heartbeat (the first pass, cache event or direct read that showed the current
//! `renewTime`), never from the `renewTime` itself. Why it suffices, with `R` the real time of
//! the kubelet's last renewal:
//!
//! * the agent credits every renewal it sees to the start of its previous read of the Lease,
//!   a moment before `R`; it feeds only while the last credit is at most `S` old
//!   ([`FencingAgent::handle_kubelet_lease`](super::FencingAgent::handle_kubelet_lease)), so
//!   its last feed is at most `R + S`, and the watchdog fires at most `W` later: `R + S + W`;
//! * the controller observes the renewal at or after `R` and deletes nothing before
//!   `observation + deadline ≥ R + deadline`.
//!
//! So `deadline ≥ S + W` (plus `M` for the reboot itself, scheduling delays and clock *rate*
//! drift) means the watchdog has fired before the first deletion. The agent's check interval
//! and API timeout do not enter: a renewal seen late is credited early, and a check that
//! fails stops the feeding sooner, not later. No timestamp written on one machine is ever
//! compared with another machine's clock, so clock **skew** between the node and the
//! controller, of any size, needs no allowance (the properties draw skews of ±10 minutes); a
//! controller that restarts observes every heartbeat afresh, later than `R`.
//!
//! A controller deadline is derived from the group's `fencing.watchdog.timeout` (or
//! [`FencingConfig::agent`]'s for groups without one) and the agent timings the controller is
//! told ([`FencingConfig::agent`] must match the DaemonSet's flags); an explicit
//! [`FencingConfig::default_timeout`] below the derived minimum is refused by
//! [`FencingConfig::validate`].

use std::time::Duration;

use super::agent::AgentConfig;
use super::plan::FencingConfig;

/// A fencing setting that would let the controller delete pods before the watchdog fired.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeadlineError {
    /// `fencingTimeout` (`--fencing-timeout`) is below the derived minimum.
    #[error(
        "fencingTimeout {timeout:?} is shorter than {minimum:?} = watchdog timeout {watchdog:?} + kubelet staleness {stale:?} + margin {margin:?}: pods could be deleted while their node still runs them; raise fencingTimeout or leave it unset to derive it"
    )]
    TimeoutTooShort {
        /// The configured timeout.
        timeout: Duration,
        /// The smallest safe one.
        minimum: Duration,
        /// The watchdog timeout it was derived from.
        watchdog: Duration,
        /// The agent's kubelet staleness.
        stale: Duration,
        /// The margin.
        margin: Duration,
    },
    /// An agent timing is zero or the feed interval does not fit in the watchdog timeout.
    #[error("{field} {value:?} is invalid: {why}")]
    InvalidTiming {
        /// The setting (`agent.feedInterval`, …).
        field: &'static str,
        /// Its value.
        value: Duration,
        /// What is wrong.
        why: &'static str,
    },
}

/// The smallest controller deadline that lets a node's watchdog (`watchdog_timeout`) fire
/// first, for an agent with `agent`'s kubelet staleness and `margin` (see the module docs).
#[inline]
pub fn min_deadline(agent: &AgentConfig, watchdog_timeout: Duration, margin: Duration) -> Duration {
    watchdog_timeout
        .saturating_add(agent.kubelet_stale_after)
        .saturating_add(margin)
}

/// Checks the agent's own timings: all non-zero, the feed interval shorter than the watchdog
/// timeout, the kubelet staleness longer than the check interval (or it could never see a
/// renewal in time).
///
/// # Errors
/// The first invalid timing, by its setting name.
pub fn validate_agent(agent: &AgentConfig) -> Result<(), DeadlineError> {
    let invalid = |field, value, why| Err(DeadlineError::InvalidTiming { field, value, why });
    for (field, value) in [
        ("feedInterval", agent.feed_interval),
        ("checkInterval", agent.api_check_interval),
        ("apiTimeout", agent.api_timeout),
        ("watchdogTimeout", agent.watchdog_timeout),
        ("kubeletStaleAfter", agent.kubelet_stale_after),
    ] {
        if value.is_zero() {
            return invalid(field, value, "must be more than zero");
        }
    }
    if agent.feed_interval >= agent.watchdog_timeout {
        return invalid(
            "feedInterval",
            agent.feed_interval,
            "must be shorter than the watchdog timeout",
        );
    }
    if agent.kubelet_stale_after <= agent.api_check_interval {
        return invalid(
            "kubeletStaleAfter",
            agent.kubelet_stale_after,
            "must be longer than the check interval (the kubelet renews its Lease every 10 s)",
        );
    }
    Ok(())
}

impl FencingConfig {
    /// The deadline for a node of a group with `watchdog_timeout` (`None`: the group sets
    /// none): derived from it ([`min_deadline`]), or [`FencingConfig::default_timeout`] for
    /// groups without one when it is set and not shorter.
    #[inline]
    pub fn deadline_for(&self, watchdog_timeout: Option<Duration>) -> Duration {
        match watchdog_timeout {
            Some(w) => min_deadline(&self.agent, w, self.margin),
            None => {
                let derived = min_deadline(&self.agent, self.agent.watchdog_timeout, self.margin);
                self.default_timeout.map_or(derived, |t| t.max(derived))
            }
        }
    }

    /// Refuses settings that would fence before the watchdog fired (the agent's own timings
    /// are checked by the agent, [`validate_agent`]).
    ///
    /// # Errors
    /// [`DeadlineError::TimeoutTooShort`] when `default_timeout` is below the derived minimum;
    /// [`DeadlineError::InvalidTiming`] for a zero kubelet staleness or watchdog timeout.
    pub fn validate(&self) -> Result<(), DeadlineError> {
        for (field, value) in [
            ("fencingKubeletStaleAfter", self.agent.kubelet_stale_after),
            ("watchdogTimeout", self.agent.watchdog_timeout),
        ] {
            if value.is_zero() {
                return Err(DeadlineError::InvalidTiming {
                    field,
                    value,
                    why: "must be more than zero",
                });
            }
        }
        let minimum = min_deadline(&self.agent, self.agent.watchdog_timeout, self.margin);
        match self.default_timeout {
            Some(timeout) if timeout < minimum => Err(DeadlineError::TimeoutTooShort {
                timeout,
                minimum,
                watchdog: self.agent.watchdog_timeout,
                stale: self.agent.kubelet_stale_after,
                margin: self.margin,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_deadline_is_watchdog_plus_staleness_plus_margin() {
        let cfg = FencingConfig::default();
        assert_eq!(cfg.deadline_for(None), Duration::from_secs(95));
        assert_eq!(
            cfg.deadline_for(Some(Duration::from_secs(120))),
            Duration::from_secs(155)
        );
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn a_timeout_below_the_derived_minimum_is_refused_by_name() {
        let cfg = FencingConfig {
            default_timeout: Some(Duration::from_secs(60)),
            ..FencingConfig::default()
        };
        let error = cfg.validate().map_err(|e| e.to_string());
        assert!(
            error
                .as_ref()
                .is_err_and(|e| e.starts_with("fencingTimeout 60s is shorter than 95s")),
            "{error:?}"
        );
        let longer = FencingConfig {
            default_timeout: Some(Duration::from_secs(120)),
            ..FencingConfig::default()
        };
        assert_eq!(longer.validate(), Ok(()));
        assert_eq!(longer.deadline_for(None), Duration::from_secs(120));
        // A group's own watchdog timeout always derives its deadline.
        assert_eq!(
            longer.deadline_for(Some(Duration::from_secs(10))),
            Duration::from_secs(45)
        );
    }

    #[test]
    fn agent_timings_are_checked() {
        let mut cfg = FencingConfig::default();
        cfg.agent.kubelet_stale_after = Duration::from_secs(5);
        let error = validate_agent(&cfg.agent).map_err(|e| e.to_string());
        assert!(
            error
                .as_ref()
                .is_err_and(|e| e.starts_with("kubeletStaleAfter 5s")),
            "{error:?}"
        );
        cfg.agent.kubelet_stale_after = Duration::ZERO;
        assert!(validate_agent(&cfg.agent).is_err());
        let error = cfg.validate().map_err(|e| e.to_string());
        assert!(
            error
                .as_ref()
                .is_err_and(|e| e.starts_with("fencingKubeletStaleAfter 0ns")),
            "{error:?}"
        );
        let mut cfg = FencingConfig::default();
        cfg.agent.feed_interval = Duration::from_secs(60);
        assert!(
            validate_agent(&cfg.agent)
                .map_err(|e| e.to_string())
                .is_err_and(|e| e.starts_with("feedInterval"))
        );
    }
}
