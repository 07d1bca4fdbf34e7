//! A throw-away OpenSSH server for tests and benchmarks: `sshd -D` on loopback addresses
//! (`127.0.0.1` and any other `127.x.y.z` asked for, one port), with a fresh host key, fresh
//! ed25519 and RSA user keys authorised for the test login, and nothing else allowed (no
//! passwords, no PAM). Stopped when dropped.
//!
//! Needs `scripts/install.d/10-sshd.sh` (OpenSSH, sudo, the user `nodemgr-test` whose sudo
//! password is in `/etc/nodemgr-test/sudo-password`) and root, as the test command runs.

use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodemgr_core::ports::{Sensitive, SshTarget};

/// The login the installer creates.
pub const TEST_USER: &str = "nodemgr-test";
/// Where the installer keeps the test user's sudo password.
pub const SUDO_PASSWORD_FILE: &str = "/etc/nodemgr-test/sudo-password";

/// Why the test sshd could not start.
#[derive(Debug, thiserror::Error)]
pub enum SshdError {
    /// Something is not installed or not allowed.
    #[error("{0}; run scripts/install.d/10-sshd.sh as root first")]
    Missing(String),
    /// Something is not installed or not allowed, as the OS said.
    #[error("{what}: {source}; run scripts/install.d/10-sshd.sh as root first")]
    Unusable {
        /// What could not be done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// sshd did not come up.
    #[error("sshd did not start: {0}")]
    Start(String),
}

/// A user key kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// ed25519.
    Ed25519,
    /// RSA 3072.
    Rsa,
}

/// A running test sshd.
#[derive(Debug)]
pub struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    addresses: Vec<Ipv4Addr>,
    child: Option<Child>,
    sudo_password: String,
}

fn io_step(what: impl Into<String>) -> impl FnOnce(io::Error) -> SshdError {
    let what = what.into();
    move |source| SshdError::Io { what, source }
}

fn keygen(kind: &str, bits: Option<&str>, path: &Path) -> Result<(), SshdError> {
    let mut command = Command::new("ssh-keygen");
    command.args(["-q", "-N", "", "-t", kind]);
    if let Some(bits) = bits {
        command.args(["-b", bits]);
    }
    let status = command
        .arg("-f")
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .map_err(|source| SshdError::Unusable {
            what: "ssh-keygen cannot run".into(),
            source,
        })?;
    if !status.success() {
        return Err(SshdError::Start(format!(
            "ssh-keygen -t {kind} failed: {status}"
        )));
    }
    Ok(())
}

fn free_port() -> Result<u16, SshdError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_step("binding a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_step("reading the free port"))?
        .port();
    Ok(port)
}

impl Sshd {
    /// Starts sshd on 127.0.0.1.
    ///
    /// # Errors
    /// [`SshdError`] when OpenSSH or the test user is missing or sshd does not answer.
    pub fn start() -> Result<Self, SshdError> {
        Self::start_on(&[Ipv4Addr::LOCALHOST])
    }

    /// Starts sshd listening on each of `addresses` (all loopback, at most 16) on one free
    /// port.
    ///
    /// # Errors
    /// As [`Sshd::start`].
    pub fn start_on(addresses: &[Ipv4Addr]) -> Result<Self, SshdError> {
        if addresses.len() > 16 {
            return Err(SshdError::Start(
                "sshd listens on at most 16 addresses (MAX_LISTEN_SOCKS)".into(),
            ));
        }
        if addresses.iter().any(|a| !a.is_loopback()) {
            return Err(SshdError::Start(
                "the test sshd listens on loopback addresses only".into(),
            ));
        }
        let sudo_password = fs::read_to_string(SUDO_PASSWORD_FILE)
            .map_err(|source| SshdError::Unusable {
                what: format!("cannot read {SUDO_PASSWORD_FILE}"),
                source,
            })?
            .trim()
            .to_owned();
        let dir = tempfile::Builder::new()
            .prefix("nodemgr-sshd.")
            .tempdir()
            .map_err(io_step("creating the sshd directory"))?;
        // The user's sshd child reads authorized_keys as the user.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .map_err(io_step("opening the sshd directory"))?;
        keygen("ed25519", None, &dir.path().join("host_ed25519"))?;
        keygen("ed25519", None, &dir.path().join("user_ed25519"))?;
        keygen("rsa", Some("3072"), &dir.path().join("user_rsa"))?;
        let mut authorized = String::new();
        for public in ["user_ed25519.pub", "user_rsa.pub"] {
            authorized += &fs::read_to_string(dir.path().join(public))
                .map_err(io_step(format!("reading {public}")))?;
        }
        let authorized_path = dir.path().join("authorized_keys");
        fs::write(&authorized_path, authorized).map_err(io_step("writing authorized_keys"))?;
        fs::set_permissions(&authorized_path, fs::Permissions::from_mode(0o644))
            .map_err(io_step("opening authorized_keys"))?;
        let mut sshd = Self {
            dir,
            port: free_port()?,
            addresses: addresses.to_vec(),
            child: None,
            sudo_password,
        };
        sshd.spawn()?;
        Ok(sshd)
    }

