//! nodemgr's remote shell over SSH: [`SshShell`] implements the core's
//! [`RemoteShell`](nodemgr_core::ports::RemoteShell) port on russh, to run the bootstrap and
//! cleanup scripts of static nodes as root.
//!
//! # What one run does
//! 1. TCP connect, SSH handshake and public key authentication, all within
//!    [`SshTarget::connect_timeout`]. The server's host key is checked before authenticating:
//!    against the pinned fingerprint when there is one (a different key ends the connection
//!    with [`RemoteShellError::HostKeyMismatch`]), otherwise it is accepted and returned in
//!    [`ScriptRun::host_key`] for the caller to pin (trust on first use).
//! 2. The script is uploaded over a first channel into a private temporary file
//!    (`mktemp`, mode 0600) — never through the command line.
//! 3. A second channel runs it with `bash`, as root: directly for `root`, otherwise through
//!    `sudo -S -p ''` with the password written to sudo's standard input (or `sudo -n` without
//!    a password). A marker printed by the root shell tells a sudo refusal
//!    ([`RemoteShellError::SudoFailed`]) from a script failure
//!    ([`RemoteShellError::CommandFailed`]). The file is removed afterwards.
//! 4. Output is streamed to `tracing` line by line (target `nodemgr_ssh::script`, level
//!    info) and its tail kept; the run ends with the script's exit status, or
//!    [`RemoteShellError::Timeout`] after [`RemoteScript::timeout`].
//!
//! Fingerprints are OpenSSH's `SHA256:<base64>` form, as `ssh-keygen -lf` prints them.

#[cfg(feature = "testing")]
pub mod testing;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nodemgr_core::ports::remote_shell::OutputTail;
use nodemgr_core::ports::{RemoteScript, RemoteShell, RemoteShellError, ScriptRun, SshTarget};
use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, Disconnect};
use tokio::net::TcpStream;
use tracing::{debug, info};

/// Printed on stderr by the root shell before the script starts: sudo let us in.
const ROOT_MARKER: &str = "nodemgr-ssh: running as root";

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

fn io_error(target: &SshTarget, error: &io::Error) -> RemoteShellError {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => RemoteShellError::Refused {
            target: target.display(),
        },
        io::ErrorKind::TimedOut => RemoteShellError::Timeout {
            target: target.display(),
            stage: "connect",
            after: target.connect_timeout,
        },
        _ => RemoteShellError::Unreachable {
            target: target.display(),
            message: error.to_string(),
        },
    }
}

fn protocol_error(target: &SshTarget, what: &str, error: &russh::Error) -> RemoteShellError {
    match error {
        russh::Error::IO(e) => io_error(target, e),
        _ => RemoteShellError::Other {
            target: target.display(),
            message: format!("{what}: {error}"),
        },
    }
}

/// Single-quotes `text` for a POSIX shell.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// What a channel produced.
struct ChannelOutput {
    stdout: Vec<u8>,
    exit_status: Option<u32>,
    tail: OutputTail,
    saw_root_marker: bool,
}

impl SshShell {
    async fn connect(
        &self,
        target: &SshTarget,
    ) -> Result<(Handle<PinningHandler>, String), RemoteShellError> {
        let presented = Arc::new(Mutex::new(None));
        let handler = PinningHandler {
            pinned: target.host_key.clone(),
            presented: presented.clone(),
        };
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| io_error(target, &e))?;
        let mut handle = match client::connect_stream(self.config.clone(), stream, handler).await {
            Ok(handle) => handle,
            Err(russh::Error::UnknownKey) => {
                let presented = presented.lock().ok().and_then(|p| p.clone());
                return Err(RemoteShellError::HostKeyMismatch {
                    target: target.display(),
                    pinned: target.host_key.clone().unwrap_or_default(),
                    presented: presented.unwrap_or_else(|| "unknown".into()),
                });
            }
            Err(e) => return Err(protocol_error(target, "SSH handshake failed", &e)),
        };
        let host_key = presented
            .lock()
            .ok()
            .and_then(|p| p.clone())
            .unwrap_or_default();

