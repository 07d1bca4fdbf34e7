//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several node-manager
//! replicas exactly one runs the controllers at a time, whatever the replicas' wall clocks say,
//! and a leader whose controllers die does not keep the Lease while doing nothing.
//!
//! # How expiry is decided
//!
//! A candidate never compares the holder's `renewTime` with its own wall clock (a clock 20 s
//! ahead would see a live Lease as expired and take it, a clock behind would wait too long).
//! Instead it remembers the record it last read (holder, `renewTime`, resourceVersion) and the
//! moment, on its own monotonic clock, when it first saw that record: the *observed time*.
//! The Lease is expired for the candidate once `lease_duration` has passed on that clock
//! since the record last changed. The duration used is the larger of the record's
//! `leaseDurationSeconds` and the candidate's own. Wall-clock time is only written into
//! `renewTime` and `acquireTime` for people and other tools to read.
//!
//! # Guarantees
//! 1. Writes (create, take over, renew, release) carry the resourceVersion that was read, so of
//!    two replicas racing for an expired Lease only one wins; the other gets a 409.
//! 2. The holder counts a renewal from the moment the successful attempt *started*, and stops its
//!    controllers when it could not renew within `renew_deadline` (a shorter time than
//!    `lease_duration`). It asks them to stop, waits `stop_grace = (lease_duration −
//!    renew_deadline) / 2`, then aborts them. A candidate can write the Lease only when no write
//!    has happened since it read it, and it saw that read's record no earlier than the holder's
//!    last write, so it takes over no earlier than `lease_duration` after that write. The holder
//!    has stopped by `renew_deadline + stop_grace` after it, which is sooner. This holds for
//!    any wall-clock skew. It assumes the replicas' monotonic clocks run at about the same rate,
//!    and that a controller reaches an `.await` within the grace time.
//! 3. A holder that dies without releasing is replaced within `lease_duration` plus about 1.6
//!    retry periods (plus request latencies): the candidate sees the last renewal within
//!    one jittered retry period (1 to 1.5 × `retry_period`), then wakes at the expiry
//!    plus at most 0.1 × `retry_period`. A holder that shuts down gracefully releases the Lease,
//!    and the next candidate takes it at its next retry.
//! 4. Candidates retry after a random 1 to 1.5 × `retry_period`, so replicas that started
//!    together do not keep colliding.
//!
//! # When the controllers die
//! The holder runs the controllers as one task. If that task ends without being asked to (a
//! controller returned or panicked, see [`crate::supervisor`]), the holder keeps the Lease and
//! restarts the controllers after a backoff (`restart_backoff`, doubling up to
//! `max_restart_backoff`); meanwhile its [`Role`] is [`Role::Restarting`], and `/readyz` reports
//! not ready. A run that lasts longer than twice `max_restart_backoff` resets the count. After
//! `max_consecutive_failures` failed runs in a row, the replica releases the Lease so that a
//! standby takes over at once, its role turns [`Role::Failed`] and [`LeaderElector::run`]
//! returns [`LeaderError::ControllersFailed`]. node-manager then exits, and the kubelet
//! restarts it with a fresh process. Why both: a restart in place rebuilds the caches and
//! recovers from a transient fault (an odd object, an API hiccup during start) without a
//! leadership change. A fault that keeps coming back should not hold the cluster's only
//! active controller slot: another replica, maybe on another node or version, gets it.
//!
//! # Why not a crate
//! `kube-lease-manager` 0.13 is built on this workspace's `kube` 5, `k8s-openapi` 0.29 and
//! `rand` 0.10, so it would not pull a second kube. It is not used because it decides expiry
//! as `renewTime + leaseDurationSeconds` against the local `SystemTime`, the clock-skew fault
//! this module exists to avoid. It also takes and renews the Lease with server-side-apply and
//! strategic-merge patches without a resourceVersion precondition, and it unwraps time
//! arithmetic on the Lease's fields, which panics on a far-future `renewTime`. kube-rs itself
//! has no leader election. See `docs/leader-election.md`.

use std::future::Future;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff;
use kube::Api;
use kube::api::PostParams;
use nodemgr_core::ports::ClusterError;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cluster::map_error;
use crate::metrics::Metrics;
use crate::supervisor::{TaskEnded, panic_message};

