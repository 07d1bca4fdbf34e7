//! The ports: traits the executors use to observe and act on the outside world. Adapters
//! (`nodemgr-k8s`, `nodemgr-cloud`, `nodemgr-ssh`) implement them over real APIs, the simulator
//! (`nodemgr-sim`) in memory, so the same executor code runs against both. Each method's doc
//! states its contract (idempotence, preconditions, not-found behaviour).

pub mod cloud;
pub mod cluster;
pub mod remote_shell;

pub use cloud::{
    CloudApi, CloudError, CloudInstance, CreateInstance, InstanceClass, InstanceState,
};
pub use cluster::{
    ClusterApi, ClusterError, ClusterRead, EventApi, EventKind, EvictionResult, NodeApi, NodePatch,
    ObjectRef, PodApi, PodRef, Precondition, RecordedEvent,
};
pub use remote_shell::{
    RemoteScript, RemoteShell, RemoteShellError, ScriptRun, Sensitive, SshTarget,
};
