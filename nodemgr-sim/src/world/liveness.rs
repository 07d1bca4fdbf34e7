//! Liveness: heartbeats renewed at each Lease period (brought up to date only when something
//! reads them from the world; computed, not stored, where the cluster port hands them out:
//! [`LiveClock`]) and the Ready condition each node shows, refreshed only where it can change
//! (the module docs of `world`).

use super::*;

impl World {
    /// Recomputes every node's heartbeat and Ready condition at the current time, recording
    /// transitions in the timeline.
    pub fn refresh_nodes(&mut self) {
        self.refresh_readiness();
        self.index.heartbeats_at = Some(self.now);
    }

    /// Recomputes the heartbeat and Ready condition of every node at the current time,
    /// recording transitions in the timeline in name order.
    pub(super) fn refresh_readiness(&mut self) {
        let now = self.now;
        let lease = Lease::of(self.heartbeat.lease_period.0, self.heartbeat.grace_period.0);
        let start = self.start;
        let mut transitions = Vec::new();
        let mut changed = Vec::new();
        // A node's `Arc` changes only with its readiness: those are logged for the simulated
        // API's change feed, not every node.
        for (at, (name, _, n)) in self.nodes.iter_mut_unlogged().enumerate() {
            if let Some(t) = refresh_node(lease, start, now, n) {
                transitions.push((name.clone(), n.group.clone(), t.0, t.1));
                changed.push(at);
            }
        }
        for at in changed {
            self.nodes.log_position(at);
        }
        // Recorded with the node's group as `World::record` would look it up.
        self.record_transitions(transitions);
    }

    /// What an instant does to the nodes that can change in it when readiness is local
    /// (`readiness_is_local`): the nodes whose agent acts (`due`; `woken` were woken) and
    /// `extra` ones (scripted, new) are refreshed, the agents act, and the nodes are refreshed
    /// again — as a refresh of those nodes, [`World::step_agents`] and the refresh again
    /// would (the plain path, which `refresh_all` instants take over every node), with each
    /// node looked up once. Nothing of a node is read by
    /// another node's refresh or agent, so each node goes through the three in turn; the
    /// timeline gets the first refresh's transitions (in name order) before the agents'
    /// events and the second refresh's after them, as the three passes record them.
    pub(super) fn step_nodes(&mut self, due: &[usize], extra: &[usize], woken: &[usize]) {
        let now = self.now;
        let lease = Lease::of(self.heartbeat.lease_period.0, self.heartbeat.grace_period.0);
        let start = self.start;
        let wake = self.agent_wake_settings();
        let base = self.timeline.events.len();
        let mut before = Vec::new();
        let mut after = Vec::new();
        let (nodes, mut env) = self.agent_parts();
        for (at, acts) in union(due, extra) {
            let Some((name, id, n)) = nodes.entry_at_mut(at) else {
                continue;
            };
            if let Some(t) = refresh_node(lease, start, now, n) {
                before.push((name.clone(), n.group.clone(), t.0, t.1));
            }
            if acts {
                env.act(name, id, n, woken.binary_search(&at).is_ok(), wake);
            }
            if let Some(t) = refresh_node(lease, start, now, n) {
                after.push((name.clone(), n.group.clone(), t.0, t.1));
            }
        }
        self.agents_stepped_at = Some(now);
        // The first refresh's transitions go before the agents' events (none: nothing moves).
        if !before.is_empty() {
            let agents = self.timeline.events.split_off(base);
            self.record_transitions(before);
            self.timeline.events.extend(agents);
        }
        self.record_transitions(after);
    }

    /// Records readiness transitions `(node, group, ready, why)` in their order.
    fn record_transitions(&mut self, transitions: Vec<(String, String, bool, String)>) {
        for (name, group, ready, why) in transitions {
            let kind = if ready {
                "node.ready"
            } else {
                "node.not-ready"
            };
            self.record_event(
                kind.into(),
                Some(name.into()),
                Some(group.into()),
                None,
                why,
            );
        }
    }

