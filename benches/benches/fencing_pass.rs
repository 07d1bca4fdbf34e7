//! Measures one pass of the fencing controller, `nodemgr_core::fencing::plan_fencing`, over
//! 1,000 to 10,000 fencing-enabled nodes spread over 3 zones (goal: under 5 ms at 10,000), with
//! about 2 % of the nodes silent, a few in maintenance, some without a heartbeat, mixed modes and
//! node types. The node list is built once per size with a seeded xorshift RNG.
//!
//! Run: `cargo bench -p nodemgr-benches --bench fencing_pass -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nodemgr_core::fencing::{FencedNode, FencingConfig, plan_fencing};
use nodemgr_core::model::{FencingMode, NodeType, Timestamp};

/// xorshift64*: deterministic, dependency-free.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn cluster(size: usize, now: Timestamp) -> Vec<FencedNode> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    (0..size)
        .map(|i| {
            let roll = rng.below(100);
            // 2 % silent (older than 60 s), 1 % no heartbeat, the rest fresh (0..40 s old).
            let last_heartbeat = match roll {
                0..=1 => Some(now - Duration::from_secs(61 + rng.below(600))),
                2 => None,
                _ => Some(now - Duration::from_millis(rng.below(40_000))),
            };
            FencedNode {
                name: format!("node-{i:05}"),
                zone: format!("zone-{}", i % 3),
                group: format!("group-{}", i % 7),
                mode: if rng.below(10) == 0 {
                    FencingMode::Notify
                } else {
                    FencingMode::Watchdog
                },
                node_type: if rng.below(4) == 0 {
                    NodeType::Static
                } else {
                    NodeType::CloudEphemeral
                },
                last_heartbeat,
                maintenance: rng.below(50) == 0,
                timeout: (rng.below(5) == 0).then(|| Duration::from_secs(120)),
                has_pods: rng.below(2) == 0,
            }
        })
        .collect()
}

fn bench_fencing_pass(c: &mut Criterion) {
    let now = Timestamp::from_secs(1_000_000);
    let cfg = FencingConfig::default();
    let mut group = c.benchmark_group("fencing_pass");
    for size in [1_000usize, 3_000, 10_000] {
        let nodes = cluster(size, now);
        group.throughput(Throughput::Elements(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &nodes, |b, nodes| {
            b.iter(|| plan_fencing(black_box(nodes), &cfg, black_box(now)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_fencing_pass);
criterion_main!(benches);
