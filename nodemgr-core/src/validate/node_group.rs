//! NodeGroup rules: the CRD schema of `nodegroups.deckhouse.io` (patterns, ranges, enums and
//! the oneOf bindings, docs/deckhouse.md §1.1) and the `nodegroup-policy.deckhouse.io` webhook (docs/deckhouse.md §1.2,
//! rules 1, 2, 4, 5, 7–14), for a create ([`validate_node_group`]) and an update
//! ([`validate_node_group_update`]).

use std::collections::{BTreeMap, BTreeSet};

use super::syntax;
use super::{Errors, FieldError, ValidationContext, unknown_value};
use crate::model::spec_facts::{self, MIG_PROFILE_PATTERN, SWAP_SIZE_PATTERN, WINDOW_TIME_PATTERN};
use crate::model::{
    ApprovalMode, ChaosMode, CloudInstances, Cri, CriType, DisruptionWindow, Disruptions,
    FencingMode, Gpu, GpuSharing, Kubelet, LabelSelector, NodeGroup, NodeTemplate, NodeType,
    Quantity, ResourceReservationMode, SelectorOperator, StaticInstances, SwapBehavior,
    TaintEffect, TopologyManagerPolicy, TopologyManagerScope, Weekday,
};

/// `kubernetesVersion` values `v1alpha1`/`v1alpha2` accept (docs/deckhouse.md §1.1; `v1` has no such field).
pub const ACCEPTED_KUBERNETES_VERSIONS: &[&str] = &["1.32", "1.33", "1.34", "1.35", "1.36"];

/// Kinds `cloudInstances.classReference.kind` accepts: one instance class per provider, and the
/// generic `InstanceClass` Deckhouse's schema admits besides them (docs/deckhouse.md §1.1), the
/// kind nodemgr's simulator and examples use. Validation and the CRD schema read this one list.
pub const INSTANCE_CLASS_KINDS: &[&str] = &[
    "OpenStackInstanceClass",
    "GCPInstanceClass",
    "VsphereInstanceClass",
    "AWSInstanceClass",
    "YandexInstanceClass",
    "AzureInstanceClass",
    "VCDInstanceClass",
    "ZvirtInstanceClass",
    "DynamixInstanceClass",
    "HuaweiCloudInstanceClass",
    "DVPInstanceClass",
    "InstanceClass",
];

