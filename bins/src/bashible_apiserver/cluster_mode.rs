//! Cluster mode of bashible-apiserver (`--from-cluster`): renders from what
//! `nodemgr_k8s::bashible_sources` watches (the groups' bootstrap tokens among it),
//! re-rendering [`Config::debounce`] after the last change (and every [`RESYNC`], which also
//! drops expired tokens and re-checks the Secrets); keeps the checksum and manual-bootstrap
//! Secrets (`nodemgr_k8s::bashible_secrets`); serves over TLS only, with the certificate of
//! `--tls-secret` (`nodemgr_k8s::tls`).
//!
//! It needs no bearer token to start: with no `--tokens-file` and no bootstrap token minted
//! yet it serves with no grant at all (every token gets 401) and with no group when there is
//! no NodeGroup, and each group's bootstrap token becomes a grant of that group as soon as
//! its Secret appears (`docs/bashible-apiserver.md`, "Bearer tokens").
//!
//! A render that cannot happen (settings that do not parse, the API unreachable) keeps
//! serving what was served; a group that stops rendering keeps its last good bundle
//! (see [`super::state`]). Secrets are written by every replica: they render the same values
//! from the same cluster, and the writes are guarded (see `nodemgr_k8s::bashible_secrets`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::Client;
use nodemgr_core::bashible::Renderer;
use nodemgr_k8s::bashible_secrets;
use nodemgr_k8s::bashible_sources::{BashibleSources, Snapshot};
use nodemgr_k8s::tls;

use super::auth::Grant;
use super::state::{Inputs, Served, Sources};
use super::{Config, Shared, router, serve, shutdown_signal};
use crate::observability::auth::{KubernetesAuthorizer, MetricsAuth, require};

/// How often everything is re-rendered without a change (expired bootstrap tokens go, the
/// Secrets are re-checked).
pub const RESYNC: Duration = Duration::from_secs(30);

fn tls_names(config: &Config) -> Vec<String> {
    if !config.tls_names.is_empty() {
        return config.tls_names.clone();
    }
    let ns = &config.namespace;
    vec![
        format!("bashible-apiserver.{ns}.svc"),
        format!("bashible-apiserver.{ns}.svc.cluster.local"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ]
}

/// What the cluster's bootstrap tokens give a render.
#[derive(Debug, Clone, Default, PartialEq)]
struct ClusterTokens {
    /// Each group's current token (baked into its bootstrap scripts).
    current: BTreeMap<String, nodemgr_core::bashible::BootstrapToken>,
    /// A grant of its group to every unexpired token with an expiration, until it expires.
    grants: Vec<Grant>,
}

/// What the groups' bootstrap tokens (watched with the rest) give a render at `now`.
fn group_tokens(snapshot: &Snapshot, now: nodemgr_core::model::Timestamp) -> ClusterTokens {
    let groups = &snapshot.groups;
    let tokens = &snapshot.tokens;
    let current = groups
        .keys()
        .filter_map(|group| {
            nodemgr_core::bootstrap_tokens::current_token(tokens, group, now)
                .and_then(|t| t.token.clone())
                .map(|t| (group.clone(), t))
        })
        .collect();
    let mut grants: Vec<Grant> = tokens
        .iter()
        .filter(|t| groups.contains_key(&t.group))
        .filter(|t| t.usable_at(now))
        .filter_map(|t| {
            let token = t.token.as_ref()?;
            let millis = u64::try_from(t.expiration?.as_millis()).ok()?;
            let expires = std::time::UNIX_EPOCH + Duration::from_millis(millis);
            Some(Grant::bootstrap_token(token.as_str(), &t.group, expires))
        })
        .collect();
    grants.sort_by_key(|g| g.expires);
    ClusterTokens { current, grants }
}

/// Renders the snapshot (off the async threads).
async fn render(
    sources: &Arc<Sources>,
    renderer: &Arc<Renderer>,
    snapshot: Snapshot,
    tokens: ClusterTokens,
    previous: Option<Arc<Served>>,
) -> anyhow::Result<Served> {
    for problem in &snapshot.problems {
        tracing::error!(%problem, "left out");
    }
    for (group, why) in &snapshot.unreadable_groups {
        tracing::error!(%group, %why, "NodeGroup does not parse; not rendered");
    }
    let inputs = Inputs {
        groups: snapshot.groups,
        customisations: snapshot.customisations,
        cluster: snapshot.cluster,
        group_tokens: tokens.current,
        extra_grants: tokens.grants,
    };
    let (sources, renderer) = (Arc::clone(sources), Arc::clone(renderer));
    tokio::task::spawn_blocking(move || sources.render(&inputs, &renderer, previous.as_deref()))
        .await
        .context("the render task failed")?
}

/// Writes the checksum and manual-bootstrap Secrets of `served`.
async fn publish(client: &Client, served: &Served) {
    let checksums: BTreeMap<String, String> = served
        .groups
        .iter()
        .map(|(group, entry)| (group.clone(), entry.bundle.checksum.clone()))
        .collect();
    match bashible_secrets::publish_checksums(client, &checksums).await {
        Ok(true) => tracing::info!(groups = checksums.len(), "configuration checksums written"),
        Ok(false) => {}
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "cannot write the configuration checksums")
        }
    }
    let scripts: BTreeMap<String, String> = served
        .groups
        .iter()
        .filter(|(_, entry)| entry.manual_bootstrap)
        .filter_map(|(group, entry)| {
            entry
                .manual_bootstrap_script()
                .map(|script| (group.clone(), script.to_owned()))
        })
        .collect();
    match bashible_secrets::sync_manual_bootstrap(client, &scripts).await {
        Ok(0) => {}
        Ok(changed) => tracing::info!(changed, "manual bootstrap Secrets written"),
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "cannot write the manual bootstrap Secrets")
        }
    }
}

