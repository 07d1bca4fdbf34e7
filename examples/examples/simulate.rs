//! Embed the simulator: load a scenario, run it with a seed, add a controller of your own that
//! watches the world, and read the timeline.
//!
//! `cargo run -p nodemgr-examples --example simulate [SCENARIO.yaml]`

use nodemgr_core::model::Timestamp;
use nodemgr_sim::{Controller, DEFAULT_SCENARIO, Scenario, Simulation, World};

/// A controller that only looks: the most nodes of a group ever cordoned at once.
struct MostCordoned {
    group: String,
    most: usize,
    next: Timestamp,
}

impl Controller for MostCordoned {
    fn name(&self) -> &str {
        "most-cordoned"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        let cordoned = world
            .nodes
            .values()
            .filter(|n| n.group == self.group && n.node.unschedulable)
            .count();
        self.most = self.most.max(cordoned);
        self.next = now + std::time::Duration::from_secs(1);
    }
}

fn main() -> anyhow::Result<()> {
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read scenario {path}: {e}"))?,
        None => DEFAULT_SCENARIO.to_owned(),
    };
    let scenario = Scenario::from_yaml(&text)?;
    let mut sim = Simulation::new(&scenario, 42);
    let group = scenario.groups[0].name.clone();
    sim.add_controller(Box::new(MostCordoned {
        group: group.clone(),
        most: 0,
        next: sim.now(),
    }));
    while sim.step() {}
    let world = sim.world();
    let timeline = &world.timeline;
    print!("{}", timeline.to_text());
    println!(
        "\n{} events; {} updates applied, {} evictions ({} refused), {} pods deleted",
        timeline.events.len(),
        world.stats.updates_completed,
        world.stats.evictions,
        world.stats.evictions_refused,
        world.stats.pod_deletions,
    );
    Ok(())
}
