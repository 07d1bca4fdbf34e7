//! Runs a replica's controller tasks as one unit: when any of them ends without being asked to
//! (it returned or panicked), the others are told to stop and the unit reports which task ended
//! and how, so that the leader elector can restart the controllers or give up the Lease
//! (`docs/leader-election.md`). A controller that silently died while its replica kept the
//! Lease and reported ready would leave its job undone with nobody noticing.
//!
//! Dropping a [`TaskGroup`] (or the future of [`TaskGroup::run`]) aborts every task in it.

use std::collections::HashMap;
use std::future::Future;

use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};

/// Why a controller task ended although nobody asked it to stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskEnded {
    /// The task's future completed while it should have kept running.
    #[error("controller task {name} returned without being asked to stop")]
    Returned {
        /// The task's name (`status`, `update`, …).
        name: String,
    },
    /// The task panicked.
    #[error("controller task {name} panicked: {message}")]
    Panicked {
        /// The task's name.
        name: String,
        /// The panic message, when it was a string.
        message: String,
    },
}

impl TaskEnded {
    /// What ended `name`, read from the task's join result (`Ok`: it returned).
    pub fn from_join(name: &str, result: Result<(), JoinError>) -> Self {
        match result {
            Ok(()) => TaskEnded::Returned { name: name.into() },
            Err(error) => TaskEnded::Panicked {
                name: name.into(),
                message: panic_message(error),
            },
        }
    }
}

/// The message of a panicked (or cancelled) task.
pub fn panic_message(error: JoinError) -> String {
    if error.is_cancelled() {
        return "cancelled".into();
    }
    match error.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into()),
        Err(error) => error.to_string(),
    }
}

/// Named tasks that share one stop signal and end together.
pub struct TaskGroup {
    tasks: JoinSet<()>,
    names: HashMap<Id, &'static str>,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
}

impl Default for TaskGroup {
    fn default() -> Self {
        Self::new()
    }
}

impl TaskGroup {
    /// An empty group.
    pub fn new() -> Self {
        let (stop_tx, stop_rx) = watch::channel(false);
        TaskGroup {
            tasks: JoinSet::new(),
            names: HashMap::new(),
            stop_tx,
            stop_rx,
        }
    }

    /// The stop signal the group's tasks must watch (it turns true when the group stops).
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop_rx.clone()
    }

    /// Starts `task` under `name`.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// How many tasks the group started.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the group has no task.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Runs until `stop` turns true (then stops every task, waits for them and returns `Ok`) or
    /// until a task ends by itself (then stops the others, waits for them and returns what
    /// ended it). An empty group waits for `stop`.
    ///
    /// # Errors
    /// The first task that returned or panicked while not asked to stop.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<(), TaskEnded> {
        let ended = loop {
            if *stop.borrow() {
                break None;
            }
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        // The caller is gone: nobody can ask us to stop any more; stop now.
                        break None;
                    }
                }
                Some(joined) = self.tasks.join_next_with_id() => {
                    let (id, result) = match joined {
                        Ok((id, ())) => (id, Ok(())),
                        Err(error) => (error.id(), Err(error)),
                    };
                    let name = self.names.get(&id).copied().unwrap_or("unnamed");
                    break Some(TaskEnded::from_join(name, result));
                }
            }
        };
        let _ = self.stop_tx.send(true);
        while let Some(joined) = self.tasks.join_next_with_id().await {
            if let Err(error) = joined {
                let name = self.names.get(&error.id()).copied().unwrap_or("unnamed");
                if error.is_panic() {
                    tracing::error!(task = name, message = %panic_message(error), "a controller task panicked while stopping");
                }
            }
        }
        match ended {
            None => Ok(()),
            Some(ended) => {
                tracing::error!(error = %ended, "a controller task ended; stopped the others");
                Err(ended)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    async fn waits_for_stop(mut stop: watch::Receiver<bool>, stopped: Arc<AtomicBool>) {
        let _ = stop.wait_for(|s| *s).await;
        stopped.store(true, Ordering::SeqCst);
    }

    #[tokio::test]
    async fn a_panicking_task_stops_the_others_and_is_named() {
        let mut group = TaskGroup::new();
        let stopped = Arc::new(AtomicBool::new(false));
        group.spawn(
            "status",
            waits_for_stop(group.stop_signal(), stopped.clone()),
        );
        group.spawn("update", async { panic!("boom in update") });
        let (_tx, rx) = watch::channel(false);
        let ended = group.run(rx).await;
        assert_eq!(
            ended,
            Err(TaskEnded::Panicked {
                name: "update".into(),
                message: "boom in update".into()
            })
        );
        assert!(
            stopped.load(Ordering::SeqCst),
            "the sibling was told to stop"
        );
    }

    #[tokio::test]
    async fn a_returning_task_counts_as_ended() {
        let mut group = TaskGroup::new();
        let stopped = Arc::new(AtomicBool::new(false));
        group.spawn(
            "fencing",
            waits_for_stop(group.stop_signal(), stopped.clone()),
        );
        group.spawn("template", async {});
        let (_tx, rx) = watch::channel(false);
        assert_eq!(
            group.run(rx).await,
            Err(TaskEnded::Returned {
                name: "template".into()
            })
        );
        assert!(stopped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_requested_stop_is_not_a_failure() {
        let mut group = TaskGroup::new();
        let stopped = Arc::new(AtomicBool::new(false));
        group.spawn(
            "status",
            waits_for_stop(group.stop_signal(), stopped.clone()),
        );
        let (tx, rx) = watch::channel(false);
        let run = tokio::spawn(group.run(rx));
        tokio::task::yield_now().await;
        tx.send(true).expect("the group listens");
        assert_eq!(run.await.expect("the group does not panic"), Ok(()));
        assert!(stopped.load(Ordering::SeqCst));
    }
}
