//! Measures `nodemgr_core::impact::impact_of`, the parameter-to-disruption matrix, on spec
//! pairs of growing size: a fully populated NodeGroup spec whose `nodeTemplate` carries
//! 0, 10, 100 and 1000 labels (the only unbounded part of a realistic spec), compared with
//! itself (no change) and with a copy whose `kubelet.maxPods`, `cri.type` and one label changed.
//! The specs are built deterministically, so no RNG is needed.
//!
//! Run: `cargo bench -p nodemgr-benches --bench impact -- --warm-up-time 1 --measurement-time 3`

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nodemgr_core::NodeGroupSpec;
use nodemgr_core::impact::impact_of;
use nodemgr_core::model::parse_node_group;

/// A full spec (every section set) with `labels` node-template labels.
fn spec(labels: usize) -> NodeGroupSpec {
    let yaml = r#"
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: worker}
spec:
  nodeType: CloudEphemeral
  nodeDrainTimeoutSecond: 600
  cri: {type: Containerd, containerd: {maxConcurrentDownloads: 3}}
  cloudInstances:
    zones: [a, b, c]
    minPerZone: 1
    maxPerZone: 5
    maxSurgePerZone: 1
    standby: "10%"
    standbyHolder: {overprovisioningRate: 50}
    classReference: {kind: AWSInstanceClass, name: worker}
  nodeTemplate:
    taints: [{key: dedicated, value: x, effect: NoSchedule}]
  chaos: {mode: Disabled}
  disruptions:
    approvalMode: Automatic
    automatic:
      drainBeforeApproval: true
      windows: [{from: "01:00", to: "03:00", days: [Mon, Tue]}]
  kubelet:
    maxPods: 110
    containerLogMaxSize: 50Mi
    resourceReservation: {mode: Static, static: {cpu: 100m, memory: 1Gi}}
    topologyManager: {enabled: true, policy: SingleNumaNode}
  update: {maxConcurrent: "25%"}
  fencing: {mode: Watchdog, watchdog: {timeout: 60s}}
"#;
    let Ok(group) = parse_node_group(yaml) else {
        panic!("benchmark spec does not parse");
    };
    let mut spec = group.spec;
    let template = spec.node_template.get_or_insert_with(Default::default);
    template.labels = Some(
        (0..labels)
            .map(|i| (format!("example.com/label-{i}"), format!("value-{i}")))
            .collect::<BTreeMap<_, _>>(),
    );
    spec
}

fn changed(base: &NodeGroupSpec) -> NodeGroupSpec {
    let mut new = base.clone();
    if let Some(kubelet) = new.kubelet.as_mut() {
        kubelet.max_pods = Some(250);
    }
    if let Some(cri) = new.cri.as_mut() {
        cri.type_ = Some(nodemgr_core::model::CriType::ContainerdV2);
    }
    if let Some(labels) = new.node_template.as_mut().and_then(|t| t.labels.as_mut()) {
        labels.insert("example.com/new".into(), "x".into());
    }
    new
}

fn bench_impact(c: &mut Criterion) {
    let mut group = c.benchmark_group("impact_of");
    for labels in [0_usize, 10, 100, 1000] {
        let old = spec(labels);
        let new = changed(&old);
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(BenchmarkId::new("unchanged", labels), &old, |b, old| {
            b.iter(|| impact_of(black_box(old), black_box(old)));
        });
        group.bench_with_input(
            BenchmarkId::new("changed", labels),
            &(old.clone(), new),
            |b, (old, new)| {
                b.iter(|| impact_of(black_box(old), black_box(new)));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_impact);
criterion_main!(benches);
