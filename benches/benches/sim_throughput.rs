//! Simulated time per wall time: how many virtual hours of a 1,000-node cluster with steady
//! updates the simulator runs per wall second. The cluster: 10 groups of 100 nodes in 3 zones
//! (maxConcurrent 10 %), 3,000 Deployment pods and a DaemonSet, a reconcile every 10 s, and a
//! new configuration for every group every 30 minutes (kubelet restarts and disruptive changes
//! with drains, alternating), over 2 virtual hours.
//!
//! Virtual hours per wall second = 2 / (the median in seconds).
//!
//! The benchmark runs on mimalloc, the allocator of the `nodemgr` CLI that runs `nodemgr
//! simulate` (docs/scale.md §5); `--features system-allocator` runs it on the C library's
//! allocator instead, as a program embedding `nodemgr-sim` without choosing one would.
//!
//! Run: `cargo bench -p nodemgr-benches --bench sim_throughput`

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use nodemgr_sim::{Scenario, run};
use serde_json::json;

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn cluster() -> Scenario {
    let mut groups = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut events = Vec::new();
    for g in 0..10 {
        let name = format!("pool{g}");
        groups.push(json!({
            "name": name, "nodes": 100, "zones": ["zone-a", "zone-b", "zone-c"],
            "spec": {"nodeType": "CloudPermanent", "update": {"maxConcurrent": "10%"},
                     "disruptions": {"approvalMode": "Automatic"}},
        }));
        workloads.push(json!({"name": format!("app{g}"), "kind": "Deployment", "replicas": 300, "group": name}));
        for round in 0..4 {
            let impact = if (g + round) % 2 == 0 {
                "kubelet-restart"
            } else {
                "disruptive"
            };
            events.push(json!({
                "at": format!("{}s", 60 + g * 120 + round * 1800),
                "change": {"group": name, "impact": impact},
            }));
        }
    }
    let value = json!({
        "name": "throughput", "duration": "2h", "reconcilePeriod": "10s",
        "agent": {"delay": "20s", "jitter": "10s", "kubeletRestart": "5s", "reboot": "60s"},
        "groups": groups, "workloads": workloads, "events": events,
    });
    match Scenario::from_yaml(&value.to_string()) {
        Ok(s) => s,
        Err(e) => panic!("the benchmark's scenario is invalid: {e}"),
    }
}

fn sim_throughput(c: &mut Criterion) {
    let scenario = cluster();
    let timeline = run(&scenario, 7);
    let updated = timeline.of_kind("agent.updated").count();
    eprintln!(
        "1,000 nodes, 2 virtual hours: {} events, {updated} node updates",
        timeline.events.len()
    );
    let mut group = c.benchmark_group("sim_throughput");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("1000_nodes_2h", |b| b.iter(|| black_box(run(&scenario, 7))));
    group.finish();
}

criterion_group!(benches, sim_throughput);
criterion_main!(benches);
