//! `nodemgr demo`: the whole of nodemgr on one machine, no cluster needed. It starts the API
//! emulator (nodemgr-testkit), installs the CRDs, creates three NodeGroups with simulated
//! machines (kubelets renewing Leases and reporting Ready, workloads and a
//! PodDisruptionBudget), gives every node a real node agent — a `bashible` process in its own
//! root applying the bundles `bashible-apiserver` renders ([`super::demo_agents`]) — runs the
//! real `node-manager` controllers through kube against it, and walks a story with short
//! timers, printing what happens:
//!
//! 1. a `nodeTemplate` label added to a group reaches every node, and leaves when removed;
//! 2. a kubelet setting changes: the rollout restarts kubelets under `maxConcurrent: 2`;
//! 3. a disruptive change in `Automatic` mode drains each node first; the PDB refuses the
//!    evictions, the drain deletes the pod at the group's `nodeDrainTimeoutSecond`;
//! 4. a fenced node goes dark: after its deadline (watchdog timeout + kubelet staleness + margin) its pods, then its Node, are deleted.
//!
//! It prints a kubeconfig path so a person can watch with `kubectl get ng,nodes -w`, and with
//! `--hold` keeps everything running after the story until Ctrl-C.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use nodemgr_core::model::keys;
use nodemgr_testkit::{
    Emulator, EmulatorOptions, Fleet, FleetConfig, FleetEvent, FleetNode, Workload, WorkloadKind,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Outcome;
use super::demo_agents::DemoAgents;
use nodemgr_bins::node_manager;

/// Arguments of `nodemgr demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Keep the emulator, the fleet and the controllers running after the story, until Ctrl-C
    /// (to look around with kubectl).
    #[arg(long)]
    pub hold: bool,
    /// Where to write the kubeconfig (default: a temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub kubeconfig_dir: Option<PathBuf>,
    /// How long one step may take before the demo gives up, in seconds.
    #[arg(long, default_value_t = 120)]
    pub step_timeout: u64,
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(demo(args.clone()))?;
    Ok(Outcome::Ok)
}

/// `nodemgr agent`: the node agent (the `bashible` binary's code), for the demo's nodes.
pub fn run_agent(config: &nodemgr_bins::bashible::Config) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(nodemgr_bins::bashible::run(config.clone()))?;
    Ok(Outcome::Ok)
}

struct Story {
    emulator: Arc<Emulator>,
    fleet: Fleet,
    agents: DemoAgents,
    /// Agent annotations last printed, per node.
    agent_seen: BTreeMap<String, Vec<String>>,
    started: Instant,
    events: mpsc::UnboundedReceiver<FleetEvent>,
    timeout: Duration,
    /// Update annotations and cordon state last printed, per node.
    seen: BTreeMap<String, Vec<String>>,
    /// Pods last seen (`namespace/name` → node) and nodes last seen.
    pods: BTreeMap<String, String>,
    evictions_refused: u64,
}

/// What node-manager writes on nodes (the agents' requests are printed by `report_agents`).
const WATCHED: [&str; 5] = [
    keys::ANNOTATION_APPROVED,
    keys::ANNOTATION_DISRUPTION_APPROVED,
    keys::ANNOTATION_DRAINING,
    keys::ANNOTATION_DRAINED,
    "unschedulable",
];

impl Story {
    fn say(&self, text: &str) {
        println!("[{:>6.1}s] {text}", self.started.elapsed().as_secs_f64());
    }

    fn heading(&self, text: &str) {
        println!();
        println!("== {text}");
    }

    fn nodes(&self) -> Vec<Value> {
        self.emulator.list("v1", "Node", None)
    }

