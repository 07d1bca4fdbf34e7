//! The pass lock: one pass at a time per node, as Deckhouse's `flock /var/lock/bashible`. A
//! pass started by the timer while another runs (a long step, `--loop` mode) finds the lock
//! held and ends at once; the lock is released when the holder exits, even by SIGKILL, because
//! it is a `flock` on an open file.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file could not be created or opened.
    #[error("cannot open the lock file {path}: {source}")]
    Open {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `flock` failed for another reason than the lock being held.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A held pass lock; dropping it releases the lock.
#[derive(Debug)]
pub struct PassLock {
    _file: File,
}

impl PassLock {
    /// Takes the lock at `path` without waiting: `Ok(None)` when another process holds it.
    ///
    /// # Errors
    /// [`LockError`] when the file cannot be opened (its directory is created first) or
    /// locked.
    pub fn try_acquire(path: &Path) -> Result<Option<Self>, LockError> {
        let open = |source| LockError::Open {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(open)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(open)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(Self { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(errno) => Err(LockError::Lock {
                path: path.to_owned(),
                source: errno.into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("var/lock/bashible");
        let first = PassLock::try_acquire(&path)
            .expect("lockable")
            .expect("free");
        assert!(PassLock::try_acquire(&path).expect("lockable").is_none());
        drop(first);
        assert!(PassLock::try_acquire(&path).expect("lockable").is_some());
    }
}
