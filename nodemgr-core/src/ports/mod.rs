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

/// Runs `futures` together and returns their outputs in order, as `futures::future::join_all`
/// does, without its bookkeeping while every future is ready at its first poll (in-memory
/// ports: the simulator's evictions). The futures are polled for the first time in order, in
/// one poll of the caller, exactly as `join_all` polls them; the first one that is not ready
/// and every later one are then run concurrently (`join` of it with `join_all` of the rest),
/// so a port whose calls wait (the kube adapter) still has all of them in flight at once.
pub(crate) async fn join_in_order<F, I>(futures: I) -> Vec<F::Output>
where
    F: std::future::Future,
    I: IntoIterator<Item = F>,
{
    let mut futures = futures.into_iter();
    let mut outputs = Vec::with_capacity(futures.size_hint().0);
    while let Some(future) = futures.next() {
        let mut future = std::pin::pin!(future);
        let first =
            std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx))).await;
        match first {
            std::task::Poll::Ready(output) => outputs.push(output),
            std::task::Poll::Pending => {
                let (output, rest) =
                    futures::future::join(future, futures::future::join_all(futures)).await;
                outputs.push(output);
                outputs.extend(rest);
                return outputs;
            }
        }
    }
    outputs
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

#[cfg(test)]
mod tests {
    use super::{block_on_ready, join_in_order};
    use proptest::prelude::*;
    use std::cell::{Cell, RefCell};
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A port call: ready after `pending` polls, or (`wait_for`) only once that many calls
    /// have been started (a call that waits on the others, as calls in flight at once do).
    struct Call<'a> {
        id: usize,
        pending: u32,
        wait_for: Option<usize>,
        polled: bool,
        started: &'a Cell<usize>,
        first_polls: &'a RefCell<Vec<usize>>,
    }

    impl Future for Call<'_> {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            if !self.polled {
                self.polled = true;
                self.started.set(self.started.get() + 1);
                self.first_polls.borrow_mut().push(self.id);
            }
            if self.wait_for.is_some_and(|n| self.started.get() < n) || self.pending > 0 {
                self.pending = self.pending.saturating_sub(1);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(self.id * 10 + 1)
        }
    }

    fn calls<'a>(
        pending: &'a [u32],
        wait_for: Option<usize>,
        started: &'a Cell<usize>,
        first_polls: &'a RefCell<Vec<usize>>,
    ) -> impl Iterator<Item = Call<'a>> + 'a {
        pending.iter().enumerate().map(move |(id, &pending)| Call {
            id,
            pending,
            wait_for,
            polled: false,
            started,
            first_polls,
        })
    }

    #[test]
    fn calls_that_wait_on_each_other_are_all_in_flight_at_once() {
        // Every call waits until all of them were started: awaiting them one after the other
        // never ends; running them together does.
        let pending = [0, 0, 1, 0, 2];
        let (started, first_polls) = (Cell::new(0), RefCell::new(Vec::new()));
        let out = block_on_ready(join_in_order(calls(
            &pending,
            Some(pending.len()),
            &started,
            &first_polls,
        )));
        assert_eq!(out, Some(vec![1, 11, 21, 31, 41]));
        assert_eq!(*first_polls.borrow(), vec![0, 1, 2, 3, 4]);
    }

    proptest! {
        /// Outputs and the order of the first polls are those of `join_all`, whichever calls
        /// wait and for how long.
        #[test]
        fn joins_as_join_all_does(
            pending in proptest::collection::vec(prop_oneof![3 => Just(0u32), 1 => 1u32..4], 0..12),
            wait in any::<bool>(),
        ) {
            let wait_for = wait.then_some(pending.len());
            let (started, first_polls) = (Cell::new(0), RefCell::new(Vec::new()));
            let ours = block_on_ready(join_in_order(calls(&pending, wait_for, &started, &first_polls)));
            let our_polls = first_polls.take();
            started.set(0);
            let theirs = block_on_ready(futures::future::join_all(calls(&pending, wait_for, &started, &first_polls)));
            prop_assert_eq!(ours, theirs);
            prop_assert_eq!(our_polls, first_polls.take());
        }
    }
}
