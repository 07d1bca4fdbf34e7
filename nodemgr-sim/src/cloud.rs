//! An in-memory cloud for the simulator: machines that take `creation_latency` to start and
//! `termination_latency` to go, listings that lag `list_lag` behind creations (EC2's
//! eventual consistency), idempotent creation by client token (as EC2 does), and failure
//! injection per call — refused before it applies (throttled, unavailable) or, the dangerous
//! case, applied and then reported as failed (a timeout after the request went through). It
//! implements the core's [`CloudApi`] against a virtual clock the driver moves.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::cloud::{
    CloudApi, CloudError, CloudInstance, CreateInstance, InstanceState,
};

use crate::rng::SimRng;

/// What the next calls do wrong.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CloudFaults {
    /// Chance a call is refused before it applies (`Throttled`).
    pub refuse: f64,
    /// Chance a call applies and then reports `Unavailable` (a timeout on the way back).
    pub lose_answer: f64,
}

/// One machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimMachine {
    /// What the API reports (state updated by [`SimCloud::advance`]).
    pub instance: CloudInstance,
    /// When it starts running.
    pub running_at: Timestamp,
    /// When it is gone, once terminated.
    pub gone_at: Option<Timestamp>,
}

#[derive(Debug)]
struct State {
    now: Timestamp,
    machines: BTreeMap<String, SimMachine>,
    tokens: BTreeMap<String, String>,
    next_id: u64,
    faults: CloudFaults,
    rng: SimRng,
    calls: u64,
}

/// The in-memory cloud.
#[derive(Debug)]
pub struct SimCloud {
    state: Mutex<State>,
    creation_latency: Duration,
    termination_latency: Duration,
    list_lag: Duration,
}

impl SimCloud {
    /// An empty cloud at `now`.
    pub fn new(
        now: Timestamp,
        creation_latency: Duration,
        termination_latency: Duration,
        seed: u64,
    ) -> Self {
        Self {
            state: Mutex::new(State {
                now,
                machines: BTreeMap::new(),
                tokens: BTreeMap::new(),
                next_id: 1,
                faults: CloudFaults::default(),
                rng: SimRng::new(seed),
                calls: 0,
            }),
            creation_latency,
            termination_latency,
            list_lag: Duration::ZERO,
        }
    }

    /// Listings show a machine only `lag` after its creation.
    #[must_use]
    pub fn with_list_lag(mut self, lag: Duration) -> Self {
        self.list_lag = lag;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the failure injection for the next calls.
    pub fn set_faults(&self, faults: CloudFaults) {
        self.lock().faults = faults;
    }

    /// Moves the clock: machines start and finish terminating.
    pub fn advance(&self, now: Timestamp) {
        let mut s = self.lock();
        s.now = now;
        s.machines.retain(|_, m| m.gone_at.is_none_or(|g| g > now));
        for m in s.machines.values_mut() {
            if m.instance.state == InstanceState::Pending && m.running_at <= now {
                m.instance.state = InstanceState::Running;
            }
        }
    }

    /// Terminates a machine behind nodemgr's back (a spot reclaim, an operator).
    pub fn terminate_out_of_band(&self, instance_id: &str) {
        let mut s = self.lock();
        let now = s.now;
        if let Some(m) = s.machines.get_mut(instance_id) {
            m.instance.state = InstanceState::ShuttingDown;
            m.gone_at.get_or_insert(now);
        }
    }

    /// A machine of `group` named `machine` in `zone` that is running already (the machines
    /// of a scenario's initial nodes), as if created with the machine's client token; no API
    /// call is counted.
    pub fn seed_running(&self, group: &str, zone: &str, machine: &str) -> CloudInstance {
        let mut s = self.lock();
        let id = format!("i-{:08x}", s.next_id);
        s.next_id += 1;
        let now = s.now;
        let instance = CloudInstance {
            provider_id: Self::provider_id(zone, &id),
            instance_id: id.clone(),
            group: group.to_owned(),
            zone: zone.to_owned(),
            machine: machine.to_owned(),
            state: InstanceState::Running,
            launched: Some(now),
        };
        s.machines.insert(
            id.clone(),
            SimMachine {
                instance: instance.clone(),
                running_at: now,
                gone_at: None,
            },
        );
        s.tokens
            .insert(nodemgr_core::ports::cloud::client_token(machine), id);
        instance
    }

    /// The next instant after the clock at which a machine starts running or is gone.
    pub fn next_change(&self) -> Option<Timestamp> {
        let s = self.lock();
        s.machines
            .values()
            .flat_map(|m| {
                let starts = (m.instance.state == InstanceState::Pending).then_some(m.running_at);
                [starts, m.gone_at]
            })
            .flatten()
            .filter(|t| *t > s.now)
            .min()
    }

    /// Every machine that exists (not shutting down or gone).
    pub fn existing(&self) -> Vec<CloudInstance> {
        self.lock()
            .machines
            .values()
            .filter(|m| m.instance.state.exists())
            .map(|m| m.instance.clone())
            .collect()
    }

    /// API calls so far.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Draws this call's fate: `Err` before applying, or whether to lose the answer.
    fn fate(s: &mut State) -> Result<bool, CloudError> {
        s.calls += 1;
        let faults = s.faults;
        if s.rng.chance(faults.refuse) {
            return Err(CloudError::throttled("RequestLimitExceeded (simulated)"));
        }
        Ok(s.rng.chance(faults.lose_answer))
    }

    fn provider_id(zone: &str, id: &str) -> String {
        format!("sim:///{zone}/{id}")
    }

    fn find<'a>(s: &'a mut State, provider_id: &str) -> Option<&'a mut SimMachine> {
        let id = provider_id.rsplit('/').next()?;
        s.machines
            .get_mut(id)
            .filter(|m| m.instance.provider_id == provider_id)
    }
}

