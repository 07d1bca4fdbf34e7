//! The node agents of the test fleet ([`crate::fleet`]): every fleet node runs core's node
//! agent ([`nodemgr_core::agent::Agent`], `docs/agent.md`) and this module drives it against
//! the emulator. Reads and guarded patches of the Node go through the emulator's in-process
//! API (a patch carries the resourceVersion the agent read, so a concurrent write — a
//! controller's, or the fleet's own heartbeat — makes it conflict as on a real API server).
//! Steps are simulated: a step takes the fleet's `agent_delay`, then the node restarts its
//! kubelet or reboots (NotReady for `kubelet_restart` / `reboot`) when the configuration
//! change needs it ([`nodemgr_core::agent::SimulatedGenerations::impact_from`]).

use std::time::{Duration, SystemTime};

use nodemgr_core::ImpactKind;
use nodemgr_core::agent::{
    Agent, AgentAction, AgentConfig, AgentInput, NodeView, PatchOutcome, SimulatedGeneration,
    SimulatedGenerations, StateFiles, StepOutcome,
};
use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::Cause;
use serde_json::Value;

use crate::emulator::Emulator;

/// A group's configuration as the fleet publishes it.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// Its generations.
    pub generations: SimulatedGenerations,
    /// The group replaces machines (`approvalMode: RollingUpdate`).
    pub rolling: bool,
}

/// A step being simulated.
#[derive(Debug, Clone, PartialEq)]
struct RunningStep {
    name: String,
    applied_at: SystemTime,
    done_at: SystemTime,
    effect: ImpactKind,
    restart_said: bool,
}

/// A fleet node's agent: the state machine, the node's state files, the step it runs.
#[derive(Debug)]
pub(crate) struct FleetAgent {
    machine: Agent,
    files: StateFiles,
    /// The checksum last written to the checksum file (what the node runs).
    applied: Option<String>,
    running: Option<RunningStep>,
    /// The Node's resourceVersion and the desired checksum the agent was last woken for.
    seen: (Option<String>, Option<String>),
}

/// Core's timestamp of a wall-clock time.
pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    Timestamp::from_system_time(t)
}

impl FleetAgent {
    /// The agent of a node that runs `generation` (or nothing published yet).
    pub fn new(node: &str, generation: Option<&SimulatedGeneration>, now: SystemTime) -> Self {
        let files = match generation {
            Some(g) => StateFiles::applied(
                &g.checksum,
                g.steps.iter().map(|s| s.name.clone()).collect(),
                g.steps
                    .iter()
                    .filter_map(|s| s.disruption_key.clone().map(|k| (s.name.clone(), k)))
                    .collect(),
            ),
            None => StateFiles::default(),
        };
        let mut config = AgentConfig::new(node);
        config.poll_interval = Duration::from_secs(2);
        config.error_backoff = Duration::from_secs(1);
        config.error_backoff_max = Duration::from_secs(10);
        Self {
            machine: Agent::new(config, files.clone(), timestamp(now)),
            files,
            applied: generation.map(|g| g.checksum.clone()),
            running: None,
            seen: (None, None),
        }
    }

