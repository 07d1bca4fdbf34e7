//! Measures the scaling policies at cluster scale (see `nodemgr_benches::scaling_world`):
//!
//! * `scale_up/plan`: `plan_scale_up` for 1,000, 2,500, 5,000 and 10,000 pending pods over 50
//!   CloudEphemeral groups in 3 zones with 2,000 existing nodes already 75–98 % full (goal:
//!   10,000 pods under 50 ms). The pods mix requests, nodeSelectors, required node affinity,
//!   tolerations of tainted groups, hostname anti-affinity, GPUs, and ~2 % that no group hosts.
//! * `scale_down/evaluate`: `plan_scale_down` over 5,000 nodes and ~150,000 pods, a quarter of
//!   the nodes underutilized long enough, with PDBs and blocking pods (goal: under 100 ms).
//!
//! Each measured call includes building the `ClusterSnapshot` from the object lists. Worlds
//! are built once per size from a fixed seed; the plan's shape is printed to stderr.
//!
//! Run: `cargo bench -p nodemgr-benches --bench scaling -- --warm-up-time 1 --measurement-time 5`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nodemgr_benches::scaling_world::{HEARTBEAT, ScalingWorld, scale_down_world, scale_up_world};
use nodemgr_core::scaling::{
    ClusterSnapshot, ScaleDownState, ScalingConfig, plan_scale_down, plan_scale_up,
};

fn snapshot(w: &ScalingWorld) -> ClusterSnapshot<'_> {
    ClusterSnapshot::new(&w.nodes, &w.pods, &w.pdbs, &w.groups, &w.classes, &w.zones)
}

fn scale_up(c: &mut Criterion) {
    let now = HEARTBEAT + Duration::from_secs(10);
    let config = ScalingConfig::default();
    let mut group = c.benchmark_group("scale_up");
    group.sample_size(20);
    for pending in [1_000usize, 2_500, 5_000, 10_000] {
        let world = scale_up_world(50, 2_000, pending, 0x5ca1_e00f);
        let plan = plan_scale_up(&snapshot(&world), &config, now);
        eprintln!(
            "scale_up {pending} pending ({} pods in all, {} nodes): {} fit existing nodes, {} new \
             nodes in {} (group, zone)s, {} unplaceable in {} classes, {} waiting for capacity",
            world.pods.len(),
            world.nodes.len(),
            plan.fits_existing.len(),
            plan.new_nodes.len(),
            plan.commands.len(),
            plan.unplaceable.iter().map(|u| u.pods.len()).sum::<usize>(),
            plan.unplaceable.len(),
            plan.waiting_for_capacity.len(),
        );
        group.throughput(Throughput::Elements(pending as u64));
        group.bench_function(BenchmarkId::new("plan", pending), |b| {
            b.iter(|| black_box(plan_scale_up(&snapshot(&world), &config, now)))
        });
    }
    group.finish();
}

fn scale_down(c: &mut Criterion) {
    let now = HEARTBEAT + Duration::from_secs(10);
    let config = ScalingConfig::default();
    let mut group = c.benchmark_group("scale_down");
    group.sample_size(20);
    let world = scale_down_world(50, 5_000, 150_000, 0x5ca1_edd0);
    // Every node has been underutilized (if it is) for an hour.
    let state = ScaleDownState {
        underutilized_since: world
            .nodes
            .iter()
            .map(|n| (n.name.clone(), now - Duration::from_secs(3600)))
            .collect::<BTreeMap<_, _>>(),
        last_scale_up: None,
    };
    let decision = plan_scale_down(&snapshot(&world), &state, &config, now);
    eprintln!(
        "scale_down {} nodes, {} pods: {} underutilized, {} removals ({} pods moved), {} notes",
        world.nodes.len(),
        world.pods.len(),
        decision.state.underutilized_since.len() + decision.removals.len(),
        decision.removals.len(),
        decision
            .removals
            .iter()
            .map(|r| r.moves.len())
            .sum::<usize>(),
        decision.notes.len(),
    );
    group.throughput(Throughput::Elements(world.nodes.len() as u64));
    group.bench_function(
        BenchmarkId::new(
            "evaluate",
            format!("{}n_{}p", world.nodes.len(), world.pods.len()),
        ),
        |b| b.iter(|| black_box(plan_scale_down(&snapshot(&world), &state, &config, now))),
    );
    group.finish();
}

criterion_group!(benches, scale_up, scale_down);
criterion_main!(benches);
