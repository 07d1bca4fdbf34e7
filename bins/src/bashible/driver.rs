//! The I/O shell around the core's node agent ([`nodemgr_core::agent::Agent`]): it reads the
//! state files once, builds the agent, and carries out the agent's actions in order — fetch
//! the bundle, read and patch the Node, run a step, write a state file, record an Event —
//! handing every answer back, and sleeps when the agent says so. It decides nothing about the
//! protocol itself.
//!
//! A state write that fails (a full disk) ends the agent: the driver logs it, waits (the wait
//! doubles up to five minutes) and rebuilds the agent from the files on disk, which the agent
//! documents as safe at any moment; nothing it did not write is ever reported.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use nodemgr_core::agent::{
    Agent, AgentAction, AgentConfig, AgentInput, DesiredBundle, NodeView, PatchOutcome, Progress,
    StateFiles, StepOutcome,
};
use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::{Cause, ErrorChain};

use super::bundle_source::{BundleServer, FetchError};
use super::layout::Layout;
use super::node_api::{ApiError, NodeApi};
use super::state_files::{self, StateFileError};
use super::step_runner::{self, StepRun};
use crate::wall_clock;

/// The progress record's file name in the state directory (the core's).
pub use nodemgr_core::agent::state::PROGRESS_FILE;

/// Marker of the running step's process group, in the state directory.
pub const RUNNING_STEP_FILE: &str = "nodemgr_running_step";