    fn config(&self) -> String {
        let dir = self.dir.path().display();
        let mut config = format!(
            "Port {port}\nHostKey {dir}/host_ed25519\nPidFile {dir}/sshd.pid\n\
             AuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nAllowUsers {TEST_USER}\nPermitRootLogin no\n\
             MaxStartups 200:30:400\nMaxSessions 64\nMaxAuthTries 6\nLoginGraceTime 30\n\
             LogLevel VERBOSE\nSubsystem sftp internal-sftp\n",
            port = self.port
        );
        for address in &self.addresses {
            config += &format!("ListenAddress {address}\n");
        }
        config
    }

    fn spawn(&mut self) -> Result<(), SshdError> {
        let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .ok_or_else(|| SshdError::Missing("sshd is not installed".into()))?;
        fs::create_dir_all("/run/sshd").map_err(io_step("creating /run/sshd"))?;
        let config_path = self.dir.path().join("sshd_config");
        fs::write(&config_path, self.config()).map_err(io_step("writing sshd_config"))?;
        let child = Command::new(sshd)
            .arg("-D")
            .arg("-f")
            .arg(&config_path)
            .arg("-E")
            .arg(self.dir.path().join("sshd.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| SshdError::Unusable {
                what: "cannot start sshd".into(),
                source,
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        for address in self.addresses.clone() {
            loop {
                if self.answers(address) {
                    break;
                }
                if let Some(child) = self.child.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    return Err(SshdError::Start(format!(
                        "sshd exited with {status}: {}",
                        self.log()
                    )));
                }
                if Instant::now() > deadline {
                    return Err(SshdError::Start(format!(
                        "no SSH banner on {address}:{} within 10 s: {}",
                        self.port,
                        self.log()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    fn answers(&self, address: Ipv4Addr) -> bool {
        let Ok(stream) = TcpStream::connect_timeout(
            &SocketAddrV4::new(address, self.port).into(),
            Duration::from_millis(200),
        ) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("SSH-2.0-")
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts sshd with a new host key on the same port (a reinstalled machine, or a man in
    /// the middle).
    ///
    /// # Errors
    /// As [`Sshd::start`].
    pub fn replace_host_key(&mut self) -> Result<(), SshdError> {
        self.stop();
        let host = self.dir.path().join("host_ed25519");
        let _ = fs::remove_file(&host);
        let _ = fs::remove_file(host.with_extension("pub"));
        keygen("ed25519", None, &host)?;
        self.spawn()
    }

    /// The port sshd listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The test login.
    pub fn user(&self) -> &str {
        TEST_USER
    }

    /// The test login's sudo password.
    pub fn sudo_password(&self) -> &str {
        &self.sudo_password
    }

    /// A user private key (OpenSSH format) authorised for the test login.
    ///
    /// # Errors
    /// When the key file cannot be read.
    pub fn private_key(&self, kind: KeyKind) -> Result<String, SshdError> {
        let file = match kind {
            KeyKind::Ed25519 => "user_ed25519",
            KeyKind::Rsa => "user_rsa",
        };
        fs::read_to_string(self.dir.path().join(file)).map_err(io_step(format!("reading {file}")))
    }

    /// The host key's fingerprint (`SHA256:…`), as `ssh-keygen -lf` prints it.
    ///
    /// # Errors
    /// When ssh-keygen fails.
    pub fn host_key_fingerprint(&self) -> Result<String, SshdError> {
        let out = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(self.dir.path().join("host_ed25519.pub"))
            .output()
            .map_err(|source| SshdError::Unusable {
                what: "ssh-keygen cannot run".into(),
                source,
            })?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1)
            .map(str::to_owned)
            .ok_or_else(|| SshdError::Start("ssh-keygen -lf printed no fingerprint".into()))
    }

    /// A target on `address` (one this sshd listens on) logging in with the ed25519 key and
    /// the sudo password, trusting the host key on first use.
    ///
    /// # Errors
    /// When the key cannot be read.
    pub fn target(&self, address: Ipv4Addr) -> Result<SshTarget, SshdError> {
        Ok(SshTarget {
            host: address.to_string(),
            port: self.port,
            user: TEST_USER.into(),
            private_key: Sensitive::new(self.private_key(KeyKind::Ed25519)?),
            sudo_password: Some(Sensitive::new(self.sudo_password.clone())),
            host_key: None,
            connect_timeout: Duration::from_secs(10),
        })
    }

    /// The path of a file for the `ssh` command line client: the private key of `kind`.
    pub fn key_path(&self, kind: KeyKind) -> PathBuf {
        self.dir.path().join(match kind {
            KeyKind::Ed25519 => "user_ed25519",
            KeyKind::Rsa => "user_rsa",
        })
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = fs::File::open(self.dir.path().join("sshd.log")) {
            let _ = file.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}
