//! The machines of CloudEphemeral groups: which cloud machines to create and delete,
//! what each machine's `Instance` resource says, which machines failed, and which Nodes lost
//! their machine (the cloud node controller of kube-controller-manager). Sans-I/O: [`Machines::step`] takes
//! a [`MachineSnapshot`], the scaling layer's [`MachineRequests`] and `now`, and returns
//! [`MachineCommand`]s; the executor reports cloud call results back
//! ([`Machines::handle_create`], [`Machines::handle_delete`]).
//!
//! # Lifecycle of a machine
//! Every machine has an `Instance` resource named like the machine (`<group>-<hash>-<suffix>`,
//! [`machine_name`]) and labelled with its group and zone. Its `status.currentStatus.phase`:
//! `Pending` (the resource exists, the cloud has not listed a machine yet) → `Provisioning`
//! (the machine exists, no Node yet) → `Running` (a Node with the machine's provider ID or
//! name registered) → `Terminating` (its deletion is asked) → the resource goes.
//!
//! # Rules
//! - **Creation.** A [`MachineRequests::create`] entry becomes that many
//!   [`MachineCommand::Create`]: the executor creates the Instance first, then the machine with
//!   the client token of its name ([`crate::ports::cloud::client_token`]). Until the cloud lists
//!   the machine, every pass asks again ([`MachineCommand::EnsureMachine`], the same token, so
//!   never a second machine), after [`MachineConfig::retry_initial`] doubling to
//!   [`MachineConfig::retry_max`] when a call failed.
//! - **Timeout.** A machine without a Node [`MachineConfig::creation_timeout`] after its
//!   Instance was created is recorded in the group's `status.lastMachineFailures`
//!   ([`MachineCommand::RecordFailure`]) and deleted; the scaling layer, seeing one machine
//!   fewer, asks for a replacement.
//! - **Deletion.** A deleted Instance, or a removal the scaling layer asks for (after the
//!   drain), deletes the machine; deletes are repeated every [`MachineConfig::retry_initial`]
//!   until the cloud no longer lists it, then the Instance goes
//!   ([`MachineCommand::ForgetInstance`]).
//! - **Vanished machines.** A machine the cloud listed before and no longer lists (terminated
//!   outside nodemgr, a spot reclaim) is recorded as a failure and its Instance goes. So is a
//!   machine never seen listed whose Node registered (a Node named like it, with a provider ID)
//!   once the cloud confirms that provider ID is gone ([`MachineSnapshot::absent`]): a name
//!   whose machine registered a Node is never asked for again, because a cloud that forgets
//!   client tokens of terminated machines would start a second machine under it.
//! - **A machine's Node** is the Node with its provider ID, or the Node named like it unless
//!   that Node carries another provider ID (a stale Node of an earlier machine of the name).
//! - **Orphans.** A machine tagged with a group but with no Instance, launched more than
//!   [`MachineConfig::orphan_grace`] ago, is deleted (the executor creates the Instance before
//!   the machine, so only a crash or a deleted Instance leaves one).
//! - **Cloud node GC.** A Node that is not Ready, older than [`MachineConfig::gc_grace`], whose
//!   provider ID is neither among the machines listed nor known to the cloud
//!   ([`MachineSnapshot::absent`], the executor's look-ups), is deleted.
//!
//! # Guarantees (property tests in `nodemgr-sim/tests/cloud.rs`)
//! - One machine name never has two machines, whatever the cloud's failures and timeouts.
//! - No Node is deleted while its machine exists.
//! - Once the cloud recovers, every group converges to its requested machines.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::model::{Instance, Node, Timestamp, keys};
use crate::ports::cloud::{CloudError, CloudInstance, client_token};

/// Annotation of an Instance holding its machine's provider ID once known.
pub const ANNOTATION_PROVIDER_ID: &str = "node-manager.deckhouse.io/provider-id";