    /// Brings every node's `last_heartbeat` to the current time, touching only the nodes whose
    /// Lease phase a renewal crossed since the last time (every node after a lease period).
    /// A heartbeat is a function of the node's Lease phase, its darkness and the time, so it
    /// is computed when something may read it rather than at every instant: the run loop
    /// calls this before the controllers that read heartbeats from the world run
    /// ([`crate::Controller::reads_heartbeats`]; the cluster port computes the ones its change
    /// feed and node patches hand out, `World::live_clock`, and calls this before a whole
    /// list), before the watch cache records the nodes, at the last instant, and when it
    /// hands out the world; the world's own readiness refresh computes the heartbeats it
    /// needs.
    pub fn renew_heartbeats(&mut self) {
        let now = self.now;
        let last = self.index.heartbeats_at.replace(now);
        if last == Some(now) {
            return;
        }
        let period = self.heartbeat.lease_period.0;
        let period_ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1);
        let start = self.start;
        let crossed: Option<Vec<String>> = match last {
            Some(last)
                if last < now && now.as_millis().saturating_sub(last.as_millis()) < period_ms =>
            {
                // Renewals at `phase + k·period` in (last, now]: phases in (a, b], or in
                // (a, period) and [0, b] when the interval wraps.
                let a = last.as_millis().rem_euclid(period_ms);
                let b = now.as_millis().rem_euclid(period_ms);
                let phases = &self.index.phases;
                let after = |x: i64| phases.partition_point(|(p, _)| *p <= x);
                let (lo, hi) = (after(a), after(b));
                let picked: Vec<&(i64, String)> = if a < b {
                    phases.get(lo..hi).unwrap_or_default().iter().collect()
                } else {
                    let tail = phases.get(lo..).unwrap_or_default().iter();
                    tail.chain(phases.get(..hi).unwrap_or_default()).collect()
                };
                // Looking many nodes up by name costs more than one pass over all of them.
                (picked.len().saturating_mul(8) < self.nodes.len())
                    .then(|| picked.into_iter().map(|(_, n)| n.clone()).collect())
            }
            _ => None,
        };
        match crossed {
            Some(names) => {
                // A heartbeat is not part of what the simulated API versions: unlogged.
                for name in names {
                    if let Some(n) = self.nodes.get_mut_unlogged(&name) {
                        n.last_heartbeat = Some(heartbeat_at(period, start, n, now));
                    }
                }
            }
            None => {
                for n in self.nodes.values_mut_unlogged() {
                    n.last_heartbeat = Some(heartbeat_at(period, start, n, now));
                }
            }
        }
    }

    /// What the heartbeats of the world's nodes are computed from at the current time: a
    /// node's [`LiveClock::heartbeat`] is what [`World::renew_heartbeats`] would write into
    /// [`SimNode::last_heartbeat`] now, computed without writing it. For the readers that see
    /// a few nodes per instant (the cluster port's change feed and node patches,
    /// [`crate::SimCluster`]), so that an instant at which only they read heartbeats does not
    /// renew every node's.
    pub(crate) fn live_clock(&self) -> LiveClock {
        LiveClock {
            period_ms: period_ms(self.heartbeat.lease_period.0),
            start: self.start,
            now: self.now,
        }
    }

    /// The nodes as the simulated API versions them, each with the heartbeat it has now
    /// ([`World::live_clock`]) rather than the stored one: the same heartbeats
    /// [`World::renew_heartbeats`] would store first, computed only for the nodes the API
    /// makes a view of.
    pub(crate) fn live_nodes(&mut self) -> (&mut crate::api::SimApiServer, LiveNodes<'_>) {
        let clock = self.live_clock();
        (
            &mut self.api,
            LiveNodes {
                nodes: &mut self.nodes,
                clock,
            },
        )
    }

    /// Whether a node that is neither dark nor scripted NotReady can never be silent (its
    /// last renewal is always less than a lease period old): then only the nodes whose agent
    /// acts, scripted ones and new ones can change readiness at an instant.
    pub(super) fn readiness_is_local(&self) -> bool {
        self.heartbeat.lease_period.0 <= self.heartbeat.grace_period.0
    }
}

/// What a heartbeat is computed from besides the node: the Lease period, the world's start
/// and the current time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveClock {
    /// The Lease period in whole milliseconds, at least one ([`heartbeat_at_ms`]).
    period_ms: i64,
    start: Timestamp,
    now: Timestamp,
}

impl LiveClock {
    /// The heartbeat of `n` at this time ([`heartbeat_at`]).
    pub(crate) fn heartbeat(&self, n: &SimNode) -> Option<Timestamp> {
        Some(heartbeat_at_ms(self.period_ms, self.start, n, self.now))
    }
}

/// The world's nodes with the heartbeats they have now ([`World::live_nodes`]); the
/// simulated API's `NodeSlots` over them (`crate::api`).
#[derive(Debug)]
pub(crate) struct LiveNodes<'a> {
    /// The nodes.
    pub(crate) nodes: &'a mut Nodes,
    /// Their heartbeats' clock.
    pub(crate) clock: LiveClock,
}

/// The positions of `a` and `b` (each sorted, each position once) in order, each once, with
/// whether it is in `a`.
fn union<'a>(a: &'a [usize], b: &'a [usize]) -> impl Iterator<Item = (usize, bool)> + 'a {
    let mut a = a.iter().copied().peekable();
    let mut b = b.iter().copied().peekable();
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) => match x.cmp(y) {
            std::cmp::Ordering::Less => a.next().map(|x| (x, true)),
            std::cmp::Ordering::Greater => b.next().map(|y| (y, false)),
            std::cmp::Ordering::Equal => {
                b.next();
                a.next().map(|x| (x, true))
            }
        },
        (Some(_), None) => a.next().map(|x| (x, true)),
        (None, _) => b.next().map(|y| (y, false)),
    })
}

