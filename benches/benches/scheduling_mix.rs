//! Measures scale-up planning on Karpenter's scheduling-benchmark mix
//! (`nodemgr_benches::scheduling_world`, docs/scheduling.md §5): `scheduling_mix/plan` runs
//! `plan_scale_up` for 1,000, 5,000, 10,000 and 20,000 pending pods — in sixths generic, zone
//! topology spread, hostname topology spread, hostname pod affinity, zone pod affinity and
//! hostname pod anti-affinity — over 50 CloudEphemeral groups × 3 zones with distinct instance
//! classes and no node yet, and reports pods per second (goal: ≥ 100,000 pods/s at 20,000
//! pods, 100× Karpenter's published ≈ 996 pods/s).
//!
//! Before measuring, each size's plan is replayed once against the slow reference
//! (`nodemgr_core::scaling::reference::replay_scale_up`): every placement must pass every
//! constraint, so the figure can never come from ignoring one. The plan's shape (pods placed,
//! nodes planned, pods left out and why) is printed to stderr. Each measured call includes
//! building the `ClusterSnapshot`; worlds are built once per size from a fixed seed.
//!
//! Run: `cargo bench -p nodemgr-benches --bench scheduling_mix`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nodemgr_benches::scaling_world::{HEARTBEAT, ScalingWorld};
use nodemgr_benches::scheduling_world::mix_world;
use nodemgr_core::scaling::reference::replay_scale_up;
use nodemgr_core::scaling::{ClusterSnapshot, ScalingConfig, plan_scale_up};

fn snapshot(w: &ScalingWorld) -> ClusterSnapshot<'_> {
    ClusterSnapshot::new(&w.nodes, &w.pods, &w.pdbs, &w.groups, &w.classes, &w.zones)
}

fn scheduling_mix(c: &mut Criterion) {
    let now = HEARTBEAT + Duration::from_secs(10);
    let config = ScalingConfig::default();
    let mut group = c.benchmark_group("scheduling_mix");
    group.sample_size(10);
    for pods in [1_000usize, 5_000, 10_000, 20_000] {
        let world = mix_world(50, pods, 0x6b61_7270);
        let plan = plan_scale_up(&snapshot(&world), &config, now);
        let started = Instant::now();
        let replayed = replay_scale_up(&snapshot(&world), &plan);
        let checked = started.elapsed();
        if let Err(e) = replayed {
            panic!("the plan for {pods} pods breaks a constraint: {e}");
        }
        let placed = plan.placement_order.len();
        assert!(
            placed * 10 >= pods * 8,
            "only {placed} of {pods} pods placed: the benchmark would not measure scheduling"
        );
        eprintln!(
            "scheduling_mix {pods} pods: {placed} placed on {} new nodes in {} (group, zone)s; \
             {} constrained, {} waiting for capacity, {} unplaceable; reference replay OK in {:.1}s",
            plan.new_nodes.len(),
            plan.commands.len(),
            plan.constrained.len(),
            plan.waiting_for_capacity.len(),
            plan.unplaceable.iter().map(|u| u.pods.len()).sum::<usize>(),
            checked.as_secs_f64(),
        );
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_function(BenchmarkId::new("plan", pods), |b| {
            b.iter(|| black_box(plan_scale_up(&snapshot(&world), &config, now)))
        });
    }
    group.finish();
}

criterion_group!(benches, scheduling_mix);
criterion_main!(benches);