/// Timeouts and pacing of the machine controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineConfig {
    /// How long a machine may take to register a Node (default 20 min, MCM's
    /// `machineCreationTimeout`).
    pub creation_timeout: Duration,
    /// First wait before asking the cloud again (default 10 s).
    pub retry_initial: Duration,
    /// Longest wait between asks (default 5 min).
    pub retry_max: Duration,
    /// Age before a machine without an Instance is deleted (default 2 min).
    pub orphan_grace: Duration,
    /// Age before a not-Ready Node without a machine is deleted (default 2 min).
    pub gc_grace: Duration,
    /// Entries kept in `status.lastMachineFailures` per group (default 5).
    pub failures_kept: usize,
}

impl Default for MachineConfig {
    fn default() -> Self {
        Self {
            creation_timeout: Duration::from_secs(20 * 60),
            retry_initial: Duration::from_secs(10),
            retry_max: Duration::from_secs(300),
            orphan_grace: Duration::from_secs(120),
            gc_grace: Duration::from_secs(120),
            failures_kept: 5,
        }
    }
}

/// The phase written to `Instance.status.currentStatus.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MachinePhase {
    /// The Instance exists; the cloud has not listed its machine yet.
    Pending,
    /// The machine exists; no Node yet.
    Provisioning,
    /// Its Node registered.
    Running,
    /// Its deletion is asked.
    Terminating,
}

impl MachinePhase {
    /// The phase's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Provisioning => "Provisioning",
            Self::Running => "Running",
            Self::Terminating => "Terminating",
        }
    }

    /// Reads a phase name; unknown or missing is `Pending`.
    pub fn parse(name: Option<&str>) -> Self {
        match name {
            Some("Provisioning" | "Provisioned") => Self::Provisioning,
            Some("Running") => Self::Running,
            Some("Terminating") => Self::Terminating,
            _ => Self::Pending,
        }
    }
}

impl fmt::Display for MachinePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a machine is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteReason {
    /// The scaling layer removes it (its Node was drained).
    ScaledDown,
    /// Its Instance was deleted.
    InstanceDeleted,
    /// No Node within the creation timeout.
    CreationTimedOut,
    /// No Instance owns it.
    Orphaned,
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ScaledDown => "scaled down",
            Self::InstanceDeleted => "its Instance was deleted",
            Self::CreationTimedOut => "no Node registered within the machine creation timeout",
            Self::Orphaned => "no Instance owns it",
        })
    }
}

/// What the scaling layer asks for in this pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineRequests {
    /// New machines: (group, zone, count).
    pub create: Vec<(String, String, u32)>,
    /// Machines (or their Nodes' names) to delete.
    pub remove: BTreeSet<String>,
}

/// Everything a pass looks at.
#[derive(Debug, Clone, Copy)]
pub struct MachineSnapshot<'a> {
    /// Every Instance resource.
    pub instances: &'a [Instance],
    /// Every machine of every CloudEphemeral group the cloud lists (read after `nodes`).
    pub cloud: &'a [CloudInstance],
    /// Provider IDs of other Nodes the cloud said it does not know.
    pub absent: &'a BTreeSet<String>,
    /// Every Node.
    pub nodes: &'a [Node],
}

/// A decision for the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineCommand {
    /// Create the Instance `machine` (phase `Pending`, labels group and zone), then the machine
    /// with `client_token`; report with [`Machines::handle_create`].
    Create {
        /// NodeGroup.
        group: String,
        /// Zone.
        zone: String,
        /// Machine and Instance name.
        machine: String,
        /// Idempotency token.
        client_token: String,
    },
    /// Ask the cloud for the machine of an existing `Pending` Instance again (same token);
    /// report with [`Machines::handle_create`].
    EnsureMachine {
        /// NodeGroup.
        group: String,
        /// Zone.
        zone: String,
        /// Machine name.
        machine: String,
        /// Idempotency token.
        client_token: String,
    },
    /// Write the Instance's phase (and node, provider ID when given).
    SetPhase {
        /// Machine name.
        machine: String,
        /// New phase.
        phase: MachinePhase,
        /// Its Node, once registered.
        node: Option<String>,
        /// Its provider ID, once known.
        provider_id: Option<String>,
    },
    /// Delete the machine in the cloud; report with [`Machines::handle_delete`].
    DeleteMachine {
        /// NodeGroup.
        group: String,
        /// Machine name.
        machine: String,
        /// Provider ID.
        provider_id: String,
        /// Why.
        reason: DeleteReason,
    },
    /// The machine is gone: delete the Instance resource (removing its finalizer).
    ForgetInstance {
        /// Machine name.
        machine: String,
    },
    /// Add an entry to the group's `status.lastMachineFailures` (keeping the newest
    /// [`MachineConfig::failures_kept`]).
    RecordFailure {
        /// NodeGroup.
        group: String,
        /// Machine name.
        machine: String,
        /// Provider ID, if known.
        provider_id: Option<String>,
        /// What happened.
        message: String,
    },
    /// Delete a Node whose machine no longer exists.
    DeleteNode {
        /// The Node.
        node: String,
        /// Why (for people).
        reason: String,
    },
}

