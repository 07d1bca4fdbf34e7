//! The machine port: what the scaling executor ([`crate::executor::scaling`]) keeps in the
//! cluster besides Nodes and Pods — one `Instance` resource per machine of a CloudEphemeral
//! group, the group's `status.lastMachineFailures` and `status.standby`, the bootstrap script a
//! new machine boots with, and the standby-holder Deployment of each group with a standby
//! (docs/deckhouse.md §8, docs/executors.md §2). `nodemgr-k8s` implements it over the Kubernetes
//! API, `nodemgr-sim` in memory.
//!
//! # Contract (in addition to the cluster port's, [`super::cluster`])
//! - Errors are [`ClusterError`], mapped as the cluster port maps them.
//! - Every mutating method is idempotent: creating an Instance that exists is `Ok`, forgetting
//!   one that is gone is `Ok`, applying the same standby holder twice changes nothing the second
//!   time, deleting a holder that does not exist is `Ok`.
//! - Reads are direct (not from a lagging cache) or at least include every write this port
//!   completed before the call: the executor counts ordered machines from
//!   [`MachineApi::list_instances`], and a listing that misses its own creations would order
//!   them twice.

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::machines::MachinePhase;
use crate::model::{ClassReference, Instance, MachineFailure, NodeGroup, Pod, Timestamp, keys};

use super::cluster::ClusterError;

/// An `Instance` resource to create for a machine about to be ordered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstance {
    /// Machine name (`<group>-<hash>-<suffix>`), also the Instance's and the Node's name.
    pub machine: String,
    /// NodeGroup (label `node.deckhouse.io/group`).
    pub group: String,
    /// Zone (label `topology.kubernetes.io/zone`).
    pub zone: String,
    /// The group's `classReference` when the machine is ordered (`status.classReference`).
    pub class_reference: Option<ClassReference>,
    /// Checksum of the instance class the machine is made from (annotation
    /// `node-manager.deckhouse.io/instance-class-checksum`, copied onto its Node).
    pub class_checksum: String,
}

/// The standby-holder Deployment of a group (docs/deckhouse.md §8): `replicas` pods of
/// `template` in `d8-cloud-instance-manager`, named [`StandbyHolder::name`].
#[derive(Debug, Clone, PartialEq)]
pub struct StandbyHolder {
    /// NodeGroup.
    pub group: String,
    /// Pods wanted: the group's standby node count.
    pub replicas: u32,
    /// The pod template: labels `app=standby-holder`, `ng=<group>`, priority class `standby`,
    /// requests, the group's nodeSelector and tolerations, a hostname anti-affinity between
    /// holders (see [`crate::scaling::standby::holder_template`]). Its name is the Deployment's.
    pub template: Pod,
}

impl StandbyHolder {
    /// The Deployment's name: `standby-holder-<group>`.
    pub fn name(&self) -> String {
        holder_name(&self.group)
    }

    /// A checksum of the template's scheduling-relevant fields (labels, priority, requests,
    /// nodeSelector, tolerations, anti-affinity): adapters store it with the Deployment
    /// ([`ANNOTATION_HOLDER_CHECKSUM`]) so that an unchanged holder is not written again.
    pub fn checksum(&self) -> String {
        let t = &self.template;
        let mut h = Sha256::new();
        let mut line = |s: String| {
            h.update(s.as_bytes());
            h.update(b"\n");
        };
        for (k, v) in &t.labels {
            line(format!("label {k}={v}"));
        }
        line(format!(
            "priority {} {}",
            t.priority_class.as_deref().unwrap_or_default(),
            t.priority
        ));
        for (k, q) in &t.requests {
            line(format!("request {k}={}", q.0));
        }
        for (k, v) in &t.node_selector {
            line(format!("selector {k}={v}"));
        }
        for tol in &t.tolerations {
            line(format!(
                "toleration {}|{}|{}|{}",
                tol.key,
                tol.exists,
                tol.value,
                tol.effect.as_ref().map_or("", |e| e.as_str())
            ));
        }
        for a in &t.hostname_anti_affinity {
            for (k, v) in a.match_labels.iter().flatten() {
                line(format!("anti-affinity {k}={v}"));
            }
        }
        h.finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What an adapter reports of this holder once applied.
    pub fn applied(&self) -> AppliedHolder {
        AppliedHolder {
            group: self.group.clone(),
            replicas: self.replicas,
            checksum: self.checksum(),
        }
    }
}

/// A standby-holder Deployment as it is in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedHolder {
    /// NodeGroup (label `ng`).
    pub group: String,
    /// `spec.replicas`.
    pub replicas: u32,
    /// [`StandbyHolder::checksum`] of the template it was applied with (empty when unknown:
    /// it is applied again).
    pub checksum: String,
}