    /// Prints what the nodes' agents wrote on their Nodes since last time.
    fn report_agents(&mut self) {
        for node in self.nodes() {
            let name = node["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let annotations = &node["metadata"]["annotations"];
            let mut marks = Vec::new();
            for (key, text) in [
                (
                    keys::ANNOTATION_WAITING_FOR_APPROVAL,
                    "asks for approval (waiting-for-approval)",
                ),
                (
                    keys::ANNOTATION_DISRUPTION_REQUIRED,
                    "asks for a disruption (disruption-required)",
                ),
            ] {
                if !annotations[key].is_null() {
                    marks.push(text.to_owned());
                }
            }
            if let Some(sum) = annotations[keys::ANNOTATION_CONFIGURATION_CHECKSUM].as_str()
                && !sum.is_empty()
            {
                marks.push(format!(
                    "applied its bundle, reports checksum {}…",
                    sum.get(..12).unwrap_or(sum)
                ));
            }
            let before = self
                .agent_seen
                .insert(name.clone(), marks.clone())
                .unwrap_or_default();
            for mark in marks.iter().filter(|m| !before.contains(m)) {
                self.say(&format!("{name:<12} bashible: {mark}"));
            }
            for (key, text) in [
                (keys::ANNOTATION_WAITING_FOR_APPROVAL, "asks for approval"),
                (
                    keys::ANNOTATION_DISRUPTION_REQUIRED,
                    "asks for a disruption",
                ),
            ] {
                let removed =
                    before.iter().any(|m| m.starts_with(text)) && annotations[key].is_null();
                if removed {
                    let short = key.rsplit('/').next().unwrap_or(key);
                    self.say(&format!("{name:<12} node-manager: {short} removed"));
                }
            }
        }
    }

    /// Prints what the fleet did and what the controllers changed on nodes since last time.
    fn report(&mut self) {
        self.report_agents();
        while let Ok(event) = self.events.try_recv() {
            self.say(&format!("{:<12} {}", event.node, event.message));
        }
        for node in self.nodes() {
            let name = node["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let annotations = node["metadata"]["annotations"].as_object();
            let mut marks: Vec<String> = WATCHED
                .iter()
                .filter(|k| annotations.is_some_and(|a| a.contains_key(**k)))
                .map(|k| k.rsplit('/').next().unwrap_or(k).to_owned())
                .collect();
            if node["spec"]["unschedulable"] == true {
                marks.push("cordoned".into());
            }
            let before = self
                .seen
                .insert(name.clone(), marks.clone())
                .unwrap_or_default();
            for mark in marks.iter().filter(|m| !before.contains(m)) {
                self.say(&format!("{name:<12} node-manager: {mark}"));
            }
            for mark in before.iter().filter(|m| !marks.contains(m)) {
                self.say(&format!("{name:<12} node-manager: {mark} removed"));
            }
        }
        let pods: BTreeMap<String, String> = self
            .emulator
            .list("v1", "Pod", None)
            .iter()
            .map(|p| {
                (
                    format!(
                        "{}/{}",
                        p["metadata"]["namespace"].as_str().unwrap_or_default(),
                        p["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    p["spec"]["nodeName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect();
        for (pod, node) in &self.pods {
            if !pods.contains_key(pod) {
                self.say(&format!("{node:<12} pod {pod} deleted"));
            }
        }
        let nodes_now: Vec<String> = self.seen.keys().cloned().collect();
        let present: Vec<String> = self
            .nodes()
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        for name in nodes_now.iter().filter(|n| !present.contains(n)) {
            self.say(&format!("{name:<12} Node deleted"));
            self.seen.remove(name);
        }
        self.pods = pods;
        let refused = self
            .emulator
            .request_count("create", "pods/eviction", Some(429));
        if refused > self.evictions_refused {
            self.say(&format!(
                "{:<12} evictions refused by the PodDisruptionBudget so far: {refused} (HTTP 429, retried)",
                "postgres"
            ));
            self.evictions_refused = refused;
        }
    }

    /// Waits for `done`, printing progress; fails after the step timeout.
    async fn until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Story) -> bool,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            self.report();
            if done(self) {
                self.say(&format!(
                    "done: {what} ({:.1}s)",
                    start.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            if start.elapsed() > self.timeout {
                bail!(
                    "the demo waited {}s for: {what}; the controllers did not get there (run with RUST_LOG=info to see why)",
                    self.timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn group_nodes(&self, group: &str) -> Vec<Value> {
        self.nodes()
            .into_iter()
            .filter(|n| n["metadata"]["labels"][keys::LABEL_NODE_GROUP] == group)
            .collect()
    }

    fn all_on(&self, group: &str, checksum: &str) -> bool {
        let nodes = self.group_nodes(group);
        !nodes.is_empty()
            && nodes.iter().all(|n| {
                n["metadata"]["annotations"][keys::ANNOTATION_CONFIGURATION_CHECKSUM] == checksum
                    && n["metadata"]["annotations"][keys::ANNOTATION_APPROVED].is_null()
                    && n["spec"]["unschedulable"] != true
            })
    }

    fn patch_spec(&self, group: &str, spec: Value) -> anyhow::Result<()> {
        self.emulator
            .merge_patch(
                "deckhouse.io/v1",
                "NodeGroup",
                "",
                group,
                &json!({"spec": spec}),
                false,
            )
            .map_err(|e| anyhow::anyhow!("cannot change NodeGroup {group}: {e}"))?;
        Ok(())
    }
}

fn fleet_config() -> FleetConfig {
    FleetConfig {
        tick: Duration::from_millis(200),
        heartbeat: Duration::from_secs(1),
        grace: Duration::from_secs(4),
        agent_delay: Duration::from_secs(2),
        kubelet_restart: Duration::from_secs(2),
        reboot: Duration::from_secs(3),
        reschedule: Duration::from_secs(1),
    }
}

/// A demo group: name, spec, nodes (name, zone).
type DemoGroup = (&'static str, Value, Vec<(&'static str, &'static str)>);

fn groups() -> Vec<DemoGroup> {
    vec![
        (
            "frontend",
            json!({"nodeType": "CloudPermanent", "update": {"maxConcurrent": 2},
                   "kubelet": {"maxPods": 110}, "nodeTemplate": {"labels": {"tier": "frontend"}}}),
            vec![
                ("frontend-0", "zone-a"),
                ("frontend-1", "zone-a"),
                ("frontend-2", "zone-b"),
                ("frontend-3", "zone-b"),
            ],
        ),
        (
            "db",
            json!({"nodeType": "CloudPermanent", "nodeDrainTimeoutSecond": 10,
                   "disruptions": {"approvalMode": "Automatic", "automatic": {"drainBeforeApproval": true}}}),
            vec![("db-0", "zone-a"), ("db-1", "zone-b")],
        ),
        (
            "edge",
            json!({"nodeType": "CloudPermanent", "fencing": {"mode": "Watchdog", "watchdog": {"timeout": "10s"}}}),
            vec![
                ("edge-0", "zone-c"),
                ("edge-1", "zone-c"),
                ("edge-2", "zone-c"),
                ("edge-3", "zone-c"),
            ],
        ),
    ]
}

type Setup = (
    Arc<Emulator>,
    Fleet,
    DemoAgents,
    mpsc::UnboundedReceiver<FleetEvent>,
);

async fn setup(args: &DemoArgs) -> anyhow::Result<Setup> {
    let emulator = Arc::new(
        Emulator::start_with(EmulatorOptions {
            kubeconfig_dir: args.kubeconfig_dir.clone(),
            ..EmulatorOptions::default()
        })
        .await
        .context("cannot start the API emulator")?,
    );
    let seed = |object: Value| -> anyhow::Result<()> {
        emulator
            .seed(object)
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("the emulator refused a demo object: {e}"))
    };
    for crd in nodemgr_k8s::crd::definitions()? {
        seed(serde_json::to_value(crd)?)?;
    }
    seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodemgr-system"}}))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let fleet = Fleet::start(emulator.clone(), fleet_config(), Some(tx))?;
    for (group, spec, _) in groups() {
        seed(
            json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": group}, "spec": spec}),
        )?;
    }
    // Nothing is published to the Fleet (`Fleet::publish`), so its simulated agents stay idle:
    // the real agents below are the only ones that act on the nodes.
    let names: Vec<&str> = groups().iter().map(|(g, _, _)| *g).collect();
    let mut agents = DemoAgents::start(&emulator, &names).await?;
    for (group, _, nodes) in groups() {
        for (name, zone) in nodes {
            fleet.add_node(FleetNode {
                name: name.into(),
                group: group.into(),
                node_type: "CloudPermanent".into(),
                zone: zone.into(),
                pods: 110,
            })?;
            agents.add_node(name, group)?;
            // The fencing agent would label its node; the fleet has no watchdog to arm.
            if group == "edge" {
                emulator
                    .merge_patch(
                        "v1",
                        "Node",
                        "",
                        name,
                        &json!({"metadata": {"labels": {keys::LABEL_FENCING_ENABLED: ""}}}),
                        false,
                    )
                    .map_err(|e| anyhow::anyhow!("cannot label {name}: {e}"))?;
            }
        }
    }
    let labels = |app: &str| BTreeMap::from([("app".to_owned(), app.to_owned())]);
    fleet.add_workload(Workload {
        name: "web".into(),
        namespace: "default".into(),
        kind: WorkloadKind::Deployment,
        replicas: 6,
        group: "frontend".into(),
        labels: labels("web"),
    });
    fleet.add_workload(Workload {
        name: "postgres".into(),
        namespace: "default".into(),
        kind: WorkloadKind::Deployment,
        replicas: 2,
        group: "db".into(),
        labels: labels("postgres"),
    });
    fleet.add_workload(Workload {
        name: "exporter".into(),
        namespace: "default".into(),
        kind: WorkloadKind::DaemonSet,
        replicas: 0,
        group: String::new(),
        labels: labels("exporter"),
    });
    seed(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "postgres", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "postgres"}}}}),
    )?;
    Ok((emulator, fleet, agents, rx))
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let (emulator, fleet, agents, events) = setup(&args).await?;
    let kubeconfig = emulator.kubeconfig_path().to_path_buf();
    println!(
        "nodemgr demo: an API emulator with 3 NodeGroups and 10 simulated machines, the real node-manager controllers,"
    );
    println!(
        "and on every node a real bashible agent process (in its own root) applying the bundles bashible-apiserver renders."
    );
    println!("bashible-apiserver: {}", agents.server());
    println!("API emulator: {}", emulator.url());
    println!(
        "Watch it:     KUBECONFIG={} kubectl get ng,nodes -w",
        kubeconfig.display()
    );

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel::<SocketAddr>();
    let config = node_manager::Config {
        kubeconfig: Some(kubeconfig.clone()),
        config_file: None,
        controllers: None,
        create_master_node_group: None,
        metrics_address: SocketAddr::from(([127, 0, 0, 1], 0)),
        metrics_serve: Default::default(),
        leader_election_namespace: "nodemgr-system".into(),
        leader_election_name: "node-manager".into(),
        identity: Some("demo".into()),
        lease_duration: None,
        renew_period: None,
        renew_deadline: None,
        no_leader_election: false,
        resync: Some(Duration::from_secs(2)),
        update_period: Some(Duration::from_secs(1)),
        fencing_period: Some(Duration::from_secs(1)),
        fencing_timeout: None,
        // Demo agents: kubelet staleness 2 s, margin 1 s ⇒ edge's deadline 10 + 2 + 1 = 13 s.
        fencing_kubelet_stale_after: Some(Duration::from_secs(2)),
        fencing_margin: Some(Duration::from_secs(1)),
        storm_threshold: None,
        static_period: None,
        static_cluster_context: None,
        cluster_context_namespace: nodemgr_core::model::keys::NAMESPACE.into(),
        static_test_roots: None,
        bootstrap_token_file: None,
        bootstrap_token_ttl: None,
        bootstrap_token_renew_margin: None,
        current_tokens: Default::default(),
        machines_config: None,
        machines_period: None,
        cloud_credentials: "env".into(),
        cluster: Default::default(),
        settings_config_map: None,
    };
    let manager = tokio::spawn(node_manager::run(
        config,
        async move {
            let _ = stop_rx.await;
        },
        Some(bound_tx),
    ));
    let metrics = bound_rx.await.context("node-manager did not start")?;
    println!("Metrics:      http://{metrics}/metrics");

    let mut story = Story {
        emulator: emulator.clone(),
        fleet,
        agents,
        agent_seen: BTreeMap::new(),
        started: Instant::now(),
        events,
        timeout: Duration::from_secs(args.step_timeout),
        seen: BTreeMap::new(),
        pods: BTreeMap::new(),
        evictions_refused: 0,
    };
    let result = walk(&mut story).await;
    story.report();
    if result.is_ok() {
        summary(&story);
        if args.hold {
            println!();
            println!(
                "Holding (Ctrl-C to stop): KUBECONFIG={} kubectl get ng,nodes -w",
                kubeconfig.display()
            );
            node_manager::termination().await;
        }
    }
    let _ = stop_tx.send(());
    story.agents.shutdown().await;
    match tokio::time::timeout(Duration::from_secs(10), manager).await {
        Ok(Ok(Err(e))) => return Err(e.context("node-manager failed")),
        Ok(Err(e)) => bail!("node-manager panicked: {e}"),
        _ => {}
    }
    result
}

async fn walk(story: &mut Story) -> anyhow::Result<()> {
    story.heading("0. node-manager takes the lead and reports the groups");
    story
        .until("every group's status counts its nodes", |s| {
            groups().iter().all(|(g, _, nodes)| {
                let status = s
                    .emulator
                    .get("deckhouse.io/v1", "NodeGroup", "", g)
                    .map(|o| o["status"].clone())
                    .unwrap_or(Value::Null);
                status["ready"] == nodes.len() && status["upToDate"] == nodes.len()
            })
        })
        .await?;

    story.heading("1. a nodeTemplate label is added to frontend, then removed");
    story.patch_spec(
        "frontend",
        json!({"nodeTemplate": {"labels": {"tier": "frontend", "team": "checkout"}}}),
    )?;
    story
        .until("team=checkout on every frontend node", |s| {
            s.group_nodes("frontend")
                .iter()
                .all(|n| n["metadata"]["labels"]["team"] == "checkout")
        })
        .await?;
    story.patch_spec(
        "frontend",
        json!({"nodeTemplate": {"labels": {"tier": "frontend", "team": null}}}),
    )?;
    story
        .until("team gone from every frontend node (tier kept)", |s| {
            s.group_nodes("frontend").iter().all(|n| {
                n["metadata"]["labels"]["team"].is_null()
                    && n["metadata"]["labels"]["tier"] == "frontend"
            })
        })
        .await?;

    story.heading("2. frontend's kubelet.maxPods changes: a kubelet restart, 2 nodes at a time");
    story.patch_spec("frontend", json!({"kubelet": {"maxPods": 150}}))?;
    let frontend = story.agents.publish(&story.emulator, "frontend").await?;
    story.say(&format!(
        "bashible-apiserver serves frontend's new bundle {}…; the agents ask for approval",
        frontend.get(..12).unwrap_or(&frontend)
    ));
    let mut most = 0;
    story
        .until(
            "every frontend node applied the new bundle (maxPods 150)",
            |s| {
                let approved = s
                    .group_nodes("frontend")
                    .iter()
                    .filter(|n| !n["metadata"]["annotations"][keys::ANNOTATION_APPROVED].is_null())
                    .count();
                most = most.max(approved);
                s.all_on("frontend", &frontend)
            },
        )
        .await?;
    story.say(&format!(
        "at most {most} frontend nodes were approved at once (maxConcurrent 2)"
    ));

    story.heading("3. a disruptive change on db (Automatic): a new container runtime; drain first; the PDB blocks, the timeout (10s) deletes");
    story.patch_spec("db", json!({"cri": {"type": "ContainerdV2"}}))?;
    let db = story.agents.publish(&story.emulator, "db").await?;
    story
        .until(
            "both db nodes drained and on their new container runtime",
            |s| s.all_on("db", &db),
        )
        .await?;

    story.heading("4. edge-1 (fenced, watchdog timeout 10s) goes dark");
    story.fleet.set_dark("edge-1", true)?;
    story.agents.stop("edge-1");
    let dark_at = Instant::now();
    story
        .until(
            "edge-1's pods and Node deleted by the fencing controller",
            |s| s.emulator.get("v1", "Node", "", "edge-1").is_none(),
        )
        .await?;
    story.say(&format!(
        "edge-1 was fenced {:.1}s after it went dark (deadline 13s = watchdog 10s + kubelet staleness 2s + margin 1s, from its last heartbeat)",
        dark_at.elapsed().as_secs_f64()
    ));
    story
        .until("edge's status shows 3 nodes", |s| {
            s.emulator
                .get("deckhouse.io/v1", "NodeGroup", "", "edge")
                .is_some_and(|g| g["status"]["nodes"] == 3)
        })
        .await?;
    Ok(())
}

fn summary(story: &Story) {
    story.heading("The groups now");
    println!(
        "{:<10} {:>6} {:>6} {:>9}",
        "NAME", "NODES", "READY", "UPTODATE"
    );
    for (group, _, _) in groups() {
        let status = story
            .emulator
            .get("deckhouse.io/v1", "NodeGroup", "", group)
            .map(|o| o["status"].clone())
            .unwrap_or(Value::Null);
        let field = |k: &str| status[k].as_i64().map_or("-".to_owned(), |v| v.to_string());
        println!(
            "{group:<10} {:>6} {:>6} {:>9}",
            field("nodes"),
            field("ready"),
            field("upToDate")
        );
    }
}