/// Where the elector reads time: the monotonic clock that decides expiry and deadlines, and the
/// wall clock written into the Lease. Tests give replicas skewed wall clocks through it.
pub trait Clock: Send + Sync + 'static {
    /// The wall-clock time to write into `renewTime` / `acquireTime` (informational only).
    fn wall(&self) -> jiff::Timestamp;
    /// The monotonic time every expiry and deadline is measured on.
    fn monotonic(&self) -> Instant {
        Instant::now()
    }
}

/// The system's clocks, the wall clock shifted by `wall_offset` (zero in production; tests
/// use ±30 s to show that skew does not matter).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock {
    /// Added to the system's wall-clock time.
    pub wall_offset: jiff::SignedDuration,
}

impl SystemClock {
    /// The system clock with its wall-clock time shifted by `seconds`.
    pub fn skewed(seconds: i64) -> Self {
        SystemClock {
            wall_offset: jiff::SignedDuration::from_secs(seconds),
        }
    }
}

impl Clock for SystemClock {
    fn wall(&self) -> jiff::Timestamp {
        let now =
            jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        now.checked_add(self.wall_offset).unwrap_or(now)
    }
}

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a candidate waits, after it last saw the Lease change, before taking it.
    /// Default 15 s.
    pub lease_duration: Duration,
    /// How long the holder keeps acting without a successful renewal. Shorter than
    /// `lease_duration`. Default 10 s.
    pub renew_deadline: Duration,
    /// How often the holder renews and candidates retry (candidates add up to 50 % jitter).
    /// Shorter than `renew_deadline`. Default 2 s.
    pub retry_period: Duration,
    /// First wait before restarting controllers that ended by themselves. Default 1 s.
    pub restart_backoff: Duration,
    /// Longest wait between restarts. Default 30 s.
    pub max_restart_backoff: Duration,
    /// Failed controller runs in a row after which the replica gives up the Lease. Default 5.
    pub max_consecutive_failures: u32,
}

impl LeaderConfig {
    /// The defaults for a Lease `namespace/name` held as `identity`.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        LeaderConfig {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            restart_backoff: Duration::from_secs(1),
            max_restart_backoff: Duration::from_secs(30),
            max_consecutive_failures: 5,
        }
    }

    /// `lease_duration`, `renew_deadline` and `retry_period` set together.
    pub fn with_timing(
        mut self,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        self.lease_duration = lease_duration;
        self.renew_deadline = renew_deadline;
        self.retry_period = retry_period;
        self
    }

    /// How long a stepping-down holder waits for its controllers before aborting them.
    pub fn stop_grace(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_deadline) / 2
    }

    /// Checks that the timing keeps the guarantees of the module docs.
    ///
    /// # Errors
    /// [`LeaderError::InvalidTiming`] naming the setting that breaks them.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let bad = |m: String| Err(LeaderError::InvalidTiming(m));
        if self.identity.is_empty() {
            return bad("the identity is empty".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return bad(format!(
                "lease duration {:?} is under 1s (a Lease counts whole seconds)",
                self.lease_duration
            ));
        }
        if i32::try_from(self.lease_duration.as_secs()).is_err() {
            return bad(format!(
                "lease duration {:?} does not fit leaseDurationSeconds (at most {} s)",
                self.lease_duration,
                i32::MAX
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return bad(format!(
                "renew deadline {:?} must be shorter than the lease duration {:?} (the holder must \
                 stop before anyone may take over)",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return bad(format!(
                "retry period {:?} must be longer than zero and shorter than the renew deadline \
                 {:?} (the holder must get more than one try)",
                self.retry_period, self.renew_deadline
            ));
        }
        if self.restart_backoff.is_zero() || self.max_restart_backoff < self.restart_backoff {
            return bad(format!(
                "restart backoff {:?} must be longer than zero and not longer than its maximum {:?}",
                self.restart_backoff, self.max_restart_backoff
            ));
        }
        if self.max_consecutive_failures == 0 {
            return bad("max consecutive failures must be at least 1".into());
        }
        Ok(())
    }
}

/// Why the election stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The settings break the election's guarantees.
    #[error("invalid leader election settings: {0}")]
    InvalidTiming(String),
    /// The controllers failed too often in a row; the Lease was given up.
    #[error("the controllers failed {failures} times in a row; gave up the leader Lease")]
    ControllersFailed {
        /// Failed runs in a row.
        failures: u32,
        /// What ended the last run.
        #[source]
        last: TaskEnded,
    },
}

/// What this replica is doing, for `/readyz`, metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not holding the Lease; campaigning.
    #[default]
    Standby,
    /// Holding the Lease with the controllers running.
    Leader,
    /// Holding the Lease, the controllers ended by themselves; they restart after a backoff.
    Restarting,
    /// The controllers failed too often; the Lease was given up. Not ready.
    Failed,
}

impl Role {
    /// Whether this replica holds the Lease.
    pub fn holds_lease(self) -> bool {
        matches!(self, Role::Leader | Role::Restarting)
    }
}

/// The outcome of one [`LeaderElector::try_acquire_or_renew`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease now (created, taken over or renewed).
    Holding,
    /// Another replica holds the Lease, and by this replica's observation it has not expired.
    HeldBy(String),
    /// The write lost a race (409): the Lease changed since it was read.
    Conflict,
}

