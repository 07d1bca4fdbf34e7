//! The remote command that runs an uploaded script as root so that nothing of it outlives the
//! SSH session, and never beside another script holding the same lock.
//!
//! Three nested shells, each quoted into the one before:
//! 1. **The login shell** (POSIX `sh`, as the SSH user) keeps the channel's standard input on
//!    a descriptor of its own. With sudo and a password it reads the first line (the password)
//!    and hands it to `sudo -S` through a pipe that then ends, so a wrong password fails at once
//!    instead of sudo waiting for another attempt. It starts the root shell in the background
//!    and a *watcher* that reads the rest of the input: the client never sends more and never
//!    closes it while the script should run, so the watcher sees end-of-file only when the
//!    client gives up (it closes its input on timeout) or the connection is gone (sshd closes
//!    the pipe). The watcher then sends `SIGTERM` to the root shell — through `setsid kill`, as
//!    sudo relays signals from processes outside its own process group only. Afterwards the
//!    login shell removes the uploaded file and exits with the script's status.
//! 2. **The root shell** (`bash`) prints [`ROOT_MARKER`] (sudo let us in), starts the script
//!    under `setsid` — a new session, so a process group of its own whose id is known — and
//!    waits. On `SIGTERM`, `SIGHUP` or `SIGINT` it kills that whole group (`SIGTERM`, then
//!    `SIGKILL` after [`KILL_GRACE_TENTHS`] tenths of a second for what is left) and exits 143.
//! 3. **The script's session** optionally takes the lock (`flock` on a file, printing
//!    [`WAITING_MARKER`] when it has to wait and [`LOCKED_MARKER`] once it holds it), then runs
//!    the script with `bash`, its standard input empty and the lock descriptor closed, so
//!    that processes the script leaves behind do not hold the lock.
//!
//! A process the script starts in a session of its own (`setsid`, a systemd unit) is not
//! killed: that is how a bootstrap starts services on purpose.

/// Printed on stderr by the root shell before the script starts: sudo let us in.
pub(crate) const ROOT_MARKER: &str = "nodemgr-ssh: running as root";
/// Printed when the lock is held by another script and this one waits for it.
pub(crate) const WAITING_MARKER: &str = "nodemgr-ssh: waiting for the lock";
/// Printed once the lock is held, right before the script starts.
pub(crate) const LOCKED_MARKER: &str = "nodemgr-ssh: lock taken";
/// How long the root shell waits after `SIGTERM` before `SIGKILL`, in tenths of a second.
pub(crate) const KILL_GRACE_TENTHS: u32 = 50;

/// Single-quotes `text` for a POSIX shell.
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// How the login shell becomes root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elevation {
    /// The login is root already.
    Root,
    /// `sudo -S`: the first line of the channel's input is the password.
    SudoWithPassword,
    /// `sudo -n`: sudo must not ask.
    SudoWithoutPassword,
}

/// The script's session: lock (if any), then the script.
fn session_shell(path: &str, lock: Option<&str>) -> String {
    let run = format!("bash {} \"$@\"", quote(path));
    match lock {
        None => format!("exec {run}"),
        Some(lock) => {
            let dir = lock.rsplit_once('/').map_or("/", |(dir, _)| dir);
            let dir = if dir.is_empty() { "/" } else { dir };
            format!(
                "mkdir -p -- {dir} && exec 9>>{lock} || {{ echo {cannot} >&2; exit 125; }}\n\
                 if ! flock -n 9; then echo {waiting} >&2; flock 9 || exit 125; fi\n\
                 echo {locked} >&2\n\
                 {run} 9>&-",
                dir = quote(dir),
                lock = quote(lock),
                cannot = quote(&format!("nodemgr-ssh: cannot open the lock file {lock}")),
                waiting = quote(WAITING_MARKER),
                locked = quote(LOCKED_MARKER),
            )
        }
    }
}

