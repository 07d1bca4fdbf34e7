//! The node agent (Deckhouse's bashible): the node half of the update protocol as a sans-I/O
//! state machine. It decides when a node asks for approval, which step of its group's bundle
//! runs next, when it asks for a disruption, and when it reports the checksum it applied. The
//! controller half is [`crate::update`]. The protocol is described in `docs/agent.md`; this is
//! the summary.
//!
//! # The protocol, node side
//! 1. The node compares the checksum of the bundle it applied last (the state file
//!    `configuration_checksum`) with its group's desired bundle. Equal: it makes sure its
//!    Node's `node.deckhouse.io/configuration-checksum` annotation says so, and the pass ends.
//! 2. Different: it checks the bundle: its steps must hash to its checksum
//!    ([`crate::bashible::configuration_checksum`]); a bundle that does not is refused and no
//!    step of it runs. The bundle it verified last is not hashed again when fetched again
//!    unchanged (same checksum, same steps in the same order), and steps shared between
//!    fetches ([`BundleSteps`]) are hashed once.
//! 3. On the first run after the bootstrap (the `first_run` marker exists) it applies at once.
//!    Otherwise it patches its Node, guarded by the resourceVersion it read, to add
//!    `update.node.deckhouse.io/waiting-for-approval` (on a 409 it re-reads and tries
//!    again), then polls until `update.node.deckhouse.io/approved` appears. The checksum
//!    annotation, the checksum file and the progress record stay as they are: the node still
//!    runs the bundle they name.
//! 4. Right before the first step of the new bundle runs (after the approvals of step 3 and
//!    5), the agent removes the Node's checksum annotation (a guarded patch; not on the first
//!    run), removes the checksum file, stores the bundle's steps (`bundle_steps/`) and starts
//!    the progress record of the new bundle, in this order. A bundle changed and changed back
//!    before that point finds the node up to date: nothing is asked, nothing runs.
//!    Steps run in lexical order of their names. A failing step emits a Warning Event
//!    (`BashibleStepFailed`, named `bashible-error-<host>-<step>`) with the last 500 bytes of
//!    its standard error and runs again after a pause (10 s by default).
//! 5. A step is disruptive when it carries a disruption key
//!    ([`crate::bashible::Step::disruption_key`]) other than the one it last ran with on this
//!    node. Before it runs (except on the first run) the agent sets `disruption-required` —
//!    `rolling-update` when its group replaces machines — guarded as in step 3, and waits for
//!    `disruption-approved`. One approval covers the rest of the apply.
//! 6. After the last step: the checksum annotation is set, `first_run` is removed and the
//!    checksum file written. A checksum is reported only after every step of its bundle
//!    succeeded.
//!
//! # Restarts and new bundles
//! After every step that succeeds the agent writes a progress record ([`Progress`]: which
//! steps of which bundle finished, and each step's disruption key as it last ran). An agent
//! rebuilt from the state files at any moment ([`Agent::new`]) resumes: it does not re-run a
//! finished step of the same bundle, it does not report a checksum whose steps did not all
//! succeed, and it asks again for whatever approval its Node no longer shows. A step that was
//! running when the agent stopped did not finish and runs again (steps are idempotent).
//!
//! The agent fetches the bundle again before every step and at every poll. When the desired
//! bundle changed (the group changed again), the apply of the old one is abandoned: the new
//! bundle's steps are stored and all of them run, from the first (as Deckhouse, which starts
//! over with the new bundle). A step already running finishes first. The node's approval
//! still holds (the controller removes `approved` only once the node reports the desired
//! checksum), so the new apply starts without asking again; a disruption is asked again if a
//! step of the new bundle needs one. A node that runs bundle A, every step recorded, and sees
//! its group move to B and back to A before B's first step ran finds A still recorded in
//! every place (step 4 gives them up only right before that step): it runs nothing and asks
//! for nothing, also when it restarted in between; the controller, seeing the group's
//! checksum on the Node, finishes it.
//!
//! # Driving it
//! quinn-proto's vocabulary: build with [`Agent::new`], drain [`Agent::poll_action`] and carry
//! the [`AgentAction`]s out in order. A request (`FetchBundle`, `ReadNode`, `PatchNode`,
//! `RunStep`) is answered with [`Agent::handle_input`] and an [`AgentInput`]; then drain again. When
//! nothing is left, sleep until [`Agent::next_deadline`] and call [`Agent::handle_timeout`].
//! [`Agent::handle_wake`] cuts a sleep short (a watch saw the Node or the bundle change). Time is
//! always passed in; the agent never reads a clock and does no I/O.
//!
//! A driver that keeps the Node and the state files itself (a simulator running many
//! agents) may drain [`Agent::poll_lean_action`] instead, which lends what the agent holds
//! (the patch as its changes, the steps, the progress record) rather than copying it, and
//! answer with [`Agent::handle_bundle_fetched`], [`Agent::handle_node_read`] and
//! [`Agent::handle_patch_applied`], which borrow what they are handed: the same decisions,
//! fewer copies.
//!
//! ```
//! use nodemgr_core::agent::{Agent, AgentAction, AgentConfig, AgentInput, DesiredBundle, StateFiles};
//! use nodemgr_core::bashible::Step;
//! use nodemgr_core::model::Timestamp;
//!
//! let bundle = DesiredBundle::of_steps(vec![Step::new("010_a.sh", "true")], false);
//! let now = Timestamp::EPOCH;
//! let mut agent = Agent::new(AgentConfig::new("node-1"), StateFiles::first_run(), now);
//! assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
//! agent.handle_input(AgentInput::Bundle(Ok(bundle)), now);
//! // First run: the steps are stored and run without asking for approval.
//! assert!(matches!(agent.poll_action(), Some(AgentAction::StoreBundle { .. })));
//! ```

mod action;
mod input;
mod lean;
mod machine;
pub mod simulated;
pub mod state;

pub use action::{AgentAction, AgentEvent, NodePatch};
pub use input::{AgentInput, BundleSteps, DesiredBundle, NodeView, PatchOutcome, StepOutcome};
pub use lean::{LeanAction, PatchRequest, StoredBundle};
pub use machine::{
    Agent, AgentConfig, AgentError, AgentStatus, REASON_BUNDLE_REJECTED, REASON_STEP_FAILED,
    STDERR_TAIL_BYTES, stderr_tail,
};
pub use simulated::{GENERATION_STEP, SimulatedGeneration, SimulatedGenerations};
pub use state::{Progress, StateError, StateFiles};