/// What identifies a version of the Lease record: when any part changes, the observed time
/// restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RecordKey {
    holder: Option<String>,
    renew_time: Option<String>,
    resource_version: Option<String>,
}

impl RecordKey {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        RecordKey {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec.and_then(|s| s.renew_time.as_ref().map(|t| t.0.to_string())),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// The record last seen and when (monotonic), with the lease duration it promised.
#[derive(Debug, Clone)]
struct Observed {
    key: RecordKey,
    at: Instant,
    duration: Duration,
}

impl Observed {
    /// When the record expires for this replica; `None`: never (an absurd duration).
    fn expiry(&self) -> Option<Instant> {
        self.at.checked_add(self.duration)
    }
}

/// One replica's side of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
    clock: Box<dyn Clock>,
    observed: Mutex<Option<Observed>>,
}

/// A uniformly distributed fraction in `[0, 1)` for jitter (std's randomly keyed hasher; no
/// cryptographic quality needed).
fn jitter_fraction() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let bits = std::hash::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed));
    // The top 53 bits make an exact f64 in [0, 1).
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// The wait before a candidate's next try: `retry × [1, 1.5)`.
fn jittered(retry: Duration) -> Duration {
    retry.mul_f64(1.0 + 0.5 * jitter_fraction())
}

