//! The remote shell port: run a script as root on a static machine over SSH and say how it
//! ended. `nodemgr-ssh` implements it over russh; the static node executor runs the bootstrap
//! and cleanup scripts of [`crate::bashible`] through it and turns its errors into the
//! [`crate::static_nodes::Cause`] of an instance's condition.
//!
//! # Contract
//! - [`RemoteShell::run_script`] connects (bounded by [`SshTarget::connect_timeout`]),
//!   checks the host key against [`SshTarget::host_key`] (pinned: a different key is refused
//!   before authenticating; `None`: trust on first use, the key seen is returned to be pinned),
//!   authenticates with the private key, uploads the script, runs it as root (through
//!   `sudo -S` with the password written to its standard input when the user is not root) and
//!   waits at most [`RemoteScript::timeout`] for it to end.
//! - The script runs in a process group of its own that dies with the run: when the timeout
//!   passes or the connection drops (the caller gave up, crashed or lost the network), every
//!   process of that group is killed, so nothing of a run outlives it on the machine.
//! - Scripts naming the same [`RemoteScript::lock`] never run at once on one machine: a second
//!   one waits for the first to end, within its own timeout, and gives up with
//!   [`RemoteShellError::Busy`].
//! - Every error raised after the SSH handshake names the host key the server presented
//!   ([`RemoteShellError::host_key`]), and [`RemoteShell::run_script_noting_host_key`] reports
//!   it as soon as the handshake succeeds: the caller pins it whatever happens next (secrets
//!   such as the sudo password may already have been sent to that server).
//! - The output is streamed line by line to the logs and only its tail is kept in memory.
//! - A script that ran and exited non-zero is [`RemoteShellError::CommandFailed`]; every other
//!   error means the script did not run to its end (or did not start).
//! - The sudo password and the private key never appear in a command line, an error, a log
//!   line or a `Debug` output ([`Sensitive`]).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::Cause;
use crate::model::SshCredentials;
use crate::validate::syntax::decode_base64;

/// A secret string whose `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Sensitive(String);

impl Sensitive {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where and as whom to run: an instance's address and its SSHCredentials, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// Host (IP address or name).
    pub host: String,
    /// TCP port (SSHCredentials `sshPort`, default 22).
    pub port: u16,
    /// Login user.
    pub user: String,
    /// The private key in OpenSSH or PEM form (ed25519 or RSA).
    pub private_key: Sensitive,
    /// The sudo password, when the user is not root and sudo asks for one.
    pub sudo_password: Option<Sensitive>,
    /// The pinned host key fingerprint (`SHA256:…`), or `None` to trust the first key seen.
    pub host_key: Option<String>,
    /// Longest wait for TCP, the SSH handshake and authentication together.
    pub connect_timeout: Duration,
}

