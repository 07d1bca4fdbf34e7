//! The bootstrap token controller: keeps one bootstrap token per NodeGroup in `kube-system`
//! with the core's [`nodemgr_core::bootstrap_tokens::plan_bootstrap_tokens`] (create before expiry, delete the
//! expired), generates the random tokens, and publishes each group's current token in a
//! [`CurrentTokens`] that the static instance and machine controllers read through a
//! [`TokenSource`] (see `docs/bootstrap.md`).
//!
//! Writers in other processes (the `manual-bootstrap-for-<group>` Secrets) call
//! [`current_token`], which reads the labelled Secrets and picks the same token.
//!
//! Tokens are never logged: log lines name the Secret (whose name is the public token id)
//! and the group only.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use nodemgr_core::bashible::BootstrapToken;
use nodemgr_core::bootstrap_tokens::{
    AUTH_EXTRA_GROUP, LABEL_NODE_GROUP, NAMESPACE, ObservedToken, SECRET_TYPE, TokenCommand,
    TokenPolicy, plan_bootstrap_tokens, secret_name,
};
use nodemgr_core::model::Timestamp;
use tokio::sync::watch;

use super::{Backoff, RETRY_FIRST, after_pass, now, wait};
use crate::crd;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

/// The controller's name in metrics and logs.
const CONTROLLER: &str = "bootstrap-tokens";
/// Letters of token ids and secrets (the API server's alphabet).
const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A failed pass.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Reading NodeGroups or Secrets failed.
    #[error("failed to list {what}")]
    List {
        /// What was listed.
        what: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing a Secret failed.
    #[error("failed to {action} the bootstrap token Secret {secret} of NodeGroup {group}")]
    Write {
        /// `create` or `delete`.
        action: &'static str,
        /// The Secret.
        secret: String,
        /// Its group.
        group: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Each NodeGroup's current token, as the controller last decided; shared with the controllers
/// that render bootstrap scripts.
#[derive(Clone, Default)]
pub struct CurrentTokens(Arc<RwLock<BTreeMap<String, BootstrapToken>>>);

impl std::fmt::Debug for CurrentTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let groups: Vec<String> = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        f.debug_struct("CurrentTokens")
            .field("groups", &groups)
            .finish()
    }
}

impl CurrentTokens {
    /// The current token of `group`, if the controller has one.
    pub fn get(&self, group: &str) -> Option<BootstrapToken> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(group)
            .cloned()
    }

    fn publish(&self, tokens: BTreeMap<String, BootstrapToken>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tokens;
    }
}

/// Where a controller that renders bootstrap scripts gets a group's token.
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// One token for every group (`--bootstrap-token-file`, the override).
    Fixed(BootstrapToken),
    /// Each group's own token, kept by the bootstrap token controller.
    PerGroup(CurrentTokens),
}

impl From<BootstrapToken> for TokenSource {
    fn from(token: BootstrapToken) -> Self {
        TokenSource::Fixed(token)
    }
}

/// No token for a group yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no bootstrap token for NodeGroup {group} yet: the bootstrap token controller mints one per \
     group (is it running?), or pass --bootstrap-token-file"
)]
pub struct NoToken {
    /// The group.
    pub group: String,
}

impl TokenSource {
    /// The token nodes of `group` join with.
    ///
    /// # Errors
    /// [`NoToken`] when the controller has not minted one for `group` yet.
    pub fn for_group(&self, group: &str) -> Result<BootstrapToken, NoToken> {
        match self {
            TokenSource::Fixed(token) => Ok(token.clone()),
            TokenSource::PerGroup(current) => current.get(group).ok_or_else(|| NoToken {
                group: group.to_owned(),
            }),
        }
    }
}

/// Settings of the controller.
#[derive(Debug, Clone, Copy)]
pub struct TokenSettings {
    /// Period of the controller (it also runs at the plan's deadline). Default 60 s.
    pub period: Duration,
    /// Lifetime and renewal margin.
    pub policy: TokenPolicy,
}

impl Default for TokenSettings {
    fn default() -> Self {
        TokenSettings {
            period: Duration::from_secs(60),
            policy: TokenPolicy::default(),
        }
    }
}

/// A new random token: 6 + 16 letters and digits from the thread's cryptographic generator
/// (rejection sampling, so every letter is equally likely).
pub fn generate_token() -> BootstrapToken {
    loop {
        let mut letters = String::with_capacity(23);
        while letters.len() < 22 {
            for byte in rand::random::<[u8; 32]>() {
                // 252 = 7 × 36: bytes above it would favour the first letters.
                if byte < 252 && letters.len() < 22 {
                    letters.push(char::from(ALPHABET[usize::from(byte % 36)]));
                }
            }
        }
        letters.insert(6, '.');
        // Always valid by construction; `new` checks the form once more.
        if let Ok(token) = BootstrapToken::new(&letters) {
            return token;
        }
    }
}

