//! [`Ec2Client`]: the cloud port over the EC2 Query API. Sends SigV4-signed form POSTs through
//! reqwest, at most `concurrency` at once, retries throttling, 5xx and connection errors with
//! jittered backoff, follows every page of a listing, and counts its API calls per action.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use aws_credential_types::Credentials as SigningCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use nodemgr_core::ports::cloud::{AwsProviderId, TAG_GROUP, TAG_MACHINE};
use nodemgr_core::ports::{
    Cause, CloudApi, CloudError, CloudInstance, CreateInstance, InstanceState,
};
use tokio::sync::Semaphore;

use crate::config::{ConfigError, Ec2Config};
use crate::query::{self, Action, Filter, Query};
use crate::response::{self, Ec2Instance};
use crate::retry::{classify, retried_here};

/// API calls sent so far per action (every attempt counts, retries included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApiCalls {
    /// `RunInstances` requests.
    pub run_instances: u64,
    /// `TerminateInstances` requests.
    pub terminate_instances: u64,
    /// `DescribeInstances` requests.
    pub describe_instances: u64,
}

impl ApiCalls {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.run_instances + self.terminate_instances + self.describe_instances
    }
}

/// The EC2 adapter.
///
/// Creation sends the request's client token (EC2 answers a repeated token with the first
/// machine) and, unless [`Ec2Config::lookup_before_create`] is off, first looks the machine up
/// by its `Name` and group tags: "one name, one machine" then holds even where tokens are not
/// honoured (moto and some EC2-compatible clouds ignore them) or have expired. Look-ups of one
/// group are coalesced: one `DescribeInstances` at a time per group, naming every machine
/// whose creation arrived while the previous one was in flight, so a burst of creations costs
/// a few look-ups rather than one each. A look-up is always sent after the creation asking for
/// it began, so it sees every machine an earlier call made, as a look-up of its own would.
/// Concurrent creations of one name take turns, so the second finds the first one's machine.
#[derive(Debug)]
pub struct Ec2Client {
    transport: Arc<Transport>,
    lookups: Mutex<HashMap<String, GroupLookups>>,
    /// One creation at a time per machine name: a concurrent second call waits, then finds
    /// the first one's machine.
    creating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Signs, sends, retries and counts requests.
#[derive(Debug)]
struct Transport {
    http: reqwest::Client,
    config: Ec2Config,
    url: String,
    permits: Arc<Semaphore>,
    calls: [AtomicU64; 3],
}

/// The look-ups of one group: the lane (one look-up in flight at a time) and the batch that
/// is still gathering names.
#[derive(Debug, Default)]
struct GroupLookups {
    lane: Arc<tokio::sync::Mutex<()>>,
    open: Option<Batch>,
}

/// Machines found by one look-up.
type Found = Result<Arc<Vec<Ec2Instance>>, CloudError>;

/// A look-up gathering names until it goes out (its `names` become `None` then).
struct Batch {
    names: Arc<Mutex<Option<Vec<String>>>>,
    result: Shared<BoxFuture<'static, Found>>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("names", &self.names).finish()
    }
}

/// EC2 takes at most 200 values per filter.
const NAMES_PER_LOOKUP: usize = 200;

