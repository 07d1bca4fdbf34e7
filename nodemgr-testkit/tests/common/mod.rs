//! Shared helpers of the emulator's HTTP tests: a tiny JSON client and a watch-stream reader.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic
#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;

/// A JSON client for one emulator.
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
}

impl Api {
    pub fn new(base: String) -> Self {
        // reqwest's TLS has no built-in crypto provider in this workspace (nodemgr-cloud
        // chooses ring): install ring before building a client; Err means one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Api {
            http: reqwest::Client::new(),
            base,
        }
    }

    /// Sends a request; returns (status, JSON body or Null).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request
                .header("content-type", content_type.unwrap_or("application/json"))
                .body(body.to_string());
        }
        let response = request.send().await.expect("request failed");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, None, Some(body))
            .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, None, Some(body))
            .await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: &Value) -> (u16, Value) {
        self.send(reqwest::Method::PATCH, path, Some(content_type), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None, body).await
    }

    /// Opens a watch and returns a reader of its events.
    pub async fn watch(&self, path: &str) -> WatchReader {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("watch request failed");
        assert_eq!(response.status().as_u16(), 200, "watch {path}");
        WatchReader {
            response,
            buffer: Vec::new(),
        }
    }
}

/// Reads newline-delimited watch events.
pub struct WatchReader {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl WatchReader {
    /// The next event, or None when the stream ends or nothing arrives within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        loop {
            if let Some(pos) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("watch line is JSON"));
            }
            match tokio::time::timeout(wait, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buffer.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// Whether the server closed the stream (within `wait`).
    pub async fn ended(&mut self, wait: Duration) -> bool {
        matches!(
            tokio::time::timeout(wait, self.response.chunk()).await,
            Ok(Ok(None)) | Ok(Err(_))
        )
    }
}

pub fn node(name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

pub fn running_pod(name: &str, node: &str, labels: Value) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// The CRD used by these tests (NodeGroup, deckhouse.io/v1, short name ng).
pub fn nodegroup_crd() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/nodegroup-crd.yaml"
    ))
    .expect("test CRD");
    serde_saphyr::from_str(&text).expect("test CRD parses")
}

/// The kubectl to run, or None when the tests are explicitly skipped.
pub fn kubectl_binary() -> Option<String> {
    let binary = std::env::var("NODEMGR_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let runs = std::process::Command::new(&binary)
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        return Some(binary);
    }
    if std::env::var("NODEMGR_SKIP_KUBECTL").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: kubectl ({binary}) is not runnable and NODEMGR_SKIP_KUBECTL=1");
        return None;
    }
    panic!(
        "kubectl ({binary}) is not runnable: run `sudo bash scripts/install.d/30-kubectl.sh`, point \
         NODEMGR_KUBECTL at a kubectl >= 1.27, or set NODEMGR_SKIP_KUBECTL=1 to skip these tests"
    );
}

pub mod real_clients;
