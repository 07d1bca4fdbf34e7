//! The EC2 adapter against a real EC2-compatible API: each test starts its own `moto_server`
//! on loopback (scripts/install.d/20-moto.sh installs it). Throttling is injected by a small
//! HTTP proxy in front of moto that answers the first requests with errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nodemgr_cloud::testing::{MotoServer, REGION};
use nodemgr_cloud::{Backoff, Credentials, Ec2Client, Ec2Config, Filter};
use nodemgr_core::ports::cloud::{TAG_GROUP, TAG_MACHINE, TAG_ZONE, client_token};
use nodemgr_core::ports::{CloudApi, CloudError, CreateInstance, InstanceClass, InstanceState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn zone(suffix: &str) -> String {
    format!("{REGION}{suffix}")
}

fn class() -> InstanceClass {
    InstanceClass {
        instance_type: "m5.large".into(),
        image_id: "ami-0abcdef1234567890".into(),
        subnets: BTreeMap::new(),
        security_groups: Vec::new(),
        root_disk_gib: Some(30),
        tags: [("team".to_owned(), "infra".to_owned())].into(),
    }
}

fn request(group: &str, zone_suffix: &str, n: usize) -> CreateInstance {
    let machine = format!("{group}-5d8f2-{n:05}");
    CreateInstance {
        group: group.into(),
        zone: zone(zone_suffix),
        client_token: client_token(&machine),
        machine,
        class: class(),
        user_data: "#!/bin/bash\necho bootstrap\n".into(),
    }
}

fn fast() -> Backoff {
    Backoff {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
    }
}

fn client(mut config: Ec2Config) -> Ec2Client {
    config.backoff = fast();
    Ec2Client::new(config).unwrap()
}

fn moto() -> MotoServer {
    MotoServer::start().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_tags_zone_and_type_show_in_describe() {
    let moto = moto();
    let ec2 = client(moto.config());
    let created = ec2
        .create_instance(&request("worker", "b", 1))
        .await
        .unwrap();
    assert!(created.instance_id.starts_with("i-"), "{created:?}");
    assert_eq!(
        created.provider_id,
        format!("aws:///{}/{}", zone("b"), created.instance_id)
    );
    assert_eq!(created.machine, "worker-5d8f2-00001");
    assert!(created.launched.is_some());

    let described = ec2
        .describe_instances(&[Filter::tag(TAG_GROUP, "worker")])
        .await
        .unwrap();
    assert_eq!(described.len(), 1);
    let instance = &described[0];
    assert_eq!(instance.instance_id, created.instance_id);
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.image_id, "ami-0abcdef1234567890");
    assert_eq!(instance.zone, zone("b"));
    assert_eq!(
        instance.tags.get(TAG_GROUP).map(String::as_str),
        Some("worker")
    );
    assert_eq!(instance.tags.get(TAG_ZONE), Some(&zone("b")));
    assert_eq!(
        instance.tags.get(TAG_MACHINE).map(String::as_str),
        Some("worker-5d8f2-00001")
    );
    assert_eq!(instance.tags.get("team").map(String::as_str), Some("infra"));

    let got = ec2
        .get_instance(&created.provider_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.group, "worker");
    assert_eq!(got.zone, zone("b"));
    assert!(got.state == InstanceState::Running || got.state == InstanceState::Pending);
    // Another group sees nothing of it.
    assert!(ec2.list_group_instances("other").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_follows_every_page() {
    let moto = moto();
    let mut config = moto.config();
    config.page_size = 5;
    let ec2 = client(config);
    for n in 0..12 {
        ec2.create_instance(&request("paged", ["a", "b", "c"][n % 3], n))
            .await
            .unwrap();
    }
    ec2.create_instance(&request("unrelated", "a", 0))
        .await
        .unwrap();
    let before = ec2.api_calls().describe_instances;
    let listed = ec2.list_group_instances("paged").await.unwrap();
    let pages = ec2.api_calls().describe_instances - before;
    assert_eq!(listed.len(), 12);
    let mut machines: Vec<_> = listed.iter().map(|i| i.machine.clone()).collect();
    machines.sort();
    machines.dedup();
    assert_eq!(machines.len(), 12, "every machine once");
    assert!(listed.iter().all(|i| i.group == "paged"));
    assert!(
        pages >= 3,
        "12 instances in pages of 5 need at least 3 requests, made {pages}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_and_terminate_again() {
    let moto = moto();
    let ec2 = client(moto.config());
    let created = ec2
        .create_instance(&request("worker", "a", 1))
        .await
        .unwrap();
    ec2.delete_instance(&created.provider_id).await.unwrap();
    ec2.delete_instance(&created.provider_id).await.unwrap();
    assert!(ec2.list_group_instances("worker").await.unwrap().is_empty());
    assert_eq!(ec2.get_instance(&created.provider_id).await.unwrap(), None);
    // A machine the cloud never had is already gone.
    let unknown = format!("aws:///{}/i-0123456789abcdef0", zone("a"));
    ec2.delete_instance(&unknown).await.unwrap();
    assert_eq!(ec2.get_instance(&unknown).await.unwrap(), None);
    assert!(matches!(
        ec2.delete_instance("openstack:///x").await,
        Err(CloudError::InvalidRequest { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_machine_twice_is_one_instance() {
    let moto = moto();
    let ec2 = client(moto.config());
    let req = request("worker", "c", 7);
    let first = ec2.create_instance(&req).await.unwrap();
    // A retry after a lost answer: same name, same token.
    let second = ec2.create_instance(&req).await.unwrap();
    assert_eq!(first.instance_id, second.instance_id);
    // Even from a fresh client (a restarted controller).
    let third = client(moto.config()).create_instance(&req).await.unwrap();
    assert_eq!(first.instance_id, third.instance_id);
    assert_eq!(ec2.list_group_instances("worker").await.unwrap().len(), 1);
    assert_eq!(ec2.api_calls().run_instances, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_auth_failed_with_the_api_message() {
    let moto = MotoServer::start_with_auth().unwrap();
    let ec2 = client(moto.config());
    let err = ec2.list_group_instances("worker").await.unwrap_err();
    match &err {
        CloudError::AuthFailed { code, message, .. } => {
            assert_eq!(code, "AuthFailure");
            assert!(message.contains("not able to validate"), "{message}");
        }
        other => panic!("expected AuthFailed, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(
        ec2.api_calls().describe_instances,
        1,
        "auth failures are not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_carry_code_and_message() {
    let moto = moto();
    let ec2 = client(moto.config());
    let mut req = request("worker", "a", 1);
    req.class
        .subnets
        .insert(zone("a"), "subnet-doesnotexist".into());
    let err = ec2.create_instance(&req).await.unwrap_err();
    match &err {
        CloudError::InvalidRequest { code, message, .. } => {
            assert_eq!(code, "InvalidSubnetID.NotFound");
            assert!(message.contains("subnet-doesnotexist"), "{message}");
        }
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
    assert!(err.to_string().contains("InvalidSubnetID.NotFound"));
    assert_eq!(
        ec2.api_calls().run_instances,
        1,
        "invalid requests are not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_up_then_down_by_group() {
    let moto = moto();
    let ec2 = Arc::new(client(moto.config()));
    let zones = ["a", "b", "c"];
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..9 {
        let ec2 = ec2.clone();
        tasks.spawn(async move {
            ec2.create_instance(&request("burst", zones[n % 3], n))
                .await
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap().unwrap();
    }
    let up = ec2.list_group_instances("burst").await.unwrap();
    assert_eq!(up.len(), 9);
    for z in zones {
        assert_eq!(
            up.iter().filter(|i| i.zone == zone(z)).count(),
            3,
            "zone {z}"
        );
    }
    let mut deletions = tokio::task::JoinSet::new();
    for instance in &up {
        let ec2 = ec2.clone();
        let id = instance.provider_id.clone();
        deletions.spawn(async move { ec2.delete_instance(&id).await });
    }
    while let Some(result) = deletions.join_next().await {
        result.unwrap().unwrap();
    }
    assert!(ec2.list_group_instances("burst").await.unwrap().is_empty());
    let calls = ec2.api_calls();
    assert_eq!(calls.run_instances, 9);
    assert_eq!(calls.terminate_instances, 9);
}

/// What the proxy answers instead of forwarding.
#[derive(Clone, Copy)]
enum Injected {
    /// 503 with EC2's `RequestLimitExceeded` body.
    RequestLimitExceeded,
    /// A bare 503.
    ServiceUnavailable,
    /// `RunInstances` forwarded to moto (so applied) but its answer dropped: the connection
    /// closes without a response, as after a timeout. Other requests pass.
    LoseRunInstancesAnswer,
    /// No answer at all for a long while (the client's request timeout must fire).
    Hang,
}

/// A proxy in front of moto that answers the first `failures` requests with `injected`, then
/// forwards (one request per connection).
async fn throttling_proxy(
    upstream: u16,
    failures: usize,
    injected: Injected,
) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(serve(socket, upstream, failures, counter, injected));
        }
    });
    (port, seen)
}

async fn read_request(socket: &mut TcpStream) -> Vec<u8> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        if n == 0 {
            return data;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if data.len() >= end + 4 + length {
                return data;
            }
        }
    }
}

async fn serve(
    mut socket: TcpStream,
    upstream: u16,
    failures: usize,
    counter: Arc<AtomicUsize>,
    injected: Injected,
) {
    let request = read_request(&mut socket).await;
    let counts = match injected {
        Injected::LoseRunInstancesAnswer => {
            String::from_utf8_lossy(&request).contains("Action=RunInstances")
        }
        _ => true,
    };
    let fail = counts && counter.fetch_add(1, Ordering::SeqCst) < failures;
    if fail && matches!(injected, Injected::LoseRunInstancesAnswer) {
        forward(&request, upstream).await;
        return; // dropping the socket: the client sees the connection close unanswered
    }
    if fail && matches!(injected, Injected::Hang) {
        tokio::time::sleep(Duration::from_secs(30)).await;
        return;
    }
    let answer = if fail {
        let body = match injected {
            Injected::RequestLimitExceeded => {
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
            }
            Injected::ServiceUnavailable | Injected::LoseRunInstancesAnswer | Injected::Hang => "",
        };
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    } else {
        forward(&request, upstream).await
    };
    let _ = socket.write_all(&answer).await;
    let _ = socket.shutdown().await;
}

/// Sends `request` to moto and returns its answer.
async fn forward(request: &[u8], upstream: u16) -> Vec<u8> {
    // With `connection: close` the answer ends with the upstream's EOF.
    let text = String::from_utf8_lossy(request).replacen("\r\n", "\r\nconnection: close\r\n", 1);
    let mut up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
    up.write_all(text.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    up.read_to_end(&mut answer).await.unwrap();
    answer
}

fn via(proxy_port: u16, max_attempts: u32) -> Ec2Config {
    let mut config = Ec2Config::new(REGION, Credentials::new("AKIAMOTOTEST", "moto-secret"))
        .with_endpoint(format!("http://127.0.0.1:{proxy_port}"));
    config.max_attempts = max_attempts;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_until_it_passes() {
    let moto = moto();
    let (port, seen) = throttling_proxy(moto.port(), 3, Injected::RequestLimitExceeded).await;
    let ec2 = client(via(port, 5));
    let created = ec2
        .create_instance(&request("worker", "a", 1))
        .await
        .unwrap();
    // 3 throttled lookups, the lookup that passes, then RunInstances.
    assert_eq!(seen.load(Ordering::SeqCst), 5);
    assert_eq!(ec2.api_calls().describe_instances, 4);
    assert_eq!(ec2.api_calls().run_instances, 1);
    let listed = client(moto.config())
        .list_group_instances("worker")
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].instance_id, created.instance_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_5xx_is_retried_too() {
    let moto = moto();
    let (port, seen) = throttling_proxy(moto.port(), 2, Injected::ServiceUnavailable).await;
    let ec2 = client(via(port, 3));
    assert!(ec2.list_group_instances("worker").await.unwrap().is_empty());
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_beyond_max_attempts_is_throttled() {
    let moto = moto();
    let (port, seen) = throttling_proxy(moto.port(), 100, Injected::RequestLimitExceeded).await;
    let ec2 = client(via(port, 4));
    let err = ec2
        .create_instance(&request("worker", "a", 1))
        .await
        .unwrap_err();
    match &err {
        CloudError::Throttled { message, .. } => {
            assert!(message.contains("RequestLimitExceeded"), "{message}");
            assert!(message.contains("Request limit exceeded."), "{message}");
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(seen.load(Ordering::SeqCst), 4);
    assert_eq!(ec2.api_calls().run_instances, 0, "nothing was created");
    assert!(
        client(moto.config())
            .list_group_instances("worker")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_empties_the_cloud() {
    let moto = moto();
    let ec2 = client(moto.config());
    ec2.create_instance(&request("worker", "a", 1))
        .await
        .unwrap();
    tokio::task::block_in_place(|| moto.reset()).unwrap();
    assert!(ec2.list_group_instances("worker").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lookup_only_the_client_token_guards_and_moto_ignores_it() {
    // Why the lookup is on by default: moto (like some EC2-compatible clouds) ignores
    // ClientToken, so a repeated creation relying on the token alone makes a second machine.
    let moto = moto();
    let mut config = moto.config();
    config.lookup_before_create = false;
    let ec2 = client(config);
    let req = request("worker", "a", 1);
    let first = ec2.create_instance(&req).await.unwrap();
    let second = ec2.create_instance(&req).await.unwrap();
    let calls = ec2.api_calls();
    assert_eq!(
        (calls.run_instances, calls.describe_instances),
        (2, 0),
        "one call per creation"
    );
    assert_ne!(first.instance_id, second.instance_id);
    assert_eq!(ec2.list_group_instances("worker").await.unwrap().len(), 2);
    // The default client finds the machine by name instead of making a third.
    let guarded = client(moto.config());
    let again = guarded.create_instance(&req).await.unwrap();
    assert!([&first.instance_id, &second.instance_id].contains(&&again.instance_id));
    assert_eq!(guarded.api_calls().run_instances, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_shares_look_ups_and_a_repeated_burst_creates_nothing() {
    let moto = moto();
    let ec2 = Arc::new(client(moto.config()));
    let burst = |ec2: Arc<Ec2Client>| async move {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..40 {
            let ec2 = ec2.clone();
            tasks.spawn(async move { ec2.create_instance(&request("burst", "a", n)).await });
        }
        let mut ids = Vec::new();
        while let Some(result) = tasks.join_next().await {
            ids.push(result.unwrap().unwrap().instance_id);
        }
        ids.sort();
        ids
    };
    let first = burst(ec2.clone()).await;
    let calls = ec2.api_calls();
    assert_eq!(calls.run_instances, 40);
    assert!(
        calls.describe_instances < 20,
        "40 creations should share look-ups, made {}",
        calls.describe_instances
    );
    // The same 40 machines again (a controller retrying every one): all found, none made.
    let second = burst(ec2.clone()).await;
    assert_eq!(first, second);
    assert_eq!(ec2.api_calls().run_instances, 40);
    assert_eq!(ec2.list_group_instances("burst").await.unwrap().len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_run_instances_answer_is_retried_without_a_second_machine() {
    let moto = moto();
    let (port, seen) = throttling_proxy(moto.port(), 1, Injected::LoseRunInstancesAnswer).await;
    let ec2 = client(via(port, 5));
    let created = ec2
        .create_instance(&request("worker", "a", 1))
        .await
        .unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "one RunInstances reached moto"
    );
    let listed = client(moto.config())
        .list_group_instances("worker")
        .await
        .unwrap();
    assert_eq!(
        listed.len(),
        1,
        "moto ignores client tokens: a blind re-send would make two"
    );
    assert_eq!(listed[0].instance_id, created.instance_id);
    let calls = ec2.api_calls();
    assert_eq!(calls.run_instances, 1);
    assert_eq!(
        calls.describe_instances, 2,
        "the look-up, then the look-up that finds it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_request_times_out_and_is_retried() {
    let moto = moto();
    // moto loads its EC2 model at the first request (seconds): do that before timing anything.
    client(moto.config())
        .list_group_instances("warm-up")
        .await
        .unwrap();
    let (port, seen) = throttling_proxy(moto.port(), 1, Injected::Hang).await;
    let mut config = via(port, 3);
    config.request_timeout = Duration::from_secs(2);
    let ec2 = client(config);
    assert!(ec2.list_group_instances("worker").await.unwrap().is_empty());
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "the hung request, then the retry"
    );

    // Every attempt hanging: Unavailable, naming the endpoint.
    let (port, _) = throttling_proxy(moto.port(), 100, Injected::Hang).await;
    let mut config = via(port, 2);
    config.request_timeout = Duration::from_millis(300);
    let err = client(config)
        .list_group_instances("worker")
        .await
        .unwrap_err();
    assert!(matches!(err, CloudError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_of_one_name_make_one_machine() {
    let moto = moto();
    let ec2 = Arc::new(client(moto.config()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let ec2 = ec2.clone();
        tasks.spawn(async move { ec2.create_instance(&request("worker", "b", 3)).await });
    }
    let mut ids = Vec::new();
    while let Some(result) = tasks.join_next().await {
        ids.push(result.unwrap().unwrap().instance_id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every caller gets the one machine: {ids:?}");
    assert_eq!(ec2.api_calls().run_instances, 1);
    assert_eq!(ec2.list_group_instances("worker").await.unwrap().len(), 1);
}
