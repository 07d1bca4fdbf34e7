//! A throw-away `moto_server` (an EC2-compatible API in memory) on 127.0.0.1 with a free
//! port, for tests and benchmarks; stopped when dropped. Each one has its own empty cloud.
//!
//! Needs `moto_server` on PATH (`scripts/install.d/20-moto.sh`), or its path in
//! `NODEMGR_MOTO_SERVER`.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{Credentials, Ec2Config};

/// The region the servers' clients use.
pub const REGION: &str = "eu-west-1";

/// Ports handed to servers of this process. The kernel may give a port it just gave (and saw
/// released) to the next `bind(0)`; two servers started at once by parallel tests would then
/// race for it, and the loser's test would talk to the winner's server until that one stops.
static CLAIMED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free port on 127.0.0.1 that no other server of this process was given.
fn unclaimed_port() -> Result<u16, MotoError> {
    for _ in 0..64 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| MotoError::Start(format!("no free port: {e}")))?
            .port();
        let mut claimed = CLAIMED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if claimed.insert(port) {
            return Ok(port);
        }
    }
    Err(MotoError::Start(
        "no free port that this process has not used already".into(),
    ))
}

/// Why moto could not start.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// moto_server is not installed.
    #[error(
        "{0} cannot run ({1}); install it with scripts/install.d/20-moto.sh or set NODEMGR_MOTO_SERVER"
    )]
    Missing(String, #[source] io::Error),
    /// It did not come up.
    #[error("moto_server did not start: {0}")]
    Start(String),
}

/// A running moto_server.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    port: u16,
}

/// The moto_server command to run.
pub fn moto_command() -> String {
    std::env::var("NODEMGR_MOTO_SERVER").unwrap_or_else(|_| "moto_server".to_owned())
}

/// Whether moto_server can be started here.
pub fn moto_available() -> bool {
    Command::new(moto_command())
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl MotoServer {
    /// Starts a server that accepts any credentials.
    ///
    /// # Errors
    /// [`MotoError`].
    pub fn start() -> Result<Self, MotoError> {
        Self::start_with(false)
    }

    /// Starts a server that checks credentials: only access keys its IAM knows are let in (so
    /// any made-up key gets `AuthFailure`).
    ///
    /// # Errors
    /// [`MotoError`].
    pub fn start_with_auth() -> Result<Self, MotoError> {
        Self::start_with(true)
    }

    fn start_with(auth: bool) -> Result<Self, MotoError> {
        let mut last = String::new();
        // A free port can be taken between our probe and moto's bind: try a few.
        for _ in 0..3 {
            let port = unclaimed_port()?;
            let mut command = Command::new(moto_command());
            command
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if auth {
                command.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
            }
            let child = command
                .spawn()
                .map_err(|e| MotoError::Missing(moto_command(), e))?;
            let mut server = Self { child, port };
            match server.wait_until_listening(Duration::from_secs(30)) {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(MotoError::Start(last))
    }

    fn wait_until_listening(&mut self, limit: Duration) -> Result<(), String> {
        // Only this process's servers use these ports (`unclaimed_port`), so whatever answers
        // on ours is the child just started.
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "moto_server exited with {status} (port {} taken?)",
                    self.port
                ));
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "moto_server not listening on {address} after {limit:?}"
        ))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Forgets every resource (moto's `POST /moto-api/reset`), so a benchmark's next round
    /// starts from an empty cloud.
    ///
    /// # Errors
    /// [`MotoError::Start`] when the server does not answer 200.
    pub fn reset(&self) -> Result<(), MotoError> {
        let fail =
            |e: io::Error| MotoError::Start(format!("reset of moto on port {}: {e}", self.port));
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(fail)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(fail)?;
        write!(
            stream,
            "POST /moto-api/reset HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            self.port
        )
        .map_err(fail)?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).map_err(fail)?;
        match answer.split_whitespace().nth(1) {
            Some("200") => Ok(()),
            _ => Err(MotoError::Start(format!(
                "reset of moto on port {} answered {:?}",
                self.port,
                answer.lines().next().unwrap_or_default()
            ))),
        }
    }

    /// A client configuration for this server (region [`REGION`], a made-up access key).
    pub fn config(&self) -> Ec2Config {
        Ec2Config::new(REGION, Credentials::new("AKIAMOTOTEST", "moto-secret"))
            .with_endpoint(self.endpoint())
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
