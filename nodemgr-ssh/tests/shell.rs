//! The SSH remote shell against a real OpenSSH server on loopback (`testing::Sshd`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use nodemgr_core::ports::{Cause, RemoteScript, RemoteShell, RemoteShellError, Sensitive};
use nodemgr_ssh::SshShell;
use nodemgr_ssh::testing::{KeyKind, Sshd};

fn script(body: &str, args: &[&str]) -> RemoteScript {
    RemoteScript {
        name: "test".into(),
        body: body.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        timeout: Duration::from_secs(60),
        lock: None,
    }
}

#[tokio::test]
async fn runs_a_script_as_root_through_sudo_and_pins_the_host_key() {
    let sshd = Sshd::start().unwrap();
    let out = tempfile::tempdir().unwrap();
    let marker = out.path().join("ran");
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let run = SshShell::new()
        .run_script(
            &target,
            &script(
                "set -e\necho \"uid=$(id -u)\"\necho \"arg=$1\"\necho to-stderr >&2\ntouch \"$2\"\n",
                &["it's one arg", marker.to_str().unwrap()],
            ),
        )
        .await
        .unwrap();
    assert_eq!(run.exit_status, 0);
    assert!(run.tail.contains("uid=0"), "{}", run.tail);
    assert!(run.tail.contains("arg=it's one arg"), "{}", run.tail);
    assert!(run.tail.contains("to-stderr"), "{}", run.tail);
    assert!(
        !run.tail.contains("nodemgr-ssh"),
        "marker leaked: {}",
        run.tail
    );
    assert!(marker.exists());
    assert_eq!(run.host_key, sshd.host_key_fingerprint().unwrap());

    // Pinned, the same server is accepted.
    let mut pinned = target.clone();
    pinned.host_key = Some(run.host_key.clone());
    let again = SshShell::new()
        .run_script(&pinned, &script("echo again", &[]))
        .await
        .unwrap();
    assert_eq!(again.tail, "again");
}

#[tokio::test]
async fn rsa_keys_log_in_too() {
    let sshd = Sshd::start().unwrap();
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.private_key = Sensitive::new(sshd.private_key(KeyKind::Rsa).unwrap());
    let run = SshShell::new()
        .run_script(&target, &script("id -u", &[]))
        .await
        .unwrap();
    assert_eq!(run.tail, "0");
}

#[tokio::test]
async fn a_changed_host_key_is_refused_before_anything_runs() {
    let mut sshd = Sshd::start().unwrap();
    let out = tempfile::tempdir().unwrap();
    let marker = out.path().join("ran");
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.host_key = Some(sshd.host_key_fingerprint().unwrap());
    let old = target.host_key.clone().unwrap();
    sshd.replace_host_key().unwrap();
    let error = SshShell::new()
        .run_script(
            &target,
            &script("touch \"$1\"", &[marker.to_str().unwrap()]),
        )
        .await
        .unwrap_err();
    match &error {
        RemoteShellError::HostKeyMismatch {
            pinned, presented, ..
        } => {
            assert_eq!(pinned, &old);
            assert_eq!(presented, &sshd.host_key_fingerprint().unwrap());
        }
        other => panic!("expected a host key mismatch, got {other:?}"),
    }
    assert!(error.to_string().contains("host key changed"), "{error}");
    assert!(!marker.exists(), "the script ran despite the changed key");
}

#[tokio::test]
async fn a_key_the_server_does_not_know_fails_authentication() {
    let sshd = Sshd::start().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let stranger = keys.path().join("stranger");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-N", "", "-t", "ed25519", "-f"])
        .arg(&stranger)
        .status()
        .unwrap();
    assert!(status.success());
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.private_key = Sensitive::new(std::fs::read_to_string(&stranger).unwrap());
    let error = SshShell::new()
        .run_script(&target, &script("true", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RemoteShellError::AuthFailed { .. }),
        "{error:?}"
    );
    assert!(!error.script_may_have_run());
}

