//! Runs one bundle step: `bash STEP` with `BB_ROOT` set, in a process group of its own, with a
//! time limit. Every line it prints goes to the agent's log (the journal on a node) as it comes,
//! tagged with the step and the stream; the last 500 bytes of its standard error are kept for
//! the `BashibleStepFailed` Event. A step over its limit gets SIGTERM on its whole process group,
//! then SIGKILL after a grace period, and counts as failed.
//!
//! The running step's process group is recorded in a file while it runs; a pass that finds the
//! file (its agent was killed mid-step) kills that group before it starts anything, so a step
//! left behind never runs alongside its own retry.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use super::state_files;

/// How much of a failed step's standard error goes into its Event.
pub const STDERR_TAIL_BYTES: usize = 500;

/// Time between SIGTERM and SIGKILL for a step over its limit.
const KILL_GRACE: Duration = Duration::from_secs(3);

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    /// Exit code 0.
    pub succeeded: bool,
    /// Killed for running longer than its limit.
    pub timed_out: bool,
    /// The exit code, when it exited (not killed by a signal).
    pub exit_code: Option<i32>,
    /// The last [`STDERR_TAIL_BYTES`] of its standard error (cut at a character boundary).
    pub stderr_tail: String,
    /// How long it ran.
    pub elapsed: Duration,
}

impl StepOutcome {
    /// One line saying how the step ended.
    pub fn describe(&self) -> String {
        if self.succeeded {
            "succeeded".into()
        } else if self.timed_out {
            format!("timed out after {}s and was killed", self.elapsed.as_secs())
        } else {
            match self.exit_code {
                Some(code) => format!("failed with exit code {code}"),
                None => "was killed by a signal".into(),
            }
        }
    }
}

/// A step that could not be started at all.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// `bash` could not be spawned.
    #[error("cannot start step {step}: {source}")]
    Spawn {
        /// The step's file.
        step: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The marker of the running step could not be written.
    #[error(transparent)]
    Marker(#[from] state_files::StateFileError),
}

/// What a step runs with.
#[derive(Debug, Clone)]
pub struct StepRun<'a> {
    /// The script file.
    pub script: &'a Path,
    /// Its name for logs (`030_kubelet.sh`).
    pub name: &'a str,
    /// `BB_ROOT` (empty on a node).
    pub bb_root: &'a str,
    /// The node's name (`BB_NODE_NAME`).
    pub node_name: &'a str,
    /// Time limit.
    pub timeout: Duration,
    /// Where the running step's process group is recorded.
    pub running_marker: &'a Path,
}

fn keep_tail(tail: &mut Vec<u8>, more: &[u8]) {
    tail.extend_from_slice(more);
    if tail.len() > STDERR_TAIL_BYTES {
        let cut = tail.len() - STDERR_TAIL_BYTES;
        tail.drain(..cut);
    }
}

/// The tail as text, starting at the first whole character.
fn tail_text(tail: &[u8]) -> String {
    let start = tail
        .iter()
        .position(|b| (*b & 0xc0) != 0x80)
        .unwrap_or(tail.len());
    String::from_utf8_lossy(&tail[start..]).into_owned()
}

enum Output {
    Line(&'static str, String),
    Stderr(Vec<u8>),
}

fn pump(
    stream: impl Read + Send + 'static,
    name: &'static str,
    tx: mpsc::Sender<Output>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if name == "stderr" && tx.send(Output::Stderr(line.clone())).is_err() {
                        break;
                    }
                    let text = String::from_utf8_lossy(&line)
                        .trim_end_matches(['\n', '\r'])
                        .to_owned();
                    if tx.send(Output::Line(name, text)).is_err() {
                        break;
                    }
                }
            }
        }
    })
}

fn signal_group(pgid: Pid, signal: Signal) {
    // ESRCH (the group is gone) is fine: there is nothing left to stop.
    let _ = kill_process_group(pgid, signal);
}

/// Kills the process group a killed agent left running, if its marker is there, and removes
/// the marker. Returns the group it signalled.
///
/// # Errors
/// When the marker cannot be read or removed.
pub fn kill_leftover(marker: &Path) -> Result<Option<i32>, state_files::StateFileError> {
    let Some(text) = state_files::read(marker)? else {
        return Ok(None);
    };
    let leftover = text
        .trim()
        .parse::<i32>()
        .ok()
        .and_then(Pid::from_raw)
        .filter(|pid| pid.as_raw_nonzero().get() > 1);
    if let Some(pgid) = leftover {
        signal_group(pgid, Signal::KILL);
    }
    state_files::remove(marker)?;
    Ok(leftover.map(|p| p.as_raw_nonzero().get()))
}

