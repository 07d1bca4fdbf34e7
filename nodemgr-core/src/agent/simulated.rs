//! Bundles for simulated nodes: a group's configuration as a list of generations, each a
//! one-step bundle, for drivers that run the real agent against simulated machines (the
//! simulator, the test fleet).
//!
//! A generation's step, [`GENERATION_STEP`], carries a disruption key that names the latest
//! disruptive generation (none before the first one), so a node that has not applied a
//! disruptive generation yet asks for a disruption whatever came after it. What running the step does to a node is the strongest
//! impact of the generations between the one it runs and the desired one
//! ([`SimulatedGenerations::impact_from`]).

use crate::bashible::Step;
use crate::impact::ImpactKind;

use super::input::{BundleSteps, DesiredBundle};

/// Name of the one step of a simulated generation's bundle.
pub const GENERATION_STEP: &str = "100_configuration.sh";

/// One configuration generation of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedGeneration {
    /// Its index (0 = what the group's nodes start with).
    pub index: usize,
    /// A name for people (`workers-gen1`); it is in the step's script, so it shapes the
    /// checksum.
    pub name: String,
    /// The bundle's checksum (what a node reports when it runs this generation).
    pub checksum: String,
    /// What moving to it from the previous generation does.
    pub impact: ImpactKind,
    /// The bundle's steps, shared by every bundle handed out ([`Self::bundle`]): the agents
    /// that fetch it verify it without hashing it again.
    pub steps: BundleSteps,
}

impl SimulatedGeneration {
    /// The checksum, shortened for logs and timelines (12 hex digits).
    pub fn short(&self) -> &str {
        self.checksum.get(..12).unwrap_or(&self.checksum)
    }

    /// The bundle a node fetches; `rolling_update` as in [`DesiredBundle`].
    pub fn bundle(&self, rolling_update: bool) -> DesiredBundle {
        DesiredBundle {
            checksum: self.checksum.clone(),
            steps: self.steps.clone(),
            rolling_update,
        }
    }

    fn disruption_key(&self) -> Option<&str> {
        self.steps.iter().find_map(|s| s.disruption_key.as_deref())
    }
}

/// A group's generations, oldest first; the last one is desired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedGenerations {
    group: String,
    /// Every generation but the desired one.
    older: Vec<SimulatedGeneration>,
    desired: SimulatedGeneration,
}

impl SimulatedGenerations {
    /// A group with one generation, named `name`; `impact` is what applying it does to a node
    /// that never ran any of the group's generations (`ImpactKind::None` for a group whose
    /// nodes start with it).
    pub fn new(group: &str, name: &str, impact: ImpactKind) -> Self {
        Self {
            group: group.to_owned(),
            older: Vec::new(),
            desired: generation(group, 0, name, impact, None),
        }
    }

    /// A new desired generation named `name`, `impact` away from the previous one.
    pub fn push(&mut self, name: &str, impact: ImpactKind) -> &SimulatedGeneration {
        let index = self.desired.index + 1;
        let next = generation(&self.group, index, name, impact, Some(&self.desired));
        self.older.push(std::mem::replace(&mut self.desired, next));
        &self.desired
    }

    /// The desired (latest) generation.
    pub fn desired(&self) -> &SimulatedGeneration {
        &self.desired
    }

    /// Every generation, oldest first.
    pub fn all(&self) -> impl Iterator<Item = &SimulatedGeneration> {
        self.older.iter().chain(std::iter::once(&self.desired))
    }

    /// What moving from the generation with `checksum` to the desired one does: the strongest
    /// impact of the generations after it. A node with no or an unknown checksum (it never ran
    /// one of these generations) goes through all of them, generation 0's impact included.
    pub fn impact_from(&self, checksum: Option<&str>) -> ImpactKind {
        let skip = checksum
            .and_then(|c| self.all().position(|g| g.checksum == c))
            .map_or(0, |i| i + 1);
        self.all()
            .skip(skip)
            .map(|g| g.impact)
            .max()
            .unwrap_or(ImpactKind::None)
    }
}

/// Generation `index` of `group`: a disruptive one gets a new disruption key, the others keep
/// `previous`'s (none before the first disruptive generation).
fn generation(
    group: &str,
    index: usize,
    name: &str,
    impact: ImpactKind,
    previous: Option<&SimulatedGeneration>,
) -> SimulatedGeneration {
    let key = if impact == ImpactKind::Disruptive {
        Some(format!("{group}-disruption-{index}"))
    } else {
        previous
            .and_then(SimulatedGeneration::disruption_key)
            .map(str::to_owned)
    };
    let step = Step::new(
        GENERATION_STEP,
        format!("# {name}: generation {index} of group {group}\n"),
    );
    let steps = BundleSteps::new(vec![match key {
        Some(key) => step.with_disruption_key(key),
        None => step,
    }]);
    SimulatedGeneration {
        index,
        name: name.to_owned(),
        checksum: steps.computed_checksum().to_owned(),
        impact,
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_only_with_disruptive_generations() {
        let mut g = SimulatedGenerations::new("w", "w-gen0", ImpactKind::None);
        let k0 = g.desired().disruption_key().map(str::to_owned);
        g.push("w-gen1", ImpactKind::KubeletRestart);
        assert_eq!(g.desired().disruption_key().map(str::to_owned), k0);
        g.push("w-gen2", ImpactKind::Disruptive);
        assert_ne!(g.desired().disruption_key().map(str::to_owned), k0);
        let sums: Vec<String> = g.all().map(|x| x.checksum.clone()).collect();
        let (first, second) = (sums[0].clone(), sums[1].clone());
        assert_eq!(g.impact_from(Some(&first)), ImpactKind::Disruptive);
        assert_eq!(g.impact_from(Some(&second)), ImpactKind::Disruptive);
        g.push("w-gen3", ImpactKind::None);
        let third = sums[2].clone();
        assert_eq!(g.impact_from(Some(&third)), ImpactKind::None);
        assert_eq!(g.impact_from(None), ImpactKind::Disruptive);
        assert_eq!(g.desired().bundle(false).checksum, g.desired().checksum);
    }
}