/// The declared duration of a record, as a [`Duration`] (`None` when missing or not positive).
fn record_duration(spec: Option<&LeaseSpec>) -> Option<Duration> {
    let seconds = spec?.lease_duration_seconds?;
    u64::try_from(seconds)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

impl LeaderElector {
    /// An elector over `client` with `config`, on the system clocks.
    pub fn new(client: kube::Client, config: LeaderConfig) -> Self {
        Self::with_clock(client, config, SystemClock::default())
    }

    /// An elector reading time from `clock` (tests skew the wall clock).
    pub fn with_clock(client: kube::Client, config: LeaderConfig, clock: impl Clock) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            clock: Box::new(clock),
            observed: Mutex::new(None),
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaderConfig {
        &self.config
    }

    fn spec(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(self.clock.wall());
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Records `lease` as seen now: the observed time restarts when the record changed.
    fn observe(&self, lease: &Lease) -> Observed {
        let key = RecordKey::of(lease);
        let duration = record_duration(lease.spec.as_ref())
            .map_or(self.config.lease_duration, |d| {
                d.max(self.config.lease_duration)
            });
        let now = self.clock.monotonic();
        let mut observed = self
            .observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = match observed.take() {
            Some(o) if o.key == key => Observed { duration, ..o },
            _ => Observed {
                key,
                at: now,
                duration,
            },
        };
        *observed = Some(entry.clone());
        entry
    }

    /// When the Lease, as last observed, expires for this replica (`None`: nothing observed
    /// or it never expires).
    fn observed_expiry(&self) -> Option<Instant> {
        self.observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|o| o.key.holder.as_deref() != Some(self.config.identity.as_str()))
            .and_then(Observed::expiry)
    }

    /// Acquires the Lease when free or expired (by observed time), renews it when held.
    ///
    /// # Errors
    /// When the API cannot be asked; a holder retries until its renew deadline.
    pub async fn try_acquire_or_renew(&self) -> Result<Attempt, ClusterError> {
        let what = format!("lease {}/{}", self.config.namespace, self.config.name);
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| map_error(&what, e))?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(Attempt::Holding)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
                Err(e) => Err(map_error(&what, e)),
            };
        };
        let observed = self.observe(&lease);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = observed.key.holder.clone();
        let mine = holder.as_deref() == Some(self.config.identity.as_str());
        let new_spec = match holder {
            _ if mine => self.spec(
                spec.lease_transitions.unwrap_or(0),
                spec.acquire_time.clone(),
            ),
            None => self.spec(spec.lease_transitions.unwrap_or(0).saturating_add(1), None),
            Some(other) => {
                let expired = observed
                    .expiry()
                    .is_some_and(|expiry| expiry <= self.clock.monotonic());
                if !expired {
                    return Ok(Attempt::HeldBy(other));
                }
                tracing::info!(identity = %self.config.identity, previous = %other, "the leader Lease expired by observed time; taking it over");
                self.spec(spec.lease_transitions.unwrap_or(0).saturating_add(1), None)
            }
        };
        lease.spec = Some(new_spec);
        // `replace` sends metadata.resourceVersion: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                Ok(Attempt::Holding)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(map_error(&what, e)),
        }
    }

    /// Gives the Lease up if this replica holds it (on graceful shutdown or giving up).
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.acquire_time = None;
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(identity = %self.config.identity, "released the leader Lease"),
            Err(error) => {
                tracing::warn!(%error, "could not release the leader Lease; it expires by itself");
            }
        }
    }

    /// Runs `work` only while this replica leads (see the module docs): campaigns, starts
    /// `work(stop)` on winning, renews every `retry_period`, and stops the work when renewal
    /// fails for `renew_deadline` or another replica holds the Lease. Work that ends by itself
    /// is restarted after a backoff, and the replica gives up after too many failures in a row.
    /// Returns when `shutdown` turns true (or its sender is dropped), after stopping the work
    /// and releasing the Lease. `role` mirrors the state for `/readyz` and tests.
    ///
    /// # Errors
    /// Invalid settings; [`LeaderError::ControllersFailed`] after giving up.
    pub async fn run<F, Fut>(
        &self,
        mut shutdown: watch::Receiver<bool>,
        metrics: &Metrics,
        role: &watch::Sender<Role>,
        mut work: F,
    ) -> Result<(), LeaderError>
    where
        F: FnMut(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = Result<(), TaskEnded>> + Send + 'static,
    {
        self.config.validate()?;
        let config = &self.config;
        let mut term: Option<Term> = None;
        let mut failures: u32 = 0;
        let set_role = |r: Role| {
            metrics.leader.set(i64::from(r.holds_lease()));
            role.send_replace(r);
        };
        set_role(Role::Standby);
        loop {
            // A dropped shutdown sender counts as a shutdown: nobody could ask any more, and
            // waiting on it would return at once and spin.
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            let Some(current) = term.as_mut() else {
                // Campaigning.
                let started = self.clock.monotonic();
                let attempt =
                    tokio::time::timeout(config.renew_deadline, self.try_acquire_or_renew()).await;
                if matches!(attempt, Ok(Ok(Attempt::Holding))) {
                    tracing::info!(identity = %config.identity, lease = %config.name, "became the leader");
                    term = Some(Term {
                        last_renewed: started,
                        work: WorkState::start(&mut work, self.clock.monotonic()),
                    });
                    set_role(Role::Leader);
                    continue;
                }
                if let Ok(Err(error)) = &attempt {
                    tracing::debug!(%error, "could not read the leader Lease");
                }
                let now = self.clock.monotonic();
                let mut wake = now + jittered(config.retry_period);
                if let Some(expiry) = self.observed_expiry() {
                    let soon = expiry + config.retry_period.mul_f64(0.1 * jitter_fraction());
                    wake = wake.min(soon.max(now));
                }
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            };
            // Leading: renew, bounded by what is left of the renew deadline.
            let started = self.clock.monotonic();
            let deadline = current.last_renewed + config.renew_deadline;
            let left = deadline.saturating_duration_since(started);
            let outcome = tokio::time::timeout(left, self.try_acquire_or_renew()).await;
            let lost = match &outcome {
                Ok(Ok(Attempt::Holding)) => {
                    current.last_renewed = started;
                    None
                }
                Ok(Ok(Attempt::HeldBy(other))) => Some(format!("{other} holds the Lease")),
                _ if self.clock.monotonic() >= deadline => Some(format!(
                    "could not renew within the renew deadline {:?}",
                    config.renew_deadline
                )),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "could not renew the leader Lease; retrying");
                    None
                }
                _ => None,
            };
            if let Some(why) = lost {
                tracing::warn!(identity = %config.identity, %why, "lost the leader Lease; stopping the controllers");
                if let Some(term) = term.take() {
                    term.work.stop(config.stop_grace()).await;
                }
                failures = 0;
                set_role(Role::Standby);
                continue;
            }
            // Wait for the next renewal, the deadline, a restart, the work ending, or shutdown.
            let deadline = current.last_renewed + config.renew_deadline;
            let wake = (started + config.retry_period).min(deadline);
            let ended = match &mut current.work {
                WorkState::Running { task, started, .. } => {
                    tokio::select! {
                        () = tokio::time::sleep_until(wake) => None,
                        _ = shutdown.changed() => None,
                        joined = task => {
                            let ran = self.clock.monotonic().saturating_duration_since(*started);
                            let ended = match joined {
                                Ok(Ok(())) => TaskEnded::Returned { name: "controllers".into() },
                                Ok(Err(ended)) => ended,
                                Err(error) => TaskEnded::Panicked {
                                    name: "controllers".into(),
                                    message: panic_message(error),
                                },
                            };
                            Some((ended, ran))
                        }
                    }
                }
                WorkState::Backoff { until } => {
                    let until = *until;
                    tokio::select! {
                        () = tokio::time::sleep_until(wake.min(until)) => {}
                        _ = shutdown.changed() => {}
                    }
                    if self.clock.monotonic() >= until && !*shutdown.borrow() {
                        tracing::info!(failures, "restarting the controllers");
                        current.work = WorkState::start(&mut work, self.clock.monotonic());
                        set_role(Role::Leader);
                    }
                    None
                }
            };
            let Some((ended, ran)) = ended else {
                continue;
            };
            // The controllers ended although nobody asked them to stop.
            metrics.controller_failures.inc();
            if ran >= config.max_restart_backoff.saturating_mul(2) {
                failures = 0;
            }
            failures = failures.saturating_add(1);
            if failures >= config.max_consecutive_failures {
                tracing::error!(error = %ended, failures, "the controllers keep failing; giving up the leader Lease");
                self.release().await;
                set_role(Role::Failed);
                return Err(LeaderError::ControllersFailed {
                    failures,
                    last: ended,
                });
            }
            let backoff = restart_delay(config, failures);
            tracing::error!(error = %ended, failures, ?backoff, "the controllers ended by themselves; restarting them after a backoff");
            current.work = WorkState::Backoff {
                until: self.clock.monotonic() + backoff,
            };
            set_role(Role::Restarting);
        }
        if let Some(term) = term.take() {
            term.work.stop(config.stop_grace()).await;
            self.release().await;
        }
        set_role(Role::Standby);
        Ok(())
    }
}

