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

pub mod cloud;
pub mod cluster;
pub mod machines;
pub mod remote_shell;
pub mod static_instances;

pub use cloud::{
    CloudApi, CloudError, CloudInstance, CreateInstance, InstanceClass, InstanceState,
};
pub use cluster::{
    ClusterApi, ClusterError, ClusterRead, EventApi, EventKind, EvictionResult, NodeApi,
    NodeHealthRead, NodePatch, ObjectRef, PodApi, PodRef, Precondition, RecordedEvent,
};
pub use machines::{
    ANNOTATION_HOLDER_CHECKSUM, AppliedHolder, MachineApi, NewInstance, StandbyHolder, holder_name,
};
pub use remote_shell::{
    RemoteScript, RemoteShell, RemoteShellError, ScriptRun, Sensitive, SshTarget,
};
pub use static_instances::{OperationEnd, StaticInstanceApi};