    /// Whether the node is NotReady because its step restarts the kubelet or reboots it.
    pub fn restarting(&self, now: SystemTime) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.effect != ImpactKind::None && r.applied_at <= now && now < r.done_at)
    }

    /// One tick of the agent on the node `object` (as read this tick): wakes it when the Node
    /// or the desired bundle changed, moves its simulated step on and carries out its actions.
    /// Returns what a person would want to read.
    #[allow(clippy::too_many_arguments)]
    pub fn tick(
        &mut self,
        emulator: &Emulator,
        config: &crate::fleet::FleetConfig,
        node: &str,
        object: &Value,
        published: Option<&Published>,
        now: SystemTime,
        say: &mut impl FnMut(String),
    ) {
        let ts = timestamp(now);
        let seen = (
            object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_owned),
            published.map(|p| p.generations.desired().checksum.clone()),
        );
        if seen != self.seen {
            self.seen = seen;
            self.machine.handle_wake(ts);
        }
        self.machine.handle_timeout(ts);
        if let Some(r) = self.running.as_mut() {
            if r.effect != ImpactKind::None && !r.restart_said && r.applied_at <= now {
                r.restart_said = true;
                say(match r.effect {
                    ImpactKind::Disruptive => "agent reboots".to_owned(),
                    _ => "agent restarts the kubelet".to_owned(),
                });
            }
            if r.done_at <= now {
                let step = r.name.clone();
                self.running = None;
                self.machine.handle_input(
                    AgentInput::StepFinished(StepOutcome {
                        step,
                        exit_code: Some(0),
                        stderr: String::new(),
                    }),
                    ts,
                );
            }
        }
        while let Some(action) = self.machine.poll_action() {
            let input = match action {
                AgentAction::FetchBundle => Some(AgentInput::Bundle(
                    published
                        .map(|p| p.generations.desired().bundle(p.rolling))
                        .ok_or_else(|| Cause::msg("no configuration published for the group")),
                )),
                AgentAction::ReadNode => {
                    let view = emulator.get("v1", "Node", "", node).map(|o| NodeView {
                        resource_version: o
                            .pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        annotations: o
                            .pointer("/metadata/annotations")
                            .and_then(Value::as_object)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    });
                    Some(AgentInput::Node(Ok(view)))
                }
                AgentAction::PatchNode(patch) => {
                    let outcome = match emulator.merge_patch_guarded(
                        "v1",
                        "Node",
                        "",
                        node,
                        &patch.merge_patch(),
                        false,
                        Some(&patch.resource_version),
                    ) {
                        Ok(after) => PatchOutcome::Applied {
                            resource_version: after
                                .pointer("/metadata/resourceVersion")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        },
                        Err(e) if e.code == 409 => PatchOutcome::Conflict,
                        Err(e) if e.code == 404 => PatchOutcome::NotFound,
                        Err(e) => PatchOutcome::Failed(Cause::new(e)),
                    };
                    if matches!(outcome, PatchOutcome::Applied { .. }) {
                        for (key, what) in [
                            (
                                nodemgr_core::model::keys::ANNOTATION_WAITING_FOR_APPROVAL,
                                "asks for approval",
                            ),
                            (
                                nodemgr_core::model::keys::ANNOTATION_DISRUPTION_REQUIRED,
                                "asks for a disruption (disruption-required)",
                            ),
                            (
                                nodemgr_core::model::keys::ANNOTATION_ROLLING_UPDATE,
                                "asks for a disruption (rolling-update)",
                            ),
                        ] {
                            if patch.set.contains_key(key) {
                                let name = published
                                    .map(|p| p.generations.desired().name.clone())
                                    .unwrap_or_default();
                                say(format!("agent needs {name}, {what}"));
                            }
                        }
                    }
                    Some(AgentInput::Patched(outcome))
                }
                AgentAction::RunStep { name } => {
                    let effect = published
                        .map(|p| p.generations.impact_from(self.applied.as_deref()))
                        .unwrap_or_default();
                    let applied_at = now + config.agent_delay;
                    let restart = match effect {
                        ImpactKind::None => Duration::ZERO,
                        ImpactKind::KubeletRestart => config.kubelet_restart,
                        ImpactKind::Disruptive => config.reboot,
                    };
                    let target = published
                        .map(|p| p.generations.desired().name.clone())
                        .unwrap_or_default();
                    say(format!("agent applies {target} ({effect})"));
                    self.running = Some(RunningStep {
                        name,
                        applied_at,
                        done_at: applied_at + restart,
                        effect,
                        restart_said: false,
                    });
                    None
                }
                AgentAction::StoreBundle { .. } => None,
                AgentAction::WriteProgress(p) => {
                    self.files.progress = Some(p);
                    None
                }
                AgentAction::WriteChecksumFile(checksum) => {
                    let name = published
                        .and_then(|p| p.generations.all().find(|g| g.checksum == checksum))
                        .map_or_else(|| checksum.clone(), |g| g.name.clone());
                    say(format!("node runs {name}"));
                    self.files.configuration_checksum = Some(checksum.clone());
                    self.applied = Some(checksum);
                    None
                }
                AgentAction::RemoveChecksumFile => {
                    self.files.configuration_checksum = None;
                    None
                }
                AgentAction::RemoveFirstRun => {
                    self.files.first_run = false;
                    None
                }
                AgentAction::EmitEvent(e) => {
                    say(format!("event {}: {}", e.reason, e.note));
                    None
                }
            };
            if let Some(input) = input {
                self.machine.handle_input(input, ts);
            }
        }
    }
}
