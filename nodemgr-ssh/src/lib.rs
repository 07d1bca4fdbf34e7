//! nodemgr's remote shell over SSH: [`SshShell`] implements the core's
//! [`RemoteShell`] port on russh, to run the bootstrap and
//! cleanup scripts of static nodes as root.
//!
//! # What one run does
//! 1. TCP connect, SSH handshake and public key authentication, all within
//!    [`SshTarget::connect_timeout`]. The server's host key is checked before authenticating:
//!    against the pinned fingerprint when there is one (a different key ends the connection
//!    with [`RemoteShellError::HostKeyMismatch`]), otherwise it is accepted, reported at once to
//!    [`RemoteShell::run_script_noting_host_key`]'s callback and named by the run's result or
//!    error for the caller to pin (trust on first use).
//! 2. The script is uploaded over a first channel into a private temporary file
//!    (`mktemp`, mode 0600) — never through the command line.
//! 3. A second channel runs it as root (directly for `root`, otherwise through
//!    `sudo -S -p ''` with the password written to sudo's standard input, or `sudo -n`
//!    without a password) in a process group of its own, under the script's lock, as
//!    `wrapper` describes. A marker printed by the root shell tells a sudo refusal
//!    ([`RemoteShellError::SudoFailed`]) from a script failure
//!    ([`RemoteShellError::CommandFailed`]). The file is removed afterwards.
//! 4. Output is streamed to `tracing` line by line (target `nodemgr_ssh::script`, level
//!    info; a line longer than [`output::MAX_LINE_BYTES`] in pieces) and only its tail kept:
//!    memory per run stays under 32 KiB whatever the script prints.
//! 5. The run ends with the script's exit status, or after [`RemoteScript::timeout`] (counted
//!    from the end of authentication): the client then closes the channel's input, which
//!    makes the remote side kill the script's process group, waits up to [`KILL_WAIT`] for it
//!    to be gone and returns [`RemoteShellError::Timeout`] — or [`RemoteShellError::Busy`]
//!    when the whole time went into waiting for the lock. A connection that drops (the caller
//!    dropped the run, the network failed) kills the group the same way.
//!
//! Fingerprints are OpenSSH's `SHA256:<base64>` form, as `ssh-keygen -lf` prints them.

pub mod output;
#[cfg(feature = "testing")]
pub mod testing;
mod wrapper;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nodemgr_core::ports::remote_shell::OutputTail;
use nodemgr_core::ports::{
    Cause, RemoteScript, RemoteShell, RemoteShellError, ScriptRun, SshTarget,
};
use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, Disconnect};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use output::Lines;
use wrapper::{Elevation, LOCKED_MARKER, ROOT_MARKER, WAITING_MARKER};

/// After a timeout, how long the client waits for the remote side to report the script's
/// process group killed before it drops the connection (which kills it too).
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// The most standard output kept from the upload channel (it prints a file name).
const UPLOAD_OUTPUT_BYTES: usize = 4096;

/// The SSH remote shell. Cheap to clone; one value serves any number of concurrent runs.
#[derive(Clone)]
pub struct SshShell {
    config: Arc<client::Config>,
}

impl Default for SshShell {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SshShell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshShell").finish_non_exhaustive()
    }
}

impl SshShell {
    /// A shell with russh's default algorithms and a 30 s keepalive.
    pub fn new() -> Self {
        let config = client::Config {
            keepalive_interval: Some(Duration::from_secs(30)),
            nodelay: true,
            ..client::Config::default()
        };
        Self {
            config: Arc::new(config),
        }
    }
}

/// The OpenSSH fingerprint (`SHA256:…`) of a host key or certificate.
fn fingerprint(key: &PublicKeyOrCertificate) -> String {
    match key {
        PublicKeyOrCertificate::PublicKey { key, .. } => key.fingerprint(HashAlg::Sha256),
        PublicKeyOrCertificate::Certificate(cert) => cert.public_key().fingerprint(HashAlg::Sha256),
    }
    .to_string()
}

/// Checks the server's key against the pin and remembers what was presented.
struct PinningHandler {
    pinned: Option<String>,
    presented: Arc<Mutex<Option<String>>>,
}

impl client::Handler for PinningHandler {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let seen = fingerprint(key);
        let accepted = self.pinned.as_deref().is_none_or(|pin| pin == seen);
        if let Ok(mut slot) = self.presented.lock() {
            *slot = Some(seen);
        }
        Ok(accepted)
    }
}

fn io_error(target: &SshTarget, error: io::Error) -> RemoteShellError {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => RemoteShellError::Refused {
            target: target.display(),
        },
        io::ErrorKind::TimedOut => RemoteShellError::Timeout {
            target: target.display(),
            stage: "connect",
            after: target.connect_timeout,
            host_key: None,
        },
        _ => RemoteShellError::Unreachable {
            target: target.display(),
            message: error.to_string(),
            source: Some(Cause::new(error)),
        },
    }
}