/// Reads a labelled bootstrap token Secret.
pub fn observe(secret: &Secret) -> Option<ObservedToken> {
    let group = secret.labels().get(LABEL_NODE_GROUP)?.clone();
    let data = secret.data.as_ref();
    let field = |key: &str| {
        data.and_then(|d| d.get(key))
            .and_then(|v| std::str::from_utf8(&v.0).ok())
            .map(str::to_owned)
    };
    let token = match (field("token-id"), field("token-secret")) {
        (Some(id), Some(secret)) => BootstrapToken::new(&format!("{id}.{secret}")).ok(),
        _ => None,
    };
    Some(ObservedToken {
        secret: secret.name_any(),
        group,
        token,
        expiration: field("expiration").and_then(|e| Timestamp::parse_rfc3339(e.trim())),
    })
}

async fn list_token_secrets(client: &Client) -> Result<Vec<Secret>, TokenError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    secrets
        .list(
            &ListParams::default()
                .labels(LABEL_NODE_GROUP)
                .fields(&format!("type={SECRET_TYPE}")),
        )
        .await
        .map(|list| list.items)
        .map_err(|source| TokenError::List {
            what: "bootstrap token Secrets in kube-system",
            source,
        })
}

/// Lists the labelled bootstrap token Secrets of `kube-system`.
///
/// # Errors
/// The list fails.
pub async fn read_tokens(client: &Client) -> Result<Vec<ObservedToken>, TokenError> {
    Ok(list_token_secrets(client)
        .await?
        .iter()
        .filter_map(observe)
        .collect())
}

/// The token new nodes of `group` join with at `now`, read from the cluster (for writers
/// outside node-manager, e.g. of `manual-bootstrap-for-<group>`); `None` before the controller
/// has minted one.
///
/// # Errors
/// The list fails.
pub async fn current_token(
    client: &Client,
    group: &str,
    now: Timestamp,
) -> Result<Option<BootstrapToken>, TokenError> {
    let tokens = read_tokens(client).await?;
    Ok(
        nodemgr_core::bootstrap_tokens::current_token(&tokens, group, now)
            .and_then(|t| t.token.clone()),
    )
}

