//! Nodes, pods and proptest strategies shared by the placement tests.

use proptest::prelude::*;

use crate::model::{
    LabelSelector, LabelSelectorRequirement, Node, Pod, PodPhase, Quantity, SelectorOperator,
    Taint, TaintEffect, Toleration, keys,
};

pub(super) fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

pub(super) fn node(name: &str, cpu: &str, mem: &str, pods: i64) -> Node {
    Node {
        name: name.into(),
        ready: true,
        allocatable: [
            ("cpu".to_string(), q(cpu)),
            ("memory".to_string(), q(mem)),
            ("pods".to_string(), Quantity::units(pods)),
        ]
        .into(),
        ..Node::default()
    }
}

pub(super) fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
    Pod {
        namespace: "ns".into(),
        name: name.into(),
        requests: [("cpu".to_string(), q(cpu)), ("memory".to_string(), q(mem))].into(),
        phase: PodPhase::Pending,
        ..Pod::default()
    }
}

pub(super) fn arb_pod() -> impl Strategy<Value = Pod> {
    (
        0i64..3000,
        0i64..4096,
        prop::option::of(0i64..2),
        0usize..5,
        prop::bool::ANY,
        prop::bool::ANY,
        0usize..3,
    )
        .prop_map(|(cpu, mem_mi, gpu, sel, tolerate, anti, app)| {
            let mut p = Pod {
                namespace: "ns".into(),
                name: String::new(),
                requests: [
                    ("cpu".to_string(), Quantity(cpu)),
                    ("memory".to_string(), Quantity::units(mem_mi << 20)),
                ]
                .into(),
                ..Pod::default()
            };
            if let Some(g) = gpu {
                p.requests
                    .insert("nvidia.com/gpu".into(), Quantity::units(g));
            }
            match sel {
                1 => {
                    p.node_selector.insert("pool".into(), "a".into());
                }
                2 => {
                    p.required_node_affinity = vec![vec![LabelSelectorRequirement {
                        key: "pool".into(),
                        operator: Some(SelectorOperator::NotIn),
                        values: Some(vec!["a".into()]),
                    }]];
                }
                3 => {
                    p.node_selector
                        .insert(keys::LABEL_HOSTNAME.into(), "n2".into());
                }
                4 => {
                    p.required_node_affinity = vec![vec![LabelSelectorRequirement {
                        key: keys::LABEL_HOSTNAME.into(),
                        operator: Some(SelectorOperator::NotIn),
                        values: Some(vec!["n0".into()]),
                    }]];
                }
                _ => {}
            }
            if tolerate {
                p.tolerations.push(Toleration {
                    key: "dedicated".into(),
                    exists: true,
                    value: String::new(),
                    effect: None,
                });
            }
            p.labels.insert("app".into(), format!("app{app}"));
            if anti {
                p.hostname_anti_affinity = vec![LabelSelector {
                    match_labels: Some([("app".to_string(), format!("app{app}"))].into()),
                    match_expressions: None,
                }];
            }
            p
        })
}

pub(super) fn arb_node() -> impl Strategy<Value = Node> {
    (
        500i64..8000,
        512i64..16384,
        1i64..12,
        prop::option::of(0i64..3),
        0usize..3,
        prop::bool::ANY,
        prop::bool::ANY,
    )
        .prop_map(|(cpu, mem_mi, pods, gpu, pool, tainted, ready)| {
            let mut n = Node {
                ready,
                allocatable: [
                    ("cpu".to_string(), Quantity(cpu)),
                    ("memory".to_string(), Quantity::units(mem_mi << 20)),
                    ("pods".to_string(), Quantity::units(pods)),
                ]
                .into(),
                ..Node::default()
            };
            if let Some(g) = gpu {
                n.allocatable
                    .insert("nvidia.com/gpu".into(), Quantity::units(g));
            }
            if pool > 0 {
                n.labels
                    .insert("pool".into(), if pool == 1 { "a" } else { "b" }.into());
            }
            if tainted {
                n.taints.push(Taint {
                    key: "dedicated".into(),
                    value: None,
                    effect: Some(TaintEffect::NoSchedule),
                });
            }
            n
        })
}