/// Puts each group's render error (stale or never rendered) into its NodeGroup's status, and
/// takes it out once it renders; stamps `status.deckhouse.processed` with the spec each served
/// bundle was rendered from (`nodemgr_k8s::bashible_status`).
async fn report_failures(client: &Client, watched: &BashibleSources, served: &Served) {
    let mut failures: BTreeMap<String, String> = served.failed.clone();
    for (group, entry) in &served.groups {
        if let Some(why) = &entry.stale_because {
            failures.insert(group.clone(), why.clone());
        }
    }
    let processed: BTreeMap<String, String> = served
        .groups
        .iter()
        .map(|(group, entry)| (group.clone(), entry.spec_checksum.clone()))
        .collect();
    let now = nodemgr_k8s::controllers::now().to_rfc3339();
    nodemgr_k8s::bashible_status::sync_render_conditions(
        client,
        &watched.group_conditions(),
        &failures,
        &processed,
        &now,
    )
    .await;
}

/// What the last render was made from.
type LastInputs = Option<(Snapshot, ClusterTokens)>;

/// One render and publish; the served state is replaced only when the render works. Inputs
/// equal to `last`'s are not rendered again unless `force` (the periodic resync, which also
/// re-checks the Secrets).
async fn refresh(
    client: &Client,
    sources: &Arc<Sources>,
    renderer: &Arc<Renderer>,
    watched: &BashibleSources,
    shared: &Arc<Shared>,
    last: &mut LastInputs,
    force: bool,
) {
    let snapshot = match watched.snapshot() {
        Ok(snapshot) => snapshot,
        Err(error) => {
            tracing::error!(%error, "cannot render; still serving the previous bundles");
            return;
        }
    };
    let tokens = group_tokens(&snapshot, nodemgr_k8s::controllers::now());
    let inputs = Some((snapshot.clone(), tokens.clone()));
    if !force && *last == inputs {
        // Nothing to render; a status rewritten by another writer may still need the
        // render condition back.
        report_failures(client, watched, &shared.current()).await;
        return;
    }
    *last = inputs;
    match render(sources, renderer, snapshot, tokens, Some(shared.current())).await {
        Ok(served) => {
            tracing::info!(
                groups = served.groups.len(),
                failed = served.failed.len(),
                "rendered"
            );
            shared.replace(served);
            publish(client, &shared.current()).await;
            report_failures(client, watched, &shared.current()).await;
        }
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "render failed; still serving the previous bundles");
        }
    }
}

/// Serves in cluster mode until SIGINT or SIGTERM.
///
/// # Errors
/// No kube configuration, the TLS Secret unusable, the first render failing, or the address
/// not bindable.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = nodemgr_k8s::cluster::client(config.kubeconfig.as_deref())
        .await
        .context("cannot configure the Kubernetes client")?;
    let pair = tls::secret::load_or_create(
        &client,
        &config.namespace,
        &config.tls_secret,
        &tls_names(&config),
    )
    .await?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&pair)?);
    let mut sources = config.sources()?;
    // Nodes that install the agent trust this server by the Secret's CA (written into their
    // bootstrap scripts): the system CAs do not know a self-signed certificate.
    if sources.public_url.is_some() {
        sources.agent_ca = Some(
            tls::secret::trust_anchor(&client, &config.namespace, &config.tls_secret, &pair)
                .await?,
        );
    }
    let sources = Arc::new(sources);
    let renderer = Arc::new(Renderer::new());
    let watched = BashibleSources::start(&client, &config.namespace);
    watched.wait_ready().await?;
    let snapshot = watched.snapshot()?;
    let tokens = group_tokens(&snapshot, nodemgr_k8s::controllers::now());
    let mut last: LastInputs = Some((snapshot.clone(), tokens.clone()));
    let served = render(&sources, &renderer, snapshot, tokens, None).await?;
    tracing::info!(
        groups = served.groups.len(),
        failed = served.failed.len(),
        "rendered from the cluster"
    );
    let shared = Arc::new(Shared::new(served));
    publish(&client, &shared.current()).await;
    report_failures(&client, &watched, &shared.current()).await;

    let (listener, address) = super::listen_announced(config.listen).await?;
    tracing::info!(%address, "serving bashible bundles over TLS");

    let metrics_client = client.clone();
    let loop_shared = Arc::clone(&shared);
    let debounce = config.debounce;
    let refresher = tokio::spawn(async move {
        let mut changes = watched.changes();
        changes.borrow_and_update();
        loop {
            let force = tokio::select! {
                changed = changes.changed() => if changed.is_err() { break } else { false },
                () = tokio::time::sleep(RESYNC) => true,
            };
            tokio::time::sleep(debounce).await;
            changes.borrow_and_update();
            refresh(
                &client,
                &sources,
                &renderer,
                &watched,
                &loop_shared,
                &mut last,
                force,
            )
            .await;
        }
    });
    let app = match config.metrics_auth {
        MetricsAuth::None => router(shared),
        MetricsAuth::Kubernetes => {
            tracing::info!("/metrics needs a Kubernetes token allowed to get it");
            router(shared).layer(axum::middleware::from_fn_with_state(
                KubernetesAuthorizer::new(metrics_client),
                require,
            ))
        }
    };
    let served = serve::serve(
        listener,
        app,
        Some(acceptor),
        config.connections.limits(),
        serve::ConnectionStats::default(),
        shutdown_signal(),
    )
    .await
    .context("the HTTPS server failed");
    refresher.abort();
    served
}
