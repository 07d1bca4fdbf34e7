//! What the tests read out of PromQL expressions and Prometheus text: the metric names an
//! expression selects, and the label names of the samples of an exposition. Shared by
//! `observability.rs` (dashboard and alert queries against real `/metrics`) and `alerts.rs`
//! (which rule a promtool case feeds).

#![allow(dead_code)] // each test crate uses a part

use std::collections::{BTreeMap, BTreeSet};

/// Functions, aggregations and keywords: never metric names.
const WORDS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "rate",
    "irate",
    "increase",
    "delta",
    "changes",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "label_values",
    "bool",
];

/// Every metric name in a PromQL expression: identifiers outside `{…}`, `[…]` and strings that
/// are not functions (followed by `(`), keywords, or the label names of a `by`/`on` list.
pub fn metrics_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_braces = 0;
    let mut in_quotes = false;
    let mut word = String::new();
    let mut after_by = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if in_quotes {
            if c == '"' {
                in_quotes = false;
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            let is_number = word.chars().next().is_some_and(|f| f.is_ascii_digit());
            if in_braces == 0
                && !after_by
                && !is_number
                && !WORDS.contains(&word.as_str())
                && c != '('
            {
                out.insert(word.clone());
            }
            after_by = matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) || (after_by && c == ',');
            word.clear();
        }
        match c {
            '"' => in_quotes = true,
            '{' | '[' => in_braces += 1,
            '}' | ']' => in_braces -= 1,
            ')' => after_by = false,
            _ => {}
        }
    }
    out
}

/// The metric names of Prometheus text: of its samples, and of the families its `# TYPE`
/// lines declare (a labelled family without series yet).
pub fn metric_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| match l.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if !l.starts_with('#') && !l.is_empty() => l.split(['{', ' ']).next(),
            None => None,
        })
        .map(str::to_owned)
        .collect()
}

/// The label names of every sample of Prometheus text, by metric name (a sample without
/// labels gives its name with no label).
pub fn labels_by_metric(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_owned()).or_default();
        let Some(rest) = line[name_end..].strip_prefix('{') else {
            continue;
        };
        // name="value" pairs; values may hold escaped quotes.
        let mut chars = rest.chars().peekable();
        loop {
            let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
            let name = name.trim_start_matches(',').trim();
            if name.is_empty() || name.starts_with('}') {
                break;
            }
            labels.insert(name.to_owned());
            if chars.next() != Some('"') {
                break;
            }
            let mut escaped = false;
            for c in chars.by_ref() {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    break;
                }
            }
            if chars.peek() == Some(&'}') {
                break;
            }
        }
    }
    out
}

/// The `$labels.NAME` a Go template of an alert annotation reads.
pub fn template_labels(text: &str) -> BTreeSet<String> {
    text.split("$labels.")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn promql_metric_names_are_found() {
    assert_eq!(
        metrics_in(
            "sum by (node_group, action) (rate(nodemgr_update_actions_total{node_group=~\"$g\"}[5m])) * 60"
        ),
        BTreeSet::from(["nodemgr_update_actions_total".to_owned()])
    );
    assert_eq!(
        metrics_in("max by (node_group_name) (d8_node_group_desired - d8_node_group_ready) > 0"),
        BTreeSet::from([
            "d8_node_group_desired".to_owned(),
            "d8_node_group_ready".to_owned()
        ])
    );
    assert_eq!(
        metrics_in("max by (node) (a == 1) * on (node) group_left () max by (node) (b)"),
        BTreeSet::from(["a".to_owned(), "b".to_owned()])
    );
}

#[test]
fn sample_labels_are_read_with_escaped_values() {
    let text = "# TYPE a gauge\na{node=\"n\\\"1\",message=\"x, y=\\\"z\\\"\"} 1\nb 0\nc{} 2\n";
    let labels = labels_by_metric(text);
    assert_eq!(
        labels["a"],
        BTreeSet::from(["message".to_owned(), "node".to_owned()])
    );
    assert!(labels["b"].is_empty() && labels["c"].is_empty());
    assert_eq!(
        template_labels("{{ $labels.node }} of {{ $labels.node_group }}"),
        BTreeSet::from(["node".to_owned(), "node_group".to_owned()])
    );
}