/// Why SSHCredentials cannot be turned into an [`SshTarget`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SSHCredentials {credentials}: {field}: {message}")]
pub struct CredentialsError {
    /// The SSHCredentials' name.
    pub credentials: String,
    /// The field at fault (`spec.privateSSHKey`).
    pub field: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// Default connect timeout of [`SshTarget::from_credentials`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl SshTarget {
    /// The target for `address` logging in with `credentials` (the key and the encoded sudo
    /// password decoded from base64), pinned to `host_key` if known.
    ///
    /// # Errors
    /// A [`CredentialsError`] naming the field when the user or key is missing or a value does
    /// not decode.
    pub fn from_credentials(
        address: &str,
        credentials: &SshCredentials,
        host_key: Option<String>,
    ) -> Result<Self, CredentialsError> {
        let name = credentials.metadata.name.clone().unwrap_or_default();
        let error = |field: &'static str, message: String| CredentialsError {
            credentials: name.clone(),
            field,
            message,
        };
        let spec = &credentials.spec;
        let user = spec
            .user
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| error("spec.user", "required: the user to log in as".into()))?;
        let key = spec
            .private_ssh_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                error(
                    "spec.privateSSHKey",
                    "required for nodemgr to log in: the private key file encoded in base64".into(),
                )
            })?;
        let key = decode_base64(key)
            .map_err(|m| error("spec.privateSSHKey", format!("{m}; it holds base64")))?;
        let key = String::from_utf8(key).map_err(|_| {
            error(
                "spec.privateSSHKey",
                "decodes to bytes that are not a text key file".into(),
            )
        })?;
        let sudo_password = match (
            spec.sudo_password_encoded
                .as_deref()
                .filter(|p| !p.is_empty()),
            spec.sudo_password.as_deref().filter(|p| !p.is_empty()),
        ) {
            (Some(encoded), _) => {
                let bytes = decode_base64(encoded).map_err(|m| {
                    error("spec.sudoPasswordEncoded", format!("{m}; it holds base64"))
                })?;
                Some(String::from_utf8(bytes).map_err(|_| {
                    error(
                        "spec.sudoPasswordEncoded",
                        "decodes to bytes that are not text".into(),
                    )
                })?)
            }
            (None, Some(clear)) => Some(clear.to_owned()),
            (None, None) => None,
        };
        let port = match spec.ssh_port {
            None => 22,
            Some(p) => u16::try_from(p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| error("spec.sshPort", format!("{p} is not a port (1..65535)")))?,
        };
        Ok(Self {
            host: address.to_owned(),
            port,
            user,
            private_key: Sensitive::new(key),
            sudo_password: sudo_password.map(Sensitive::new),
            host_key,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        })
    }

    /// `user@host:port`, for messages.
    pub fn display(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }
}

/// A script to run as root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteScript {
    /// A short name for logs (`bootstrap worker`).
    pub name: String,
    /// The script, run by `bash`.
    pub body: String,
    /// Arguments passed to the script.
    pub args: Vec<String>,
    /// Longest wait for the script to end once started (waiting for [`RemoteScript::lock`]
    /// included).
    pub timeout: Duration,
    /// An absolute path on the machine locked (`flock`) while the script runs: another script
    /// naming the same file waits until this one ended. `None`: no lock.
    pub lock: Option<String>,
}

/// How a script that ran to its end ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptRun {
    /// The host key fingerprint the server presented (to pin on first contact).
    pub host_key: String,
    /// The script's exit status (0: success).
    pub exit_status: u32,
    /// The last lines of its output (stdout and stderr interleaved), at most [`TAIL_BYTES`].
    pub tail: String,
}

/// How much output [`ScriptRun::tail`] keeps.
pub const TAIL_BYTES: usize = 4096;