impl fmt::Display for MachineCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Create {
                group,
                zone,
                machine,
                ..
            } => {
                write!(f, "create machine {machine} of {group} in {zone}")
            }
            Self::EnsureMachine { machine, .. } => write!(f, "ask the cloud again for {machine}"),
            Self::SetPhase { machine, phase, .. } => write!(f, "mark {machine} {phase}"),
            Self::DeleteMachine {
                machine,
                provider_id,
                reason,
                ..
            } => {
                write!(f, "delete machine {machine} ({provider_id}): {reason}")
            }
            Self::ForgetInstance { machine } => write!(f, "delete Instance {machine}"),
            Self::RecordFailure {
                group,
                machine,
                message,
                ..
            } => {
                write!(f, "record failure of {machine} in {group}: {message}")
            }
            Self::DeleteNode { node, reason } => write!(f, "delete Node {node}: {reason}"),
        }
    }
}

/// The answer of a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachinePlan {
    /// Commands, in order.
    pub commands: Vec<MachineCommand>,
}

/// A machine name of `group` in `zone`: `<group>-<hash>-<suffix>`, the hash (5 hex) naming
/// the zone, the suffix (5 base-36) drawn from `nonce` (the planner uses the time and a
/// counter, so a name, hence a client token, is never reused, even across restarts).
pub fn machine_name(group: &str, zone: &str, nonce: u64) -> String {
    let zone_hash = Sha256::digest(format!("{group}/{zone}").as_bytes());
    let hash: String = zone_hash
        .iter()
        .take(3)
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..5]
        .to_owned();
    let digest = Sha256::digest(format!("{group}/{zone}/{nonce}").as_bytes());
    let mut value = u64::from_be_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ]);
    let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut suffix = String::with_capacity(5);
    for _ in 0..5 {
        suffix.push(char::from(alphabet[(value % 36) as usize]));
        value /= 36;
    }
    format!("{group}-{hash}-{suffix}")
}

/// The provider IDs the cloud node GC must look up: those of not-Ready Nodes that no listed
/// machine explains. The executor asks the cloud for each and puts the ones it does not know
/// into [`MachineSnapshot::absent`].
pub fn provider_ids_to_look_up<'a>(nodes: &'a [Node], listed: &[CloudInstance]) -> Vec<&'a str> {
    let listed: BTreeSet<&str> = listed.iter().map(|m| m.provider_id.as_str()).collect();
    nodes
        .iter()
        .filter(|n| !n.ready)
        .filter_map(|n| n.provider_id.as_deref())
        .filter(|id| !listed.contains(id))
        .collect()
}

/// A failing cloud call's backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    failures: u32,
    not_before: Timestamp,
}

/// The machine controller's memory: a name counter and the pacing of cloud calls. Losing it (a restart) is safe: calls are idempotent, a vanished
/// machine is then only noticed through its phase.
#[derive(Debug, Clone, Default)]
pub struct Machines {
    config: MachineConfig,
    sequence: u64,
    creates: BTreeMap<String, Backoff>,
    deletes: BTreeMap<String, Backoff>,
}

/// What one Instance says.
struct InstanceView<'a> {
    name: &'a str,
    group: &'a str,
    zone: &'a str,
    phase: MachinePhase,
    provider_id: Option<&'a str>,
    created: Option<Timestamp>,
    deleted: bool,
}

