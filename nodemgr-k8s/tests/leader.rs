//! Leader election against the API emulator: replicas with wall clocks skewed by ±30 s never
//! lead together and fail over within the lease duration plus the renew deadline; a leader
//! whose renewals fail stops before anyone else starts; controllers that end by themselves are
//! restarted while the replica keeps the Lease (and `/readyz` says not ready meanwhile), and
//! controllers that keep failing make the replica give the Lease up to a standby.
//!
//! Timings are short and real (the emulator is a real HTTP server); every wait is a deadline for
//! something that must happen. The failover times are printed for the record; the assertion is
//! the bound the election guarantees (`nodemgr_k8s::leader` docs), not a benchmark.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodemgr_k8s::cluster::client;
use nodemgr_k8s::leader::{LeaderConfig, LeaderElector, LeaderError, Role, SystemClock};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_k8s::serve::{self, Health};
use nodemgr_k8s::supervisor::TaskEnded;
use nodemgr_testkit::{Emulator, Fault};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1200);
const RETRY: Duration = Duration::from_millis(200);

fn config(id: &str) -> LeaderConfig {
    LeaderConfig {
        restart_backoff: Duration::from_millis(100),
        max_restart_backoff: Duration::from_millis(400),
        ..LeaderConfig::new("nodemgr-system", "node-manager", id).with_timing(
            LEASE,
            RENEW_DEADLINE,
            RETRY,
        )
    }
}

async fn emulator() -> Arc<Emulator> {
    let emulator = Emulator::start().await.unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodemgr-system"}}))
        .unwrap();
    Arc::new(emulator)
}

async fn eventually(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out after {secs}s waiting for {what}");
}

/// Who acts right now: `now` replicas inside their work, `most` the high-water mark, and when
/// each term started and ended (monotonic), to measure failovers.
#[derive(Default)]
struct Acting {
    now: AtomicUsize,
    most: AtomicUsize,
    terms: Mutex<Vec<(String, Instant, Option<Instant>)>>,
}

impl Acting {
    fn begin(&self, id: &str) -> usize {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let mut terms = self.terms.lock().unwrap();
        terms.push((id.to_owned(), Instant::now(), None));
        terms.len() - 1
    }

    fn end(&self, term: usize) {
        self.terms.lock().unwrap()[term].2 = Some(Instant::now());
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn started(&self) -> usize {
        self.terms.lock().unwrap().len()
    }

    fn last_leader(&self) -> Option<String> {
        self.terms.lock().unwrap().last().map(|t| t.0.clone())
    }

    fn last_start(&self) -> Instant {
        self.terms.lock().unwrap().last().unwrap().1
    }
}

/// One node-manager replica: an elector with a wall clock skewed by `skew` seconds whose work
/// marks itself in `acting` until told to stop (or until the replica is killed).
struct Replica {
    id: String,
    role: watch::Receiver<Role>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<(), LeaderError>>,
}

impl Replica {
    async fn start(emulator: &Emulator, id: &str, skew: i64, acting: Arc<Acting>) -> Replica {
        let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
        let elector = LeaderElector::with_clock(client, config(id), SystemClock::skewed(skew));
        let (role_tx, role) = watch::channel(Role::Standby);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let name = id.to_owned();
        let task = tokio::spawn(async move {
            elector
                .run(shutdown_rx, &Metrics::new(), &role_tx, move |mut stop| {
                    let (acting, name) = (acting.clone(), name.clone());
                    async move {
                        let term = acting.begin(&name);
                        // Ends when asked to stop, or when the replica is killed (the sender
                        // goes away with the elector), as a process's controllers would.
                        let _ = stop.wait_for(|s| *s).await;
                        acting.end(term);
                        Ok(())
                    }
                })
                .await
        });
        Replica {
            id: id.to_owned(),
            role,
            shutdown,
            task,
        }
    }

    fn leads(&self) -> bool {
        *self.role.borrow() == Role::Leader
    }