/// What went wrong running a script.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteShellError {
    /// No route or no answer at the network level.
    #[error("{target} is unreachable: {message}; check the instance's address and the network")]
    Unreachable {
        /// `user@host:port`.
        target: String,
        /// The OS error.
        message: String,
        /// The OS error itself, when the adapter kept it.
        #[source]
        source: Option<Cause>,
    },
    /// Nothing listens on the port.
    #[error("{target} refused the connection; check that sshd runs and SSHCredentials sshPort")]
    Refused {
        /// `user@host:port`.
        target: String,
    },
    /// The server did not accept the key.
    #[error(
        "{target}: authentication failed with the key of the SSHCredentials; add its public \
         key to the user's authorized_keys or fix the SSHCredentials"
    )]
    AuthFailed {
        /// `user@host:port`.
        target: String,
        /// The host key seen (the handshake succeeded).
        host_key: String,
    },
    /// The server presented a different host key than the one pinned.
    #[error(
        "{target}: host key changed: pinned {pinned}, presented {presented}; if the machine \
         was reinstalled on purpose remove the pin from the StaticInstance, otherwise \
         someone may be intercepting the connection"
    )]
    HostKeyMismatch {
        /// `user@host:port`.
        target: String,
        /// The pinned fingerprint.
        pinned: String,
        /// The fingerprint presented.
        presented: String,
    },
    /// Connecting or the script took longer than allowed.
    #[error("{target}: {stage} timed out after {} s", after.as_secs_f64())]
    Timeout {
        /// `user@host:port`.
        target: String,
        /// `connect` or `script`.
        stage: &'static str,
        /// The limit.
        after: Duration,
        /// The host key seen, when the handshake succeeded before the time ran out.
        host_key: Option<String>,
    },
    /// sudo refused the password or the user may not use it.
    #[error(
        "{target}: sudo refused: {message}; fix the SSHCredentials sudo password or the sudoers rules"
    )]
    SudoFailed {
        /// `user@host:port`.
        target: String,
        /// sudo's message.
        message: String,
        /// The host key seen (the handshake succeeded).
        host_key: String,
    },
    /// Another script held [`RemoteScript::lock`] on the machine for the whole timeout; this
    /// one never started.
    #[error(
        "{target}: another nodemgr script holds {lock} on the machine; waited {} s for it to \
         end. It is retried later; if it persists look for a stuck bootstrap or cleanup there",
        waited.as_secs_f64()
    )]
    Busy {
        /// `user@host:port`.
        target: String,
        /// The lock file.
        lock: String,
        /// How long this run waited.
        waited: Duration,
        /// The host key seen (the handshake succeeded).
        host_key: String,
    },
    /// The script ran and exited non-zero.
    #[error("{target}: script exited with status {exit_status}; last output:\n{tail}")]
    CommandFailed {
        /// `user@host:port`.
        target: String,
        /// Its exit status.
        exit_status: u32,
        /// The end of its output.
        tail: String,
        /// The host key seen (the connection itself was fine).
        host_key: String,
    },
    /// The key cannot be read, or the SSH protocol failed otherwise.
    #[error("{target}: {message}")]
    Other {
        /// `user@host:port`.
        target: String,
        /// What happened.
        message: String,
        /// The host key seen, when the handshake succeeded.
        host_key: Option<String>,
        /// The adapter's error (the SSH library's, the key parser's), when there is one.
        #[source]
        source: Option<Cause>,
    },
}

impl RemoteShellError {
    /// The host key the server presented when the SSH handshake succeeded before the error (a
    /// key to pin on first contact); `None` when the handshake did not succeed (or presented a
    /// key that does not match the pin).
    pub fn host_key(&self) -> Option<&str> {
        match self {
            Self::AuthFailed { host_key, .. }
            | Self::SudoFailed { host_key, .. }
            | Self::Busy { host_key, .. }
            | Self::CommandFailed { host_key, .. } => Some(host_key),
            Self::Timeout { host_key, .. } | Self::Other { host_key, .. } => host_key.as_deref(),
            Self::Unreachable { .. } | Self::Refused { .. } | Self::HostKeyMismatch { .. } => None,
        }
    }

    /// Whether the machine may have been changed by the script (it started): only then is a
    /// cleanup needed after a failed bootstrap.
    pub fn script_may_have_run(&self) -> bool {
        matches!(
            self,
            Self::CommandFailed { .. }
                | Self::Timeout {
                    stage: "script",
                    ..
                }
                | Self::Other { .. }
        )
    }
}

/// Runs scripts as root on remote machines.
#[async_trait]
pub trait RemoteShell: Send + Sync {
    /// Runs `script` on `target` as root and returns how it ended (see the module contract).
    ///
    /// # Errors
    /// [`RemoteShellError`]; `CommandFailed` when it ran and exited non-zero.
    async fn run_script(
        &self,
        target: &SshTarget,
        script: &RemoteScript,
    ) -> Result<ScriptRun, RemoteShellError>;

    /// [`RemoteShell::run_script`], calling `host_key_seen` with the server's host key
    /// fingerprint as soon as the SSH handshake succeeded, before anything is sent — so that a
    /// caller that stops waiting (and drops the run) still learns the key to pin.
    ///
    /// The default reports the key from the run's result instead (for implementations without
    /// a handshake of their own, such as in-memory fakes).
    ///
    /// # Errors
    /// As [`RemoteShell::run_script`].
    async fn run_script_noting_host_key(
        &self,
        target: &SshTarget,
        script: &RemoteScript,
        host_key_seen: &(dyn Fn(String) + Send + Sync),
    ) -> Result<ScriptRun, RemoteShellError> {
        let result = self.run_script(target, script).await;
        let key = match &result {
            Ok(run) => Some(run.host_key.clone()),
            Err(error) => error.host_key().map(str::to_owned),
        };
        if let Some(key) = key {
            host_key_seen(key);
        }
        result
    }
}

