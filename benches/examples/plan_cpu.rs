//! CPU time of scale-up plans on Karpenter's mix (`scheduling_world::mix_world`, as the
//! `scheduling_mix` benchmark builds it): for comparing two builds on a machine busy with other
//! work, where wall-clock medians swing by more than the difference. It plans the same world N
//! times and prints the median and every run's CPU time of the planning thread (Linux's
//! `/proc/thread-self/schedstat`). Not a benchmark: `scheduling_mix` is (benches/README.md).
//!
//! `cargo run --release -p nodemgr-benches --example plan_cpu -- [pods] [runs]`
//! (20,000 pods and 10 runs by default); run two builds' binaries alternately.

use std::time::Duration;

use nodemgr_benches::scaling_world::HEARTBEAT;
use nodemgr_benches::scheduling_world::mix_world;
use nodemgr_core::scaling::{ClusterSnapshot, ScalingConfig, plan_scale_up};

/// CPU time the calling thread has run, in nanoseconds.
fn thread_cpu_ns() -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .map_err(|e| format!("cannot read /proc/thread-self/schedstat (Linux only): {e}"))?;
    text.split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| format!("unexpected /proc/thread-self/schedstat: {text:?}"))
}

fn arg(n: usize, default: usize) -> Result<usize, String> {
    match std::env::args().nth(n) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|e| format!("argument {n} ({s:?}) is not a count: {e}")),
    }
}

fn main() -> Result<(), String> {
    let pods = arg(1, 20_000)?;
    let runs = arg(2, 10)?.max(1);
    let w = mix_world(50, pods, 0x6b61_7270);
    let snapshot =
        ClusterSnapshot::new(&w.nodes, &w.pods, &w.pdbs, &w.groups, &w.classes, &w.zones);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let before = thread_cpu_ns()?;
        let plan = plan_scale_up(
            &snapshot,
            &ScalingConfig::default(),
            HEARTBEAT + Duration::from_secs(10),
        );
        times.push(thread_cpu_ns()?.saturating_sub(before));
        std::hint::black_box(plan);
    }
    times.sort_unstable();
    let ms = |t: u64| t as f64 / 1e6;
    let all: Vec<String> = times.iter().map(|&t| format!("{:.1}", ms(t))).collect();
    let median = times.get(runs / 2).copied().unwrap_or(0);
    println!(
        "{pods} pods: median {:.1} ms CPU over {runs} plans; all {}",
        ms(median),
        all.join(" ")
    );
    Ok(())
}
