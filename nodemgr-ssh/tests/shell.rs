//! The SSH remote shell against a real OpenSSH server on loopback (`testing::Sshd`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use nodemgr_core::ports::{RemoteScript, RemoteShell, RemoteShellError, Sensitive};
use nodemgr_ssh::SshShell;
use nodemgr_ssh::testing::{KeyKind, Sshd};

fn script(body: &str, args: &[&str]) -> RemoteScript {
    RemoteScript {
        name: "test".into(),
        body: body.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        timeout: Duration::from_secs(60),
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