/// Runs a step to its end or its limit, streaming its output to the log.
///
/// # Errors
/// [`StepError`] when it cannot be started; a step that fails or times out is an `Ok` outcome.
pub fn run_step(run: &StepRun<'_>) -> Result<StepOutcome, StepError> {
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg(run.script)
        .env("BB_ROOT", run.bb_root)
        .env("BB_NODE_NAME", run.node_name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| StepError::Spawn {
            step: run.script.to_owned(),
            source,
        })?;
    let pgid = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
    let marked = state_files::write_atomic(run.running_marker, child.id().to_string().as_bytes());
    if let Err(e) = marked {
        if let Some(pgid) = pgid {
            signal_group(pgid, Signal::KILL);
        }
        let _ = child.wait();
        return Err(e.into());
    }
    let (tx, rx) = mpsc::channel();
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(pump(out, "stdout", tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(pump(err, "stderr", tx.clone()));
    }
    drop(tx);
    let mut tail = Vec::new();
    let mut drain = |rx: &mpsc::Receiver<Output>, wait: Duration| {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Output::Line(stream, text)) => {
                    tracing::info!(step = run.name, stream, "{text}");
                }
                Ok(Output::Stderr(bytes)) => keep_tail(&mut tail, &bytes),
                Err(_) => break,
            }
        }
    };
    let mut timed_out = false;
    let mut terminated_at: Option<Instant> = None;
    let status = loop {
        drain(&rx, Duration::from_millis(20));
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(step = run.name, error = %e, "cannot wait for the step");
                break None;
            }
        }
        let elapsed = started.elapsed();
        if elapsed > run.timeout && terminated_at.is_none() {
            tracing::error!(
                step = run.name,
                timeout_secs = run.timeout.as_secs(),
                "step runs longer than its limit; stopping its process group"
            );
            timed_out = true;
            terminated_at = Some(Instant::now());
            if let Some(pgid) = pgid {
                signal_group(pgid, Signal::TERM);
            }
        }
        if terminated_at.is_some_and(|t| t.elapsed() > KILL_GRACE)
            && let Some(pgid) = pgid
        {
            signal_group(pgid, Signal::KILL);
        }
    };
    // The step is done; whatever it started in its group goes with it.
    if let Some(pgid) = pgid {
        signal_group(pgid, Signal::KILL);
    }
    drain(&rx, Duration::from_millis(200));
    for p in pumps {
        if p.is_finished() {
            let _ = p.join();
        }
    }
    state_files::remove(run.running_marker)?;
    let exit_code = status.and_then(|s| s.code());
    Ok(StepOutcome {
        succeeded: exit_code == Some(0) && !timed_out,
        timed_out,
        exit_code,
        stderr_tail: tail_text(&tail),
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_script(dir: &Path, script: &str, timeout: Duration) -> StepOutcome {
        let path = dir.join("step.sh");
        std::fs::write(&path, script).expect("write");
        let marker = dir.join("running-step");
        let outcome = run_step(&StepRun {
            script: &path,
            name: "step.sh",
            bb_root: "/nonexistent-root",
            node_name: "n1",
            timeout,
            running_marker: &marker,
        })
        .expect("bash starts");
        assert!(!marker.exists(), "the marker is removed after the step");
        outcome
    }

    #[test]
    fn a_step_sees_its_root_and_node_and_reports_its_exit() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ok = run_script(
            dir.path(),
            "echo \"$BB_ROOT $BB_NODE_NAME\" >&2\n",
            Duration::from_secs(10),
        );
        assert!(ok.succeeded, "{ok:?}");
        assert_eq!(ok.stderr_tail, "/nonexistent-root n1\n");
        let failed = run_script(
            dir.path(),
            "echo broken >&2; exit 3\n",
            Duration::from_secs(10),
        );
        assert!(!failed.succeeded);
        assert_eq!(failed.exit_code, Some(3));
        assert_eq!(failed.describe(), "failed with exit code 3");
    }

    #[test]
    fn only_the_last_500_bytes_of_stderr_are_kept() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = run_script(
            dir.path(),
            "for i in $(seq 1 200); do echo \"line $i\" >&2; done; exit 1\n",
            Duration::from_secs(10),
        );
        assert!(out.stderr_tail.len() <= STDERR_TAIL_BYTES);
        assert!(
            out.stderr_tail.ends_with("line 200\n"),
            "{}",
            out.stderr_tail
        );
        let mut tail = Vec::new();
        keep_tail(&mut tail, "é".repeat(400).as_bytes());
        assert!(tail_text(&tail).chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_hanging_step_and_its_children_are_killed_at_the_limit() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let pid_file = dir.path().join("child.pid");
        let out = run_script(
            dir.path(),
            &format!("sleep 300 & echo $! > {}; wait\n", pid_file.display()),
            Duration::from_millis(500),
        );
        assert!(out.timed_out && !out.succeeded, "{out:?}");
        assert!(out.elapsed < Duration::from_secs(10), "{out:?}");
        let child: i32 = std::fs::read_to_string(&pid_file)
            .expect("the step wrote its child's pid")
            .trim()
            .parse()
            .expect("a pid");
        let alive = Path::new(&format!("/proc/{child}")).exists()
            && !std::fs::read_to_string(format!("/proc/{child}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "the step's child {child} was killed with it");
    }

    proptest::proptest! {
        /// Whatever chunks a step writes, the Event gets the end of its stderr: at most 500
        /// bytes, a suffix of what was written, and whole characters.
        #[test]
        fn the_tail_is_the_last_whole_characters_of_stderr(
            chunks in proptest::collection::vec("(?s).{0,200}", 0..12),
        ) {
            let mut tail = Vec::new();
            for chunk in &chunks {
                keep_tail(&mut tail, chunk.as_bytes());
            }
            let all: String = chunks.concat();
            let text = tail_text(&tail);
            proptest::prop_assert!(text.len() <= STDERR_TAIL_BYTES);
            proptest::prop_assert!(all.ends_with(&text));
            // Nothing more than a partial character is lost at the cut.
            let wanted = all.len().min(STDERR_TAIL_BYTES);
            proptest::prop_assert!(wanted - text.len() < 4, "{} of {}", text.len(), wanted);
        }
    }

    #[test]
    fn a_leftover_step_is_killed_and_its_marker_removed() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let marker = dir.path().join("running-step");
        assert_eq!(kill_leftover(&marker).expect("readable"), None);
        let mut orphan = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .expect("sleep starts");
        std::fs::write(&marker, orphan.id().to_string()).expect("write");
        let killed = kill_leftover(&marker).expect("readable");
        assert_eq!(killed, i32::try_from(orphan.id()).ok());
        let status = orphan.wait().expect("waitable");
        assert!(!status.success());
        assert!(!marker.exists());
    }
}
