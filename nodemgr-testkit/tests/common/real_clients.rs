//! Real components for the emulator's fidelity tests: kubectl with its own discovery cache and
//! manifest files, the Python webhook server (`tests/python/webhook_server.py`) behind a
//! certificate chain made by `openssl`, and the Python interpreter that has Debian's
//! `python3-kubernetes`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use base64::Engine as _;
use tokio::io::AsyncBufReadExt as _;

use super::kubectl_binary;

/// What a kubectl run printed.
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// kubectl against one emulator, with its own cache and a directory for manifests.
pub struct Kubectl {
    binary: String,
    kubeconfig: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Kubectl {
    /// None when kubectl is missing and `NODEMGR_SKIP_KUBECTL=1`.
    pub fn new(kubeconfig: &Path) -> Option<Self> {
        Some(Kubectl {
            binary: kubectl_binary()?,
            kubeconfig: kubeconfig.to_path_buf(),
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// Writes a manifest (YAML or JSON text) and returns its path.
    pub fn manifest(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Runs kubectl and returns what it printed, whether it succeeded or not.
    pub async fn output(&self, args: &[&str]) -> Output {
        let output = tokio::process::Command::new(&self.binary)
            .env("KUBECONFIG", &self.kubeconfig)
            .arg(format!(
                "--cache-dir={}",
                self.dir.path().join("cache").display()
            ))
            .arg("--request-timeout=60s")
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("kubectl starts");
        Output {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs kubectl; panics with its output when it fails.
    pub async fn run(&self, args: &[&str]) -> Output {
        let out = self.output(args).await;
        assert!(
            out.success,
            "kubectl {args:?} failed:\n{}\n{}",
            out.stdout, out.stderr
        );
        out
    }

    /// Runs kubectl; panics when it succeeds.
    pub async fn fail(&self, args: &[&str]) -> Output {
        let out = self.output(args).await;
        assert!(
            !out.success,
            "kubectl {args:?} succeeded:\n{}\n{}",
            out.stdout, out.stderr
        );
        out
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Python webhook server on 127.0.0.1 over HTTPS, with a throw-away CA.
pub struct WebhookServer {
    pub port: u16,
    /// base64 of the CA certificate (PEM): a `caBundle`.
    pub ca_bundle: String,
    _dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl WebhookServer {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=emulator-test-ca",
            ],
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        std::fs::write(d.join("ext.cnf"), "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n").unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "leaf.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/webhook_server.py"
        );
        let mut child = tokio::process::Command::new("python3")
            .arg(script)
            .arg(d.join("leaf.pem"))
            .arg(d.join("leaf.key"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 starts the webhook server");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("the webhook server prints its port within 60 s")
        .unwrap();
        let port = line.trim().parse().expect("a port");
        let ca = std::fs::read(d.join("ca.pem")).unwrap();
        WebhookServer {
            port,
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca),
            _dir: dir,
            _child: child,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The AdmissionReview requests the server received.
    pub async fn reviews(&self) -> Vec<serde_json::Value> {
        let ca = base64::engine::general_purpose::STANDARD
            .decode(&self.ca_bundle)
            .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
            .build()
            .unwrap();
        client
            .get(self.url("/reviews"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// The Python interpreter with the `kubernetes` module (`NODEMGR_PYTHON`, default
/// `/usr/bin/python3`), or None when it is missing and `NODEMGR_SKIP_PYTHON=1`.
pub fn python_with_kubernetes() -> Option<String> {
    let python = std::env::var("NODEMGR_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_owned());
    let ok = std::process::Command::new(&python)
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    if std::env::var("NODEMGR_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {python} cannot import kubernetes and NODEMGR_SKIP_PYTHON=1");
        return None;
    }
    panic!(
        "{python} cannot import the kubernetes module: run `sudo bash scripts/install.d/40-python-kubernetes.sh`, \
         point NODEMGR_PYTHON at a python3 that has it, or set NODEMGR_SKIP_PYTHON=1 to skip this test"
    );
}
