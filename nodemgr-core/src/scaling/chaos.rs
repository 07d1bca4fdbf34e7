//! The chaos monkey (issue 4 item 6; facts §7): a group with `chaos.mode: DrainAndDelete`
//! loses one random node per `chaos.period` (default `6h`), drained and deleted, so that its
//! workloads prove they survive node loss.
//!
//! # Rules
//! * **One victim in flight, cluster-wide.** The victim is marked with the annotation
//!   `node.deckhouse.io/chaos-monkey-victim` before its drain ([`ChaosDecision::mark`]), and no
//!   new victim is chosen while any node carries that annotation. Deckhouse's hook gates on a
//!   Machine *label* of that key but marks its victim with an *annotation* (facts §7, §11), so
//!   its gate never trips and a second victim can be picked while the first one is still
//!   draining; nodemgr checks the marker it sets.
//! * **Only a whole, ready group**: every node of the group Ready and none leaving, no machine
//!   upcoming, the desired count (summed over zones) above 1 and equal to the Ready count
//!   (Deckhouse: `desired > 1 && desired == ready`).
//! * **Once per period**: a group's next victim comes no sooner than `chaos.period` after its
//!   previous one; a group seen for the first time starts its period then (no victim at
//!   start-up). Deckhouse instead fires each minute with probability 1/period-minutes; the mean
//!   rate is the same, the spacing is not random.
//! * **Random victim**: the node is picked by the caller's `seed` mixed with the group name and
//!   the period number, so the core stays pure and a run is reproducible. When several groups
//!   are due, the most overdue goes first.
//!
//! A group with an invalid `chaos.period` gets no victim and a note.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::time::Duration;

use crate::model::{ChaosMode, Node, Timestamp, keys, parse_duration};

use super::bounds::zone_states;
use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::snapshot::{ClusterSnapshot, ScalingGroup};
use super::util::{Fnv, mix64};

/// Default `chaos.period`: 6 h.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(6 * 3600);

/// What the chaos monkey remembers between passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChaosState {
    /// Per group: when its current period started (its last victim, or when chaos was first
    /// seen enabled).
    pub period_start: BTreeMap<String, Timestamp>,
}

/// The chaos monkey's decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChaosDecision {
    /// The node to annotate `node.deckhouse.io/chaos-monkey-victim: ""` before anything else.
    pub mark: Option<String>,
    /// The victim's removal (after the mark).
    pub commands: Vec<ScalingCommand>,
    /// The state for the next pass.
    pub state: ChaosState,
    /// Why no victim.
    pub notes: Vec<String>,
}

/// The group's chaos period when `DrainAndDelete` is on; `Err` with a note for a bad period.
fn chaos_period(group: &ScalingGroup<'_>) -> Option<Result<Duration, String>> {
    let chaos = group.group.spec.chaos.as_ref()?;
    if chaos.mode != Some(ChaosMode::DrainAndDelete) {
        return None;
    }
    Some(match chaos.period.as_deref() {
        None => Ok(DEFAULT_PERIOD),
        Some(p) => parse_duration(p)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("chaos.period {p:?} is not a duration such as 6h or 30m")),
    })
}

/// Chooses at most one victim at `now` (see the module docs). `state` is the previous
/// decision's state; `seed` is the caller's randomness.
pub fn plan_chaos(
    snapshot: &ClusterSnapshot<'_>,
    state: &ChaosState,
    seed: u64,
    config: &ScalingConfig,
    now: Timestamp,
) -> ChaosDecision {
    let mut decision = ChaosDecision::default();
    let in_flight: Vec<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| n.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM))
        .map(|n| n.name.as_str())
        .collect();
    let states = zone_states(snapshot, config, now);
    // (overdue by, group, period) of the groups due.
    let mut due: Vec<(Duration, &ScalingGroup<'_>, Duration)> = Vec::new();
    for group in &snapshot.groups {
        let name = group.name();
        let period = match chaos_period(group) {
            None => continue,
            Some(Err(note)) => {
                decision.notes.push(format!("{name}: {note}"));
                continue;
            }
            Some(Ok(p)) => p,
        };
        let start = state.period_start.get(name).copied().unwrap_or(now);
        decision.state.period_start.insert(name.to_owned(), start);
        let elapsed = now.saturating_since(start);
        if elapsed < period {
            continue;
        }
        let zones = states.get(name).map(Vec::as_slice).unwrap_or_default();
        let desired: u32 = zones
            .iter()
            .filter(|z| z.in_group_zones)
            .map(|z| z.desired)
            .sum();
        let nodes: usize = zones.iter().map(|z| z.nodes.len()).sum();
        let ready: u32 = zones.iter().map(|z| z.ready()).sum();
        let leaving: usize = zones.iter().map(|z| z.leaving.len()).sum();
        let upcoming: u32 = zones.iter().map(|z| z.upcoming).sum();
        let whole = desired > 1
            && desired == ready
            && u32::try_from(nodes).ok() == Some(ready)
            && leaving == 0
            && upcoming == 0;
        if !whole {
            decision.notes.push(format!(
                "{name}: due, but not whole and ready (desired {desired}, nodes {nodes}, ready {ready}, leaving {leaving}, upcoming {upcoming})"
            ));
            continue;
        }
        due.push((elapsed - period, group, period));
    }
    if !in_flight.is_empty() {
        if !due.is_empty() {
            decision.notes.push(format!(
                "victim {} still in flight: no new victim",
                in_flight.join(", ")
            ));
        }
        return decision;
    }
    due.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name().cmp(b.1.name())));
    let Some(&(_, group, period)) = due.first() else {
        return decision;
    };
    let name = group.name();
    let mut candidates: Vec<&Node> = states
        .get(name)
        .into_iter()
        .flatten()
        .flat_map(|z| z.nodes.iter().copied())
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = Fnv::default();
    h.write(name.as_bytes());
    let period_number = u64::try_from(now.as_millis()).unwrap_or(0)
        / u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    let roll = mix64(seed ^ h.finish() ^ mix64(period_number));
    let Some(victim) = candidates
        .get((roll % candidates.len().max(1) as u64) as usize)
        .copied()
    else {
        return decision;
    };
    decision.mark = Some(victim.name.clone());
    decision.commands.push(ScalingCommand::RemoveNode {
        node: victim.name.clone(),
        group: name.to_owned(),
        zone: victim.zone().unwrap_or_default().to_owned(),
        why: Why::Chaos,
    });
    decision.state.period_start.insert(name.to_owned(), now);
    decision
}