/// The Secret of a new token.
pub fn token_secret(token: &BootstrapToken, group: &str, expires: Timestamp) -> Secret {
    let (id, secret) = token.as_str().split_once('.').unwrap_or_default();
    let data: BTreeMap<String, ByteString> = [
        ("token-id", id.to_owned()),
        ("token-secret", secret.to_owned()),
        ("expiration", expires.to_rfc3339()),
        ("usage-bootstrap-authentication", "true".to_owned()),
        ("usage-bootstrap-signing", "true".to_owned()),
        ("auth-extra-groups", AUTH_EXTRA_GROUP.to_owned()),
        (
            "description",
            format!("Bootstrap token of NodeGroup {group}, kept by nodemgr node-manager"),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(id)),
            namespace: Some(NAMESPACE.to_owned()),
            labels: Some(
                [
                    (LABEL_NODE_GROUP.to_owned(), group.to_owned()),
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        "nodemgr".to_owned(),
                    ),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The controller.
pub struct BootstrapTokenController {
    client: Client,
    settings: TokenSettings,
    current: CurrentTokens,
    metrics: Metrics,
}

impl std::fmt::Debug for BootstrapTokenController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapTokenController")
            .field("settings", &self.settings)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

impl BootstrapTokenController {
    /// A controller publishing into `current`.
    pub fn new(
        client: Client,
        settings: TokenSettings,
        current: CurrentTokens,
        metrics: Metrics,
    ) -> Self {
        BootstrapTokenController {
            client,
            settings,
            current,
            metrics,
        }
    }

    /// One pass at `now`: reads the groups and tokens, creates and deletes as planned,
    /// publishes the current tokens. Returns the plan's next deadline.
    ///
    /// # Errors
    /// A list or a write failed (what was done before stays done; the next pass continues).
    pub async fn pass(&self, now: Timestamp) -> Result<Option<Timestamp>, TokenError> {
        let groups = Api::<crd::NodeGroup>::all(self.client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map_err(|source| TokenError::List {
                what: "NodeGroups",
                source,
            })?;
        let names: Vec<String> = groups.items.iter().map(ResourceExt::name_any).collect();
        let listed = list_token_secrets(&self.client).await?;
        let tokens: Vec<ObservedToken> = listed.iter().filter_map(observe).collect();
        let decided = plan_bootstrap_tokens(
            names.iter().map(String::as_str),
            &tokens,
            now,
            &self.settings.policy,
        );
        for (secret, why) in &decided.unusable {
            tracing::warn!(%secret, why, "labelled bootstrap token Secret not used");
        }
        let mut current = decided.current.clone();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), NAMESPACE);
        let mut first_error = None;
        for command in &decided.commands {
            let result = match command {
                TokenCommand::Create { group, expires } => {
                    let token = generate_token();
                    let secret = token_secret(&token, group, *expires);
                    let name = secret.name_any();
                    match secrets.create(&PostParams::default(), &secret).await {
                        Ok(_) => {
                            tracing::info!(%group, secret = %name, expires = %expires.to_rfc3339(), "bootstrap token created");
                            current.insert(group.clone(), token);
                            Ok(())
                        }
                        Err(source) => Err(TokenError::Write {
                            action: "create",
                            secret: name,
                            group: group.clone(),
                            source,
                        }),
                    }
                }
                TokenCommand::Delete { secret, group, .. } => {
                    // Deleted only as seen: a Secret rewritten since is decided next pass.
                    let seen = listed.iter().find(|s| s.name_any() == *secret);
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: seen.and_then(|s| s.metadata.uid.clone()),
                            resource_version: seen.and_then(|s| s.resource_version()),
                        }),
                        ..DeleteParams::default()
                    };
                    match secrets.delete(secret, &params).await {
                        Ok(_) => {
                            tracing::info!(%group, %secret, "expired bootstrap token deleted");
                            Ok(())
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                        Err(source) => Err(TokenError::Write {
                            action: "delete",
                            secret: secret.clone(),
                            group: group.clone(),
                            source,
                        }),
                    }
                }
            };
            if let Err(error) = result {
                tracing::warn!(error = %ErrorChain(&error), "bootstrap token change failed; retried next pass");
                first_error.get_or_insert(error);
            }
        }
        self.current.publish(current);
        match first_error {
            Some(error) => Err(error),
            None => Ok(decided.next_deadline),
        }
    }

    /// Runs passes until `stop`: every period, at the plan's deadline, when a NodeGroup is
    /// added, changed or deleted (so a new group has its token within moments), and after a
    /// failure with a growing backoff.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        use futures::{FutureExt as _, StreamExt as _};
        let period = self.settings.period;
        let backoff = Backoff::new(RETRY_FIRST, period);
        let mut groups = kube::runtime::watcher(
            Api::<crd::NodeGroup>::all(self.client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .boxed();
        loop {
            let started = Instant::now();
            let result = self.pass(now()).await;
            let (next, deadline) =
                after_pass(CONTROLLER, &self.metrics, &backoff, period, started, result);
            tokio::select! {
                running = wait(next, deadline, &mut stop) => {
                    if !running {
                        break;
                    }
                }
                event = groups.next() => {
                    if event.is_none() && !wait(next, deadline, &mut stop).await {
                        // The watch ended (it does not normally): fall back to the period.
                        break;
                    }
                    if let Some(Err(error)) = event {
                        tracing::debug!(%error, "NodeGroup watch");
                        // The watcher retries by itself; do not spin on its errors.
                        tokio::time::sleep(RETRY_FIRST).await;
                    }
                    // One pass for everything that arrived together.
                    while let Some(Some(_)) = groups.next().now_or_never() {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_well_formed_and_differ() {
        let tokens: std::collections::BTreeSet<String> = (0..200)
            .map(|_| generate_token().as_str().to_owned())
            .collect();
        assert_eq!(tokens.len(), 200);
        let mut counts = [0u32; 36];
        for t in &tokens {
            assert!(BootstrapToken::new(t).is_ok(), "{t}");
            for b in t.bytes().filter(|b| *b != b'.') {
                if let Some(i) = ALPHABET.iter().position(|a| *a == b) {
                    counts[i] += 1;
                }
            }
        }
        // 4400 letters over 36: every letter shows up.
        assert!(counts.iter().all(|c| *c > 0), "{counts:?}");
    }

    #[test]
    fn a_secret_reads_back_as_the_token_it_holds() {
        let token = generate_token();
        let expires = Timestamp::from_secs(1_800_000_000);
        let secret = token_secret(&token, "worker", expires);
        assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
        let id = token.as_str().split('.').next().unwrap_or_default();
        assert_eq!(secret.name_any(), format!("bootstrap-token-{id}"));
        let seen = observe(&secret).expect("labelled");
        assert_eq!(seen.group, "worker");
        assert_eq!(seen.token.as_ref(), Some(&token));
        assert_eq!(seen.expiration, Some(expires));
        let fixed = TokenSource::from(token.clone());
        assert_eq!(fixed.for_group("any").ok(), Some(token));
        let per_group = TokenSource::PerGroup(CurrentTokens::default());
        let e = per_group.for_group("worker").unwrap_err();
        assert!(e.to_string().contains("--bootstrap-token-file"), "{e}");
    }
}