fn view(instance: &Instance) -> Option<InstanceView<'_>> {
    let meta = &instance.metadata;
    Some(InstanceView {
        name: meta.name.as_deref()?,
        group: meta
            .labels
            .get(keys::LABEL_NODE_GROUP)
            .map_or("", String::as_str),
        zone: meta
            .labels
            .get(keys::LABEL_TOPOLOGY_ZONE)
            .map_or("", String::as_str),
        phase: MachinePhase::parse(
            instance
                .status
                .current_status
                .as_ref()
                .and_then(|c| c.phase.as_deref()),
        ),
        provider_id: meta
            .annotations
            .get(ANNOTATION_PROVIDER_ID)
            .map(String::as_str),
        created: meta
            .creation_timestamp
            .as_deref()
            .and_then(Timestamp::parse_rfc3339),
        deleted: meta.deletion_timestamp.is_some(),
    })
}

impl Machines {
    /// A controller with default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// A controller with `config`.
    pub fn with_config(config: MachineConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    fn backoff(&self, failures: u32) -> Duration {
        crate::backoff::Backoff::new(self.config.retry_initial, self.config.retry_max)
            .after_failures(failures)
    }

    /// The executor reports a create (or ensure) call: success clears the machine's backoff, a
    /// failure delays the next ask.
    pub fn handle_create(
        &mut self,
        machine: &str,
        result: Result<&CloudInstance, &CloudError>,
        now: Timestamp,
    ) {
        match result {
            Ok(_) => {
                // Asked again only if the cloud still does not list it after a while.
                self.creates.insert(
                    machine.to_owned(),
                    Backoff {
                        failures: 0,
                        not_before: now + self.config.retry_initial,
                    },
                );
            }
            Err(_) => {
                let failures = self.creates.get(machine).map_or(1, |b| b.failures + 1);
                let not_before = now + self.backoff(failures);
                self.creates.insert(
                    machine.to_owned(),
                    Backoff {
                        failures,
                        not_before,
                    },
                );
            }
        }
    }

    /// The executor reports a delete call.
    pub fn handle_delete(
        &mut self,
        machine: &str,
        result: Result<(), &CloudError>,
        now: Timestamp,
    ) {
        let failures = match result {
            Ok(()) => 0,
            Err(_) => self.deletes.get(machine).map_or(1, |b| b.failures + 1),
        };
        let wait = if failures == 0 {
            self.config.retry_initial
        } else {
            self.backoff(failures)
        };
        self.deletes.insert(
            machine.to_owned(),
            Backoff {
                failures,
                not_before: now + wait,
            },
        );
    }

    /// The earliest time a pass would decide something new by itself.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.creates
            .values()
            .chain(self.deletes.values())
            .map(|b| b.not_before)
            .min()
    }

    fn may(map: &BTreeMap<String, Backoff>, machine: &str, now: Timestamp) -> bool {
        map.get(machine).is_none_or(|b| b.not_before <= now)
    }

