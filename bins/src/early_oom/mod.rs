//! `early-oom`: kills one pod per memory-pressure episode before the kubelet's eviction or the
//! kernel's OOM killer do, on the core's policy ([`PressureMonitor`], [`plan_victim`](nodemgr_core::oom::plan_victim)).
//!
//! - **Input**: memory PSI from `/proc/pressure/memory` or a cgroup v2 `memory.pressure`
//!   (`--psi-file`; in a cluster the kubepods cgroup's). **Mode**: it writes a PSI trigger
//!   (`some 150000 2000000`: 150 ms stalled within 2 s; a window in whole 2 s steps is what the
//!   kernel accepts from a process without CAP_SYS_RESOURCE) to the file and waits for `POLLPRI`
//!   (`trigger` mode), and
//!   samples every `--sample-interval` besides; when the kernel refuses the trigger (no write
//!   access, old kernel, a plain file) it only samples (`polling` mode). It logs which.
//! - **Victim**: the node's pods (`spec.nodeName`), never `system-node-critical` /
//!   `system-cluster-critical` / system-range priorities, DaemonSet or mirror pods; the lowest
//!   priority first, then the largest working set — `memory.current` minus `inactive_file` of
//!   the pod's cgroup found under `--cgroup-root` by its UID (systemd `pod<uid_with_underscores>`
//!   or cgroupfs `pod<uid>` directories) — then the name.
//! - **Action**: deletes the victim with grace period 0 (a kill; an eviction could be refused by
//!   a PodDisruptionBudget while the node runs out of memory), or evicts it with `--evict`; a
//!   Kubernetes Event per kill; `--dry-run` only logs the decision. One kill per episode and none
//!   within the cooldown (15 s) of the last.
//! - **No PSI** (kernel before 4.20, no `CONFIG_PSI`, booted with `psi=0`, or no such file):
//!   early-oom stays up, says so in the log and in `early_oom_psi_unavailable 1`, and idles (as
//!   Deckhouse's does) instead of failing in a crash loop; its alert `EarlyOOMPodIsNotReady` fires.
//! - **Metrics** on `--metrics-address` (`/metrics` in the format the scraper asks for,
//!   `/healthz`; behind Kubernetes authorization with `--metrics-auth kubernetes`): PSI values,
//!   `early_oom_psi_unavailable`, the mode, kills, `early_oom_build_info`.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use nodemgr_core::oom::{
    OomCandidate, OomConfig, OomDecision, PressureMonitor, PsiKind, parse_psi, trigger_line,
};
use nodemgr_core::ports::{
    EventApi, EventKind, ObjectRef, PodApi, PodRef, Precondition, RecordedEvent,
};
use nodemgr_k8s::convert::pod_to_core;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;

use crate::{duration_flag as duration, wall_clock as now};

