//! Measures NodeGroup validation (`nodemgr_core::validate`): one group with a growing
//! `nodeTemplate` (labels, annotations and taints, the part whose cost grows with input), and a
//! stream of whole documents typed and validated as `nodemgr validate` does.
//!
//! Run: `cargo bench -p nodemgr-benches --bench validate -- --warm-up-time 1 --measurement-time 3`.
//! Inputs are built deterministically from their index; no randomness is needed.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nodemgr_core::model::{
    NodeGroup, NodeTemplate, Taint, TaintEffect, parse_documents, parse_node_group,
};
use nodemgr_core::validate::{ValidationContext, validate_document, validate_node_group};

const FULL: &str = r#"
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: frontend}
spec:
  nodeType: CloudEphemeral
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: frontend}
    zones: [eu-1a, eu-1b, eu-1c]
    minPerZone: 1
    maxPerZone: 5
    standby: 10%
  cri: {type: Containerd, containerd: {maxConcurrentDownloads: 3}}
  kubelet:
    maxPods: 110
    containerLogMaxSize: 50Mi
    resourceReservation: {mode: Static, static: {cpu: 500m, memory: 1Gi}}
  disruptions:
    approvalMode: Automatic
    automatic:
      windows: [{from: "8:00", to: "15:00", days: [Tue, Sat]}]
  update: {maxConcurrent: 25%}
  fencing: {mode: Watchdog, watchdog: {timeout: 60s}}
  chaos: {mode: DrainAndDelete, period: 6h}
"#;

fn group_with_template(entries: usize) -> NodeGroup {
    let mut ng = parse_node_group(FULL).unwrap_or_default();
    let labels: BTreeMap<String, String> = (0..entries)
        .map(|i| {
            (
                format!("team-{i}.example.com/role-{i}"),
                format!("value-{i}"),
            )
        })
        .collect();
    let taints = (0..entries)
        .map(|i| Taint {
            effect: Some(match i % 3 {
                0 => TaintEffect::NoSchedule,
                1 => TaintEffect::PreferNoSchedule,
                _ => TaintEffect::NoExecute,
            }),
            key: format!("custom-{i}"),
            value: Some(format!("v{i}")),
        })
        .collect();
    ng.spec.node_template = Some(NodeTemplate {
        labels: Some(labels.clone()),
        annotations: Some(labels),
        taints: Some(taints),
    });
    ng
}

fn bench_template(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate_node_group/template_entries");
    for entries in [0usize, 10, 100, 1000] {
        let ng = group_with_template(entries);
        let ctx = ValidationContext {
            custom_toleration_keys: (0..entries).map(|i| format!("custom-{i}")).collect(),
            ..ValidationContext::default()
        };
        assert!(validate_node_group(&ng, &ctx).is_empty());
        group.throughput(Throughput::Elements(entries.max(1) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(entries), &ng, |b, ng| {
            b.iter(|| validate_node_group(black_box(ng), &ctx))
        });
    }
    group.finish();
}

fn bench_documents(c: &mut Criterion) {
    let Some(base) = parse_documents(FULL)
        .ok()
        .and_then(|docs| docs.into_iter().next())
        .map(|d| d.value)
    else {
        return;
    };
    let mut group = c.benchmark_group("validate_document/documents");
    for count in [1usize, 100, 1000] {
        let docs: Vec<_> = (0..count)
            .map(|i| {
                let mut doc = base.clone();
                doc["metadata"]["name"] = format!("group-{i}").into();
                // Every tenth document is broken: minPerZone above maxPerZone.
                if i % 10 == 9 {
                    doc["spec"]["cloudInstances"]["minPerZone"] = 9.into();
                }
                doc
            })
            .collect();
        let ctx = ValidationContext::default();
        group.throughput(Throughput::Elements(count as u64));
        group.bench_with_input(BenchmarkId::from_parameter(count), &docs, |b, docs| {
            b.iter(|| {
                docs.iter()
                    .map(|d| validate_document(black_box(d.clone()), &ctx).len())
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_template, bench_documents);
criterion_main!(benches);
