//! Measures one update-planning pass at cluster scale: `plan_updates` over every group plus the
//! creation of a `Drain` for every node it tells to drain, on synthetic clusters with nodes in
//! every phase of an update (see `nodemgr_benches::update_world`).
//!
//! Sizes: 50 nodes / 1,500 pods / 1 group, 500 nodes / 15,000 pods / 10 groups and 5,000 nodes /
//! 150,000 pods / 100 groups;
//! the plan alone, and the plan with drains built from a prebuilt pods-by-node index (as an
//! executor with an informer index runs it) are also measured.
//!
//! Run: `cargo bench -p nodemgr-benches --bench update_planning -- --warm-up-time 1 --measurement-time 3`

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nodemgr_benches::update_world::update_world;
use nodemgr_core::model::{Pod, Timestamp};
use nodemgr_core::update::{drains_for, drains_for_indexed, plan_updates};

fn update_planning(c: &mut Criterion) {
    let now = Timestamp::from_secs(1_790_000_000);
    let mut group = c.benchmark_group("update_planning");
    for (groups, nodes, pods) in [(1, 50, 1_500), (10, 500, 15_000), (100, 5_000, 150_000)] {
        let world = update_world(groups, nodes, pods, 0x5eed_0003);
        let label = format!("{nodes}n_{pods}p_{groups}g");
        let commands = plan_updates(&world.groups, &world.desired, &world.nodes, now);
        let drains = drains_for(&commands, &world.groups, &world.nodes, &world.pods, now);
        eprintln!(
            "{label}: {} commands, {} drains over {} pods",
            commands.len(),
            drains.len(),
            drains.iter().map(|d| d.remaining().count()).sum::<usize>()
        );
        group.throughput(Throughput::Elements(nodes as u64));
        group.bench_function(BenchmarkId::new("plan", &label), |b| {
            b.iter(|| {
                black_box(plan_updates(
                    &world.groups,
                    &world.desired,
                    &world.nodes,
                    now,
                ))
            })
        });
        group.bench_function(BenchmarkId::new("plan_and_drains", &label), |b| {
            b.iter(|| {
                let commands = plan_updates(&world.groups, &world.desired, &world.nodes, now);
                let drains = drains_for(&commands, &world.groups, &world.nodes, &world.pods, now);
                black_box((commands, drains))
            })
        });
        // As an executor with an informer index of pods by node would run it.
        let mut index: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in &world.pods {
            if let Some(node) = pod.node_name.as_deref() {
                index.entry(node).or_default().push(pod);
            }
        }
        group.bench_function(BenchmarkId::new("plan_and_drains_indexed", &label), |b| {
            b.iter(|| {
                let commands = plan_updates(&world.groups, &world.desired, &world.nodes, now);
                let drains = drains_for_indexed(&commands, &world.groups, &world.nodes, now, |n| {
                    index.get(n).into_iter().flatten().copied()
                });
                black_box((commands, drains))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, update_planning);
criterion_main!(benches);
