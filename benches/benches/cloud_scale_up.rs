//! Scales a CloudEphemeral group from 0 to 100 machines through nodemgr-cloud's `Ec2Client`
//! against a local moto_server (an EC2-compatible API; `testing::MotoServer` on 127.0.0.1):
//! 100 `create_instance` calls, at most `concurrency` in flight, then `list_group_instances`
//! until all 100 are running. Each round starts from an empty cloud (moto reset outside the
//! timing). Measures the time to converge and prints the API calls per converged node
//! (creation lookups, RunInstances, and the listings until converged). Variants:
//! - `lookup_c16`: the adapter's defaults (look up by name before creating, look-ups of a
//!   group coalesced, 16 in flight);
//! - `token_only_c16`: no lookup, idempotency from EC2's client token alone;
//! - `lookup_c64`: 64 in flight.
//!
//! Needs `scripts/install.d/20-moto.sh`; without moto_server it prints why and measures
//! nothing. Run: `cargo bench -p nodemgr-benches --bench cloud_scale_up`

#![allow(clippy::expect_used)] // a benchmark whose setup fails should stop loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use nodemgr_cloud::Ec2Client;
use nodemgr_cloud::testing::{MotoServer, REGION};
use nodemgr_core::ports::cloud::client_token;
use nodemgr_core::ports::{CloudApi, CreateInstance, InstanceClass, InstanceState};
use tokio::sync::Semaphore;

const NODES: usize = 100;
const ZONES: [&str; 3] = ["a", "b", "c"];
const GROUP: &str = "burst";

fn request(n: usize) -> CreateInstance {
    let machine = format!("{GROUP}-5d8f2-{n:05}");
    CreateInstance {
        group: GROUP.into(),
        zone: format!("{REGION}{}", ZONES[n % ZONES.len()]),
        client_token: client_token(&machine),
        machine,
        class: InstanceClass {
            instance_type: "m5.large".into(),
            image_id: "ami-0abcdef1234567890".into(),
            root_disk_gib: Some(50),
            ..InstanceClass::default()
        },
        user_data: "#!/bin/bash\necho bootstrap\n".into(),
    }
}

/// One round: returns the time to converge and the API calls it took.
async fn scale_up(ec2: Arc<Ec2Client>) -> (Duration, u64) {
    let start = Instant::now();
    let permits = Arc::new(Semaphore::new(ec2.config().concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..NODES {
        let (ec2, permits) = (ec2.clone(), permits.clone());
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("open semaphore");
            ec2.create_instance(&request(n)).await
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("creation task").expect("machine created");
    }
    loop {
        let listed = ec2.list_group_instances(GROUP).await.expect("listing");
        let running = listed
            .iter()
            .filter(|i| i.state == InstanceState::Running)
            .count();
        assert!(
            listed.len() <= NODES,
            "duplicate machines: {}",
            listed.len()
        );
        if running == NODES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (start.elapsed(), ec2.api_calls().total())
}

fn bench(c: &mut Criterion) {
    let moto = match MotoServer::start() {
        Ok(moto) => moto,
        Err(error) => {
            eprintln!("cloud_scale_up: skipped: {error}");
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("cloud_scale_up_0_to_100");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(60));
    let mut summaries = Vec::new();
    for (name, lookup, concurrency) in [
        ("lookup_c16", true, 16),
        ("token_only_c16", false, 16),
        ("lookup_c64", true, 64),
    ] {
        let mut config = moto.config();
        config.lookup_before_create = lookup;
        config.concurrency = concurrency;
        let mut rounds: Vec<(Duration, u64)> = Vec::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    moto.reset().expect("moto resets");
                    let ec2 = Arc::new(Ec2Client::new(config.clone()).expect("a client"));
                    let (took, calls) = runtime.block_on(scale_up(ec2));
                    rounds.push((took, calls));
                    total += took;
                }
                total
            });
        });
        summaries.push(summary(name, &rounds));
    }
    group.finish();
    for line in summaries {
        println!("{line}");
    }
}

fn summary(name: &str, rounds: &[(Duration, u64)]) -> String {
    let mut times: Vec<Duration> = rounds.iter().map(|r| r.0).collect();
    times.sort();
    let mut calls: Vec<u64> = rounds.iter().map(|r| r.1).collect();
    calls.sort_unstable();
    let (Some(time), Some(call)) = (times.get(times.len() / 2), calls.get(calls.len() / 2)) else {
        return format!("cloud_scale_up {name}: no rounds");
    };
    let per_node = |c: u64| c as f64 / NODES as f64;
    format!(
        "cloud_scale_up {name}: {} rounds of 0 -> {NODES} nodes: median {time:.2?} to converge, \
         median {call} API calls = {:.2} per converged node (min {:.2}, max {:.2})",
        rounds.len(),
        per_node(*call),
        per_node(calls[0]),
        per_node(calls[calls.len() - 1]),
    )
}

criterion_group!(benches, bench);
criterion_main!(benches);