#[tokio::test]
async fn a_key_that_is_not_a_key_is_a_clear_error() {
    let sshd = Sshd::start().unwrap();
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.private_key = Sensitive::new("-----BEGIN NONSENSE-----\nxx\n-----END NONSENSE-----\n");
    let error = SshShell::new()
        .run_script(&target, &script("true", &[]))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("cannot read the private key"),
        "{error}"
    );
    // The key parser's error is the source, not only pasted into the message.
    let parser = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<Cause>());
    assert!(
        parser.is_some_and(|c| c.get().downcast_ref::<russh::keys::Error>().is_some()),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_failing_script_reports_its_status_and_output_tail() {
    let sshd = Sshd::start().unwrap();
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let error = SshShell::new()
        .run_script(
            &target,
            &script(
                "for i in $(seq 1 2000); do echo \"line $i\"; done\nexit 3",
                &[],
            ),
        )
        .await
        .unwrap_err();
    match error {
        RemoteShellError::CommandFailed {
            exit_status,
            tail,
            host_key,
            ..
        } => {
            assert_eq!(exit_status, 3);
            assert!(tail.ends_with("line 2000"), "{tail}");
            assert!(tail.len() <= 4096);
            assert!(host_key.starts_with("SHA256:"));
        }
        other => panic!("expected CommandFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_wrong_sudo_password_is_a_sudo_error_that_does_not_show_the_password() {
    let sshd = Sshd::start().unwrap();
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.sudo_password = Some(Sensitive::new("definitely-wrong-pw"));
    let error = SshShell::new()
        .run_script(&target, &script("true", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RemoteShellError::SudoFailed { .. }),
        "{error:?}"
    );
    assert!(!error.to_string().contains("definitely-wrong-pw"));
    assert!(!format!("{target:?}").contains("definitely-wrong-pw"));
    assert!(!sshd.log().contains("definitely-wrong-pw"));
}

#[tokio::test]
async fn nothing_listening_is_refused() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sshd = Sshd::start().unwrap();
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.port = port;
    let error = SshShell::new()
        .run_script(&target, &script("true", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RemoteShellError::Refused { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_host_that_never_answers_times_out() {
    // Accepts TCP connections and never says a word: the SSH handshake cannot finish.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let sshd = Sshd::start().unwrap();
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.port = silent.local_addr().unwrap().port();
    target.connect_timeout = Duration::from_millis(500);
    let started = std::time::Instant::now();
    let error = SshShell::new()
        .run_script(&target, &script("true", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RemoteShellError::Timeout {
                stage: "connect",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(silent);
}

#[tokio::test]
async fn a_script_that_runs_too_long_times_out() {
    let sshd = Sshd::start().unwrap();
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let mut long = script("echo started; sleep 30", &[]);
    long.timeout = Duration::from_millis(1500);
    let error = SshShell::new()
        .run_script(&target, &long)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RemoteShellError::Timeout {
                stage: "script",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.script_may_have_run());
}

/// Whether a process whose command line contains `pattern` runs on this machine.
fn running(pattern: &str) -> bool {
    std::process::Command::new("pgrep")
        .args(["-f", pattern])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A marker unique to one test of one process, for `pgrep -f`.
fn marker(test: &str) -> String {
    format!("nodemgr-ssh-test-{test}-{}", std::process::id())
}

/// A script that records it started, runs a sleep named `marker` (and a child that ignores
/// SIGTERM) for `seconds`, then writes the file `after`.
fn sleeper(
    marker: &str,
    started: &std::path::Path,
    after: &std::path::Path,
    seconds: u32,
) -> String {
    format!(
        "(trap '' TERM; exec -a {marker}-stubborn sleep {seconds}) &\n\
         touch '{}'\n\
         (exec -a {marker} sleep {seconds})\n\
         touch '{}'\n",
        started.display(),
        after.display()
    )
}

async fn gone_within(pattern: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while running(pattern) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a process matching {pattern} still runs {} s later",
            within.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_script_that_times_out_leaves_no_process_behind_and_names_the_host_key() {
    let sshd = Sshd::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (started, after) = (dir.path().join("started"), dir.path().join("after"));
    let marker = marker("timeout");
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let mut long = script(&sleeper(&marker, &started, &after, 6), &[]);
    long.timeout = Duration::from_secs(2);
    let error = SshShell::new()
        .run_script(&target, &long)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            RemoteShellError::Timeout {
                stage: "script",
                host_key: Some(key),
                ..
            } if *key == sshd.host_key_fingerprint().unwrap()
        ),
        "{error:?}"
    );
    assert!(started.exists(), "the script started before its timeout");
    // The run returns once the remote side reported the group killed.
    assert!(!running(&marker), "the script's process group survived");
    // And nothing of it goes on: the file it writes after its sleep never appears.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!after.exists(), "the script went on after its timeout");
}

#[tokio::test]
async fn a_dropped_connection_kills_the_script() {
    let sshd = Sshd::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (started, after) = (dir.path().join("started"), dir.path().join("after"));
    let marker = marker("dropped");
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let body = sleeper(&marker, &started, &after, 8);
    let run = tokio::spawn(async move {
        SshShell::new()
            .run_script(&target, &script(&body, &[]))
            .await
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !(started.exists() && running(&marker)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the script never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The caller gives up (a controller aborting the operation): the connection drops.
    run.abort();
    // SIGTERM at once, SIGKILL 5 s later for the child that ignores SIGTERM.
    gone_within(&marker, Duration::from_secs(8)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !after.exists(),
        "the script went on after the connection dropped"
    );
}

#[tokio::test]
async fn two_scripts_with_one_lock_never_run_at_once() {
    let sshd = Sshd::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let lock = dir.path().join("locks/host.lock");
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let body = format!(
        "echo \"start $1\" >>'{log}'\nsleep 1.5\necho \"end $1\" >>'{log}'\n",
        log = log.display()
    );
    let runs = ["a", "b"].map(|name| {
        let mut s = script(&body, &[name]);
        s.lock = Some(lock.to_string_lossy().into_owned());
        let target = target.clone();
        tokio::spawn(async move { SshShell::new().run_script(&target, &s).await })
    });
    for run in runs {
        run.await.unwrap().unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("start")
            && lines[1] == lines[0].replace("start", "end")
            && lines[2].starts_with("start")
            && lines[3] == lines[2].replace("start", "end"),
        "the two scripts overlapped:\n{text}"
    );
}

#[tokio::test]
async fn a_script_waiting_for_the_lock_past_its_timeout_is_busy_and_never_runs() {
    let sshd = Sshd::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("host.lock").to_string_lossy().into_owned();
    let (started, after) = (dir.path().join("started"), dir.path().join("after"));
    let second = dir.path().join("second-ran");
    let marker = marker("busy");
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    let mut first = script(&sleeper(&marker, &started, &after, 4), &[]);
    first.lock = Some(lock.clone());
    let holder = {
        let target = target.clone();
        tokio::spawn(async move { SshShell::new().run_script(&target, &first).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first script never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut waiting = script(&format!("touch '{}'", second.display()), &[]);
    waiting.lock = Some(lock.clone());
    waiting.timeout = Duration::from_secs(1);
    let error = SshShell::new()
        .run_script(&target, &waiting)
        .await
        .unwrap_err();
    match &error {
        RemoteShellError::Busy {
            lock: held,
            host_key,
            ..
        } => {
            assert_eq!(held, &lock);
            assert_eq!(host_key, &sshd.host_key_fingerprint().unwrap());
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        error.to_string().contains("another nodemgr script holds"),
        "{error}"
    );
    assert!(!error.script_may_have_run());
    holder.await.unwrap().unwrap();
    assert!(after.exists(), "the holder ran to its end");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.exists(), "the refused script ran later anyway");
}

#[tokio::test]
async fn a_sudo_refusal_names_the_host_key_to_pin() {
    let sshd = Sshd::start().unwrap();
    let mut target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    target.sudo_password = Some(Sensitive::new("wrong-again"));
    let seen = std::sync::Mutex::new(Vec::new());
    let error = SshShell::new()
        .run_script_noting_host_key(&target, &script("true", &[]), &|key| {
            seen.lock().unwrap().push(key);
        })
        .await
        .unwrap_err();
    let fingerprint = sshd.host_key_fingerprint().unwrap();
    assert!(
        matches!(&error, RemoteShellError::SudoFailed { host_key, .. } if *host_key == fingerprint),
        "{error:?}"
    );
    assert_eq!(error.host_key(), Some(fingerprint.as_str()));
    assert_eq!(
        *seen.lock().unwrap(),
        vec![fingerprint],
        "reported once, at the handshake"
    );
}

#[tokio::test]
async fn megabytes_of_output_keep_only_the_tail() {
    let sshd = Sshd::start().unwrap();
    let target = sshd.target(Ipv4Addr::LOCALHOST).unwrap();
    // 20 MB of short lines, a 5 MB line without a newline, then a last line.
    let run = SshShell::new()
        .run_script(
            &target,
            &script(
                "yes 'some output line' | head -c 20000000\nhead -c 5000000 /dev/zero | tr '\\0' x\necho\necho the-end",
                &[],
            ),
        )
        .await
        .unwrap();
    assert!(run.tail.len() <= 4096, "{}", run.tail.len());
    assert!(
        run.tail.ends_with("the-end"),
        "{}",
        &run.tail[run.tail.len().saturating_sub(100)..]
    );
}
