//! The Secrets bashible-apiserver keeps, against the API emulator: written only when a value
//! changes, a conflict re-read and retried, two writers of the same values writing once, and
//! the TLS Secret created once by two replicas starting together.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeMap;

use nodemgr_core::model::keys;
use nodemgr_k8s::bashible_secrets::{CHECKSUMS_SECRET, publish_checksums};
use nodemgr_k8s::cluster::{client, decode_checksum};
use nodemgr_k8s::tls;
use nodemgr_testkit::{Emulator, Fault};
use serde_json::json;

async fn emulator() -> Emulator {
    let emulator = Emulator::start().await.unwrap();
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": keys::NAMESPACE}}),
        )
        .unwrap();
    emulator
}

fn checksums(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn resource_version(emulator: &Emulator) -> String {
    emulator
        .get("v1", "Secret", keys::NAMESPACE, CHECKSUMS_SECRET)
        .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn checksums_are_written_on_change_only_and_survive_a_conflict() {
    let emulator = emulator().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let first = checksums(&[("worker", "aaa"), ("frontend", "bbb")]);
    assert!(publish_checksums(&client, &first).await.unwrap());
    let version = resource_version(&emulator);
    assert!(
        !publish_checksums(&client, &first).await.unwrap(),
        "same values: no write"
    );
    assert_eq!(resource_version(&emulator), version);

    // Someone else writes between our read and our update: 409, re-read, retry.
    emulator.inject_fault(Fault::new(409).verb("update").resource("secrets").times(2));
    let second = checksums(&[("worker", "ccc")]);
    assert!(publish_checksums(&client, &second).await.unwrap());
    let secret = emulator
        .get("v1", "Secret", keys::NAMESPACE, CHECKSUMS_SECRET)
        .unwrap();
    assert_eq!(
        decode_checksum(secret["data"]["worker"].as_str().unwrap()).unwrap(),
        "ccc"
    );
    assert!(
        secret["data"]["frontend"].is_null(),
        "a group gone loses its key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_publishing_the_same_checksums_write_once() {
    let emulator = emulator().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    publish_checksums(&client, &checksums(&[("worker", "v1")]))
        .await
        .unwrap();
    let before = emulator.request_count("update", "secrets", None);
    let values = checksums(&[("worker", "v2")]);
    let writes: Vec<bool> =
        futures::future::join_all((0..4).map(|_| publish_checksums(&client, &values)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    let successful_updates = emulator.request_count("update", "secrets", Some(200));
    assert!(writes.iter().filter(|w| **w).count() >= 1);
    assert!(
        emulator.request_count("update", "secrets", None) - before <= 4,
        "no retry storm"
    );
    assert_eq!(
        successful_updates, 1,
        "the first publish created the Secret; of four replicas updating it, one wrote: {writes:?}"
    );
    // Once settled, nobody writes again.
    for _ in 0..3 {
        assert!(!publish_checksums(&client, &values).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_end_up_with_one_certificate() {
    let emulator = emulator().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let names = vec!["bashible-apiserver.test.svc".to_owned()];
    let (a, b) = tokio::join!(
        tls::secret::load_or_create(&client, keys::NAMESPACE, "tls", &names),
        tls::secret::load_or_create(&client, keys::NAMESPACE, "tls", &names),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "the loser of the create reads the winner's pair");
    tls::server_config(&a).unwrap();
    let again = tls::secret::load_or_create(&client, keys::NAMESPACE, "tls", &names)
        .await
        .unwrap();
    assert_eq!(again, a);

    // A Secret without a key is reported and left alone.
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "half", "namespace": keys::NAMESPACE},
            "data": {"tls.crt": "Zm9v"}}),
        )
        .unwrap();
    let err = tls::secret::load_or_create(&client, keys::NAMESPACE, "half", &names)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tls.key") && err.contains("delete it"),
        "{err}"
    );
}