/// Whether the node has scripted readiness or darkness (looked at at every instant).
pub(crate) fn is_special(n: &SimNode) -> bool {
    n.not_ready_until.is_some() || n.dark_since.is_some() || n.dark_until.is_some()
}

/// Recomputes one node's heartbeat and Ready condition at `now`; the transition (new
/// readiness and why) when it changed.
pub(super) fn refresh_node(
    lease: Lease,
    start: Timestamp,
    now: Timestamp,
    n: &mut SimNode,
) -> Option<(bool, String)> {
    let hb = heartbeat_at_ms(lease.period_ms, start, n, now);
    let restarting = n.agent.restarting(now);
    let scripted = n.not_ready_until.is_some_and(|u| now < u);
    let silent = lease.silent(hb, now);
    let grace = lease.grace;
    let ready = !(restarting || scripted || silent);
    let was = n.node.ready;
    n.last_heartbeat = Some(hb);
    if was != ready {
        Arc::make_mut(&mut n.node).ready = ready;
    }
    if was == ready {
        return None;
    }
    let why = if ready {
        "Ready".to_owned()
    } else if silent {
        format!(
            "NotReady: no heartbeat for more than {}s (Ready=Unknown)",
            grace.as_secs()
        )
    } else if restarting {
        "NotReady: the agent restarts it".to_owned()
    } else {
        "NotReady (injected)".to_owned()
    };
    Some((ready, why))
}

/// The Lease settings a readiness pass reads for every node, with the period and the grace
/// period in whole milliseconds (converted once per pass).
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    /// The renewal period in milliseconds, at least one ([`heartbeat_at_ms`]).
    period_ms: i64,
    /// The grace period.
    grace: Duration,
    /// The grace period's whole milliseconds.
    grace_ms: i64,
}

impl Lease {
    /// The settings of renewal period `period` and grace period `grace`.
    pub(super) fn of(period: Duration, grace: Duration) -> Self {
        Self {
            period_ms: period_ms(period),
            grace,
            grace_ms: i64::try_from(grace.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// Whether a node last renewed at `heartbeat` is silent at `now`: longer ago than the
    /// grace period (`now.saturating_since(heartbeat) > grace`), compared in whole
    /// milliseconds — a whole number of them exceeds the grace period exactly when it
    /// exceeds its whole milliseconds.
    fn silent(&self, heartbeat: Timestamp, now: Timestamp) -> bool {
        let silent = now.as_millis().saturating_sub(heartbeat.as_millis()) > self.grace_ms;
        debug_assert_eq!(silent, now.saturating_since(heartbeat) > self.grace);
        silent
    }
}

/// A renewal period in whole milliseconds, at least one.
fn period_ms(period: Duration) -> i64 {
    i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The node's last Lease renewal at `now`: renewals every `period` at the node's phase, none
/// while it is dark, none before it was created.
pub(super) fn heartbeat_at(
    period: Duration,
    start: Timestamp,
    n: &SimNode,
    now: Timestamp,
) -> Timestamp {
    heartbeat_at_ms(period_ms(period), start, n, now)
}

/// [`heartbeat_at`] with the period in whole milliseconds (at least one).
fn heartbeat_at_ms(period: i64, start: Timestamp, n: &SimNode, now: Timestamp) -> Timestamp {
    let phase = i64::try_from(n.lease_phase.as_millis()).unwrap_or(0);
    let until = match n.dark_since {
        Some(since) if n.is_dark(now) => since - Duration::from_millis(1),
        _ => now,
    };
    let created = n.node.created.unwrap_or(start);
    let t = until.as_millis() - phase;
    let renew = Timestamp::from_millis(t.div_euclid(period) * period + phase);
    renew.max(created).min(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Silence judged in whole milliseconds is the comparison of the time since the
        /// heartbeat with the grace period, for grace periods with or without a fraction of
        /// a millisecond and heartbeats before, at or after `now`, often about the grace
        /// period ago.
        #[test]
        fn silence_in_milliseconds_is_the_duration_compared(
            grace_ms in 0u64..100_000,
            grace_ns in prop_oneof![Just(0u32), 1u32..1_000_000],
            now in -1_000_000i64..1_000_000,
            // How long ago the heartbeat was: within a few milliseconds of the grace period
            // half the time, anything (or in the future) otherwise.
            near in any::<bool>(),
            offset in -3i64..=3,
            far in -2_000i64..200_000,
        ) {
            let ago = if near { grace_ms as i64 + offset } else { far };
            let grace = Duration::from_millis(grace_ms) + Duration::from_nanos(u64::from(grace_ns));
            let lease = Lease::of(Duration::from_secs(10), grace);
            let now = Timestamp::from_millis(now);
            let heartbeat = Timestamp::from_millis(now.as_millis() - ago);
            let plain = now.saturating_since(heartbeat) > grace;
            prop_assert_eq!(
                now.as_millis().saturating_sub(heartbeat.as_millis()) > lease.grace_ms,
                plain
            );
            prop_assert_eq!(lease.silent(heartbeat, now), plain);
        }
    }
}