/// Taint keys every Deckhouse component tolerates without configuration (webhook rule 7):
/// the documented `dedicated` keys and the control-plane role keys of master groups.
pub const BUILTIN_TOLERATION_KEYS: &[&str] = &[
    "dedicated",
    "dedicated.deckhouse.io",
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// `deckhouse.io` subdomains that `nodeTemplate.labels` may still use: Deckhouse's own docs
/// label system and frontend groups `node-role.deckhouse.io/<role>: ""`.
pub const RESERVED_DOMAIN_EXCEPTIONS: &[&str] = &["node-role.deckhouse.io"];

fn quote(key: &str) -> String {
    format!("[{key:?}]")
}

/// Checks a NodeGroup as Deckhouse does on CREATE: the schema and every webhook rule whose
/// input `ctx` provides. Returns all errors; empty = valid.
pub fn validate_node_group(ng: &NodeGroup, ctx: &ValidationContext) -> Vec<FieldError> {
    let mut e = Errors::default();
    check_name(&mut e, ng, ctx, true);
    check_spec(&mut e, ng, ctx);
    check_containerd_v2_support(&mut e, ng, None, ctx);
    e.0
}

/// Checks a change from `old` to `new` as Deckhouse does on UPDATE: every rule of
/// [`validate_node_group`] except the create-only name length vs cluster prefix (rule 1), then
/// the transition rules: `nodeType` is immutable (rule 9), `staticInstances.labelSelector` may
/// be added but never changed or removed (CEL), the CRI type may not change while nodes carry
/// `containerd-config=custom` (rule 12), and ContainerdV2 or memorySwap may not be switched on
/// while nodes carry `containerd-v2-unsupported` (rules 13, 14).
pub fn validate_node_group_update(
    old: &NodeGroup,
    new: &NodeGroup,
    ctx: &ValidationContext,
) -> Vec<FieldError> {
    let mut e = Errors::default();
    check_name(&mut e, new, ctx, false);
    check_spec(&mut e, new, ctx);
    check_containerd_v2_support(&mut e, new, Some(old), ctx);

    if let (Some(before), Some(after)) = (&old.spec.node_type, &new.spec.node_type)
        && before != after
    {
        e.push(
            "spec.nodeType",
            format!(
                "nodeType is immutable: it was {before} and cannot become {after}; \
                 create a new NodeGroup instead"
            ),
        );
    }
    let old_selector = old
        .spec
        .static_instances
        .as_ref()
        .and_then(|s| s.label_selector.as_ref());
    let new_selector = new
        .spec
        .static_instances
        .as_ref()
        .and_then(|s| s.label_selector.as_ref());
    if let Some(before) = old_selector
        && Some(before) != new_selector
    {
        e.push(
            "spec.staticInstances.labelSelector",
            if new_selector.is_none() {
                "labelSelector cannot be removed once set; keep the previous selector"
            } else {
                "labelSelector may be added but never changed; keep the previous selector or \
                 create a new NodeGroup"
            },
        );
    }
    let (old_cri, new_cri) = (old.spec.cri_type(), new.spec.cri_type());
    if old_cri != new_cri && !ctx.nodes_with_custom_containerd_config.is_empty() {
        e.push(
            "spec.cri.type",
            format!(
                "cri.type cannot change from {old_cri} to {new_cri} while nodes have label \
                 containerd-config=custom ({}); remove the custom containerd configuration first",
                ctx.nodes_with_custom_containerd_config.join(", ")
            ),
        );
    }
    e.0
}

fn check_name(e: &mut Errors, ng: &NodeGroup, ctx: &ValidationContext, create: bool) {
    let Some(name) = ng.metadata.name.as_deref() else {
        e.push("metadata.name", "required: every NodeGroup needs a name");
        return;
    };
    e.check("metadata.name", syntax::check_node_group_name(name));
    if create && let Some(prefix) = ctx.cluster_prefix_len {
        // A machine name is `<prefix>-<name>-<21 characters>`, at most 63: 63 − prefix − 1 −
        // len(name) − 21 ≥ 0. Checked: a prefix of any size gives a budget, never a wrap.
        let budget = 63usize.checked_sub(prefix.saturating_add(22));
        match budget {
            Some(budget) if name.len() <= budget => {}
            Some(budget) => e.push(
                "metadata.name",
                format!(
                    "{name:?} is {} characters long; with a cluster prefix of {prefix} \
                     characters at most {budget} are allowed (63 − prefix − 1 − name − 21 ≥ 0)",
                    name.len(),
                ),
            ),
            None => e.push(
                "metadata.name",
                format!(
                    "no NodeGroup name fits a cluster prefix of {prefix} characters: machine \
                     names are at most 63 characters (63 − prefix − 1 − name − 21 ≥ 0), so the \
                     prefix can be at most 41"
                ),
            ),
        }
    }
}

fn check_spec(e: &mut Errors, ng: &NodeGroup, ctx: &ValidationContext) {
    let spec = &ng.spec;
    match &spec.node_type {
        None => e.push(
            "spec.nodeType",
            format!("required; accepted: {}", NodeType::KNOWN.join(", ")),
        ),
        Some(t) if !t.is_known() => {
            let hint = match t.as_str() {
                "Cloud" => " (\"Cloud\" is the old spelling of CloudEphemeral)",
                "Hybrid" => {
                    " (\"Hybrid\" is the old spelling of CloudPermanent for master and the \
                     provider's groups, of CloudStatic for the others)"
                }
                _ => "",
            };
            e.push(
                "spec.nodeType",
                unknown_value(t.as_str(), "nodeType", NodeType::KNOWN) + hint,
            );
        }
        Some(t) => check_node_type_binding(e, t, ng),
    }
    if let Some(Err(error)) = spec
        .node_drain_timeout_second
        .map(spec_facts::check_drain_timeout)
    {
        e.push(spec_facts::DRAIN_TIMEOUT_PATH, error.to_string());
    }
    if let Some(gpu) = &spec.gpu {
        check_gpu(e, gpu);
    }
    if let Some(cri) = &spec.cri {
        check_cri(e, cri);
    }
    if let Some(s) = &spec.static_instances {
        check_static_instances(e, s);
    }
    if let Some(c) = &spec.cloud_instances {
        check_cloud_instances(e, c, ctx);
    }
    if let Some(t) = &spec.node_template {
        check_node_template(e, t, ctx);
    }
    if let Some(chaos) = &spec.chaos {
        if let Some(mode) = &chaos.mode
            && !mode.is_known()
        {
            e.push(
                "spec.chaos.mode",
                unknown_value(mode.as_str(), "chaos mode", ChaosMode::KNOWN),
            );
        }
        if let Some(Err(error)) = chaos.period.as_deref().map(spec_facts::parse_chaos_period) {
            e.push("spec.chaos.period", error.to_string());
        }
    }
    if let Some(d) = &spec.disruptions {
        check_disruptions(e, d, spec.node_type.as_ref());
    }
    if let Some(k) = &spec.kubelet {
        check_kubelet(e, k);
    }
    if let Some(Err(error)) = spec
        .update
        .as_ref()
        .and_then(|u| u.max_concurrent.as_ref())
        .map(spec_facts::parse_max_concurrent)
    {
        e.push(spec_facts::MAX_CONCURRENT_PATH, error.to_string());
    }
    if let Some(f) = &spec.fencing {
        match &f.mode {
            None => e.push(
                "spec.fencing.mode",
                format!(
                    "required when fencing is set; accepted: {}",
                    FencingMode::KNOWN.join(", ")
                ),
            ),
            Some(m) if !m.is_known() => e.push(
                "spec.fencing.mode",
                unknown_value(m.as_str(), "fencing mode", FencingMode::KNOWN),
            ),
            Some(_) => {}
        }
        if let Some(Err(error)) = f
            .watchdog
            .as_ref()
            .and_then(|w| w.timeout.as_deref())
            .map(spec_facts::parse_watchdog_timeout)
        {
            e.push("spec.fencing.watchdog.timeout", error.to_string());
        }
    }
    check_old_version_fields(e, spec);
}

/// `kubernetesVersion` and `static`: fields of the old versions that the conversion to `v1`
/// drops (docs/admission-and-conversion.md §1.1), so a document is checked for them before it is
/// converted, as the API server's schema of its version would.
pub(crate) fn check_old_version_fields(e: &mut Errors, spec: &crate::model::NodeGroupSpec) {
    if let Some(v) = &spec.kubernetes_version
        && !ACCEPTED_KUBERNETES_VERSIONS.contains(&v.as_str())
    {
        e.push(
            "spec.kubernetesVersion",
            format!(
                "{v:?} is not a supported Kubernetes version; accepted: {} (v1 drops the \
                 field and takes the version from the cluster configuration)",
                ACCEPTED_KUBERNETES_VERSIONS.join(", ")
            ),
        );
    }
    if let Some(cidrs) = spec
        .static_
        .as_ref()
        .and_then(|s| s.internal_network_cidrs.as_ref())
    {
        for (i, c) in cidrs.iter().enumerate() {
            if !syntax::is_ipv4_cidr(c) {
                e.push(
                    format!("spec.static.internalNetworkCIDRs[{i}]"),
                    format!("{c:?} is not an IPv4 CIDR such as \"10.0.0.0/24\""),
                );
            }
        }
    }
}

fn check_node_type_binding(e: &mut Errors, t: &NodeType, ng: &NodeGroup) {
    let spec = &ng.spec;
    match t {
        NodeType::CloudEphemeral => {
            if spec.cloud_instances.is_none() {
                e.push(
                    "spec.cloudInstances",
                    "required for nodeType CloudEphemeral: set classReference, minPerZone and \
                     maxPerZone",
                );
            }
            if spec.static_instances.is_some() {
                e.push(
                    "spec.staticInstances",
                    "not allowed for nodeType CloudEphemeral; staticInstances is for Static \
                     and CloudStatic groups",
                );
            }
        }
        NodeType::Static | NodeType::CloudStatic => {
            if spec.cloud_instances.is_some() {
                e.push(
                    "spec.cloudInstances",
                    format!(
                        "not allowed for nodeType {t}; cloudInstances is for CloudEphemeral \
                         groups only"
                    ),
                );
            }
        }
        NodeType::CloudPermanent => {
            if spec.static_instances.is_some() {
                e.push(
                    "spec.staticInstances",
                    "not allowed for nodeType CloudPermanent; staticInstances is for Static \
                     and CloudStatic groups",
                );
            }
        }
        NodeType::Unknown(_) => {}
    }
}

fn check_gpu(e: &mut Errors, gpu: &Gpu) {
    let sharing = match &gpu.sharing {
        None => {
            e.push(
                "spec.gpu.sharing",
                format!(
                    "required when gpu is set; accepted: {}",
                    GpuSharing::KNOWN.join(", ")
                ),
            );
            None
        }
        Some(s) if !s.is_known() => {
            e.push(
                "spec.gpu.sharing",
                unknown_value(s.as_str(), "GPU sharing mode", GpuSharing::KNOWN),
            );
            None
        }
        Some(s) => Some(s),
    };
    if let Some(sharing) = sharing {
        let bound = [
            (
                "timeSlicing",
                gpu.time_slicing.is_some(),
                GpuSharing::TimeSlicing,
            ),
            ("mig", gpu.mig.is_some(), GpuSharing::Mig),
            ("exclusive", gpu.exclusive.is_some(), GpuSharing::Exclusive),
        ];
        for (field, present, owner) in bound {
            if present && *sharing != owner {
                e.push(
                    format!("spec.gpu.{field}"),
                    format!("only allowed with sharing {owner}, but sharing is {sharing}"),
                );
            }
        }
    }
    if let Some(ts) = &gpu.time_slicing {
        e.range(
            "spec.gpu.timeSlicing.partitionCount",
            ts.partition_count,
            1,
            100,
        );
    }
    if let Some(mig) = &gpu.mig {
        let parted = mig
            .parted_config
            .as_deref()
            .unwrap_or(spec_facts::MIG_PARTED_CONFIG_DEFAULT);
        if !syntax::is_mig_parted_config(parted) {
            e.push(
                "spec.gpu.mig.partedConfig",
                format!(
                    "{parted:?} is not accepted; use \"all-<profile>\" such as \"all-1g.5gb\" \
                     or \"custom\" with customConfigs"
                ),
            );
        }
        let custom = parted == "custom";
        match (&mig.custom_configs, custom) {
            (None, true) => e.push(
                "spec.gpu.mig.customConfigs",
                "required when partedConfig is \"custom\"",
            ),
            (Some(_), false) => e.push(
                "spec.gpu.mig.customConfigs",
                format!(
                    "only allowed when partedConfig is \"custom\", but it is {parted:?}; \
                     remove customConfigs or set partedConfig: custom"
                ),
            ),
            _ => {}
        }
        for (i, cfg) in mig.custom_configs.iter().flatten().enumerate() {
            let base = format!("spec.gpu.mig.customConfigs[{i}]");
            e.at_least(&format!("{base}.index"), cfg.index, 0);
            if cfg.index.is_none() {
                e.push(format!("{base}.index"), "required: the GPU index (>= 0)");
            }
            match &cfg.slices {
                None => e.push(
                    format!("{base}.slices"),
                    "required: at least one slice {profile, count}",
                ),
                Some(slices) if slices.is_empty() => e.push(
                    format!("{base}.slices"),
                    "must list at least one slice {profile, count}",
                ),
                Some(_) => {}
            }
            for (j, slice) in cfg.slices.iter().flatten().enumerate() {
                let sp = format!("{base}.slices[{j}]");
                match &slice.profile {
                    None => e.push(format!("{sp}.profile"), "required, e.g. \"1g.5gb\""),
                    Some(p) if !syntax::is_mig_profile(p) => e.push(
                        format!("{sp}.profile"),
                        format!(
                            "{p:?} is not a MIG profile; use \"<n>g.<m>gb\" with an optional \
                             \".me\" such as \"1g.5gb\" (pattern {MIG_PROFILE_PATTERN})"
                        ),
                    ),
                    Some(_) => {}
                }
                e.range(&format!("{sp}.count"), slice.count, 1, 7);
            }
        }
    }
}

fn check_cri(e: &mut Errors, cri: &Cri) {
    let Some(t) = &cri.type_ else {
        // The type then comes from the cluster's defaultCRI, which is not known here.
        return;
    };
    match t {
        CriType::Docker => e.push(
            "spec.cri.type",
            "Docker is no longer supported; use Containerd, ContainerdV2 or NotManaged",
        ),
        CriType::Unknown(other) => {
            e.push(
                "spec.cri.type",
                unknown_value(other, "CRI type", CriType::KNOWN),
            );
            return;
        }
        _ => {}
    }
    let bound = [
        ("containerd", cri.containerd.is_some(), CriType::Containerd),
        (
            "containerdV2",
            cri.containerd_v2.is_some(),
            CriType::ContainerdV2,
        ),
        ("notManaged", cri.not_managed.is_some(), CriType::NotManaged),
        ("docker", cri.docker.is_some(), CriType::Docker),
    ];
    for (field, present, owner) in bound {
        if present && *t != owner {
            e.push(
                format!("spec.cri.{field}"),
                format!("only allowed with cri.type {owner}, but cri.type is {t}"),
            );
        }
    }
}

fn check_selector(e: &mut Errors, base: &str, selector: &LabelSelector) {
    for (k, v) in selector.match_labels.iter().flatten() {
        let path = format!("{base}.matchLabels{}", quote(k));
        e.check(path.clone(), syntax::check_qualified_name(k));
        e.check(path, syntax::check_label_value(v));
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let path = format!("{base}.matchExpressions[{i}]");
        e.check(
            format!("{path}.key"),
            syntax::check_qualified_name(&req.key),
        );
        let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
        match &req.operator {
            None => e.push(
                format!("{path}.operator"),
                format!("required; accepted: {}", SelectorOperator::KNOWN.join(", ")),
            ),
            Some(SelectorOperator::Unknown(op)) => e.push(
                format!("{path}.operator"),
                unknown_value(op, "selector operator", SelectorOperator::KNOWN),
            ),
            Some(op @ (SelectorOperator::In | SelectorOperator::NotIn)) if !has_values => e.push(
                format!("{path}.values"),
                format!("operator {op} needs a non-empty list of values"),
            ),
            Some(op @ (SelectorOperator::Exists | SelectorOperator::DoesNotExist))
                if req.values.is_some() =>
            {
                e.push(
                    format!("{path}.values"),
                    format!("operator {op} takes no values; remove the list"),
                )
            }
            Some(_) => {}
        }
        for (j, v) in req.values.iter().flatten().enumerate() {
            e.check(format!("{path}.values[{j}]"), syntax::check_label_value(v));
        }
    }
}

fn check_static_instances(e: &mut Errors, s: &StaticInstances) {
    if let Some(c) = s.count
        && c < 0
    {
        e.push(
            "spec.staticInstances.count",
            format!("{c} is negative; must be >= 0"),
        );
    }
    if let Some(sel) = &s.label_selector {
        check_selector(e, "spec.staticInstances.labelSelector", sel);
    }
}

fn check_cloud_instances(e: &mut Errors, c: &CloudInstances, ctx: &ValidationContext) {
    const BASE: &str = "spec.cloudInstances";
    match &c.class_reference {
        None => e.push(
            format!("{BASE}.classReference"),
            format!(
                "required: {{kind, name}} of the instance class; kind is one of {}",
                INSTANCE_CLASS_KINDS.join(", ")
            ),
        ),
        Some(r) => {
            if !INSTANCE_CLASS_KINDS.contains(&r.kind.as_str()) {
                e.push(
                    format!("{BASE}.classReference.kind"),
                    format!(
                        "{:?} is not an instance class kind; accepted: {}",
                        r.kind,
                        INSTANCE_CLASS_KINDS.join(", ")
                    ),
                );
            }
            if r.name.is_empty() {
                e.push(
                    format!("{BASE}.classReference.name"),
                    "required: the name of the instance class",
                );
            }
        }
    }
    for (field, value) in [
        ("minPerZone", c.min_per_zone),
        ("maxPerZone", c.max_per_zone),
    ] {
        match value {
            None => e.push(
                format!("{BASE}.{field}"),
                "required: an integer >= 0 (nodes per zone)",
            ),
            Some(v) if v < 0 => e.push(
                format!("{BASE}.{field}"),
                format!("{v} is negative; must be >= 0"),
            ),
            Some(_) => {}
        }
    }
    if let (Some(min), Some(max)) = (c.min_per_zone, c.max_per_zone)
        && min > max
        && min >= 0
        && max >= 0
    {
        e.push(
            format!("{BASE}.minPerZone"),
            format!("{min} is greater than maxPerZone {max}; minPerZone must be <= maxPerZone"),
        );
    }
    e.at_least(
        &format!("{BASE}.maxUnavailablePerZone"),
        c.max_unavailable_per_zone,
        0,
    );
    e.at_least(&format!("{BASE}.maxSurgePerZone"), c.max_surge_per_zone, 0);
    if let Some(Err(error)) = c.standby.as_ref().map(spec_facts::parse_standby) {
        e.push(format!("{BASE}.standby"), error.to_string());
    }
    if let Some(h) = &c.standby_holder {
        e.range(
            &format!("{BASE}.standbyHolder.overprovisioningRate"),
            h.overprovisioning_rate,
            1,
            80,
        );
    }
    let mut seen = BTreeSet::new();
    for (i, z) in c.zones.iter().flatten().enumerate() {
        let path = format!("{BASE}.zones[{i}]");
        if z.is_empty() {
            e.push(path, "must not be empty");
            continue;
        }
        if !seen.insert(z.as_str()) {
            e.push(path, format!("zone {z:?} is listed twice"));
            continue;
        }
        if let Some(known) = &ctx.known_zones
            && !known.contains(z)
        {
            let list: Vec<&str> = known.iter().map(String::as_str).collect();
            e.push(
                path,
                format!(
                    "zone {z:?} does not exist in the provider configuration; known zones: {}",
                    list.join(", ")
                ),
            );
        }
    }
}

fn check_reserved_domain(e: &mut Errors, path: &str, key: &str, what: &str) {
    if let Some(domain) = syntax::deckhouse_domain_prefix(key)
        && !RESERVED_DOMAIN_EXCEPTIONS.contains(&domain)
    {
        e.push(
            path,
            format!(
                "{what} key {key:?} uses the deckhouse.io domain, which Deckhouse reserves for \
                 its own {what}s (only {} may be set here); use your own domain",
                RESERVED_DOMAIN_EXCEPTIONS.join(", ")
            ),
        );
    }
}

fn check_map(e: &mut Errors, base: &str, map: &BTreeMap<String, String>, labels: bool) {
    let what = if labels { "label" } else { "annotation" };
    for (k, v) in map {
        let key = syntax::check_qualified_name(k);
        let value = if labels {
            syntax::check_label_value(v)
        } else {
            Ok(())
        };
        let reserved = syntax::deckhouse_domain_prefix(k)
            .is_some_and(|d| !RESERVED_DOMAIN_EXCEPTIONS.contains(&d));
        if key.is_ok() && value.is_ok() && !reserved {
            continue;
        }
        // Paths are only formatted for entries that are wrong.
        let path = format!("{base}{}", quote(k));
        e.check(path.clone(), key);
        e.check(path.clone(), value);
        check_reserved_domain(e, &path, k, what);
    }
}

fn check_node_template(e: &mut Errors, t: &NodeTemplate, ctx: &ValidationContext) {
    if let Some(labels) = &t.labels {
        check_map(e, "spec.nodeTemplate.labels", labels, true);
    }
    if let Some(annotations) = &t.annotations {
        check_map(e, "spec.nodeTemplate.annotations", annotations, false);
    }
    let Some(taints) = &t.taints else {
        return;
    };
    let tolerable: BTreeSet<&str> = BUILTIN_TOLERATION_KEYS
        .iter()
        .copied()
        .chain(ctx.custom_toleration_keys.iter().map(String::as_str))
        .collect();
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let base = |i: usize| format!("spec.nodeTemplate.taints[{i}]");
    for (i, taint) in taints.iter().enumerate() {
        match &taint.effect {
            None => e.push(
                format!("{}.effect", base(i)),
                format!("required; accepted: {}", TaintEffect::KNOWN.join(", ")),
            ),
            Some(eff) if !eff.is_known() => e.push(
                format!("{}.effect", base(i)),
                unknown_value(eff.as_str(), "taint effect", TaintEffect::KNOWN),
            ),
            Some(_) => {}
        }
        if taint.key.is_empty() {
            e.push(format!("{}.key", base(i)), "required: the taint key");
        } else if let Err(m) = syntax::check_qualified_name(&taint.key) {
            e.push(format!("{}.key", base(i)), m);
        } else if !tolerable.contains(taint.key.as_str()) {
            let mut keys: Vec<&str> = BUILTIN_TOLERATION_KEYS.to_vec();
            keys.extend(ctx.custom_toleration_keys.iter().map(String::as_str));
            e.push(
                format!("{}.key", base(i)),
                format!(
                    "taint key {:?} is not tolerated by Deckhouse components, so they could not \
                     run on these nodes; use one of {} or add it to \
                     global.modules.placement.customTolerationKeys",
                    taint.key,
                    keys.join(", ")
                ),
            );
        }
        if let Some(v) = &taint.value
            && let Err(m) = syntax::check_label_value(v)
        {
            e.push(format!("{}.value", base(i)), m);
        }
        let effect = taint.effect.as_ref().map_or("", TaintEffect::as_str);
        match seen.entry((taint.key.as_str(), effect)) {
            std::collections::btree_map::Entry::Occupied(first) => e.push(
                base(i),
                format!(
                    "duplicate taint {}:{effect}, already at taints[{}]; a key may appear \
                     once per effect",
                    taint.key,
                    first.get()
                ),
            ),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
    }
}

fn check_windows(e: &mut Errors, base: &str, windows: &[DisruptionWindow]) {
    for (i, w) in windows.iter().enumerate() {
        let path = format!("{base}.windows[{i}]");
        for (field, value) in [("from", &w.from), ("to", &w.to)] {
            if value.is_empty() {
                e.push(
                    format!("{path}.{field}"),
                    "required: a UTC time such as \"8:00\"",
                );
            } else if crate::window::parse_time_of_day(value).is_err() {
                e.push(
                    format!("{path}.{field}"),
                    format!(
                        "{value:?} is not a time of day; use H:MM or HH:MM in UTC, 0:00 to \
                         23:59 (pattern {WINDOW_TIME_PATTERN})"
                    ),
                );
            }
        }
        for (j, d) in w.days.iter().flatten().enumerate() {
            if !d.is_known() {
                e.push(
                    format!("{path}.days[{j}]"),
                    unknown_value(d.as_str(), "day", Weekday::KNOWN),
                );
            }
        }
    }
}

fn check_disruptions(e: &mut Errors, d: &Disruptions, node_type: Option<&NodeType>) {
    const BASE: &str = "spec.disruptions";
    let mode = d.approval_mode.clone().unwrap_or(ApprovalMode::Automatic);
    match &mode {
        ApprovalMode::Unknown(m) => e.push(
            format!("{BASE}.approvalMode"),
            unknown_value(m, "approval mode", ApprovalMode::KNOWN),
        ),
        ApprovalMode::Automatic => {
            if d.rolling_update.is_some() {
                e.push(
                    format!("{BASE}.rollingUpdate"),
                    "only allowed with approvalMode RollingUpdate, but approvalMode is Automatic",
                );
            }
        }
        ApprovalMode::RollingUpdate => {
            if d.automatic.is_some() {
                e.push(
                    format!("{BASE}.automatic"),
                    "only allowed with approvalMode Automatic, but approvalMode is RollingUpdate",
                );
            }
            if let Some(t) = node_type
                && *t != NodeType::CloudEphemeral
                && t.is_known()
            {
                e.push(
                    format!("{BASE}.approvalMode"),
                    format!(
                        "RollingUpdate replaces machines and is only allowed for nodeType \
                         CloudEphemeral, not {t}; use Automatic or Manual"
                    ),
                );
            }
        }
        ApprovalMode::Manual => {
            for (field, present) in [
                ("automatic", d.automatic.is_some()),
                ("rollingUpdate", d.rolling_update.is_some()),
            ] {
                if present {
                    e.push(
                        format!("{BASE}.{field}"),
                        "not allowed with approvalMode Manual; remove it or change approvalMode",
                    );
                }
            }
        }
    }
    if let Some(w) = d.automatic.as_ref().and_then(|a| a.windows.as_ref()) {
        check_windows(e, &format!("{BASE}.automatic"), w);
    }
    if let Some(w) = d.rolling_update.as_ref().and_then(|a| a.windows.as_ref()) {
        check_windows(e, &format!("{BASE}.rollingUpdate"), w);
    }
}

fn check_quantity(e: &mut Errors, path: &str, value: &str) {
    if let Err(err) = Quantity::parse(value) {
        e.push(path, err.to_string());
    } else if value.trim_start().starts_with('-') {
        e.push(path, format!("{value:?} is negative; must be >= 0"));
    }
}

fn check_kubelet(e: &mut Errors, k: &Kubelet) {
    const BASE: &str = "spec.kubelet";
    if let Some(m) = k.max_pods
        && m <= 0
    {
        e.push(
            format!("{BASE}.maxPods"),
            format!("{m} is not accepted; must be > 0"),
        );
    }
    if let Some(dir) = &k.root_dir
        && !dir.starts_with('/')
    {
        e.push(
            format!("{BASE}.rootDir"),
            format!("{dir:?} is not an absolute path; use one such as \"/var/lib/kubelet\""),
        );
    }
    if let Some(size) = &k.container_log_max_size {
        check_quantity(e, &format!("{BASE}.containerLogMaxSize"), size);
    }
    e.range(
        &format!("{BASE}.containerLogMaxFiles"),
        k.container_log_max_files,
        1,
        20,
    );
    let reservation_mode = k
        .resource_reservation
        .as_ref()
        .and_then(|r| r.mode.clone())
        .unwrap_or(ResourceReservationMode::Auto);
    if let Some(r) = &k.resource_reservation {
        let path = format!("{BASE}.resourceReservation");
        if let ResourceReservationMode::Unknown(m) = &reservation_mode {
            e.push(
                format!("{path}.mode"),
                unknown_value(
                    m,
                    "resource reservation mode",
                    ResourceReservationMode::KNOWN,
                ),
            );
        }
        let s = r.static_.as_ref();
        let any = s.is_some_and(|s| {
            s.cpu.is_some() || s.memory.is_some() || s.ephemeral_storage.is_some()
        });
        if reservation_mode == ResourceReservationMode::Static && !any {
            e.push(
                format!("{path}.static"),
                "mode Static needs static with at least one of cpu, memory, ephemeralStorage",
            );
        }
        if let Some(s) = s {
            for (field, value) in [
                ("cpu", &s.cpu),
                ("memory", &s.memory),
                ("ephemeralStorage", &s.ephemeral_storage),
            ] {
                if let Some(v) = value {
                    check_quantity(e, &format!("{path}.static.{field}"), v);
                }
            }
        }
    }
    if let Some(t) = &k.topology_manager {
        let path = format!("{BASE}.topologyManager");
        if let Some(TopologyManagerScope::Unknown(s)) = &t.scope {
            e.push(
                format!("{path}.scope"),
                unknown_value(s, "topology manager scope", TopologyManagerScope::KNOWN),
            );
        }
        if let Some(TopologyManagerPolicy::Unknown(p)) = &t.policy {
            e.push(
                format!("{path}.policy"),
                unknown_value(p, "topology manager policy", TopologyManagerPolicy::KNOWN),
            );
        }
        if t.enabled == Some(true) && reservation_mode == ResourceReservationMode::Off {
            e.push(
                format!("{path}.enabled"),
                "the topology manager needs reserved resources (static CPU and memory \
                 managers), but resourceReservation.mode is Off; use Auto or Static",
            );
        }
    }
    if let Some(s) = &k.memory_swap {
        let path = format!("{BASE}.memorySwap");
        if let Some(SwapBehavior::Unknown(b)) = &s.swap_behavior {
            e.push(
                format!("{path}.swapBehavior"),
                unknown_value(b, "swap behavior", SwapBehavior::KNOWN),
            );
        }
        e.range(&format!("{path}.swappiness"), s.swappiness, 0, 100);
        let size = s.limited_swap.as_ref().and_then(|l| l.size.as_ref());
        if s.swap_behavior == Some(SwapBehavior::LimitedSwap) && size.is_none() {
            e.push(
                format!("{path}.limitedSwap.size"),
                "required with swapBehavior LimitedSwap: a whole number of gigabytes such as \"4G\"",
            );
        }
        if let Some(size) = size
            && !syntax::is_swap_size(size)
        {
            e.push(
                format!("{path}.limitedSwap.size"),
                format!(
                    "{size:?} is not accepted; use a whole number of gigabytes such as \"4G\" \
                     (pattern {SWAP_SIZE_PATTERN})"
                ),
            );
        }
    }
}

fn check_containerd_v2_support(
    e: &mut Errors,
    new: &NodeGroup,
    old: Option<&NodeGroup>,
    ctx: &ValidationContext,
) {
    if ctx.nodes_without_containerd_v2.is_empty() {
        return;
    }
    let nodes = ctx.nodes_without_containerd_v2.join(", ");
    let v2 = |ng: &NodeGroup| ng.spec.cri_type() == CriType::ContainerdV2;
    if v2(new) && !old.is_some_and(v2) {
        e.push(
            "spec.cri.type",
            format!(
                "ContainerdV2 cannot be enabled while nodes have label containerd-v2-unsupported \
                 ({nodes}); it needs cgroup v2, kernel >= 5.8, systemd >= 244 and erofs"
            ),
        );
    }
    let swap = |ng: &NodeGroup| ng.spec.kubelet.as_ref().and_then(|k| k.memory_swap.clone());
    let new_swap = swap(new);
    if new_swap.is_some() && old.is_none_or(|o| swap(o) != new_swap) {
        e.push(
            "spec.kubelet.memorySwap",
            format!(
                "memorySwap cannot be set while nodes have label containerd-v2-unsupported \
                 ({nodes}); it needs cgroup v2"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{IntOrString, parse_node_group};
    use proptest::prelude::*;

    fn ng(spec_yaml: &str) -> NodeGroup {
        let text = format!(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: worker\nspec:\n{}",
            spec_yaml
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>()
        );
        parse_node_group(&text).unwrap()
    }

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    fn check(spec_yaml: &str) -> Vec<FieldError> {
        validate_node_group(&ng(spec_yaml), &ValidationContext::default())
    }

    const EPHEMERAL: &str = "nodeType: CloudEphemeral\ncloudInstances:\n  classReference: {kind: AWSInstanceClass, name: worker}\n  minPerZone: 1\n  maxPerZone: 3\n";

    #[test]
    fn minimal_groups_of_every_type_are_valid() {
        assert_eq!(check("nodeType: Static"), vec![]);
        assert_eq!(check("nodeType: CloudStatic"), vec![]);
        assert_eq!(check("nodeType: CloudPermanent"), vec![]);
        assert_eq!(check(EPHEMERAL), vec![]);
    }

    #[test]
    fn name_rules() {
        let mut g = ng("nodeType: Static");
        g.metadata.name = Some("Bad_Name".into());
        let ctx = ValidationContext::default();
        assert_eq!(paths(&validate_node_group(&g, &ctx)), vec!["metadata.name"]);
        g.metadata.name = None;
        assert_eq!(paths(&validate_node_group(&g, &ctx)), vec!["metadata.name"]);
        g.metadata.name = Some("a".repeat(30));
        assert_eq!(validate_node_group(&g, &ctx), vec![]);
        let ctx = ValidationContext {
            cluster_prefix_len: Some(15),
            ..Default::default()
        };
        // 63 − 15 − 1 − 30 − 21 = −4 < 0
        let errors = validate_node_group(&g, &ctx);
        assert_eq!(paths(&errors), vec!["metadata.name"]);
        assert!(errors[0].message.contains("at most 26"), "{}", errors[0]);
        // The prefix rule is create-only.
        assert_eq!(validate_node_group_update(&g, &g, &ctx), vec![]);
        // A prefix too long for any name, up to usize::MAX, says so instead of wrapping.
        for prefix in [42, 63, 1 << 40, usize::MAX / 2 + 1, usize::MAX] {
            let ctx = ValidationContext {
                cluster_prefix_len: Some(prefix),
                ..Default::default()
            };
            let errors = validate_node_group(&g, &ctx);
            assert_eq!(paths(&errors), vec!["metadata.name"], "{prefix}");
            assert!(
                errors[0].message.contains("no NodeGroup name fits"),
                "{}",
                errors[0]
            );
        }
        let ctx = ValidationContext {
            cluster_prefix_len: Some(41),
            ..Default::default()
        };
        g.metadata.name = Some(String::new());
        assert!(
            validate_node_group(&g, &ctx)
                .iter()
                .all(|e| !e.message.contains("cluster prefix")),
            "a prefix of 41 leaves room for no character but is not itself refused"
        );
    }

    #[test]
    fn node_type_is_required_known_and_bound() {
        assert_eq!(paths(&check("kubelet: {}")), vec!["spec.nodeType"]);
        let e = check("nodeType: Metal");
        assert_eq!(paths(&e), vec!["spec.nodeType"]);
        assert!(
            e[0].message
                .contains("CloudEphemeral, CloudPermanent, CloudStatic, Static")
        );
        assert_eq!(
            paths(&check("nodeType: CloudEphemeral")),
            vec!["spec.cloudInstances"]
        );
        assert_eq!(
            paths(&check(&format!("{EPHEMERAL}staticInstances: {{count: 1}}"))),
            vec!["spec.staticInstances"]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ncloudInstances: {minPerZone: 1, maxPerZone: 1, classReference: {kind: AWSInstanceClass, name: a}}"
            )),
            vec!["spec.cloudInstances"]
        );
        assert_eq!(
            paths(&check(
                "nodeType: CloudPermanent\nstaticInstances: {count: 1}"
            )),
            vec!["spec.staticInstances"]
        );
        assert_eq!(
            check("nodeType: Static\nstaticInstances: {count: 2}"),
            vec![]
        );
    }

    #[test]
    fn cloud_instances_rules() {
        let e = check(
            "nodeType: CloudEphemeral\ncloudInstances:\n  classReference: {kind: FooInstanceClass}\n  minPerZone: 5\n  maxPerZone: 3\n  maxSurgePerZone: -1\n  maxUnavailablePerZone: -2\n  standby: 10x\n  standbyHolder: {overprovisioningRate: 90}\n  zones: [a, a, '']",
        );
        assert_eq!(
            paths(&e),
            vec![
                "spec.cloudInstances.classReference.kind",
                "spec.cloudInstances.classReference.name",
                "spec.cloudInstances.minPerZone",
                "spec.cloudInstances.maxUnavailablePerZone",
                "spec.cloudInstances.maxSurgePerZone",
                "spec.cloudInstances.standby",
                "spec.cloudInstances.standbyHolder.overprovisioningRate",
                "spec.cloudInstances.zones[1]",
                "spec.cloudInstances.zones[2]",
            ]
        );
        assert_eq!(
            e[2].message,
            "5 is greater than maxPerZone 3; minPerZone must be <= maxPerZone"
        );
        let e = check("nodeType: CloudEphemeral\ncloudInstances: {minPerZone: -1}");
        assert_eq!(
            paths(&e),
            vec![
                "spec.cloudInstances.classReference",
                "spec.cloudInstances.minPerZone",
                "spec.cloudInstances.maxPerZone",
            ]
        );
        assert_eq!(
            check(&format!("{EPHEMERAL}  standby: 20%\n  zones: [eu-1a]")),
            vec![]
        );
    }

    #[test]
    fn zones_are_checked_against_known_zones() {
        let g = ng(&format!("{EPHEMERAL}  zones: [eu-1a, eu-1z]"));
        let ctx = ValidationContext {
            known_zones: Some(["eu-1a".to_owned(), "eu-1b".to_owned()].into()),
            ..Default::default()
        };
        let e = validate_node_group(&g, &ctx);
        assert_eq!(paths(&e), vec!["spec.cloudInstances.zones[1]"]);
        assert!(e[0].message.contains("eu-1a, eu-1b"));
        assert_eq!(
            validate_node_group(&g, &ValidationContext::default()),
            vec![]
        );
    }

    #[test]
    fn cri_rules() {
        assert_eq!(
            paths(&check("nodeType: Static\ncri: {type: Docker}")),
            vec!["spec.cri.type"]
        );
        assert_eq!(
            paths(&check("nodeType: Static\ncri: {type: Podman}")),
            vec!["spec.cri.type"]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ncri: {type: Containerd, containerdV2: {maxConcurrentDownloads: 3}, notManaged: {}}"
            )),
            vec!["spec.cri.containerdV2", "spec.cri.notManaged"]
        );
        assert_eq!(
            check(
                "nodeType: Static\ncri: {type: NotManaged, notManaged: {criSocketPath: /run/crio/crio.sock}}"
            ),
            vec![]
        );
    }

    #[test]
    fn node_template_rules() {
        let e = check(
            "nodeType: Static\nnodeTemplate:\n  labels: {'bad key': v, ok: '-bad', node.deckhouse.io/group: x, node-role.deckhouse.io/system: ''}\n  annotations: {update.node.deckhouse.io/approved: '', fine/anno: 'any value at all'}\n  taints:\n  - {key: dedicated, value: db, effect: NoSchedule}\n  - {key: dedicated, value: other, effect: NoSchedule}\n  - {key: dedicated, effect: NoExecute}\n  - {key: mine, effect: NoSchedule}\n  - {key: dedicated.deckhouse.io, effect: Sometimes}\n  - {key: dedicated}",
        );
        assert_eq!(
            paths(&e),
            vec![
                r#"spec.nodeTemplate.labels["bad key"]"#,
                r#"spec.nodeTemplate.labels["node.deckhouse.io/group"]"#,
                r#"spec.nodeTemplate.labels["ok"]"#,
                r#"spec.nodeTemplate.annotations["update.node.deckhouse.io/approved"]"#,
                "spec.nodeTemplate.taints[1]",
                "spec.nodeTemplate.taints[3].key",
                "spec.nodeTemplate.taints[4].effect",
                "spec.nodeTemplate.taints[5].effect",
            ]
        );
        let ctx = ValidationContext {
            custom_toleration_keys: vec!["mine".into()],
            ..Default::default()
        };
        let g = ng("nodeType: Static\nnodeTemplate:\n  taints: [{key: mine, effect: NoSchedule}]");
        assert_eq!(validate_node_group(&g, &ctx), vec![]);
    }

    #[test]
    fn the_generic_instance_class_kind_is_accepted_as_the_schema_admits_it() {
        let spec = |kind: &str| {
            format!(
                "nodeType: CloudEphemeral\ncloudInstances:\n  classReference: {{kind: {kind}, name: medium}}\n  minPerZone: 1\n  maxPerZone: 2\n  zones: [a]"
            )
        };
        assert_eq!(check(&spec("InstanceClass")), vec![]);
        assert_eq!(check(&spec("AWSInstanceClass")), vec![]);
        assert_eq!(
            paths(&check(&spec("FooInstanceClass"))),
            vec!["spec.cloudInstances.classReference.kind"]
        );
    }

    #[test]
    fn chaos_update_fencing_and_version_rules() {
        let e = check(
            "nodeType: Static\nchaos: {mode: Always, period: 1d}\nupdate: {maxConcurrent: 0}\nfencing: {watchdog: {timeout: '60'}}\nkubernetesVersion: '1.20'\nnodeDrainTimeoutSecond: -5",
        );
        assert_eq!(
            paths(&e),
            vec![
                "spec.nodeDrainTimeoutSecond",
                "spec.chaos.mode",
                "spec.chaos.period",
                "spec.update.maxConcurrent",
                "spec.fencing.mode",
                "spec.fencing.watchdog.timeout",
                "spec.kubernetesVersion",
            ]
        );
        assert_eq!(
            check(
                "nodeType: Static\nchaos: {mode: DrainAndDelete, period: 1h30m}\nupdate: {maxConcurrent: 25%}\nfencing: {mode: Watchdog, watchdog: {timeout: 2m}}\nkubernetesVersion: '1.33'\nnodeDrainTimeoutSecond: 0"
            ),
            vec![]
        );
        // A zero period or timeout matches the CRD's pattern but is refused: the policies
        // read these fields with the same parser (spec_facts).
        assert_eq!(
            paths(&check(
                "nodeType: Static\nchaos: {mode: DrainAndDelete, period: 0m}\nfencing: {mode: Watchdog, watchdog: {timeout: 0s}}"
            )),
            vec!["spec.chaos.period", "spec.fencing.watchdog.timeout"]
        );
        assert_eq!(
            paths(&check("nodeType: Static\nupdate: {maxConcurrent: '0%'}")),
            vec!["spec.update.maxConcurrent"]
        );
    }

    #[test]
    fn disruption_rules() {
        assert_eq!(
            paths(&check(
                "nodeType: Static\ndisruptions: {approvalMode: RollingUpdate, automatic: {drainBeforeApproval: false}}"
            )),
            vec![
                "spec.disruptions.automatic",
                "spec.disruptions.approvalMode"
            ]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ndisruptions: {approvalMode: Manual, automatic: {}, rollingUpdate: {}}"
            )),
            vec![
                "spec.disruptions.automatic",
                "spec.disruptions.rollingUpdate"
            ]
        );
        assert_eq!(
            paths(&check("nodeType: Static\ndisruptions: {rollingUpdate: {}}")),
            vec!["spec.disruptions.rollingUpdate"]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ndisruptions:\n  approvalMode: Automatic\n  automatic:\n    windows:\n    - {from: '8:00', to: '24:00', days: [Mon, Funday]}\n    - {from: '', to: '23:59'}"
            )),
            vec![
                "spec.disruptions.automatic.windows[0].to",
                "spec.disruptions.automatic.windows[0].days[1]",
                "spec.disruptions.automatic.windows[1].from",
            ]
        );
        assert_eq!(
            check(&format!(
                "{EPHEMERAL}disruptions:\n  approvalMode: RollingUpdate\n  rollingUpdate:\n    windows: [{{from: '22:00', to: '2:00', days: [Sat, Sun]}}]"
            )),
            vec![]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ndisruptions: {approvalMode: Sometimes}"
            )),
            vec!["spec.disruptions.approvalMode"]
        );
    }

    #[test]
    fn kubelet_rules() {
        let e = check(
            "nodeType: Static\nkubelet:\n  maxPods: 0\n  rootDir: var/lib/kubelet\n  containerLogMaxSize: lots\n  containerLogMaxFiles: 21\n  resourceReservation: {mode: Static, static: {}}\n  topologyManager: {enabled: true, scope: Node, policy: Best}\n  memorySwap: {swapBehavior: LimitedSwap, swappiness: 101}",
        );
        assert_eq!(
            paths(&e),
            vec![
                "spec.kubelet.maxPods",
                "spec.kubelet.rootDir",
                "spec.kubelet.containerLogMaxSize",
                "spec.kubelet.containerLogMaxFiles",
                "spec.kubelet.resourceReservation.static",
                "spec.kubelet.topologyManager.scope",
                "spec.kubelet.topologyManager.policy",
                "spec.kubelet.memorySwap.swappiness",
                "spec.kubelet.memorySwap.limitedSwap.size",
            ]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\nkubelet:\n  resourceReservation: {mode: 'Off'}\n  topologyManager: {enabled: true}\n  memorySwap: {swapBehavior: LimitedSwap, limitedSwap: {size: 4Gi}}"
            )),
            vec![
                "spec.kubelet.topologyManager.enabled",
                "spec.kubelet.memorySwap.limitedSwap.size",
            ]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\nkubelet:\n  resourceReservation: {mode: Static, static: {cpu: 500m, memory: 1x}}"
            )),
            vec!["spec.kubelet.resourceReservation.static.memory"]
        );
        assert_eq!(
            check(
                "nodeType: Static\nkubelet:\n  maxPods: 150\n  rootDir: /mnt/kubelet\n  containerLogMaxSize: 100Mi\n  containerLogMaxFiles: 5\n  resourceReservation: {mode: Static, static: {cpu: 500m, memory: 1Gi, ephemeralStorage: 2Gi}}\n  topologyManager: {enabled: true, scope: Pod, policy: SingleNumaNode}\n  memorySwap: {swapBehavior: LimitedSwap, swappiness: 10, limitedSwap: {size: 4G}}"
            ),
            vec![]
        );
    }

    #[test]
    fn gpu_rules() {
        assert_eq!(
            paths(&check(
                "nodeType: Static\ngpu: {sharing: TimeSlicing, timeSlicing: {partitionCount: 101}, mig: {}}"
            )),
            vec!["spec.gpu.mig", "spec.gpu.timeSlicing.partitionCount"]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ngpu:\n  sharing: MIG\n  mig:\n    partedConfig: custom\n    customConfigs:\n    - index: 0\n      slices: [{profile: 1g.5gb, count: 8}, {profile: big, count: 1}]\n    - {index: -1}"
            )),
            vec![
                "spec.gpu.mig.customConfigs[0].slices[0].count",
                "spec.gpu.mig.customConfigs[0].slices[1].profile",
                "spec.gpu.mig.customConfigs[1].index",
                "spec.gpu.mig.customConfigs[1].slices",
            ]
        );
        assert_eq!(
            paths(&check(
                "nodeType: Static\ngpu: {sharing: MIG, mig: {partedConfig: custom}}"
            )),
            vec!["spec.gpu.mig.customConfigs"]
        );
        assert_eq!(
            paths(&check("nodeType: Static\ngpu: {sharing: Shared}")),
            vec!["spec.gpu.sharing"]
        );
        assert_eq!(
            check("nodeType: Static\ngpu: {sharing: MIG, mig: {partedConfig: all-1g.10gb}}"),
            vec![]
        );
        assert_eq!(
            check("nodeType: Static\ngpu: {sharing: Exclusive, exclusive: {}}"),
            vec![]
        );
    }

    #[test]
    fn static_instances_selector_rules() {
        assert_eq!(
            paths(&check(
                "nodeType: Static\nstaticInstances:\n  count: -1\n  labelSelector:\n    matchLabels: {role: 'bad value!'}\n    matchExpressions:\n    - {key: zone, operator: In}\n    - {key: zone, operator: Exists, values: [a]}\n    - {key: zone, operator: Gt, values: ['1']}\n    - {key: zone}"
            )),
            vec![
                "spec.staticInstances.count",
                r#"spec.staticInstances.labelSelector.matchLabels["role"]"#,
                "spec.staticInstances.labelSelector.matchExpressions[0].values",
                "spec.staticInstances.labelSelector.matchExpressions[1].values",
                "spec.staticInstances.labelSelector.matchExpressions[2].operator",
                "spec.staticInstances.labelSelector.matchExpressions[3].operator",
            ]
        );
    }

    #[test]
    fn update_rules() {
        let ctx = ValidationContext::default();
        let old = ng("nodeType: Static\nstaticInstances:\n  count: 1");
        let with_selector = ng(
            "nodeType: Static\nstaticInstances:\n  count: 1\n  labelSelector: {matchLabels: {role: worker}}",
        );
        assert_eq!(
            validate_node_group_update(&old, &with_selector, &ctx),
            vec![]
        );
        let changed = ng(
            "nodeType: Static\nstaticInstances:\n  count: 1\n  labelSelector: {matchLabels: {role: db}}",
        );
        assert_eq!(
            paths(&validate_node_group_update(&with_selector, &changed, &ctx)),
            vec!["spec.staticInstances.labelSelector"]
        );
        assert_eq!(
            paths(&validate_node_group_update(&with_selector, &old, &ctx)),
            vec!["spec.staticInstances.labelSelector"]
        );
        let cloud = ng("nodeType: CloudStatic");
        assert_eq!(
            paths(&validate_node_group_update(&old, &cloud, &ctx)),
            vec!["spec.nodeType"]
        );
    }

    #[test]
    fn containerd_context_rules() {
        let ctx = ValidationContext {
            nodes_with_custom_containerd_config: vec!["n1".into()],
            nodes_without_containerd_v2: vec!["n2".into()],
            ..Default::default()
        };
        let c1 = ng("nodeType: Static\ncri: {type: Containerd}");
        let v2 = ng("nodeType: Static\ncri: {type: ContainerdV2}");
        let e = validate_node_group_update(&c1, &v2, &ctx);
        assert_eq!(paths(&e), vec!["spec.cri.type", "spec.cri.type"]);
        assert_eq!(
            paths(&validate_node_group(&v2, &ctx)),
            vec!["spec.cri.type"]
        );
        assert_eq!(validate_node_group_update(&v2, &v2, &ctx), vec![]);
        let swap = ng("nodeType: Static\nkubelet: {memorySwap: {swapBehavior: NoSwap}}");
        assert_eq!(
            paths(&validate_node_group(&swap, &ctx)),
            vec!["spec.kubelet.memorySwap"]
        );
        assert_eq!(validate_node_group_update(&swap, &swap, &ctx), vec![]);
        assert_eq!(
            validate_node_group(&swap, &ValidationContext::default()),
            vec![]
        );
    }

    /// A valid group using most of the spec, and single-field breakages of it with the one
    /// path each must be reported at.
    fn full_group() -> NodeGroup {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/valid/cloud-ephemeral-full.yaml"
        ))
        .unwrap();
        parse_node_group(&text).unwrap()
    }

    type Breakage = (&'static str, fn(&mut NodeGroup));

    fn breakages() -> Vec<Breakage> {
        fn ci(g: &mut NodeGroup) -> &mut CloudInstances {
            g.spec.cloud_instances.as_mut().unwrap()
        }
        fn kubelet(g: &mut NodeGroup) -> &mut Kubelet {
            g.spec.kubelet.as_mut().unwrap()
        }
        vec![
            ("metadata.name", |g| g.metadata.name = Some("Front".into())),
            ("spec.nodeType", |g| {
                g.spec.node_type = Some(NodeType::Unknown("Cloud".into()))
            }),
            ("spec.cloudInstances.minPerZone", |g| {
                ci(g).min_per_zone = Some(-3)
            }),
            ("spec.cloudInstances.maxPerZone", |g| {
                ci(g).max_per_zone = None
            }),
            ("spec.cloudInstances.classReference.kind", |g| {
                ci(g).class_reference.as_mut().unwrap().kind = "Yandex".into()
            }),
            ("spec.cloudInstances.standby", |g| {
                ci(g).standby = Some(IntOrString::String("x%".into()))
            }),
            ("spec.cloudInstances.zones[1]", |g| {
                ci(g).zones = Some(vec!["a".into(), "a".into()])
            }),
            ("spec.nodeTemplate.taints[1].key", |g| {
                g.spec
                    .node_template
                    .as_mut()
                    .unwrap()
                    .taints
                    .as_mut()
                    .unwrap()[1]
                    .key = "gpu".into()
            }),
            ("spec.cri.type", |g| {
                g.spec.cri.as_mut().unwrap().type_ = Some(CriType::Unknown("Podman".into()))
            }),
            ("spec.kubelet.maxPods", |g| kubelet(g).max_pods = Some(-1)),
            ("spec.kubelet.containerLogMaxFiles", |g| {
                kubelet(g).container_log_max_files = Some(0)
            }),
            ("spec.kubelet.memorySwap.limitedSwap.size", |g| {
                kubelet(g).memory_swap.as_mut().unwrap().limited_swap = None
            }),
            ("spec.disruptions.automatic.windows[1].to", |g| {
                g.spec
                    .disruptions
                    .as_mut()
                    .unwrap()
                    .automatic
                    .as_mut()
                    .unwrap()
                    .windows
                    .as_mut()
                    .unwrap()[1]
                    .to = "3:5".into()
            }),
            ("spec.disruptions.approvalMode", |g| {
                g.spec.disruptions.as_mut().unwrap().approval_mode =
                    Some(ApprovalMode::Unknown("Auto".into()))
            }),
            ("spec.update.maxConcurrent", |g| {
                g.spec.update.as_mut().unwrap().max_concurrent = Some(IntOrString::Int(0))
            }),
            ("spec.fencing.watchdog.timeout", |g| {
                g.spec
                    .fencing
                    .as_mut()
                    .unwrap()
                    .watchdog
                    .as_mut()
                    .unwrap()
                    .timeout = Some("2 min".into())
            }),
            ("spec.chaos.period", |g| {
                g.spec.chaos.as_mut().unwrap().period = Some("0".into())
            }),
            ("spec.nodeDrainTimeoutSecond", |g| {
                g.spec.node_drain_timeout_second = Some(-1)
            }),
        ]
    }

    #[test]
    fn the_full_group_is_valid() {
        assert_eq!(
            validate_node_group(&full_group(), &ValidationContext::default()),
            vec![]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn breaking_fields_reports_exactly_their_paths(
            picks in proptest::collection::btree_set(0usize..18, 1..5)
        ) {
            let all = breakages();
            prop_assert_eq!(all.len(), 18);
            let mut g = full_group();
            let mut want = BTreeSet::new();
            for &i in &picks {
                let (path, breaks) = all[i];
                breaks(&mut g);
                want.insert(path.to_owned());
            }
            let got: BTreeSet<String> = validate_node_group(&g, &ValidationContext::default())
                .into_iter()
                .map(|e| e.path)
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn min_max_per_zone_rule_is_exact(min in -3i64..20, max in -3i64..20) {
            let g = ng(&format!("nodeType: CloudEphemeral\ncloudInstances:\n  classReference: {{kind: AWSInstanceClass, name: w}}\n  minPerZone: {min}\n  maxPerZone: {max}"));
            let errors = validate_node_group(&g, &ValidationContext::default());
            prop_assert_eq!(errors.is_empty(), min >= 0 && max >= 0 && min <= max);
            prop_assert!(errors.iter().all(|e| e.path.starts_with("spec.cloudInstances.")));
        }

        #[test]
        fn validation_is_deterministic_and_update_without_change_adds_nothing(
            node_type in prop::sample::select(vec!["Static", "CloudStatic", "CloudPermanent", "CloudEphemeral", "Cloud", ""]),
            max_pods in -2i64..300,
            files in -2i64..25,
            swappiness in -5i64..110,
            rate in -5i64..100,
            mode in prop::sample::select(vec!["Manual", "Automatic", "RollingUpdate", "Never"]),
        ) {
            let g = ng(&format!("nodeType: '{node_type}'\nkubelet: {{maxPods: {max_pods}, containerLogMaxFiles: {files}, memorySwap: {{swappiness: {swappiness}}}}}\ndisruptions: {{approvalMode: {mode}}}\ncloudInstances: {{standbyHolder: {{overprovisioningRate: {rate}}}}}"));
            let ctx = ValidationContext::default();
            let once = validate_node_group(&g, &ctx);
            prop_assert_eq!(&once, &validate_node_group(&g, &ctx));
            prop_assert_eq!(&once, &validate_node_group_update(&g, &g, &ctx));
            let has = |p: &str| once.iter().any(|e| e.path == p);
            prop_assert_eq!(has("spec.kubelet.maxPods"), max_pods <= 0);
            prop_assert_eq!(has("spec.kubelet.containerLogMaxFiles"), !(1..=20).contains(&files));
            prop_assert_eq!(has("spec.kubelet.memorySwap.swappiness"), !(0..=100).contains(&swappiness));
            prop_assert_eq!(has("spec.cloudInstances.standbyHolder.overprovisioningRate"), !(1..=80).contains(&rate));
            prop_assert_eq!(has("spec.nodeType"), !NodeType::KNOWN.contains(&node_type));
            for e in &once {
                prop_assert!(!e.message.is_empty());
                prop_assert!(e.path.starts_with("spec."));
            }
        }
    }
}