/// Keeps the last [`TAIL_BYTES`] of a stream of output, cut at a line start when it can.
#[derive(Debug, Clone, Default)]
pub struct OutputTail {
    buffer: Vec<u8>,
}

impl OutputTail {
    /// An empty tail.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends output.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() > 2 * TAIL_BYTES {
            let cut = self.buffer.len() - TAIL_BYTES;
            self.buffer.drain(..cut);
        }
    }

    /// The last [`TAIL_BYTES`] (or fewer) as text, starting after a newline when one is there.
    pub fn text(&self) -> String {
        let start = self.buffer.len().saturating_sub(TAIL_BYTES);
        let mut slice = &self.buffer[start..];
        if start > 0
            && let Some(newline) = slice.iter().position(|b| *b == b'\n')
        {
            slice = &slice[newline + 1..];
        }
        String::from_utf8_lossy(slice).trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ObjectMeta, SshCredentialsSpec};

    fn credentials(spec: SshCredentialsSpec) -> SshCredentials {
        SshCredentials {
            api_version: String::new(),
            kind: String::new(),
            metadata: ObjectMeta {
                name: Some("creds".into()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }

    #[test]
    fn credentials_decode_and_keep_secrets_out_of_debug() {
        // base64 of "-----BEGIN KEY-----" and of "s3cret"
        let c = credentials(SshCredentialsSpec {
            user: Some("ubuntu".into()),
            private_ssh_key: Some("LS0tLS1CRUdJTiBLRVktLS0tLQ==".into()),
            ssh_port: Some(2222),
            sudo_password_encoded: Some("czNjcmV0".into()),
            ..SshCredentialsSpec::default()
        });
        let t = SshTarget::from_credentials("10.0.0.5", &c, None).unwrap();
        assert_eq!(t.port, 2222);
        assert_eq!(t.private_key.expose(), "-----BEGIN KEY-----");
        assert_eq!(t.sudo_password.as_ref().unwrap().expose(), "s3cret");
        let debug = format!("{t:?}");
        assert!(
            !debug.contains("s3cret") && !debug.contains("BEGIN"),
            "{debug}"
        );
        assert_eq!(t.display(), "ubuntu@10.0.0.5:2222");
    }

    #[test]
    fn bad_credentials_name_the_field() {
        let c = credentials(SshCredentialsSpec {
            user: Some("ubuntu".into()),
            private_ssh_key: Some("not base64!".into()),
            ..SshCredentialsSpec::default()
        });
        let e = SshTarget::from_credentials("10.0.0.5", &c, None).unwrap_err();
        assert_eq!(e.field, "spec.privateSSHKey");
        assert!(
            e.to_string()
                .starts_with("SSHCredentials creds: spec.privateSSHKey")
        );
        let c = credentials(SshCredentialsSpec {
            user: Some("ubuntu".into()),
            private_ssh_key: Some("LS0tLS1CRUdJTiBLRVktLS0tLQ==".into()),
            ssh_port: Some(70000),
            ..SshCredentialsSpec::default()
        });
        let e = SshTarget::from_credentials("10.0.0.5", &c, None).unwrap_err();
        assert_eq!(e.field, "spec.sshPort");
        let c = credentials(SshCredentialsSpec::default());
        assert_eq!(
            SshTarget::from_credentials("h", &c, None)
                .unwrap_err()
                .field,
            "spec.user"
        );
    }

    #[test]
    fn tail_keeps_the_end_from_a_line_start() {
        let mut tail = OutputTail::new();
        for i in 0..2000 {
            tail.push(format!("line {i}\n").as_bytes());
        }
        let text = tail.text();
        assert!(text.len() <= TAIL_BYTES);
        assert!(text.ends_with("line 1999"));
        assert!(text.starts_with("line "), "{}", &text[..20]);
        let mut short = OutputTail::new();
        short.push(b"ok\n");
        assert_eq!(short.text(), "ok");
    }

    #[test]
    fn only_a_started_script_may_have_changed_the_machine() {
        let target = "u@h:22".to_owned();
        assert!(
            !RemoteShellError::AuthFailed {
                target: target.clone(),
                host_key: "SHA256:k".into(),
            }
            .script_may_have_run()
        );
        assert!(
            !RemoteShellError::Timeout {
                target: target.clone(),
                stage: "connect",
                after: Duration::from_secs(1),
                host_key: None,
            }
            .script_may_have_run()
        );
        assert!(
            RemoteShellError::Timeout {
                target: target.clone(),
                stage: "script",
                after: Duration::from_secs(1),
                host_key: Some("SHA256:k".into()),
            }
            .script_may_have_run()
        );
        assert!(
            !RemoteShellError::Busy {
                target,
                lock: "/var/lock/x".into(),
                waited: Duration::from_secs(1),
                host_key: "SHA256:k".into(),
            }
            .script_may_have_run()
        );
    }

    /// A shell without a handshake of its own: fails sudo on a key it names.
    struct RefusingSudo;

    #[async_trait]
    impl RemoteShell for RefusingSudo {
        async fn run_script(
            &self,
            target: &SshTarget,
            _script: &RemoteScript,
        ) -> Result<ScriptRun, RemoteShellError> {
            Err(RemoteShellError::SudoFailed {
                target: target.display(),
                message: "no".into(),
                host_key: "SHA256:seen".into(),
            })
        }
    }

    #[test]
    fn the_default_reports_the_host_key_of_a_failed_run() {
        let target = SshTarget {
            host: "h".into(),
            port: 22,
            user: "u".into(),
            private_key: Sensitive::new("k"),
            sudo_password: None,
            host_key: None,
            connect_timeout: Duration::from_secs(1),
        };
        let script = RemoteScript {
            name: "s".into(),
            body: "true".into(),
            args: Vec::new(),
            timeout: Duration::from_secs(1),
            lock: None,
        };
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |key: String| seen.lock().unwrap().push(key);
        let mut run = RefusingSudo.run_script_noting_host_key(&target, &script, &report);
        // The fake never waits: one poll finishes it.
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let polled = run.as_mut().poll(&mut context);
        assert!(matches!(polled, std::task::Poll::Ready(Err(_))));
        drop(run);
        assert_eq!(*seen.lock().unwrap(), vec!["SHA256:seen".to_owned()]);
    }

    #[test]
    fn errors_after_the_handshake_name_the_host_key() {
        let target = || "u@h:22".to_owned();
        let key = || "SHA256:k".to_owned();
        let after_handshake = [
            RemoteShellError::AuthFailed {
                target: target(),
                host_key: key(),
            },
            RemoteShellError::SudoFailed {
                target: target(),
                message: String::new(),
                host_key: key(),
            },
            RemoteShellError::CommandFailed {
                target: target(),
                exit_status: 1,
                tail: String::new(),
                host_key: key(),
            },
            RemoteShellError::Timeout {
                target: target(),
                stage: "script",
                after: Duration::from_secs(1),
                host_key: Some(key()),
            },
            RemoteShellError::Busy {
                target: target(),
                lock: "/l".into(),
                waited: Duration::from_secs(1),
                host_key: key(),
            },
        ];
        for error in after_handshake {
            assert_eq!(error.host_key(), Some("SHA256:k"), "{error:?}");
        }
        let mismatch = RemoteShellError::HostKeyMismatch {
            target: target(),
            pinned: "a".into(),
            presented: "b".into(),
        };
        assert_eq!(mismatch.host_key(), None, "a refused key is never pinned");
    }
}