    /// Decides this pass's commands. See the module docs for the rules.
    #[must_use = "the plan's commands must be applied"]
    pub fn step(
        &mut self,
        snapshot: &MachineSnapshot<'_>,
        requests: &MachineRequests,
        now: Timestamp,
    ) -> MachinePlan {
        let mut plan = MachinePlan::default();
        let cloud: BTreeMap<&str, &CloudInstance> = snapshot
            .cloud
            .iter()
            .filter(|m| m.state.exists())
            .map(|m| (m.machine.as_str(), m))
            .collect();
        let live_ids: BTreeSet<&str> = cloud.values().map(|m| m.provider_id.as_str()).collect();
        // A machine's Node: the one with its provider ID, or the one named like it unless
        // that Node carries another machine's provider ID (a stale Node of an earlier machine
        // of the same name, which must not make this one Running).
        let node_of = |machine: &str, provider_id: Option<&str>| -> Option<&Node> {
            snapshot
                .nodes
                .iter()
                .find(|n| match (n.provider_id.as_deref(), provider_id) {
                    (Some(node_id), Some(id)) => node_id == id,
                    _ => n.name == machine,
                })
        };
        let views: Vec<InstanceView<'_>> = snapshot.instances.iter().filter_map(view).collect();
        let owned: BTreeSet<&str> = views.iter().map(|v| v.name).collect();
        // Forget the memory of machines that no longer have an Instance.
        self.creates.retain(|m, _| owned.contains(m.as_str()));
        self.deletes
            .retain(|m, _| owned.contains(m.as_str()) || cloud.contains_key(m.as_str()));

        for v in &views {
            let machine = cloud.get(v.name).copied();
            let provider_id = machine.map(|m| m.provider_id.as_str()).or(v.provider_id);
            let node = node_of(v.name, provider_id);
            let removal = v.deleted
                || requests.remove.contains(v.name)
                || node.is_some_and(|n| requests.remove.contains(&n.name));
            let timed_out = node.is_none()
                && v.phase != MachinePhase::Terminating
                && v.created
                    .is_some_and(|c| now.saturating_since(c) >= self.config.creation_timeout);

            match machine {
                Some(m) => {
                    if removal || timed_out || v.phase == MachinePhase::Terminating {
                        if timed_out {
                            plan.commands.push(MachineCommand::RecordFailure {
                                group: v.group.to_owned(),
                                machine: v.name.to_owned(),
                                provider_id: Some(m.provider_id.clone()),
                                message: format!(
                                    "no Node registered within {} s of the machine's creation",
                                    self.config.creation_timeout.as_secs()
                                ),
                            });
                        }
                        if v.phase != MachinePhase::Terminating {
                            plan.commands.push(MachineCommand::SetPhase {
                                machine: v.name.to_owned(),
                                phase: MachinePhase::Terminating,
                                node: None,
                                provider_id: Some(m.provider_id.clone()),
                            });
                        }
                        if Self::may(&self.deletes, v.name, now) {
                            let reason = if timed_out {
                                DeleteReason::CreationTimedOut
                            } else if v.deleted {
                                DeleteReason::InstanceDeleted
                            } else {
                                DeleteReason::ScaledDown
                            };
                            plan.commands.push(MachineCommand::DeleteMachine {
                                group: v.group.to_owned(),
                                machine: v.name.to_owned(),
                                provider_id: m.provider_id.clone(),
                                reason,
                            });
                            // Paced until the executor reports.
                            self.deletes.insert(
                                v.name.to_owned(),
                                Backoff {
                                    failures: self.deletes.get(v.name).map_or(0, |b| b.failures),
                                    not_before: now + self.config.retry_initial,
                                },
                            );
                        }
                    } else if let Some(node) = node {
                        if v.phase != MachinePhase::Running {
                            plan.commands.push(MachineCommand::SetPhase {
                                machine: v.name.to_owned(),
                                phase: MachinePhase::Running,
                                node: Some(node.name.clone()),
                                provider_id: Some(m.provider_id.clone()),
                            });
                        }
                    } else if v.phase == MachinePhase::Pending
                        || v.provider_id != Some(m.provider_id.as_str())
                    {
                        plan.commands.push(MachineCommand::SetPhase {
                            machine: v.name.to_owned(),
                            phase: MachinePhase::Provisioning,
                            node: None,
                            provider_id: Some(m.provider_id.clone()),
                        });
                    }
                    self.creates.remove(v.name);
                }
                None => {
                    let was_listed =
                        matches!(v.phase, MachinePhase::Provisioning | MachinePhase::Running);
                    // Never seen listed, but a Node of this name with a provider ID registered:
                    // the machine existed all the same. It is not asked for again under the
                    // same name; once the cloud confirms the provider ID gone it vanished, and
                    // until then the pass waits.
                    let registered = node.and_then(|n| n.provider_id.as_deref());
                    let unseen_gone =
                        !was_listed && registered.is_some_and(|id| snapshot.absent.contains(id));
                    if (was_listed || unseen_gone) && !removal {
                        plan.commands.push(MachineCommand::RecordFailure {
                            group: v.group.to_owned(),
                            machine: v.name.to_owned(),
                            provider_id: if was_listed {
                                v.provider_id
                            } else {
                                registered
                            }
                            .map(str::to_owned),
                            message: "the machine disappeared from the cloud".into(),
                        });
                    }
                    if removal || was_listed || unseen_gone || v.phase == MachinePhase::Terminating
                    {
                        // The machine is gone: its Node may go, then its Instance.
                        if let Some(node) = node {
                            plan.commands.push(MachineCommand::DeleteNode {
                                node: node.name.clone(),
                                reason: format!("its machine {} is gone", v.name),
                            });
                        }
                        plan.commands.push(MachineCommand::ForgetInstance {
                            machine: v.name.to_owned(),
                        });
                    } else if registered.is_some() {
                        // Waiting for the cloud to confirm the registered machine is gone.
                    } else if timed_out {
                        plan.commands.push(MachineCommand::RecordFailure {
                            group: v.group.to_owned(),
                            machine: v.name.to_owned(),
                            provider_id: None,
                            message: format!(
                                "the cloud created no machine within {} s",
                                self.config.creation_timeout.as_secs()
                            ),
                        });
                        plan.commands.push(MachineCommand::ForgetInstance {
                            machine: v.name.to_owned(),
                        });
                    } else if Self::may(&self.creates, v.name, now) {
                        plan.commands.push(MachineCommand::EnsureMachine {
                            group: v.group.to_owned(),
                            zone: v.zone.to_owned(),
                            machine: v.name.to_owned(),
                            client_token: client_token(v.name),
                        });
                        let failures = self.creates.get(v.name).map_or(0, |b| b.failures);
                        self.creates.insert(
                            v.name.to_owned(),
                            Backoff {
                                failures,
                                not_before: now + self.config.retry_initial,
                            },
                        );
                    }
                }
            }
        }

        // Orphans: machines no Instance owns.
        for m in cloud.values() {
            if owned.contains(m.machine.as_str()) {
                continue;
            }
            let old = m
                .launched
                .is_none_or(|t| now.saturating_since(t) >= self.config.orphan_grace);
            if old && Self::may(&self.deletes, &m.machine, now) {
                plan.commands.push(MachineCommand::DeleteMachine {
                    group: m.group.clone(),
                    machine: m.machine.clone(),
                    provider_id: m.provider_id.clone(),
                    reason: DeleteReason::Orphaned,
                });
                self.deletes.insert(
                    m.machine.clone(),
                    Backoff {
                        failures: 0,
                        not_before: now + self.config.retry_initial,
                    },
                );
            }
        }

        // Cloud node GC: not-Ready Nodes whose machine is gone.
        let forgotten: BTreeSet<&str> = plan
            .commands
            .iter()
            .filter_map(|c| match c {
                MachineCommand::DeleteNode { node, .. } => Some(node.as_str()),
                _ => None,
            })
            .collect::<BTreeSet<_>>();
        let mut gc = Vec::new();
        for node in snapshot.nodes {
            let Some(id) = node.provider_id.as_deref() else {
                continue;
            };
            if node.ready || forgotten.contains(node.name.as_str()) || live_ids.contains(id) {
                continue;
            }
            let old = node
                .created
                .is_some_and(|c| now.saturating_since(c) >= self.config.gc_grace);
            // An Instance claims the Node with its provider ID, or the Node of its name until
            // it knows another provider ID (then the Node is a stale one of an earlier machine).
            let claimed = views.iter().any(|v| {
                v.provider_id == Some(id) || (v.name == node.name && v.provider_id.is_none())
            });
            if old && !claimed && snapshot.absent.contains(id) {
                gc.push(MachineCommand::DeleteNode {
                    node: node.name.clone(),
                    reason: format!("the cloud has no machine {id}"),
                });
            }
        }
        plan.commands.extend(gc);

        // New machines.
        for (group, zone, count) in &requests.create {
            for _ in 0..*count {
                let machine = loop {
                    self.sequence += 1;
                    let nonce = u64::try_from(now.as_millis())
                        .unwrap_or_default()
                        .wrapping_mul(1 << 20)
                        .wrapping_add(self.sequence);
                    let name = machine_name(group, zone, nonce);
                    if !owned.contains(name.as_str()) && !cloud.contains_key(name.as_str()) {
                        break name;
                    }
                };
                self.creates.insert(
                    machine.clone(),
                    Backoff {
                        failures: 0,
                        not_before: now + self.config.retry_initial,
                    },
                );
                plan.commands.push(MachineCommand::Create {
                    group: group.clone(),
                    zone: zone.clone(),
                    client_token: client_token(&machine),
                    machine,
                });
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests;