fn action_index(action: Action) -> usize {
    match action {
        Action::RunInstances => 0,
        Action::TerminateInstances => 1,
        Action::DescribeInstances => 2,
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Ec2Client {
    /// A client for `config` (checked first). Installs ring as the process's rustls crypto
    /// provider when none is installed yet (the workspace's one TLS stack).
    ///
    /// # Errors
    /// [`ConfigError`] for settings that cannot work or an HTTP client that cannot be built.
    pub fn new(config: Ec2Config) -> Result<Self, ConfigError> {
        config.validate()?;
        // Err means another provider is installed already; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .pool_max_idle_per_host(config.concurrency)
            .build()
            .map_err(|e| ConfigError::Invalid {
                setting: "endpoint".to_owned(),
                message: format!("cannot build an HTTP client: {}", error_chain(&e)),
                source: Some(Cause::new(e)),
            })?;
        let mut url = config.endpoint.clone();
        if !url.ends_with('/') {
            url.push('/');
        }
        Ok(Self {
            transport: Arc::new(Transport {
                http,
                permits: Arc::new(Semaphore::new(config.concurrency)),
                config,
                url,
                calls: Default::default(),
            }),
            lookups: Mutex::new(HashMap::new()),
            creating: Mutex::new(HashMap::new()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Ec2Config {
        &self.transport.config
    }

    /// API calls sent so far.
    pub fn api_calls(&self) -> ApiCalls {
        let get = |action| self.transport.calls[action_index(action)].load(Ordering::Relaxed);
        ApiCalls {
            run_instances: get(Action::RunInstances),
            terminate_instances: get(Action::TerminateInstances),
            describe_instances: get(Action::DescribeInstances),
        }
    }

    /// Every instance matching all `filters`, across every page.
    ///
    /// # Errors
    /// [`CloudError`].
    pub async fn describe_instances(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<Ec2Instance>, CloudError> {
        self.transport.describe_instances(filters).await
    }

    /// One instance by ID, `None` when EC2 does not know it.
    ///
    /// # Errors
    /// [`CloudError`] (never `NotFound`).
    pub async fn describe_instance(
        &self,
        instance_id: &str,
    ) -> Result<Option<Ec2Instance>, CloudError> {
        self.transport.describe_instance(instance_id).await
    }

    async fn send(&self, q: &Query) -> Result<String, CloudError> {
        self.transport.send(q).await
    }

    /// The live machine named `machine` in `group`, if the cloud lists one. Joins the group's
    /// look-up that has not gone out yet, or starts one.
    ///
    /// # Errors
    /// [`CloudError`] of the look-up.
    pub async fn find_machine(
        &self,
        group: &str,
        machine: &str,
    ) -> Result<Option<Ec2Instance>, CloudError> {
        let result = {
            let mut lookups = self
                .lookups
                .lock()
                .map_err(|_| CloudError::other("look-up table poisoned".to_owned()))?;
            let entry = lookups.entry(group.to_owned()).or_default();
            let joined = entry.open.as_ref().and_then(|batch| {
                let mut names = batch.names.lock().ok()?;
                names.as_mut()?.push(machine.to_owned());
                Some(batch.result.clone())
            });
            match joined {
                Some(result) => result,
                None => {
                    let names = Arc::new(Mutex::new(Some(vec![machine.to_owned()])));
                    let result = lookup(
                        self.transport.clone(),
                        group.to_owned(),
                        entry.lane.clone(),
                        names.clone(),
                    )
                    .boxed()
                    .shared();
                    entry.open = Some(Batch {
                        names,
                        result: result.clone(),
                    });
                    result
                }
            }
        };
        let found = result.await?;
        Ok(found
            .iter()
            .find(|i| i.tags.get(TAG_MACHINE).map(String::as_str) == Some(machine))
            .cloned())
    }
}

/// One look-up of a group: waits for the group's lane, closes the batch (takes its names) and
/// asks for the live machines of the group carrying any of those names.
async fn lookup(
    transport: Arc<Transport>,
    group: String,
    lane: Arc<tokio::sync::Mutex<()>>,
    names: Arc<Mutex<Option<Vec<String>>>>,
) -> Found {
    let _lane = lane.lock().await;
    let names = names
        .lock()
        .map_err(|_| CloudError::other("look-up batch poisoned".to_owned()))?
        .take()
        .unwrap_or_default();
    let mut found = Vec::new();
    for chunk in names.chunks(NAMES_PER_LOOKUP) {
        let instances = transport
            .describe_instances(&[
                Filter::tag(TAG_GROUP, &group),
                Filter::new(format!("tag:{TAG_MACHINE}"), chunk.iter().cloned()),
                Filter::live(),
            ])
            .await?;
        found.extend(instances.into_iter().filter(|i| i.state.exists()));
    }
    Ok(Arc::new(found))
}

impl Transport {
    /// Every instance matching all `filters`, across every page.
    ///
    /// # Errors
    /// [`CloudError`].
    pub async fn describe_instances(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<Ec2Instance>, CloudError> {
        let mut instances = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let q = query::describe_instances(filters, self.config.page_size, token.as_deref());
            let body = self.send(&q).await?;
            let page = response::describe_instances(&body)
                .map_err(|e| CloudError::other(e.to_string()).with_source(e))?;
            instances.extend(page.instances);
            match page.next_token {
                // A server repeating the token would loop forever; stop instead.
                Some(next) if token.as_deref() != Some(next.as_str()) => token = Some(next),
                _ => return Ok(instances),
            }
        }
    }

    /// One instance by ID, `None` when EC2 does not know it.
    ///
    /// # Errors
    /// [`CloudError`] (never `NotFound`).
    pub async fn describe_instance(
        &self,
        instance_id: &str,
    ) -> Result<Option<Ec2Instance>, CloudError> {
        match self.send(&query::describe_instance(instance_id)).await {
            Ok(body) => Ok(response::describe_instances(&body)
                .map_err(|e| CloudError::other(e.to_string()).with_source(e))?
                .instances
                .into_iter()
                .find(|i| i.instance_id == instance_id)),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends `q`, retrying what [`retried_here`] allows up to `max_attempts` times in all.
    async fn send(&self, q: &Query) -> Result<String, CloudError> {
        self.send_attempts(q, self.config.max_attempts).await
    }

    /// Sends `q`, retrying what [`retried_here`] allows up to `max_attempts` times in all.
    async fn send_attempts(&self, q: &Query, max_attempts: u32) -> Result<String, CloudError> {
        let body = q.body();
        let mut retry = 0;
        loop {
            match self.attempt(q.action, &body).await {
                Err(error) if retried_here(&error) && retry + 1 < max_attempts => {
                    let wait = self
                        .config
                        .backoff
                        .full_jitter(retry, rand::random::<f64>());
                    tracing::debug!(action = q.action.name(), retry, ?wait, %error, "retrying EC2 call");
                    tokio::time::sleep(wait).await;
                    retry += 1;
                }
                Err(error) => {
                    tracing::debug!(action = q.action.name(), attempts = retry + 1, %error, "EC2 call failed");
                    return Err(error);
                }
                Ok(answer) => return Ok(answer),
            }
        }
    }

    async fn attempt(&self, action: Action, body: &str) -> Result<String, CloudError> {
        let _permit = self.permits.acquire().await.map_err(|e| {
            CloudError::other(format!("request limiter closed: {e}")).with_source(e)
        })?;
        self.calls[action_index(action)].fetch_add(1, Ordering::Relaxed);
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let signed = self.sign(body, content_type)?;
        let mut request = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.to_owned());
        for (name, value) in signed {
            request = request.header(name, value);
        }
        let unavailable = |what: &str, e: reqwest::Error| {
            CloudError::unavailable(format!(
                "{} {what} {}: {}",
                action.name(),
                self.config.endpoint,
                error_chain(&e)
            ))
            .with_source(e)
        };
        let answer = request.send().await.map_err(|e| unavailable("to", e))?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|e| unavailable("reading from", e))?;
        if status.is_success() {
            return Ok(text);
        }
        let api = response::api_error(&text);
        Err(classify(status.as_u16(), api.as_ref()))
    }

    /// The SigV4 headers of a POST of `body` (`authorization`, `x-amz-date`, and
    /// `x-amz-security-token` with temporary credentials).
    fn sign(&self, body: &str, content_type: &str) -> Result<Vec<(String, String)>, CloudError> {
        let creds = &self.config.credentials;
        let identity = SigningCredentials::new(
            &creds.access_key_id,
            &creds.secret_access_key,
            creds.session_token.clone(),
            None,
            "nodemgr",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.config.region)
            .name("ec2")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| CloudError::other(format!("cannot sign the request: {e}")).with_source(e))?
            .into();
        let headers = [("content-type", content_type)];
        let signable = SignableRequest::new(
            "POST",
            self.url.as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| CloudError::other(format!("cannot sign the request: {e}")).with_source(e))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| CloudError::other(format!("cannot sign the request: {e}")).with_source(e))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect())
    }
}

impl Ec2Client {
    fn instance_id_of(provider_id: &str) -> Result<String, CloudError> {
        AwsProviderId::parse(provider_id)
            .map(|id| id.instance_id)
            .ok_or_else(|| {
                CloudError::invalid_request(
                    "InvalidProviderID",
                    format!(
                        "{provider_id:?} is not an AWS provider ID (aws:///<zone>/<instance-id>)"
                    ),
                )
            })
    }
}

#[async_trait]
impl CloudApi for Ec2Client {
    /// With the look-up on, a `RunInstances` that failed in a way that may have been applied
    /// (throttled, 5xx, a lost answer) is retried through a new look-up, never re-sent blindly.
    async fn create_instance(&self, request: &CreateInstance) -> Result<CloudInstance, CloudError> {
        query::check_run_instances(request)?;
        let turn = {
            let mut creating = self
                .creating
                .lock()
                .map_err(|_| CloudError::other("creation table poisoned".to_owned()))?;
            creating.entry(request.machine.clone()).or_default().clone()
        };
        let result = {
            let _turn = turn.lock().await;
            self.create_in_turn(request).await
        };
        if let Ok(mut creating) = self.creating.lock()
            && Arc::strong_count(&turn) == 2
        {
            // Nobody else waits for this name: forget it.
            creating.remove(&request.machine);
        }
        result
    }

    async fn delete_instance(&self, provider_id: &str) -> Result<(), CloudError> {
        self.terminate(provider_id).await
    }

    async fn list_group_instances(&self, group: &str) -> Result<Vec<CloudInstance>, CloudError> {
        self.list_group(group).await
    }

    async fn get_instance(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudError> {
        self.lookup_provider_id(provider_id).await
    }
}

impl Ec2Client {
    /// A creation holding its name's turn.
    async fn create_in_turn(&self, request: &CreateInstance) -> Result<CloudInstance, CloudError> {
        let config = self.config();
        let q = query::run_instances(request, &config.root_device_name);
        let mut retry = 0;
        let body = loop {
            if !config.lookup_before_create {
                // The client token alone makes re-sending safe.
                break self.send(&q).await?;
            }
            if let Some(found) = self.find_machine(&request.group, &request.machine).await? {
                tracing::debug!(machine = %request.machine, instance = %found.instance_id, "machine exists already");
                return Ok(found.to_cloud_instance());
            }
            match self.transport.send_attempts(&q, 1).await {
                Ok(body) => break body,
                Err(error) if retried_here(&error) && retry + 1 < config.max_attempts => {
                    let wait = config.backoff.full_jitter(retry, rand::random::<f64>());
                    tracing::debug!(machine = %request.machine, retry, ?wait, %error, "RunInstances failed, looking up again before retrying");
                    tokio::time::sleep(wait).await;
                    retry += 1;
                }
                Err(error) => return Err(error),
            }
        };
        let created = response::run_instances(&body)
            .map_err(|e| CloudError::other(e.to_string()).with_source(e))?
            .into_iter()
            .next()
            .ok_or_else(|| {
                CloudError::other("RunInstances answered without an instance".to_owned())
            })?;
        let zone = if created.zone.is_empty() {
            request.zone.clone()
        } else {
            created.zone.clone()
        };
        tracing::info!(machine = %request.machine, instance = %created.instance_id, %zone, "machine created");
        Ok(CloudInstance {
            provider_id: AwsProviderId {
                zone,
                instance_id: created.instance_id.clone(),
            }
            .to_string(),
            instance_id: created.instance_id,
            group: request.group.clone(),
            zone: request.zone.clone(),
            machine: request.machine.clone(),
            state: created.state,
            launched: created
                .launch_time
                .as_deref()
                .and_then(nodemgr_core::model::Timestamp::parse_rfc3339),
        })
    }

    async fn terminate(&self, provider_id: &str) -> Result<(), CloudError> {
        let instance_id = Self::instance_id_of(provider_id)?;
        match self.send(&query::terminate_instances(&instance_id)).await {
            Ok(_) => {
                tracing::info!(%provider_id, "machine terminating");
                Ok(())
            }
            Err(CloudError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn list_group(&self, group: &str) -> Result<Vec<CloudInstance>, CloudError> {
        Ok(self
            .describe_instances(&[Filter::tag(TAG_GROUP, group), Filter::live()])
            .await?
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(Ec2Instance::to_cloud_instance)
            .collect())
    }

    async fn lookup_provider_id(
        &self,
        provider_id: &str,
    ) -> Result<Option<CloudInstance>, CloudError> {
        let instance_id = Self::instance_id_of(provider_id)?;
        Ok(self
            .describe_instance(&instance_id)
            .await?
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| i.to_cloud_instance()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Credentials;

    #[test]
    fn requests_are_signed_for_ec2_in_the_region() {
        let mut config = Ec2Config::new("eu-west-1", Credentials::new("AKIDEXAMPLE", "secret"))
            .with_endpoint("http://127.0.0.1:1");
        config.credentials.session_token = Some("session".into());
        let client = Ec2Client::new(config).unwrap();
        let headers = client
            .transport
            .sign(
                "Action=DescribeInstances",
                "application/x-www-form-urlencoded",
            )
            .unwrap();
        let auth = &headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
            "{auth}"
        );
        assert!(auth.contains("/eu-west-1/ec2/aws4_request"), "{auth}");
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date"),
            "{auth}"
        );
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "x-amz-security-token" && v == "session")
        );
        assert!(headers.iter().any(|(n, _)| n == "x-amz-date"));
    }

    #[test]
    fn provider_ids_must_be_aws() {
        assert_eq!(
            Ec2Client::instance_id_of("aws:///eu-west-1a/i-1").unwrap(),
            "i-1"
        );
        assert!(matches!(
            Ec2Client::instance_id_of("gce:///x/y"),
            Err(CloudError::InvalidRequest { code, .. }) if code == "InvalidProviderID"
        ));
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_retried_then_unavailable() {
        // A port nothing listens on: bind, learn the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = Ec2Config::new("eu-west-1", Credentials::new("a", "b"))
            .with_endpoint(format!("http://127.0.0.1:{port}"));
        config.max_attempts = 3;
        config.backoff = crate::retry::Backoff {
            base: std::time::Duration::from_millis(1),
            cap: std::time::Duration::from_millis(2),
        };
        let client = Ec2Client::new(config).unwrap();
        let err = client.list_group_instances("g").await.unwrap_err();
        assert!(matches!(err, CloudError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains(&port.to_string()), "{err}");
        // The HTTP client's error is the source, not only pasted into the message.
        let http = err
            .cause()
            .and_then(|c| c.get().downcast_ref::<reqwest::Error>());
        assert!(http.is_some_and(reqwest::Error::is_connect), "{err:?}");
        assert!(std::error::Error::source(&err).is_some());
        assert_eq!(client.api_calls().describe_instances, 3);
    }
}