/// Flags of `early-oom`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "early-oom",
    version,
    about = "Kills one pod per memory-pressure episode, early"
)]
pub struct Config {
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The PSI file: /proc/pressure/memory or a cgroup v2 memory.pressure.
    #[arg(long, default_value = "/proc/pressure/memory")]
    pub psi_file: PathBuf,
    /// The cgroup under which pod cgroups are found (memory use per pod).
    #[arg(long, default_value = "/sys/fs/cgroup/kubepods.slice")]
    pub cgroup_root: PathBuf,
    /// `full avg10` threshold, percent (Deckhouse: 30).
    #[arg(long, default_value_t = 30.0, value_parser = crate::percent_flag)]
    pub full_avg10: f64,
    /// `some avg10` threshold, percent (off by default).
    #[arg(long, value_parser = crate::percent_flag)]
    pub some_avg10: Option<f64>,
    /// How often PSI is sampled.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub sample_interval: Duration,
    /// No kill within this time after the previous one.
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub cooldown: Duration,
    /// Only log decisions.
    #[arg(long)]
    pub dry_run: bool,
    /// Evict (PodDisruptionBudgets apply) instead of deleting with grace period 0.
    #[arg(long)]
    pub evict: bool,
    /// Don't try a PSI trigger; sample only.
    #[arg(long)]
    pub no_trigger: bool,
    /// Address for /metrics and /healthz (off when unset; the chart uses 0.0.0.0:9651).
    #[arg(long)]
    pub metrics_address: Option<SocketAddr>,
    /// Who may scrape /metrics, over HTTP or HTTPS.
    #[command(flatten)]
    pub metrics_serve: crate::observability::server::MetricsServeArgs,
    /// Kubeconfig to use; without it the in-cluster configuration.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// The working set of each pod cgroup under `root`, by pod UID (dashes, as the API has it):
/// `memory.current` minus `inactive_file`. Directories are searched three levels deep.
pub fn pod_working_sets(root: &Path) -> BTreeMap<String, u64> {
    fn walk(dir: &Path, depth: usize, out: &mut BTreeMap<String, u64>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            // `…-pod<uid>.slice` (systemd) or `pod<uid>` (cgroupfs): the UID follows the last
            // "pod" (the first may be the one in "kubepods").
            if let Some((_, rest)) = name.rsplit_once("pod") {
                let uid = rest.trim_end_matches(".slice").replace('_', "-");
                if uid.len() >= 32 {
                    let current = read_u64(&path.join("memory.current"));
                    let inactive = std::fs::read_to_string(path.join("memory.stat"))
                        .ok()
                        .and_then(|s| {
                            s.lines().find_map(|l| {
                                l.strip_prefix("inactive_file ")
                                    .and_then(|v| v.trim().parse::<u64>().ok())
                            })
                        })
                        .unwrap_or(0);
                    if let Some(current) = current {
                        out.insert(uid, current.saturating_sub(inactive));
                    }
                    continue;
                }
            }
            if depth < 3 {
                walk(&path, depth + 1, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, 0, &mut out);
    out
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Waits for PSI trigger events on `path` in a thread and sends one message per event; returns
/// false when the kernel refuses the trigger.
fn start_trigger(
    path: &Path,
    stall: Duration,
    window: Duration,
    tx: mpsc::UnboundedSender<()>,
) -> bool {
    use std::io::Write;
    let Ok(line) = trigger_line(PsiKind::Some, stall, window) else {
        return false;
    };
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(error) => {
            tracing::info!(%error, "cannot open the PSI file for a trigger");
            return false;
        }
    };
    if let Err(error) = file.write_all(format!("{line}\0").as_bytes()) {
        tracing::info!(%error, "the kernel refused the PSI trigger");
        return false;
    }
    // A plain file accepts the write; only a PSI file reports POLLPRI. Probe once.
    if path.starts_with("/proc/pressure")
        || path.file_name().is_some_and(|n| n == "memory.pressure")
    {
        std::thread::spawn(move || {
            use rustix::event::{PollFd, PollFlags, poll};
            loop {
                let mut fds = [PollFd::new(&file, PollFlags::PRI)];
                match poll(&mut fds, None) {
                    Ok(_) if fds[0].revents().contains(PollFlags::ERR) => return,
                    Ok(_) => {
                        if tx.send(()).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        true
    } else {
        false
    }
}

struct Metrics {
    registry: Arc<Registry>,
    psi_unavailable: Gauge,
    some_avg10: Gauge<f64, AtomicU64>,
    full_avg10: Gauge<f64, AtomicU64>,
    trigger_mode: Gauge,
    kills: Counter,
}

fn metrics() -> Metrics {
    let mut registry = Registry::with_prefix("early_oom");
    let some_avg10 = Gauge::<f64, AtomicU64>::default();
    let full_avg10 = Gauge::<f64, AtomicU64>::default();
    let trigger_mode = Gauge::default();
    let kills = Counter::default();
    let psi_unavailable = Gauge::default();
    registry.register(
        "psi_unavailable",
        "1 when the kernel offers no memory PSI and early-oom idles (Deckhouse-compatible)",
        psi_unavailable.clone(),
    );
    registry.register(
        "build",
        "The version of early-oom",
        prometheus_client::metrics::info::Info::new(vec![(
            "version".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        )]),
    );
    registry.register(
        "psi_some_avg10",
        "Memory PSI some avg10, percent",
        some_avg10.clone(),
    );
    registry.register(
        "psi_full_avg10",
        "Memory PSI full avg10, percent",
        full_avg10.clone(),
    );
    registry.register(
        "trigger_mode",
        "1 when woken by a PSI trigger, 0 when polling",
        trigger_mode.clone(),
    );
    registry.register("kills", "Pods killed under memory pressure", kills.clone());
    Metrics {
        registry: Arc::new(registry),
        psi_unavailable,
        some_avg10,
        full_avg10,
        trigger_mode,
        kills,
    }
}

/// Whether `path` holds memory PSI; the reason when it does not.
fn psi_available(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read {}: {e}. PSI needs Linux 4.20+ with CONFIG_PSI and psi=1; or pass --psi-file",
            path.display()
        )
    })?;
    parse_psi(&text)
        .map(|_| ())
        .map_err(|e| format!("{} is not a PSI file: {e}", path.display()))
}

/// Runs until `shutdown`.
///
/// # Errors
/// No cluster configuration, the metrics address taken, unusable TLS files.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let client = nodemgr_k8s::cluster::client(config.kubeconfig.as_deref())
        .await
        .context("no Kubernetes configuration: pass --kubeconfig or run in a pod")?;
    let cluster = nodemgr_k8s::cluster::KubeCluster::writer_only(client.clone(), "early-oom");
    let pods = Api::<Pod>::all(client.clone());
    let mut monitor = PressureMonitor::new(OomConfig {
        full_avg10: Some(config.full_avg10),
        some_avg10: config.some_avg10,
        cooldown: config.cooldown,
        sample_interval: config.sample_interval,
        ..OomConfig::default()
    });
    let m = Arc::new(metrics());
    let (_healthy, health) = tokio::sync::watch::channel(Ok(()));
    let _stop_server = crate::observability::server::spawn_agent_server(
        config.metrics_address,
        &config.metrics_serve,
        m.registry.clone(),
        health,
        &client,
    )
    .await?;
    if let Err(why) = psi_available(&config.psi_file) {
        m.psi_unavailable.set(1);
        tracing::warn!(
            "{why}; early-oom idles (early_oom_psi_unavailable 1) and kills nothing on this node"
        );
        shutdown.await;
        return Ok(());
    }
    let (tx, mut woken) = mpsc::unbounded_channel();
    let trigger = !config.no_trigger
        && start_trigger(
            &config.psi_file,
            Duration::from_millis(150),
            Duration::from_secs(2),
            tx,
        );
    m.trigger_mode.set(i64::from(trigger));
    tracing::info!(
        mode = if trigger { "trigger" } else { "polling" },
        psi = %config.psi_file.display(),
        dry_run = config.dry_run,
        "early-oom running"
    );
    tokio::pin!(shutdown);
    loop {
        match std::fs::read_to_string(&config.psi_file).map(|t| parse_psi(&t)) {
            Ok(Ok(psi)) => {
                m.some_avg10.set(psi.some.avg10);
                m.full_avg10.set(psi.full.map_or(0.0, |f| f.avg10));
                monitor.handle_sample(psi, now());
                if monitor.current_breach().is_some() && monitor.is_armed() {
                    let candidates = candidates(&pods, &config).await;
                    if let Some(decision) = monitor.poll_decision(now(), &candidates) {
                        act(&decision, &config, &cluster, &m).await;
                    }
                }
            }
            Ok(Err(error)) => tracing::warn!(%error, "unreadable PSI sample; skipped"),
            Err(error) => tracing::warn!(%error, "cannot read the PSI file; skipped"),
        }
        tokio::select! {
            () = tokio::time::sleep(config.sample_interval) => {}
            Some(()) = woken.recv() => tracing::debug!("PSI trigger fired"),
            () = &mut shutdown => return Ok(()),
        }
    }
}

async fn candidates(pods: &Api<Pod>, config: &Config) -> Vec<OomCandidate> {
    let listed = match pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={}", config.node_name)))
        .await
    {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!(%error, "cannot list this node's pods; no victim this time");
            return Vec::new();
        }
    };
    let sets = pod_working_sets(&config.cgroup_root);
    listed
        .iter()
        .map(pod_to_core)
        .filter(|p| !p.is_terminal())
        .map(|p| {
            let ws = sets.get(&p.uid).copied().unwrap_or(0);
            OomCandidate::from_pod(&p, ws)
        })
        .collect()
}

async fn act(
    decision: &OomDecision,
    config: &Config,
    cluster: &nodemgr_k8s::cluster::KubeCluster,
    m: &Metrics,
) {
    let OomDecision::Kill { victim, reason } = decision else {
        tracing::warn!("{decision}");
        return;
    };
    if config.dry_run {
        tracing::warn!(dry_run = true, "{decision}");
        return;
    }
    let pod = PodRef::new(&victim.namespace, &victim.name);
    let result = if config.evict {
        cluster
            .evict_pod(&pod)
            .await
            .map(|r| tracing::info!(?r, "eviction"))
    } else {
        cluster
            .delete_pod(&pod, Some(Duration::ZERO), &Precondition::None)
            .await
    };
    match result {
        Ok(()) => {
            m.kills.inc();
            tracing::warn!("{decision}");
            let _ = cluster
                .emit_event(&RecordedEvent {
                    regarding: ObjectRef::pod(&pod),
                    kind: EventKind::Warning,
                    reason: "EarlyOOMKill".into(),
                    message: format!(
                        "killed on node {} under memory pressure ({reason}); working set {} bytes",
                        config.node_name, victim.working_set_bytes
                    ),
                    time: now(),
                })
                .await;
        }
        Err(error) => tracing::error!(%error, "could not kill {pod}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_pressure_file_parses_where_the_kernel_has_psi() {
        match std::fs::read_to_string("/proc/pressure/memory") {
            Ok(text) => {
                let psi = parse_psi(&text).unwrap();
                assert!(psi.some.avg10 >= 0.0);
            }
            Err(e) => eprintln!("SKIPPED: /proc/pressure/memory unreadable here ({e})"),
        }
    }

    #[test]
    fn pod_cgroups_are_found_for_both_drivers() {
        let dir = tempfile::tempdir().unwrap();
        let systemd = dir
            .path()
            .join("kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_1111_2222_3333_444455556666.slice");
        std::fs::create_dir_all(&systemd).unwrap();
        std::fs::write(systemd.join("memory.current"), "1000000\n").unwrap();
        std::fs::write(
            systemd.join("memory.stat"),
            "anon 1\ninactive_file 250000\n",
        )
        .unwrap();
        let cgroupfs = dir
            .path()
            .join("besteffort/pod9a1b2c3d-1111-2222-3333-444455556666");
        std::fs::create_dir_all(&cgroupfs).unwrap();
        std::fs::write(cgroupfs.join("memory.current"), "42\n").unwrap();
        let sets = pod_working_sets(dir.path());
        assert_eq!(
            sets.get("0a1b2c3d-1111-2222-3333-444455556666"),
            Some(&750_000)
        );
        assert_eq!(sets.get("9a1b2c3d-1111-2222-3333-444455556666"), Some(&42));
    }
}