        let key =
            russh::keys::decode_secret_key(target.private_key.expose(), None).map_err(|e| {
                RemoteShellError::Other {
                    target: target.display(),
                    message: format!(
                        "cannot read the private key of the SSHCredentials ({e}); it must be an \
                     unencrypted OpenSSH or PEM ed25519 or RSA key"
                    ),
                }
            })?;
        let hash = if key.algorithm().is_rsa() {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| protocol_error(target, "RSA hash negotiation failed", &e))?
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
            .map_err(|e| protocol_error(target, "authentication failed", &e))?;
        if !auth.success() {
            return Err(RemoteShellError::AuthFailed {
                target: target.display(),
            });
        }
        Ok((handle, host_key))
    }

    /// Runs `command` on a new channel with `stdin` as its input, streaming its output.
    async fn exec(
        handle: &Handle<PinningHandler>,
        target: &SshTarget,
        script: &str,
        command: &str,
        stdin: &[u8],
        log_output: bool,
    ) -> Result<ChannelOutput, RemoteShellError> {
        let mut channel = handle
            .channel_open_session()
            .await
            .map_err(|e| protocol_error(target, "cannot open an SSH channel", &e))?;
        channel
            .exec(true, command)
            .await
            .map_err(|e| protocol_error(target, "cannot start the command", &e))?;
        if !stdin.is_empty() {
            channel
                .data(stdin)
                .await
                .map_err(|e| protocol_error(target, "cannot send the input", &e))?;
        }
        channel
            .eof()
            .await
            .map_err(|e| protocol_error(target, "cannot close the input", &e))?;

        let mut out = ChannelOutput {
            stdout: Vec::new(),
            exit_status: None,
            tail: OutputTail::new(),
            saw_root_marker: false,
        };
        let mut pending = Vec::new();
        while let Some(message) = channel.wait().await {
            let data = match message {
                ChannelMsg::Data { ref data } => {
                    out.stdout.extend_from_slice(data);
                    Some(data.clone())
                }
                ChannelMsg::ExtendedData { ref data, .. } => Some(data.clone()),
                ChannelMsg::ExitStatus { exit_status } => {
                    out.exit_status = Some(exit_status);
                    None
                }
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    debug!(host = %target.host, script, signal = ?signal_name, "killed by a signal");
                    out.exit_status.get_or_insert(128);
                    None
                }
                ChannelMsg::Close => break,
                _ => None,
            };
            let Some(data) = data else { continue };
            pending.extend_from_slice(&data);
            while let Some(newline) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=newline).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end();
                if line == ROOT_MARKER {
                    out.saw_root_marker = true;
                    continue;
                }
                if log_output {
                    info!(target: "nodemgr_ssh::script", host = %target.host, script, "{line}");
                }
                out.tail.push(line.as_bytes());
                out.tail.push(b"\n");
            }
        }
        if !pending.is_empty() {
            let line = String::from_utf8_lossy(&pending);
            if log_output {
                info!(target: "nodemgr_ssh::script", host = %target.host, script, "{line}");
            }
            out.tail.push(line.as_bytes());
        }
        Ok(out)
    }

    async fn run_connected(
        handle: &Handle<PinningHandler>,
        target: &SshTarget,
        script: &RemoteScript,
        host_key: &str,
    ) -> Result<ScriptRun, RemoteShellError> {
        // 1. Upload into a private temporary file.
        let upload = Self::exec(
            handle,
            target,
            &script.name,
            "umask 077 && f=$(mktemp /tmp/nodemgr-script.XXXXXXXX) && cat >\"$f\" && printf '%s' \"$f\"",
            script.body.as_bytes(),
            false,
        )
        .await?;
        let path = String::from_utf8_lossy(&upload.stdout).trim().to_owned();
        if upload.exit_status != Some(0) || !path.starts_with("/tmp/nodemgr-script.") {
            return Err(RemoteShellError::Other {
                target: target.display(),
                message: format!(
                    "cannot upload the script into /tmp (exit status {:?}): {}",
                    upload.exit_status,
                    upload.tail.text()
                ),
            });
        }

        // 2. Run it as root.
        let args: Vec<String> = script.args.iter().map(|a| quote(a)).collect();
        let root_shell = format!(
            "echo {} >&2; exec bash {} {}",
            quote(ROOT_MARKER),
            quote(&path),
            args.join(" ")
        );
        let (elevated, stdin) = if target.user == "root" {
            (format!("bash -c {}", quote(&root_shell)), Vec::new())
        } else if let Some(password) = &target.sudo_password {
            let mut stdin = password.expose().as_bytes().to_vec();
            stdin.push(b'\n');
            (
                format!("sudo -S -p '' -- bash -c {}", quote(&root_shell)),
                stdin,
            )
        } else {
            (
                format!("sudo -n -- bash -c {}", quote(&root_shell)),
                Vec::new(),
            )
        };
        let command = format!("{elevated}; rc=$?; rm -f {}; exit $rc", quote(&path));
        debug!(target = %target.display(), script = %script.name, "running script");
        let run = Self::exec(handle, target, &script.name, &command, &stdin, true).await?;
        let exit_status = run.exit_status.unwrap_or(255);
        if !run.saw_root_marker {
            return Err(RemoteShellError::SudoFailed {
                target: target.display(),
                message: run.tail.text(),
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
        let (handle, host_key) =
            match tokio::time::timeout(target.connect_timeout, self.connect(target)).await {
                Ok(connected) => connected?,
                Err(_) => {
                    return Err(RemoteShellError::Timeout {
                        target: target.display(),
                        stage: "connect",
                        after: target.connect_timeout,
                    });
                }
            };
        let result = tokio::time::timeout(
            script.timeout,
            Self::run_connected(&handle, target, script, &host_key),
        )
        .await
        .unwrap_or_else(|_| {
            Err(RemoteShellError::Timeout {
                target: target.display(),
                stage: "script",
                after: script.timeout,
            })
        });
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

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