    /// Kills the replica without a release (a crashed or partitioned process).
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_wall_clocks_never_give_two_leaders_and_fail_over_within_lease_and_renew() {
    let emulator = emulator().await;
    let acting = Arc::new(Acting::default());
    let skews = [("minus-30", -30), ("exact", 0), ("plus-30", 30)];
    let mut replicas = Vec::new();
    for (id, skew) in skews {
        replicas.push(Replica::start(&emulator, id, skew, acting.clone()).await);
    }
    // A watchdog samples the roles too: two replicas reporting Leader at once is a failure
    // even between the work's own marks.
    let roles: Vec<watch::Receiver<Role>> = replicas.iter().map(|r| r.role.clone()).collect();
    let roles = Arc::new(Mutex::new(roles));
    let both = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (roles, both) = (roles.clone(), both.clone());
        tokio::spawn(async move {
            loop {
                let leading = roles
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|r| *r.borrow() == Role::Leader)
                    .count();
                if leading > 1 {
                    both.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    eventually("a first leader", 10, || acting.started() == 1).await;
    let mut failovers = Vec::new();
    // Kill the leader three times (each skew class gets its turn as the likely successor),
    // restarting the killed replica as a standby each time.
    for round in 0..3 {
        let leader_id = acting.last_leader().unwrap();
        let index = replicas.iter().position(|r| r.id == leader_id).unwrap();
        // Let the leader renew a few times first, so the others have observed live renewals.
        tokio::time::sleep(RETRY * 4).await;
        let before = acting.started();
        let leader = replicas.remove(index);
        *roles.lock().unwrap() = replicas.iter().map(|r| r.role.clone()).collect();
        let killed_at = Instant::now();
        leader.kill().await;
        eventually("a new leader after the kill", 10, || {
            acting.started() > before
        })
        .await;
        let failover = acting.last_start().saturating_duration_since(killed_at);
        failovers.push((
            round,
            leader_id.clone(),
            acting.last_leader().unwrap(),
            failover,
        ));
        assert!(
            failover <= LEASE + RENEW_DEADLINE,
            "round {round}: failover took {failover:?}, more than lease + renew deadline"
        );
        assert_ne!(acting.last_leader().unwrap(), leader_id);
        // The killed replica comes back with the same identity and skew, as a standby.
        let skew = skews.iter().find(|(id, _)| *id == leader_id).unwrap().1;
        let back = Replica::start(&emulator, &leader_id, skew, acting.clone()).await;
        replicas.push(back);
        *roles.lock().unwrap() = replicas.iter().map(|r| r.role.clone()).collect();
        // A while with everyone up: nobody else takes over a live Lease.
        let terms = acting.started();
        tokio::time::sleep(LEASE * 2).await;
        assert_eq!(
            acting.started(),
            terms,
            "round {round}: leadership moved while the leader was alive"
        );
    }
    for (round, from, to, took) in &failovers {
        eprintln!(
            "failover {round}: {from} killed, {to} leads after {took:?} (lease {LEASE:?}, renew deadline {RENEW_DEADLINE:?}, retry {RETRY:?})"
        );
    }
    // A graceful shutdown releases the Lease: the next one takes over within a retry or two.
    let leader_id = acting.last_leader().unwrap();
    let index = replicas.iter().position(|r| r.id == leader_id).unwrap();
    let before = acting.started();
    let stopped_at = Instant::now();
    replicas[index].shutdown.send(true).unwrap();
    eventually("a leader after the graceful stop", 10, || {
        acting.started() > before
    })
    .await;
    let handover = acting.last_start().saturating_duration_since(stopped_at);
    eprintln!("graceful handover took {handover:?}");
    assert!(
        handover < LEASE,
        "a released Lease is taken at once, took {handover:?}"
    );
    sampler.abort();
    assert_eq!(
        acting.most.load(Ordering::SeqCst),
        1,
        "two replicas acted at once"
    );
    assert_eq!(
        both.load(Ordering::SeqCst),
        0,
        "two replicas reported Leader at once"
    );
    for r in replicas {
        let _ = r.shutdown.send(true);
        let _ = r.task.await;
    }
    assert_eq!(acting.now.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewal_fails_stops_acting_before_anyone_else_starts() {
    let emulator = emulator().await;
    let acting = Arc::new(Acting::default());
    let a = Replica::start(&emulator, "replica-a", 30, acting.clone()).await;
    let b = Replica::start(&emulator, "replica-b", -30, acting.clone()).await;
    eventually("a first leader", 10, || acting.started() == 1).await;
    // The API server fails every Lease write for longer than the renew deadline: the leader
    // must step down, and nobody may take over while it could still be acting.
    emulator.inject_fault(Fault::new(500).verb("update").resource("leases").times(12));
    eventually("the leader stepped down", 10, || {
        emulator.request_count("update", "leases", Some(500)) >= 1
            && acting.now.load(Ordering::SeqCst) == 0
    })
    .await;
    eventually("a leader again once the API recovers", 15, || {
        acting.started() >= 2 && acting.now.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        acting.most.load(Ordering::SeqCst),
        1,
        "two replicas acted at once"
    );
    for r in [a, b] {
        r.shutdown.send(true).unwrap();
        r.task.await.unwrap().unwrap();
    }
    assert_eq!(acting.now.load(Ordering::SeqCst), 0);
}

async fn readyz(address: SocketAddr) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw.split(' ').nth(1).unwrap().parse().unwrap()
}

fn lease_holder(emulator: &Emulator) -> Option<String> {
    emulator
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "nodemgr-system",
            "node-manager",
        )?
        .pointer("/spec/holderIdentity")?
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_controller_is_restarted_and_readiness_is_false_meanwhile() {
    let emulator = emulator().await;
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let config = LeaderConfig {
        // Long enough for the probe below to see the restart window.
        restart_backoff: Duration::from_millis(600),
        max_restart_backoff: Duration::from_millis(600),
        ..config("replica-a")
    };
    let elector = LeaderElector::new(client, config);
    let metrics = Metrics::new();
    let (role_tx, role) = watch::channel(Role::Standby);
    let (reachable_tx, reachable) = watch::channel(true);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let listener = serve::bind(([127, 0, 0, 1], 0).into()).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(serve::serve(
        listener,
        serve::router(
            metrics.clone(),
            Health {
                api_reachable: reachable,
                role: role.clone(),
            },
        ),
        shutdown_rx.clone(),
    ));
    let runs = Arc::new(AtomicUsize::new(0));
    let run = {
        let (runs, metrics) = (runs.clone(), metrics.clone());
        tokio::spawn(async move {
            elector
                .run(shutdown_rx, &metrics, &role_tx, move |mut stop| {
                    let runs = runs.clone();
                    async move {
                        // The first run's controller panics after a moment; later ones behave.
                        if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            panic!("controller bug");
                        }
                        let _ = stop.wait_for(|s| *s).await;
                        Ok(())
                    }
                })
                .await
        })
    };
    eventually("leading", 10, || *role.borrow() == Role::Leader).await;
    assert_eq!(readyz(address).await, 200);
    eventually("restarting after the panic", 10, || {
        *role.borrow() == Role::Restarting
    })
    .await;
    assert_eq!(readyz(address).await, 503, "not ready while restarting");
    assert_eq!(
        lease_holder(&emulator).as_deref(),
        Some("replica-a"),
        "the Lease is kept during the restart"
    );
    eventually("the controllers run again", 10, || {
        runs.load(Ordering::SeqCst) == 2 && *role.borrow() == Role::Leader
    })
    .await;
    assert_eq!(readyz(address).await, 200);
    assert!(
        metrics
            .encode()
            .contains("nodemgr_controller_failures_total 1"),
        "{}",
        metrics.encode()
    );
    drop(reachable_tx);
    shutdown.send(true).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(lease_holder(&emulator), None, "released on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_that_keep_failing_give_the_lease_to_a_standby() {
    let emulator = emulator().await;
    let acting = Arc::new(Acting::default());
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let config = LeaderConfig {
        max_consecutive_failures: 3,
        ..config("broken")
    };
    let elector = LeaderElector::new(client, config);
    let (role_tx, role) = watch::channel(Role::Standby);
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let broken = tokio::spawn(async move {
        elector
            .run(shutdown_rx, &Metrics::new(), &role_tx, |_stop| async {
                Err(TaskEnded::Returned {
                    name: "update".into(),
                })
            })
            .await
    });
    eventually("the broken replica leads first", 10, || {
        lease_holder(&emulator).as_deref() == Some("broken")
    })
    .await;
    let healthy = Replica::start(&emulator, "healthy", 0, acting.clone()).await;
    let error = broken.await.unwrap().unwrap_err();
    let gave_up = Instant::now();
    match &error {
        LeaderError::ControllersFailed { failures, last } => {
            assert_eq!(*failures, 3);
            assert_eq!(
                *last,
                TaskEnded::Returned {
                    name: "update".into()
                }
            );
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(*role.borrow(), Role::Failed, "not ready after giving up");
    eventually("the standby leads", 10, || healthy.leads()).await;
    let handover = Instant::now().saturating_duration_since(gave_up);
    assert!(
        handover < LEASE,
        "a released Lease is taken without waiting for expiry, took {handover:?}"
    );
    healthy.shutdown.send(true).unwrap();
    healthy.task.await.unwrap().unwrap();
}