/// A protocol failure; `host_key` is the key seen when the handshake had succeeded.
fn protocol_error(
    target: &SshTarget,
    what: &str,
    error: russh::Error,
    host_key: Option<&str>,
) -> RemoteShellError {
    match (error, host_key) {
        (russh::Error::IO(e), None) => io_error(target, e),
        (error, _) => RemoteShellError::Other {
            target: target.display(),
            message: format!("{what}: {error}"),
            host_key: host_key.map(str::to_owned),
            source: Some(Cause::new(error)),
        },
    }
}

/// How a channel is driven.
struct ExecOptions<'a> {
    /// The script's name, for logs.
    script: &'a str,
    /// The command line.
    command: &'a str,
    /// Written to the command's input first.
    stdin: &'a [u8],
    /// Close the input after `stdin` (the upload); otherwise it stays open until the deadline,
    /// as the run's kill switch.
    close_input: bool,
    /// Log each line of output.
    log_output: bool,
    /// When the client stops waiting.
    deadline: Instant,
}

/// What a channel produced.
struct ChannelOutput {
    /// The first [`UPLOAD_OUTPUT_BYTES`] of standard output.
    stdout: Vec<u8>,
    exit_status: Option<u32>,
    tail: OutputTail,
    saw_root_marker: bool,
    saw_waiting_marker: bool,
    saw_locked_marker: bool,
    /// The deadline passed before the command ended.
    timed_out: bool,
}

impl ChannelOutput {
    fn take_line(&mut self, piece: &[u8], ends_line: bool, log: Option<(&SshTarget, &str)>) {
        if ends_line {
            let marker = match piece {
                p if p == ROOT_MARKER.as_bytes() => Some(&mut self.saw_root_marker),
                p if p == WAITING_MARKER.as_bytes() => Some(&mut self.saw_waiting_marker),
                p if p == LOCKED_MARKER.as_bytes() => Some(&mut self.saw_locked_marker),
                _ => None,
            };
            if let Some(seen) = marker {
                *seen = true;
                return;
            }
        }
        let line = String::from_utf8_lossy(piece);
        let line = line.trim_end();
        if let Some((target, script)) = log {
            info!(target: "nodemgr_ssh::script", host = %target.host, script, "{line}");
        }
        self.tail.push(line.as_bytes());
        if ends_line {
            self.tail.push(b"\n");
        }
    }
}

/// The host key the handler saw, if any.
fn seen_key(slot: &Mutex<Option<String>>) -> Option<String> {
    slot.lock().ok().and_then(|k| k.clone())
}

impl SshShell {
    /// Connects and authenticates; the handler records the host key into `presented`, which
    /// is reported to `host_key_seen` as soon as the handshake succeeded.
    async fn connect(
        &self,
        target: &SshTarget,
        presented: Arc<Mutex<Option<String>>>,
        host_key_seen: &(dyn Fn(String) + Send + Sync),
    ) -> Result<(Handle<PinningHandler>, String), RemoteShellError> {
        let handler = PinningHandler {
            pinned: target.host_key.clone(),
            presented: presented.clone(),
        };
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| io_error(target, e))?;
        let mut handle = match client::connect_stream(self.config.clone(), stream, handler).await {
            Ok(handle) => handle,
            Err(russh::Error::UnknownKey) => {
                return Err(RemoteShellError::HostKeyMismatch {
                    target: target.display(),
                    pinned: target.host_key.clone().unwrap_or_default(),
                    presented: seen_key(&presented).unwrap_or_else(|| "unknown".into()),
                });
            }
            Err(e) => return Err(protocol_error(target, "SSH handshake failed", e, None)),
        };
        let host_key = seen_key(&presented).unwrap_or_default();
        host_key_seen(host_key.clone());
        let known = Some(host_key.as_str());