fn lost() -> CloudError {
    CloudError::unavailable("the request timed out (simulated; it was applied)")
}

#[async_trait]
impl CloudApi for SimCloud {
    async fn create_instance(&self, request: &CreateInstance) -> Result<CloudInstance, CloudError> {
        let mut s = self.lock();
        let lose = Self::fate(&mut s)?;
        let existing = s
            .tokens
            .get(&request.client_token)
            .and_then(|id| s.machines.get(id))
            .map(|m| m.instance.clone());
        let instance = match existing {
            Some(instance) => instance,
            None => {
                let id = format!("i-{:08x}", s.next_id);
                s.next_id += 1;
                let instance = CloudInstance {
                    provider_id: Self::provider_id(&request.zone, &id),
                    instance_id: id.clone(),
                    group: request.group.clone(),
                    zone: request.zone.clone(),
                    machine: request.machine.clone(),
                    state: InstanceState::Pending,
                    launched: Some(s.now),
                };
                let running_at = s.now + self.creation_latency;
                s.machines.insert(
                    id.clone(),
                    SimMachine {
                        instance: instance.clone(),
                        running_at,
                        gone_at: None,
                    },
                );
                s.tokens.insert(request.client_token.clone(), id);
                instance
            }
        };
        if lose { Err(lost()) } else { Ok(instance) }
    }

    async fn delete_instance(&self, provider_id: &str) -> Result<(), CloudError> {
        let mut s = self.lock();
        let lose = Self::fate(&mut s)?;
        let gone_at = s.now + self.termination_latency;
        if let Some(m) = Self::find(&mut s, provider_id)
            && m.instance.state.exists()
        {
            m.instance.state = InstanceState::ShuttingDown;
            m.gone_at = Some(gone_at);
        }
        if lose { Err(lost()) } else { Ok(()) }
    }

    async fn list_group_instances(&self, group: &str) -> Result<Vec<CloudInstance>, CloudError> {
        let mut s = self.lock();
        Self::fate(&mut s)?;
        let now = s.now;
        Ok(s.machines
            .values()
            .filter(|m| m.instance.group == group && m.instance.state != InstanceState::Terminated)
            .filter(|m| m.instance.launched.is_none_or(|t| t + self.list_lag <= now))
            .map(|m| m.instance.clone())
            .collect())
    }

    async fn get_instance(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudError> {
        let mut s = self.lock();
        Self::fate(&mut s)?;
        Ok(Self::find(&mut s, provider_id).map(|m| m.instance.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on;

    fn request(machine: &str) -> CreateInstance {
        CreateInstance {
            group: "worker".into(),
            zone: "a".into(),
            machine: machine.into(),
            class: Default::default(),
            user_data: String::new(),
            client_token: nodemgr_core::ports::cloud::client_token(machine),
        }
    }

    #[test]
    fn creation_is_idempotent_and_machines_start_and_stop_in_time() {
        let cloud = SimCloud::new(
            Timestamp::EPOCH,
            Duration::from_secs(30),
            Duration::from_secs(10),
            1,
        );
        let a = block_on(cloud.create_instance(&request("m1")))
            .unwrap()
            .unwrap();
        let again = block_on(cloud.create_instance(&request("m1")))
            .unwrap()
            .unwrap();
        assert_eq!(a, again);
        assert_eq!(cloud.existing().len(), 1);
        assert_eq!(a.state, InstanceState::Pending);
        cloud.advance(Timestamp::from_secs(30));
        let listed = block_on(cloud.list_group_instances("worker"))
            .unwrap()
            .unwrap();
        assert_eq!(listed[0].state, InstanceState::Running);
        block_on(cloud.delete_instance(&a.provider_id))
            .unwrap()
            .unwrap();
        assert!(cloud.existing().is_empty());
        block_on(cloud.delete_instance(&a.provider_id))
            .unwrap()
            .unwrap();
        cloud.advance(Timestamp::from_secs(40));
        assert!(
            block_on(cloud.get_instance(&a.provider_id))
                .unwrap()
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_lost_answer_still_applies_and_the_retry_finds_the_machine() {
        let cloud = SimCloud::new(
            Timestamp::EPOCH,
            Duration::from_secs(30),
            Duration::from_secs(10),
            1,
        );
        cloud.set_faults(CloudFaults {
            refuse: 0.0,
            lose_answer: 1.0,
        });
        assert!(
            block_on(cloud.create_instance(&request("m1")))
                .unwrap()
                .is_err()
        );
        assert_eq!(cloud.existing().len(), 1, "applied despite the error");
        cloud.set_faults(CloudFaults::default());
        block_on(cloud.create_instance(&request("m1")))
            .unwrap()
            .unwrap();
        assert_eq!(cloud.existing().len(), 1, "the retry found it");
    }
}