/// Why the node's group is not known (without `--group`).
#[derive(Debug, thiserror::Error)]
enum GroupError {
    /// The Node could not be read.
    #[error("cannot learn the node's group from its label node.deckhouse.io/group: {0}")]
    Read(#[source] ApiError),
    /// The Node has no group label.
    #[error("Node {0} has no label node.deckhouse.io/group; pass --group")]
    Unlabelled(String),
}

/// What the driver needs besides the agent.
pub struct Driver {
    /// The agent's files.
    pub layout: Layout,
    /// The node's name.
    pub node: String,
    /// The group, when given with `--group`; else read from the Node's label.
    pub group: Option<String>,
    /// The API.
    pub api: NodeApi,
    /// The bundle server.
    pub server: BundleServer,
    /// Time limit of one step.
    pub step_timeout: Duration,
    /// The agent's timings.
    pub agent: AgentConfig,
    /// Stop once the node is up to date (one pass); `false` runs forever.
    pub one_pass: bool,
}

/// Why the driver stopped the agent.
#[derive(Debug, thiserror::Error)]
enum Stop {
    /// A state file could not be written: the agent is rebuilt from disk later.
    #[error(transparent)]
    State(#[from] StateFileError),
}

/// Reads the state files as the agent expects them.
///
/// # Errors
/// A file that exists but cannot be read.
pub fn read_state_files(layout: &Layout) -> Result<StateFiles, StateFileError> {
    let configuration_checksum = state_files::read(&layout.checksum_file())?
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    let first_run = layout.first_run_marker().exists();
    let progress = match state_files::read(&layout.state_file(PROGRESS_FILE))? {
        None => None,
        Some(text) => match Progress::parse(&text) {
            Ok(p) => Some(p),
            Err(error) => {
                tracing::error!(%error, "every step of the next bundle runs again");
                None
            }
        },
    };
    Ok(StateFiles {
        configuration_checksum,
        first_run,
        progress,
    })
}

fn until(deadline: Timestamp, now: Timestamp) -> Duration {
    let millis = deadline.as_millis().saturating_sub(now.as_millis());
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

impl Driver {
    fn running_marker(&self) -> PathBuf {
        self.layout.state_file(RUNNING_STEP_FILE)
    }

    /// Runs the agent: until the node is up to date (`one_pass`) or forever.
    ///
    /// # Errors
    /// Never in practice: failures are logged and retried; the `Result` is for the caller's
    /// plumbing.
    pub async fn run(&self) -> anyhow::Result<()> {
        let rebuild =
            nodemgr_core::backoff::Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let mut failures = 0_u32;
        loop {
            match self.drive().await {
                Ok(()) => return Ok(()),
                Err(Stop::State(error)) => {
                    failures = failures.saturating_add(1);
                    let rebuild_backoff = rebuild.after_failures(failures);
                    tracing::error!(
                        %error,
                        retry_in_secs = rebuild_backoff.as_secs(),
                        "cannot write the agent's state; nothing further is applied or reported until it can"
                    );
                    tokio::time::sleep(rebuild_backoff).await;
                }
            }
        }
    }

    async fn drive(&self) -> Result<(), Stop> {
        if let Some(pgid) = step_runner::kill_leftover(&self.running_marker())? {
            tracing::warn!(
                process_group = pgid,
                "killed a step left running by an agent that was stopped mid-step; it runs again"
            );
        }
        let files = read_state_files(&self.layout)?;
        tracing::info!(
            node = %self.node,
            applied = files.configuration_checksum.as_deref().unwrap_or("-"),
            first_run = files.first_run,
            "agent starts"
        );
        let mut agent = Agent::new(self.agent.clone(), files, wall_clock());
        let mut group = self.group.clone();
        loop {
            while let Some(action) = agent.poll_action() {
                if let Some(input) = self.carry_out(action, &mut group).await? {
                    agent.handle_input(input, wall_clock());
                }
            }
            if self.one_pass && agent.is_up_to_date() {
                tracing::info!(status = ?agent.status(), "the node is up to date; pass done");
                return Ok(());
            }
            let now = wall_clock();
            match agent.next_deadline() {
                Some(deadline) => {
                    tokio::time::sleep(until(deadline, now)).await;
                    agent.handle_timeout(wall_clock());
                }
                None => {
                    // Up to date without a pass interval, in loop mode: wake every minute.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    agent.handle_wake(wall_clock());
                }
            }
        }
    }

    async fn group(&self, group: &mut Option<String>) -> Result<String, GroupError> {
        if let Some(g) = group {
            return Ok(g.clone());
        }
        let node = self.api.node().await.map_err(GroupError::Read)?;
        let label = node
            .labels
            .get(nodemgr_core::model::keys::LABEL_NODE_GROUP)
            .cloned()
            .ok_or_else(|| GroupError::Unlabelled(self.node.clone()))?;
        tracing::info!(group = %label, "group from the Node's label");
        *group = Some(label.clone());
        Ok(label)
    }

    async fn carry_out(
        &self,
        action: AgentAction,
        group: &mut Option<String>,
    ) -> Result<Option<AgentInput>, Stop> {
        match action {
            AgentAction::FetchBundle => {
                let fetched = match self.group(group).await {
                    Err(e) => Err(Cause::new(e)),
                    Ok(g) => self.fetch(&g).await.map_err(Cause::new),
                };
                if let Err(error) = &fetched {
                    tracing::warn!(error = %ErrorChain(error), "bundle not fetched; retrying with backoff");
                }
                Ok(Some(AgentInput::Bundle(fetched)))
            }
            AgentAction::ReadNode => {
                let read = match self.api.node().await {
                    Ok(node) => Ok(Some(NodeView {
                        resource_version: node.resource_version,
                        annotations: node.annotations.into(),
                    })),
                    Err(ApiError::NodeGone(name)) => {
                        tracing::warn!(node = %name, "the Node does not exist; waiting for it to be registered again");
                        Ok(None)
                    }
                    Err(error) => {
                        tracing::warn!(error = %ErrorChain(&error), "cannot read the Node; retrying with backoff");
                        Err(Cause::new(error))
                    }
                };
                Ok(Some(AgentInput::Node(read)))
            }
            AgentAction::PatchNode(patch) => {
                tracing::info!("{}", AgentAction::PatchNode(patch.clone()));
                let mut changes: BTreeMap<String, Option<String>> = patch
                    .set
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect();
                for key in &patch.remove {
                    changes.insert(key.clone(), None);
                }
                let outcome = match self
                    .api
                    .patch_annotations(&changes, Some(&patch.resource_version))
                    .await
                {
                    Ok(node) => PatchOutcome::Applied {
                        resource_version: node.resource_version,
                    },
                    Err(ApiError::Conflict) => {
                        tracing::info!("the Node changed meanwhile (409); reading it again");
                        PatchOutcome::Conflict
                    }
                    Err(ApiError::NodeGone(_)) => PatchOutcome::NotFound,
                    Err(error) => {
                        tracing::warn!(error = %ErrorChain(&error), "cannot patch the Node; retrying with backoff");
                        PatchOutcome::Failed(Cause::new(error))
                    }
                };
                Ok(Some(AgentInput::Patched(outcome)))
            }
            AgentAction::RunStep { name } => {
                Ok(Some(AgentInput::StepFinished(self.run_step(&name).await?)))
            }
            AgentAction::StoreBundle { checksum, steps } => {
                tracing::info!(%checksum, steps = steps.len(), "storing the bundle's steps");
                let files: Vec<(&str, &str)> = steps
                    .iter()
                    .map(|s| (s.name.as_str(), s.script.as_str()))
                    .collect();
                state_files::replace_dir(&self.layout.bundle_steps(), &files)?;
                Ok(None)
            }
            AgentAction::WriteProgress(progress) => {
                state_files::write_atomic(
                    &self.layout.state_file(PROGRESS_FILE),
                    progress.to_file().as_bytes(),
                )?;
                Ok(None)
            }
            AgentAction::WriteChecksumFile(checksum) => {
                tracing::info!(%checksum, "applied: writing configuration_checksum");
                state_files::write_atomic(&self.layout.checksum_file(), checksum.as_bytes())?;
                Ok(None)
            }
            AgentAction::RemoveChecksumFile => {
                state_files::remove(&self.layout.checksum_file())?;
                Ok(None)
            }
            AgentAction::RemoveFirstRun => {
                state_files::remove(&self.layout.first_run_marker())?;
                Ok(None)
            }
            AgentAction::EmitEvent(event) => {
                tracing::warn!(reason = %event.reason, name = %event.name, "{}", event.note);
                if let Err(error) = self
                    .api
                    .record_event(&event.name, &event.reason, true, &event.note)
                    .await
                {
                    tracing::warn!(%error, reason = %event.reason, "cannot record the Event");
                }
                Ok(None)
            }
        }
    }

    async fn fetch(&self, group: &str) -> Result<DesiredBundle, FetchError> {
        let bundle = self.server.fetch(group).await?;
        Ok(DesiredBundle {
            checksum: bundle.checksum,
            steps: bundle.steps.into(),
            // Not served by bashible-apiserver yet: RollingUpdate groups ask with
            // disruption-required, which node-manager also answers.
            rolling_update: false,
        })
    }

    async fn run_step(&self, name: &str) -> Result<StepOutcome, Stop> {
        let script = self.layout.bundle_steps().join(name);
        tracing::info!(step = name, "running step");
        let bb_root = self.layout.bb_root();
        let marker = self.running_marker();
        let (node, timeout) = (self.node.clone(), self.step_timeout);
        let step = name.to_owned();
        let ran = tokio::task::spawn_blocking(move || {
            step_runner::run_step(&StepRun {
                script: &script,
                name: &step,
                bb_root: &bb_root,
                node_name: &node,
                timeout,
                running_marker: &marker,
            })
        })
        .await;
        let outcome = match ran {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(step_runner::StepError::Marker(e))) => return Err(Stop::State(e)),
            Ok(Err(error)) => {
                tracing::error!(step = name, %error, "the step could not start");
                return Ok(StepOutcome {
                    step: name.to_owned(),
                    exit_code: None,
                    stderr: error.to_string(),
                });
            }
            Err(error) => {
                tracing::error!(step = name, %error, "the step's runner failed");
                return Ok(StepOutcome {
                    step: name.to_owned(),
                    exit_code: None,
                    stderr: error.to_string(),
                });
            }
        };
        if outcome.succeeded {
            tracing::info!(
                step = name,
                elapsed_ms = outcome.elapsed.as_millis(),
                "step {}",
                outcome.describe()
            );
        } else {
            tracing::error!(
                step = name,
                elapsed_ms = outcome.elapsed.as_millis(),
                "step {}",
                outcome.describe()
            );
        }
        if super::node_user_status::is_node_users_step(name) {
            match super::node_user_status::report(
                self.api.client(),
                &self.node,
                &outcome.stderr_tail,
            )
            .await
            {
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "cannot report the NodeUsers' status; reported after the step's next run");
                }
            }
        }
        Ok(StepOutcome {
            step: name.to_owned(),
            exit_code: if outcome.timed_out {
                None
            } else {
                outcome.exit_code
            },
            stderr: outcome.stderr_tail,
        })
    }
}

/// The path the agent's progress record lives at under `layout`.
pub fn progress_file(layout: &Layout) -> PathBuf {
    layout.state_file(PROGRESS_FILE)
}
