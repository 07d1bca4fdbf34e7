//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several node-manager
//! replicas exactly one acts at a time.
//!
//! A replica holds the Lease while it renews it every `renew_period`; another replica takes it
//! over only when `renewTime + leaseDurationSeconds` has passed. Every write is guarded by the
//! Lease's resourceVersion, so two replicas racing for an expired Lease cannot both win. The
//! holder stops its controllers at the first renewal that fails or takes longer than
//! `renew_period` (well inside the lease duration, so it has stopped before anyone else can
//! start), and releases the Lease on a graceful shutdown so the next replica starts at once.

use std::future::Future;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff;
use kube::Api;
use kube::api::PostParams;
use nodemgr_core::ports::ClusterError;
use tokio::sync::watch;

use crate::cluster::map_error;
use crate::metrics::Metrics;

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a Lease stays valid without renewal. Default 15 s.
    pub lease_duration: Duration,
    /// How often the holder renews and the others retry. Default 5 s.
    pub renew_period: Duration,
}

impl LeaderConfig {
    /// The defaults for a Lease `namespace/name` held as `identity`.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        LeaderConfig {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(5),
        }
    }
}

/// One replica's side of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
}

fn micro_now() -> MicroTime {
    let now = jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    MicroTime(now)
}

fn expired(spec: &LeaseSpec, now: jiff::Timestamp) -> bool {
    let Some(renew) = spec.renew_time.as_ref() else {
        return true;
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15).max(0));
    renew.0.as_second().saturating_add(duration) < now.as_second()
}

impl LeaderElector {
    /// An elector over `client` with `config`.
    pub fn new(client: kube::Client, config: LeaderConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaderConfig {
        &self.config
    }

    fn spec(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        let now = micro_now();
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

    /// Acquires the Lease when free or expired, renews it when held: `Ok(true)` when this
    /// replica holds it afterwards, `Ok(false)` when another one does (or won a race).
    ///
    /// # Errors
    /// When the API cannot be asked; the caller must then act as not leading.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, ClusterError> {
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
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(map_error(&what, e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.config.identity.as_str());
        let free = spec.holder_identity.as_deref().is_none_or(str::is_empty);
        let now = micro_now().0;
        let new_spec = if mine {
            self.spec(
                spec.lease_transitions.unwrap_or(0),
                spec.acquire_time.clone(),
            )
        } else if free || expired(&spec, now) {
            self.spec(spec.lease_transitions.unwrap_or(0).saturating_add(1), None)
        } else {
            return Ok(false);
        };
        lease.spec = Some(new_spec);
        // `replace` sends metadata.resourceVersion: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(map_error(&what, e)),
        }
    }

    /// Gives the Lease up if this replica holds it (on graceful shutdown).
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
        if let Err(error) = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(%error, "could not release the leader lease; it expires by itself");
        }
    }

    /// Runs `work` only while this replica leads: campaigns every `renew_period`, starts
    /// `work(stop)` on winning, and on a lost or failed renewal signals `stop` and awaits the
    /// work before campaigning again. Returns when `shutdown` turns true (after stopping the
    /// work and releasing the Lease). `leading` mirrors the state for `/readyz` and tests.
    pub async fn run<F, Fut>(
        &self,
        mut shutdown: watch::Receiver<bool>,
        metrics: &Metrics,
        leading: &watch::Sender<bool>,
        mut work: F,
    ) where
        F: FnMut(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut running: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)> = None;
        loop {
            if *shutdown.borrow() {
                break;
            }
            let held = matches!(
                tokio::time::timeout(self.config.renew_period, self.try_acquire_or_renew()).await,
                Ok(Ok(true))
            );
            match (&running, held) {
                (None, true) => {
                    tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
                    let (stop_tx, stop_rx) = watch::channel(false);
                    let task = tokio::spawn(work(stop_rx));
                    running = Some((stop_tx, task));
                    metrics.leader.set(1);
                    let _ = leading.send(true);
                }
                (Some(_), false) => {
                    tracing::warn!(identity = %self.config.identity, "lost the leader lease; stopping the controllers");
                    if let Some((stop, task)) = running.take() {
                        let _ = stop.send(true);
                        let _ = task.await;
                    }
                    metrics.leader.set(0);
                    let _ = leading.send(false);
                }
                _ => {}
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.renew_period) => {}
                _ = shutdown.changed() => {}
            }
        }
        if let Some((stop, task)) = running.take() {
            let _ = stop.send(true);
            let _ = task.await;
            self.release().await;
        }
        metrics.leader.set(0);
        let _ = leading.send(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_after_its_duration() {
        let renew = jiff::Timestamp::from_second(1_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let spec = LeaseSpec {
            renew_time: Some(MicroTime(renew)),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        let at = |s| jiff::Timestamp::from_second(s).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        assert!(!expired(&spec, at(1_010)));
        assert!(!expired(&spec, at(1_015)));
        assert!(expired(&spec, at(1_016)));
        assert!(expired(&LeaseSpec::default(), at(0)));
    }
}