/// Annotation of a standby-holder Deployment holding [`StandbyHolder::checksum`].
pub const ANNOTATION_HOLDER_CHECKSUM: &str = "node-manager.deckhouse.io/standby-holder-checksum";

/// The name of `group`'s standby-holder Deployment: `standby-holder-<group>`.
pub fn holder_name(group: &str) -> String {
    format!("{}{group}", keys::STANDBY_HOLDER_PREFIX)
}

/// The machines' records and the standby holders in the cluster.
#[async_trait]
pub trait MachineApi: Send + Sync {
    /// Every Instance resource (of CloudEphemeral machines; others are ignored by the caller).
    async fn list_instances(&self) -> Result<Vec<Instance>, ClusterError>;

    /// Creates the Instance of a machine about to be ordered: labels group and zone, the
    /// class checksum annotation, a finalizer that holds it until its machine is gone,
    /// `status.classReference`, and phase `Pending` with `lastUpdateTime` `now`. An Instance
    /// of that name that exists already is `Ok` (idempotent).
    async fn create_instance(
        &self,
        instance: &NewInstance,
        now: Timestamp,
    ) -> Result<(), ClusterError>;

    /// Writes an Instance's `status.currentStatus.phase` (with `lastUpdateTime` `now`), its
    /// `status.nodeRef` when `node` is given and its provider ID annotation
    /// ([`crate::machines::ANNOTATION_PROVIDER_ID`]) when `provider_id` is given.
    /// [`ClusterError::NotFound`] when the Instance is gone.
    async fn set_instance_phase(
        &self,
        machine: &str,
        phase: MachinePhase,
        node: Option<&str>,
        provider_id: Option<&str>,
        now: Timestamp,
    ) -> Result<(), ClusterError>;

    /// Removes the Instance's finalizer and deletes it; `Ok` when it is already gone.
    async fn forget_instance(&self, machine: &str) -> Result<(), ClusterError>;

    /// Appends `failure` to the group's `status.lastMachineFailures`, keeping the newest
    /// `keep` entries.
    async fn record_machine_failure(
        &self,
        group: &str,
        failure: &MachineFailure,
        keep: usize,
    ) -> Result<(), ClusterError>;

    /// The user data a new machine of `group` boots with (its bootstrap script); empty when
    /// there is none (the default). Never fails: an adapter that cannot render it logs why
    /// and answers empty.
    async fn user_data(&self, group: &NodeGroup) -> String {
        let _ = group;
        String::new()
    }

    /// Every standby-holder Deployment nodemgr made (`app=standby-holder`), as applied.
    async fn list_standby_holders(&self) -> Result<Vec<AppliedHolder>, ClusterError>;

    /// Creates or updates the standby-holder Deployment of `holder.group` (and the `standby`
    /// PriorityClass when the cluster has none), so that it runs `holder.replicas` pods of
    /// `holder.template`.
    async fn apply_standby_holder(&self, holder: &StandbyHolder) -> Result<(), ClusterError>;

    /// Deletes the standby-holder Deployment of `group` (its pods go with it); `Ok` when there
    /// is none.
    async fn delete_standby_holder(&self, group: &str) -> Result<(), ClusterError>;

    /// Writes `status.standby` of `group`: the standby nodes its holders hold.
    async fn set_standby_status(&self, group: &str, standby: u32) -> Result<(), ClusterError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Quantity, TaintEffect, Toleration};

    fn holder() -> StandbyHolder {
        let mut template = Pod {
            name: holder_name("g"),
            priority_class: Some("standby".into()),
            ..Pod::default()
        };
        template.requests.insert("cpu".into(), Quantity::units(2));
        StandbyHolder {
            group: "g".into(),
            replicas: 2,
            template,
        }
    }

    #[test]
    fn the_checksum_follows_what_scheduling_reads_and_nothing_else() {
        let a = holder();
        assert_eq!(a.name(), "standby-holder-g");
        assert_eq!(a.checksum(), holder().checksum());
        assert_eq!(a.checksum().len(), 16);
        let mut more = holder();
        more.replicas = 3;
        assert_eq!(more.checksum(), a.checksum(), "replicas are compared apart");
        assert_ne!(more.applied(), a.applied());
        let mut bigger = holder();
        bigger
            .template
            .requests
            .insert("cpu".into(), Quantity::units(3));
        assert_ne!(bigger.checksum(), a.checksum());
        let mut tolerant = holder();
        tolerant.template.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: false,
            value: "g".into(),
            effect: Some(TaintEffect::NoSchedule),
        });
        assert_ne!(tolerant.checksum(), a.checksum());
    }
}