/// The root shell: starts the script's session and kills its group when told to stop.
fn root_shell(path: &str, args: &[String], lock: Option<&str>) -> String {
    let args: Vec<String> = args.iter().map(|a| quote(a)).collect();
    format!(
        "pid=\n\
         stop() {{\n\
           trap '' TERM HUP INT\n\
           if [ -n \"$pid\" ]; then\n\
             kill -TERM -- \"-$pid\" 2>/dev/null\n\
             i=0\n\
             while kill -0 -- \"-$pid\" 2>/dev/null && [ \"$i\" -lt {grace} ]; do sleep 0.1; i=$((i+1)); done\n\
             kill -KILL -- \"-$pid\" 2>/dev/null\n\
           fi\n\
           exit 143\n\
         }}\n\
         trap stop TERM HUP INT\n\
         echo {marker} >&2\n\
         setsid bash -c {session} nodemgr-script {args} </dev/null &\n\
         pid=$!\n\
         wait \"$pid\"",
        grace = KILL_GRACE_TENTHS,
        marker = quote(ROOT_MARKER),
        session = quote(&session_shell(path, lock)),
        args = args.join(" "),
    )
}

/// The command for the SSH channel: runs the uploaded script at `path` with `args` as root,
/// under `lock`, and removes the file afterwards. See the module docs.
pub(crate) fn run_command(
    path: &str,
    args: &[String],
    lock: Option<&str>,
    elevation: Elevation,
) -> String {
    let root = quote(&root_shell(path, args, lock));
    let start = match elevation {
        Elevation::Root => format!("bash -c {root} nodemgr-root </dev/null &"),
        Elevation::SudoWithoutPassword => {
            format!("sudo -n -- bash -c {root} nodemgr-root </dev/null &")
        }
        Elevation::SudoWithPassword => format!(
            "IFS= read -r pw <&3\n\
             printf '%s\\n' \"$pw\" | sudo -S -p '' -- bash -c {root} nodemgr-root &"
        ),
    };
    format!(
        "exec 3<&0 </dev/null\n\
         {start}\n\
         pid=$!\n\
         pw=\n\
         (while IFS= read -r _; do :; done; setsid kill -TERM \"$pid\") <&3 >/dev/null 2>&1 &\n\
         watcher=$!\n\
         exec 3<&-\n\
         wait \"$pid\"; rc=$?\n\
         kill \"$watcher\" 2>/dev/null\n\
         rm -f {path}\n\
         exit \"$rc\"",
        path = quote(path),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    /// Runs `command` with `sh -c` locally (the root form, no sudo), its input held open as
    /// the SSH client holds it, and returns its output.
    fn sh(command: &str) -> std::process::Output {
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        let _input = child.stdin.take();
        child.wait_with_output().expect("sh ends")
    }

    #[test]
    fn the_command_passes_arguments_intact_and_removes_the_script() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "printf '[%s]' \"$@\"; exit 7\n").expect("script written");
        let args = vec!["it's one".to_owned(), "$HOME `x`".to_owned()];
        let lock = dir.path().join("sub/lock");
        let out = sh(&run_command(
            &script.to_string_lossy(),
            &args,
            Some(&lock.to_string_lossy()),
            Elevation::Root,
        ));
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "[it's one][$HOME `x`]"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(ROOT_MARKER), "{stderr}");
        assert!(stderr.contains(LOCKED_MARKER), "{stderr}");
        assert!(!script.exists(), "the uploaded script is removed");
        assert!(lock.exists(), "the lock file is created with its directory");
    }

    /// The kill switch without sshd: closing the command's input kills the script's whole
    /// process group, a child that ignores SIGTERM included, and nothing runs after the sleep.
    #[test]
    fn closing_the_input_kills_the_whole_group() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let script = dir.path().join("s.sh");
        let after = dir.path().join("after");
        let marker = format!("nodemgr-wrapper-test-{}", std::process::id());
        std::fs::write(
            &script,
            format!(
                "(trap '' TERM; exec -a {marker}-stubborn sleep 30) &\n\
                 exec -a {marker}-sleep sleep 30\ntouch {}\n",
                quote(&after.to_string_lossy())
            ),
        )
        .expect("script written");
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(run_command(
                &script.to_string_lossy(),
                &[],
                None,
                Elevation::Root,
            ))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh runs");
        let running = |pattern: &str| {
            std::process::Command::new("pgrep")
                .args(["-f", pattern])
                .stdout(std::process::Stdio::null())
                .status()
                .expect("pgrep runs")
                .success()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !(running(&format!("{marker}-sleep")) && running(&format!("{marker}-stubborn"))) {
            assert!(
                std::time::Instant::now() < deadline,
                "the script never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        drop(child.stdin.take());
        let status = child.wait().expect("sh ends");
        assert_eq!(status.code(), Some(143), "killed, not finished");
        assert!(!running(&marker), "a process of the script survived");
        assert!(!after.exists());
    }
}