        let key =
            russh::keys::decode_secret_key(target.private_key.expose(), None).map_err(|e| {
                RemoteShellError::Other {
                    target: target.display(),
                    message: format!(
                        "cannot read the private key of the SSHCredentials ({e}); it must be an \
                     unencrypted OpenSSH or PEM ed25519 or RSA key"
                    ),
                    host_key: Some(host_key.clone()),
                    source: Some(Cause::new(e)),
                }
            })?;
        let hash = if key.algorithm().is_rsa() {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| protocol_error(target, "RSA hash negotiation failed", e, known))?
                .flatten()
        } else {
            None
        };
        let auth = handle
            .authenticate_publickey(
                target.user.clone(),
                PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
            .map_err(|e| protocol_error(target, "authentication failed", e, known))?;
        if !auth.success() {
            return Err(RemoteShellError::AuthFailed {
                target: target.display(),
                host_key,
            });
        }
        Ok((handle, host_key))
    }

    /// Runs a command on a new channel, streaming its output, until it ends or the deadline
    /// passes. At the deadline the input is closed (the run's kill switch) and the end is
    /// awaited [`KILL_WAIT`] more.
    async fn exec(
        handle: &Handle<PinningHandler>,
        target: &SshTarget,
        host_key: &str,
        options: ExecOptions<'_>,
    ) -> Result<ChannelOutput, RemoteShellError> {
        let failed = |what: &str, e: russh::Error| protocol_error(target, what, e, Some(host_key));
        let mut channel = handle
            .channel_open_session()
            .await
            .map_err(|e| failed("cannot open an SSH channel", e))?;
        channel
            .exec(true, options.command)
            .await
            .map_err(|e| failed("cannot start the command", e))?;
        if !options.stdin.is_empty() {
            channel
                .data(options.stdin)
                .await
                .map_err(|e| failed("cannot send the input", e))?;
        }
        if options.close_input {
            channel
                .eof()
                .await
                .map_err(|e| failed("cannot close the input", e))?;
        }

        let mut out = ChannelOutput {
            stdout: Vec::new(),
            exit_status: None,
            tail: OutputTail::new(),
            saw_root_marker: false,
            saw_waiting_marker: false,
            saw_locked_marker: false,
            timed_out: false,
        };
        let log = options.log_output.then_some((target, options.script));
        let mut lines = Lines::new();
        let mut deadline = options.deadline;
        loop {
            let message = tokio::select! {
                message = channel.wait() => message,
                () = tokio::time::sleep_until(deadline) => {
                    if out.timed_out {
                        warn!(host = %target.host, script = options.script, "the script did not end within {} s of its timeout; dropping the connection", KILL_WAIT.as_secs());
                        break;
                    }
                    out.timed_out = true;
                    debug!(host = %target.host, script = options.script, "timed out: closing the input to kill the script");
                    // The remote side kills the script's process group on end of input.
                    let _ = channel.eof().await;
                    deadline = Instant::now() + KILL_WAIT;
                    continue;
                }
            };
            let Some(message) = message else { break };
            let data = match message {
                ChannelMsg::Data { ref data } => {
                    let room = UPLOAD_OUTPUT_BYTES.saturating_sub(out.stdout.len());
                    out.stdout
                        .extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
                    Some(data.clone())
                }
                ChannelMsg::ExtendedData { ref data, .. } => Some(data.clone()),
                ChannelMsg::ExitStatus { exit_status } => {
                    out.exit_status = Some(exit_status);
                    None
                }
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    debug!(host = %target.host, script = options.script, signal = ?signal_name, "killed by a signal");
                    out.exit_status.get_or_insert(128);
                    None
                }
                ChannelMsg::Close => break,
                _ => None,
            };
            if let Some(data) = data {
                lines.push(&data, &mut |piece, ends| out.take_line(piece, ends, log));
            }
        }
        lines.finish(&mut |piece, ends| out.take_line(piece, ends, log));
        Ok(out)
    }

    async fn run_connected(
        handle: &Handle<PinningHandler>,
        target: &SshTarget,
        script: &RemoteScript,
        host_key: &str,
    ) -> Result<ScriptRun, RemoteShellError> {
        let started = Instant::now();
        let deadline = started + script.timeout;
        let timeout = |host_key: &str| RemoteShellError::Timeout {
            target: target.display(),
            stage: "script",
            after: script.timeout,
            host_key: Some(host_key.to_owned()),
        };
        if let Some(lock) = &script.lock
            && !lock.starts_with('/')
        {
            return Err(RemoteShellError::Other {
                target: target.display(),
                message: format!("the lock file {lock:?} is not an absolute path"),
                host_key: Some(host_key.to_owned()),
                source: None,
            });
        }

        // 1. Upload into a private temporary file.
        let upload = Self::exec(
            handle,
            target,
            host_key,
            ExecOptions {
                script: &script.name,
                command: "umask 077 && f=$(mktemp /tmp/nodemgr-script.XXXXXXXX) && cat >\"$f\" && printf '%s' \"$f\"",
                stdin: script.body.as_bytes(),
                close_input: true,
                log_output: false,
                deadline,
            },
        )
        .await?;
        if upload.timed_out {
            return Err(timeout(host_key));
        }
        let path = String::from_utf8_lossy(&upload.stdout).trim().to_owned();
        if upload.exit_status != Some(0) || !path.starts_with("/tmp/nodemgr-script.") {
            return Err(RemoteShellError::Other {
                target: target.display(),
                message: format!(
                    "cannot upload the script into /tmp (exit status {:?}): {}",
                    upload.exit_status,
                    upload.tail.text()
                ),
                host_key: Some(host_key.to_owned()),
                source: None,
            });
        }

        // 2. Run it as root, in its own process group, under its lock.
        let (elevation, stdin) = if target.user == "root" {
            (Elevation::Root, Vec::new())
        } else if let Some(password) = &target.sudo_password {
            let mut stdin = password.expose().as_bytes().to_vec();
            stdin.push(b'\n');
            (Elevation::SudoWithPassword, stdin)
        } else {
            (Elevation::SudoWithoutPassword, Vec::new())
        };
        let command = wrapper::run_command(&path, &script.args, script.lock.as_deref(), elevation);
        debug!(target = %target.display(), script = %script.name, "running script");
        let run = Self::exec(
            handle,
            target,
            host_key,
            ExecOptions {
                script: &script.name,
                command: &command,
                stdin: &stdin,
                close_input: false,
                log_output: true,
                deadline,
            },
        )
        .await?;
        if run.timed_out {
            if run.saw_waiting_marker && !run.saw_locked_marker {
                return Err(RemoteShellError::Busy {
                    target: target.display(),
                    lock: script.lock.clone().unwrap_or_default(),
                    waited: started.elapsed(),
                    host_key: host_key.to_owned(),
                });
            }
            return Err(timeout(host_key));
        }
        let exit_status = run.exit_status.unwrap_or(255);
        if !run.saw_root_marker {
            return Err(RemoteShellError::SudoFailed {
                target: target.display(),
                message: run.tail.text(),
                host_key: host_key.to_owned(),
            });
        }
        if exit_status != 0 {
            return Err(RemoteShellError::CommandFailed {
                target: target.display(),
                exit_status,
                tail: run.tail.text(),
                host_key: host_key.to_owned(),
            });
        }
        Ok(ScriptRun {
            host_key: host_key.to_owned(),
            exit_status,
            tail: run.tail.text(),
        })
    }
}

