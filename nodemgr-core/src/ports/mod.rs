//! The ports: traits the executors use to observe and act on the outside world. Adapters
//! (`nodemgr-k8s`, `nodemgr-cloud`, `nodemgr-ssh`) implement them over real APIs, the simulator
//! (`nodemgr-sim`) in memory, so the same executor code runs against both ([`crate::executor`]).
//!
//! | port | what | used by |
//! |---|---|---|
//! | [`cluster`] | Nodes, Pods, PodDisruptionBudgets, NodeGroups, Events | every executor |
//! | [`machines`] | Instances, machine failures, bootstrap user data, standby holders | the scaling executor |
//! | [`cloud`] | the provider's machines | the scaling executor |
//! | [`remote_shell`] | scripts on static machines over SSH | node-manager's static instances adapter |
//! | [`static_instances`] | StaticInstances, SSHCredentials, operations on static machines | the static instances executor |
//!
//! Each method's doc states its contract (idempotence, preconditions, not-found behaviour).

pub mod cause;
pub mod cloud;
pub mod cluster;
pub mod machines;
pub mod remote_shell;
pub mod static_instances;

/// Runs a port future to completion when the port never waits on anything (in-memory ports:
/// the simulator's, tests', an embedder's fake): polls it with a no-op waker until it is
/// ready. `None` if it is still pending after a million polls, which means the port does wait
/// and needs a real async runtime. Pure: no thread, no clock, no I/O.
///
/// # Examples
/// ```
/// use nodemgr_core::ports::block_on_ready;
///
/// assert_eq!(block_on_ready(async { 1 + 1 }), Some(2));
/// ```
pub fn block_on_ready<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..1_000_000 {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

pub use cause::{Cause, ErrorChain};
pub use cloud::{
    CloudApi, CloudError, CloudInstance, CreateInstance, InstanceClass, InstanceState,
};
pub use cluster::{
    ClusterApi, ClusterError, ClusterRead, EventApi, EventKind, EvictionResult, NodeApi,
    NodeChanges, NodeHealthRead, NodePatch, NodePod, NodeRevision, ObjectRef, PodApi, PodRef,
    Precondition, RecordedEvent,
};
pub use machines::{
    ANNOTATION_HOLDER_CHECKSUM, AppliedHolder, MachineApi, NewInstance, StandbyHolder, holder_name,
};
pub use remote_shell::{
    RemoteScript, RemoteShell, RemoteShellError, ScriptRun, Sensitive, SshTarget,
};
pub use static_instances::{OperationEnd, StaticInstanceApi};