/// The wait before restart number `failures` (1-based): `restart_backoff × 2^(failures − 1)`,
/// at most `max_restart_backoff`.
fn restart_delay(config: &LeaderConfig, failures: u32) -> Duration {
    nodemgr_core::backoff::Backoff::new(config.restart_backoff, config.max_restart_backoff)
        .after_failures(failures)
}

/// The current leadership term.
struct Term {
    /// When the last successful renewal attempt started (monotonic).
    last_renewed: Instant,
    work: WorkState,
}

/// The controllers of a term.
enum WorkState {
    /// Running.
    Running {
        stop: watch::Sender<bool>,
        task: JoinHandle<Result<(), TaskEnded>>,
        started: Instant,
    },
    /// Ended by themselves; restart at `until`.
    Backoff { until: Instant },
}

impl WorkState {
    fn start<F, Fut>(work: &mut F, now: Instant) -> Self
    where
        F: FnMut(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = Result<(), TaskEnded>> + Send + 'static,
    {
        let (stop, stop_rx) = watch::channel(false);
        WorkState::Running {
            stop,
            task: tokio::spawn(work(stop_rx)),
            started: now,
        }
    }

    /// Asks the work to stop, waits up to `grace`, then aborts it.
    async fn stop(self, grace: Duration) {
        let WorkState::Running { stop, mut task, .. } = self else {
            return;
        };
        let _ = stop.send(true);
        match tokio::time::timeout(grace, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(ended))) => {
                tracing::warn!(error = %ended, "the controllers failed while stopping")
            }
            Ok(Err(error)) => {
                tracing::warn!(message = %panic_message(error), "the controllers panicked while stopping");
            }
            Err(_) => {
                tracing::warn!(
                    ?grace,
                    "the controllers did not stop in time; aborting them"
                );
                task.abort();
                let _ = task.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn timing(lease: u64, deadline: u64, retry: u64) -> LeaderConfig {
        LeaderConfig::new("ns", "lease", "me").with_timing(
            Duration::from_millis(lease),
            Duration::from_millis(deadline),
            Duration::from_millis(retry),
        )
    }

    #[test]
    fn the_defaults_keep_the_guarantees() {
        let config = LeaderConfig::new("ns", "lease", "me");
        assert!(config.validate().is_ok());
        assert_eq!(config.stop_grace(), Duration::from_millis(2500));
    }

    #[test]
    fn timing_that_breaks_the_guarantees_is_refused_with_the_setting_named() {
        let message = |c: LeaderConfig| c.validate().map_err(|e| e.to_string()).unwrap_err();
        assert!(message(timing(500, 300, 100)).contains("under 1s"));
        assert!(message(timing(2000, 2000, 100)).contains("renew deadline"));
        assert!(message(timing(2000, 1000, 1000)).contains("retry period"));
        assert!(message(timing(2000, 1000, 0)).contains("retry period"));
        let huge = Duration::from_secs(u64::from(u32::MAX));
        assert!(
            message(timing(0, 0, 1).with_timing(
                huge,
                Duration::from_secs(2),
                Duration::from_secs(1)
            ))
            .contains("leaseDurationSeconds")
        );
        let mut no_identity = timing(2000, 1000, 100);
        no_identity.identity.clear();
        assert!(message(no_identity).contains("identity"));
    }

    #[test]
    fn restarts_back_off_exponentially_up_to_the_maximum() {
        let config = LeaderConfig::new("ns", "lease", "me");
        let delays: Vec<u64> = (1..=8)
            .map(|n| restart_delay(&config, n).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(restart_delay(&config, u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn a_record_duration_is_read_only_when_positive() {
        let spec = |s| LeaseSpec {
            lease_duration_seconds: Some(s),
            ..LeaseSpec::default()
        };
        assert_eq!(
            record_duration(Some(&spec(15))),
            Some(Duration::from_secs(15))
        );
        assert_eq!(record_duration(Some(&spec(0))), None);
        assert_eq!(record_duration(Some(&spec(-5))), None);
        assert_eq!(record_duration(Some(&spec(i32::MIN))), None);
        assert_eq!(
            record_duration(Some(&spec(i32::MAX))),
            Some(Duration::from_secs(u64::from(i32::MAX.unsigned_abs())))
        );
        assert_eq!(record_duration(None), None);
    }

    #[test]
    fn a_skewed_clock_shifts_only_the_wall_time() {
        let ahead = SystemClock::skewed(30).wall();
        let exact = SystemClock::default().wall();
        let diff = ahead.duration_since(exact).as_secs();
        assert!((29..=30).contains(&diff), "{diff}");
        // An offset past the end of time keeps the system time instead of panicking.
        let absurd = SystemClock::skewed(i64::MAX / 2).wall();
        assert!(absurd.as_second() > 0);
    }

    proptest! {
        /// Candidates wait between one and one and a half retry periods.
        #[test]
        fn jitter_stays_within_half_a_period(millis in 1u64..100_000) {
            let retry = Duration::from_millis(millis);
            let wait = jittered(retry);
            prop_assert!(wait >= retry);
            prop_assert!(wait <= retry.mul_f64(1.5));
        }
    }
}