#[async_trait]
impl RemoteShell for SshShell {
    async fn run_script(
        &self,
        target: &SshTarget,
        script: &RemoteScript,
    ) -> Result<ScriptRun, RemoteShellError> {
        self.run_script_noting_host_key(target, script, &|_| {})
            .await
    }

    async fn run_script_noting_host_key(
        &self,
        target: &SshTarget,
        script: &RemoteScript,
        host_key_seen: &(dyn Fn(String) + Send + Sync),
    ) -> Result<ScriptRun, RemoteShellError> {
        let presented = Arc::new(Mutex::new(None));
        let connecting = self.connect(target, presented.clone(), host_key_seen);
        let (handle, host_key) =
            match tokio::time::timeout(target.connect_timeout, connecting).await {
                Ok(connected) => connected?,
                Err(_) => {
                    return Err(RemoteShellError::Timeout {
                        target: target.display(),
                        stage: "connect",
                        after: target.connect_timeout,
                        // A key seen before the time ran out was not refused: name it.
                        host_key: seen_key(&presented).filter(|_| target.host_key.is_none()),
                    });
                }
            };
        let result = Self::run_connected(&handle, target, script, &host_key).await;
        // Best effort: the server notices a dropped connection anyway.
        let _ = handle
            .disconnect(Disconnect::ByApplication, "done", "en")
            .await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemgr_core::ports::Sensitive;

    fn target() -> SshTarget {
        SshTarget {
            host: "192.0.2.1".into(),
            port: 22,
            user: "root".into(),
            private_key: Sensitive::new(String::new()),
            sudo_password: None,
            host_key: None,
            connect_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn an_os_error_is_kept_as_the_source() {
        let error = io_error(
            &target(),
            io::Error::new(io::ErrorKind::HostUnreachable, "no route to host"),
        );
        assert!(
            matches!(&error, RemoteShellError::Unreachable { message, .. } if message == "no route to host"),
            "{error:?}"
        );
        let os = std::error::Error::source(&error)
            .and_then(|e| e.downcast_ref::<Cause>())
            .and_then(|c| c.get().downcast_ref::<io::Error>());
        assert_eq!(
            os.map(io::Error::kind),
            Some(io::ErrorKind::HostUnreachable)
        );
    }

    #[test]
    fn a_protocol_error_is_kept_as_the_source() {
        let error = protocol_error(
            &target(),
            "cannot open an SSH channel",
            russh::Error::Disconnect,
            Some("SHA256:x"),
        );
        assert_eq!(error.host_key(), Some("SHA256:x"));
        let russh = std::error::Error::source(&error)
            .and_then(|e| e.downcast_ref::<Cause>())
            .and_then(|c| c.get().downcast_ref::<russh::Error>());
        assert!(matches!(russh, Some(russh::Error::Disconnect)), "{error:?}");
    }
}
