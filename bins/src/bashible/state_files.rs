//! The agent's state files under `/var/lib/bashible`: read, written atomically (a temporary
//! file, `fsync`, then a rename, so a crash or a full disk never leaves half a checksum), and
//! removed. A write that fails — a full disk above all — is an error naming the file and the
//! cause; the caller then reports nothing it did not record.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A state file operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// Reading failed (other than the file being absent).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Writing failed; `hint` says what to do (a full disk says so).
    #[error("cannot write {path}: {source}{hint}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
        /// Advice for the operator (empty when there is none).
        hint: &'static str,
    },
}

impl StateFileError {
    fn write(path: &Path, source: std::io::Error) -> Self {
        let hint = if source.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) {
            " (the disk is full: free space on the node; the pass is retried)"
        } else {
            ""
        };
        Self::Write {
            path: path.to_owned(),
            source,
            hint,
        }
    }
}

/// The file's text, or `None` when it does not exist.
///
/// # Errors
/// [`StateFileError::Read`] for any other failure.
pub fn read(path: &Path) -> Result<Option<String>, StateFileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StateFileError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Makes `path` hold exactly `content`: written to `path.nodemgr-new`, synced, renamed over
/// `path`. The parent directory is created when missing.
///
/// # Errors
/// [`StateFileError::Write`] naming the file; the old content is then untouched.
pub fn write_atomic(path: &Path, content: &[u8]) -> Result<(), StateFileError> {
    let fail = |e| StateFileError::write(path, e);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".nodemgr-new");
    let temporary = PathBuf::from(temporary);
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(content)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(fail(e));
    }
    Ok(())
}

/// Removes `path` if present.
///
/// # Errors
/// [`StateFileError::Write`] when it exists and cannot be removed.
pub fn remove(path: &Path) -> Result<(), StateFileError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StateFileError::write(path, e)),
    }
}

/// Replaces the directory `dir` with one holding exactly `files` (name, content): built beside
/// it, then swapped in, so `bundle_steps/` always holds one whole bundle.
///
/// # Errors
/// [`StateFileError::Write`] naming what failed; `dir` is then left as it was.
pub fn replace_dir(dir: &Path, files: &[(&str, &str)]) -> Result<(), StateFileError> {
    let mut staging = dir.as_os_str().to_owned();
    staging.push(".nodemgr-new");
    let staging = PathBuf::from(staging);
    let fail = |path: &Path, e| StateFileError::write(path, e);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| fail(&staging, e))?;
    }
    std::fs::create_dir_all(&staging).map_err(|e| fail(&staging, e))?;
    for (name, content) in files {
        write_atomic(&staging.join(name), content.as_bytes())?;
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| fail(dir, e))?;
    }
    std::fs::rename(&staging, dir).map_err(|e| fail(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_files_and_reads_see_absence() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("var/lib/bashible/configuration_checksum");
        assert_eq!(read(&path).expect("readable"), None);
        write_atomic(&path, b"abc").expect("writable");
        write_atomic(&path, b"de").expect("writable");
        assert_eq!(read(&path).expect("readable").as_deref(), Some("de"));
        remove(&path).expect("removable");
        remove(&path).expect("removing twice is fine");
        assert_eq!(read(&path).expect("readable"), None);
    }

    #[test]
    fn a_directory_is_replaced_as_a_whole() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let steps = dir.path().join("bundle_steps");
        replace_dir(&steps, &[("001_a.sh", "a"), ("002_b.sh", "b")]).expect("writable");
        replace_dir(&steps, &[("003_c.sh", "c")]).expect("writable");
        let mut names: Vec<String> = std::fs::read_dir(&steps)
            .expect("listable")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["003_c.sh"]);
    }

    #[test]
    fn a_write_that_cannot_happen_names_the_file_and_keeps_the_old_content() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("configuration_checksum");
        write_atomic(&path, b"old").expect("writable");
        // A directory where the temporary file must go: the write fails like a full disk would.
        std::fs::create_dir(dir.path().join("configuration_checksum.nodemgr-new"))
            .expect("a directory");
        let error = write_atomic(&path, b"new").expect_err("unwritable");
        // The OS error is the source, not only pasted into the message.
        let io = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert!(io.is_some(), "{error:?}");
        let error = error.to_string();
        assert!(error.contains("configuration_checksum"), "{error}");
        assert_eq!(read(&path).expect("readable").as_deref(), Some("old"));
    }

    #[test]
    fn a_full_disk_says_so() {
        let error = StateFileError::write(
            Path::new("/var/lib/bashible/configuration_checksum"),
            std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()),
        )
        .to_string();
        assert!(error.contains("the disk is full"), "{error}");
    }
}
