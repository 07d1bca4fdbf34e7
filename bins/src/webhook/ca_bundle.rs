//! Keeps the `caBundle` of the webhook's ValidatingWebhookConfiguration and of the CRDs'
//! conversion webhooks trusting the CA that signed the serving certificate, so a renewed
//! certificate (new CA) is trusted by the API server without a manual step.
//!
//! Every replica keeps the bundles, each with the CA of the certificate files it mounts. They
//! mount the same Secret, but during a rotation the kubelet refreshes each pod's files on its
//! own schedule, so for a while some replicas serve the new certificate and others the old one.
//! Writing "my CA" would then flap between the two CAs, and calls routed to the other replicas
//! would fail meanwhile. So a bundle is never narrowed to one replica's view at once
//! ([`Settled::decide`]): a replica whose CA is missing **adds** it in front of the CAs already
//! there; a replica whose CA is there drops the others only after its CA has been in the bundle
//! for a grace period (`--ca-bundle-grace-seconds`, longer than the kubelet takes to refresh a
//! Secret volume), when every replica serves the new certificate. The replicas then agree on one
//! CA and write nothing more. Should a dropped CA come back (replicas that really mount
//! different certificates), the replica that dropped it keeps it from then on instead of
//! flapping (docs/admission-and-conversion.md §4).
//!
//! Each pass reads the objects and writes only those whose bundle changes (with their
//! resourceVersion, so a lost race is retried on the next pass). A CRD is only touched when its
//! `conversion.strategy` is `Webhook`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

/// The objects whose bundle is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaBundleTargets {
    /// ValidatingWebhookConfiguration names: every webhook in them gets the bundle.
    pub webhook_configurations: Vec<String>,
    /// CRD names (`nodegroups.deckhouse.io`, …).
    pub crds: Vec<String>,
}

const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const END: &str = "-----END CERTIFICATE-----";

/// The PEM certificate blocks of `pem`, each normalised (its base64 body without whitespace),
/// in order, without repeats.
fn blocks(pem: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let Some(end) = body.find(END) else {
            break;
        };
        let block: String = body[..end].split_whitespace().collect();
        if !block.is_empty() && !out.contains(&block) {
            out.push(block);
        }
        rest = &body[end + END.len()..];
    }
    out
}

/// PEM text of normalised blocks (64-character lines).
fn pem_of(blocks: &[String]) -> String {
    let mut out = String::new();
    for block in blocks {
        out.push_str(BEGIN);
        out.push('\n');
        let mut line = String::with_capacity(65);
        for c in block.chars() {
            line.push(c);
            if line.len() == 64 {
                out.push_str(&line);
                out.push('\n');
                line.clear();
            }
        }
        if !line.is_empty() {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(END);
        out.push('\n');
    }
    out
}

/// Whether every certificate of `own` is in `bundle`.
pub fn trusts(bundle: &str, own: &str) -> bool {
    let have = blocks(bundle);
    let own = blocks(own);
    !own.is_empty() && own.iter().all(|b| have.contains(b))
}

/// What a bundle holding `current` should become for a replica whose CA is `own`, or `None` to
/// leave it: `own` in front of the other CAs when it is missing (nothing dropped then); else
/// the bundle without the other CAs listed in `drop` (normalised blocks), if any is there. A
/// bundle that already is what it should be is never rewritten, whatever its formatting.
pub fn next_bundle(current: &str, own: &str, drop: &[String]) -> Option<String> {
    let own_blocks = blocks(own);
    if own_blocks.is_empty() {
        return None;
    }
    let have = blocks(current);
    let others: Vec<String> = have
        .iter()
        .filter(|b| !own_blocks.contains(b))
        .cloned()
        .collect();
    if !own_blocks.iter().all(|b| have.contains(b)) {
        let mut next = own_blocks;
        next.extend(others);
        return Some(pem_of(&next));
    }
    if !others.iter().any(|b| drop.contains(b)) {
        return None;
    }
    let mut next = own_blocks;
    next.extend(others.into_iter().filter(|b| !drop.contains(b)));
    Some(pem_of(&next))
}

/// What one replica remembers of one object's bundle.
#[derive(Debug, Clone)]
struct ObjectMemory {
    /// This replica's CA when last seen trusted, and since when.
    own: Vec<String>,
    since: Instant,
    /// Other CAs this replica dropped from the bundle.
    dropped: Vec<String>,
    /// Dropped CAs that came back (another replica still serves them): never dropped again.
    kept: Vec<String>,
}

/// What this replica remembers of each object's bundle (by `kind/name`): since when it has
/// trusted this replica's CA, and which other CAs it dropped and saw come back.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    objects: BTreeMap<String, ObjectMemory>,
}

impl Settled {
    /// The bundle `object` should hold next ([`next_bundle`]), or `None`: the other CAs go once
    /// the bundle has trusted `own` for `grace`, except those this replica dropped before and
    /// that came back, which another replica, whose certificate files are not the same,
    /// still serves (dropping them again would flap).
    pub fn decide(
        &mut self,
        object: &str,
        current: &str,
        own: &str,
        grace: Duration,
    ) -> Option<String> {
        if !trusts(current, own) {
            // Added now; the grace period starts once it is seen there.
            return next_bundle(current, own, &[]);
        }
        let own_blocks = blocks(own);
        let memory = self
            .objects
            .entry(object.to_owned())
            .or_insert_with(|| ObjectMemory {
                own: own_blocks.clone(),
                since: Instant::now(),
                dropped: Vec::new(),
                kept: Vec::new(),
            });
        if memory.own != own_blocks {
            *memory = ObjectMemory {
                own: own_blocks.clone(),
                since: Instant::now(),
                dropped: Vec::new(),
                kept: Vec::new(),
            };
        }
        let others: Vec<String> = blocks(current)
            .into_iter()
            .filter(|b| !own_blocks.contains(b))
            .collect();
        for block in &others {
            if memory.dropped.contains(block) && !memory.kept.contains(block) {
                tracing::warn!(
                    object,
                    "a CA this replica dropped from the caBundle is back: another replica serves \
                     a certificate of it; both stay trusted"
                );
                memory.kept.push(block.clone());
            }
        }
        if memory.since.elapsed() < grace {
            return None;
        }
        let drop: Vec<String> = others
            .into_iter()
            .filter(|b| !memory.kept.contains(b))
            .collect();
        let next = next_bundle(current, own, &drop);
        if next.is_some() {
            memory.dropped.extend(drop);
        }
        next
    }
}

/// The PEM text of a caBundle field (empty when unset or not UTF-8).
fn text(bundle: Option<&ByteString>) -> String {
    bundle
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .unwrap_or_default()
}

/// One pass: every target's bundle becomes what [`Settled::decide`] says (this replica's CA
/// added, or the other CAs dropped once it has been trusted for `grace`). Returns how many
/// objects were written.
///
/// # Errors
/// The first API error, naming the object.
pub async fn sync_once(
    client: &Client,
    targets: &CaBundleTargets,
    ca_pem: &str,
    settled: &mut Settled,
    grace: Duration,
) -> Result<usize, String> {
    let mut written = 0;
    let configurations = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    for name in &targets.webhook_configurations {
        let Some(mut vwc) = configurations
            .get_opt(name)
            .await
            .map_err(|e| format!("failed to read ValidatingWebhookConfiguration {name}: {e}"))?
        else {
            tracing::debug!(%name, "no such ValidatingWebhookConfiguration yet");
            continue;
        };
        let mut changed = false;
        for webhook in vwc.webhooks.iter_mut().flatten() {
            let current = text(webhook.client_config.ca_bundle.as_ref());
            let key = format!("ValidatingWebhookConfiguration/{name}/{}", webhook.name);
            if let Some(next) = settled.decide(&key, &current, ca_pem, grace) {
                webhook.client_config.ca_bundle = Some(ByteString(next.into_bytes()));
                changed = true;
            }
        }
        if changed {
            configurations
                .replace(name, &PostParams::default(), &vwc)
                .await
                .map_err(|e| {
                    format!("failed to write ValidatingWebhookConfiguration {name}: {e}")
                })?;
            written += 1;
        }
    }
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for name in &targets.crds {
        let Some(mut crd) = crds
            .get_opt(name)
            .await
            .map_err(|e| format!("failed to read CRD {name}: {e}"))?
        else {
            continue;
        };
        let Some(conversion) = crd.spec.conversion.as_mut() else {
            continue;
        };
        if conversion.strategy != "Webhook" {
            continue;
        }
        let Some(config) = conversion
            .webhook
            .as_mut()
            .and_then(|w| w.client_config.as_mut())
        else {
            continue;
        };
        let current = text(config.ca_bundle.as_ref());
        if let Some(next) = settled.decide(&format!("CRD/{name}"), &current, ca_pem, grace) {
            config.ca_bundle = Some(ByteString(next.into_bytes()));
            crds.replace(name, &PostParams::default(), &crd)
                .await
                .map_err(|e| format!("failed to write CRD {name}: {e}"))?;
            written += 1;
        }
    }
    Ok(written)
}

/// Runs [`sync_once`] every `period` with the CA `ca_pem` returns, until `stop`.
pub async fn keep(
    client: Client,
    targets: CaBundleTargets,
    ca_pem: impl Fn() -> String + Send + 'static,
    period: Duration,
    grace: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut settled = Settled::default();
    loop {
        let pem = ca_pem();
        match sync_once(&client, &targets, &pem, &mut settled, grace).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(objects = n, "caBundle updated"),
            Err(message) => tracing::warn!(%message, "caBundle not updated; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(body: &str) -> String {
        format!("{BEGIN}\n{body}\n{END}\n")
    }

    #[test]
    fn a_missing_ca_is_added_in_front_of_the_others() {
        let (old, new) = (cert("T0xE"), cert("TkVX"));
        let next = next_bundle(&old, &new, &[]).unwrap();
        assert_eq!(blocks(&next), ["TkVX", "T0xE"]);
        assert!(trusts(&next, &old) && trusts(&next, &new));
        // Adding never drops, whatever `drop` says.
        assert_eq!(next_bundle(&old, &new, &blocks(&old)), Some(next.clone()));
        // The old replica sees its CA there: nothing to write, no flapping back.
        assert_eq!(next_bundle(&next, &old, &[]), None);
        assert_eq!(next_bundle(&next, &new, &[]), None);
        assert_eq!(
            blocks(&next_bundle(&next, &new, &blocks(&old)).unwrap()),
            ["TkVX"]
        );
    }

    #[test]
    fn a_bundle_that_is_the_ca_is_left_alone_whatever_its_formatting() {
        let ca = cert("QUJD\nREVG");
        assert_eq!(next_bundle(&ca, &ca, &[]), None);
        assert_eq!(next_bundle(&cert("QUJDREVG"), &ca, &[]), None);
        assert_eq!(next_bundle("", &ca, &[]), Some(pem_of(&blocks(&ca))));
        // Nothing to trust: nothing written.
        assert_eq!(next_bundle(&ca, "not PEM", &[]), None);
    }

    #[test]
    fn long_bodies_are_written_in_64_character_lines() {
        let body = "A".repeat(130);
        let pem = pem_of(std::slice::from_ref(&body));
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[3].len(), 2);
        assert_eq!(blocks(&pem), [body]);
    }

    /// Applies `decide` of `replica` to `bundle`; whether it wrote.
    fn pass(replica: &mut (Settled, String), bundle: &mut String, grace: Duration) -> bool {
        match replica.0.decide("x", bundle, &replica.1, grace) {
            Some(next) => {
                *bundle = next;
                true
            }
            None => false,
        }
    }

    #[test]
    fn a_rotation_trusts_both_cas_until_the_grace_period_is_over_then_the_new_one() {
        let (old, new) = (cert("T0xE"), cert("TkVX"));
        let grace = Duration::from_millis(50);
        let mut bundle = old.clone();
        let mut a = (Settled::default(), new.clone());
        let mut b = (Settled::default(), old.clone());
        assert!(pass(&mut a, &mut bundle, grace), "the new CA is added");
        assert!(
            !pass(&mut b, &mut bundle, grace),
            "the old one is kept: no write"
        );
        assert!(!pass(&mut a, &mut bundle, grace), "within the grace period");
        assert!(trusts(&bundle, &old) && trusts(&bundle, &new));
        // b's files are refreshed; the grace period ends.
        b.1 = new.clone();
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            !pass(&mut b, &mut bundle, grace),
            "b's own period only starts"
        );
        assert!(pass(&mut a, &mut bundle, grace), "a drops the old CA");
        assert_eq!(blocks(&bundle), ["TkVX"]);
        std::thread::sleep(Duration::from_millis(60));
        for _ in 0..3 {
            assert!(!pass(&mut a, &mut bundle, grace) && !pass(&mut b, &mut bundle, grace));
        }
    }

    #[test]
    fn replicas_with_different_cas_for_good_end_up_trusting_both_without_flapping() {
        let (ca_a, ca_b) = (cert("QQ=="), cert("Qg=="));
        let grace = Duration::ZERO;
        let mut bundle = String::new();
        let mut a = (Settled::default(), ca_a.clone());
        let mut b = (Settled::default(), ca_b.clone());
        let mut writes = 0;
        for _ in 0..10 {
            writes += usize::from(pass(&mut a, &mut bundle, grace));
            writes += usize::from(pass(&mut b, &mut bundle, grace));
        }
        assert!(trusts(&bundle, &ca_a) && trusts(&bundle, &ca_b), "{bundle}");
        // Each adds its CA at most twice and drops the other's at most once.
        assert!(writes <= 6, "{writes} writes: the bundle flapped");
        assert!(!pass(&mut a, &mut bundle, grace) && !pass(&mut b, &mut bundle, grace));
    }

    proptest::proptest! {
        /// Whatever the starting bundle, the replicas' two CAs and the order of their passes
        /// (grace period over from the start), the bundle stops changing after a few writes
        /// and then trusts both CAs.
        #[test]
        fn two_replicas_settle(
            start in proptest::collection::vec(0usize..4, 0..4),
            a in 0usize..4,
            b in 0usize..4,
            order in proptest::collection::vec(proptest::bool::ANY, 8..40),
        ) {
            let names = ["QQ==", "Qg==", "Qw==", "RA=="];
            let mut bundle: String = start.iter().map(|i| cert(names[*i])).collect();
            let mut ra = (Settled::default(), cert(names[a]));
            let mut rb = (Settled::default(), cert(names[b]));
            let mut writes = 0;
            for turn_a in order {
                let replica = if turn_a { &mut ra } else { &mut rb };
                writes += usize::from(pass(replica, &mut bundle, Duration::ZERO));
            }
            // Then both in turn: within a few rounds a round writes nothing, and none after.
            let mut rounds = 0;
            loop {
                let wrote = pass(&mut ra, &mut bundle, Duration::ZERO)
                    | pass(&mut rb, &mut bundle, Duration::ZERO);
                writes += usize::from(wrote);
                if !wrote {
                    break;
                }
                rounds += 1;
                proptest::prop_assert!(rounds <= 4, "still writing after {} rounds", rounds);
            }
            proptest::prop_assert!(writes <= 10, "{} writes", writes);
            for _ in 0..3 {
                proptest::prop_assert!(!pass(&mut ra, &mut bundle, Duration::ZERO));
                proptest::prop_assert!(!pass(&mut rb, &mut bundle, Duration::ZERO));
            }
            proptest::prop_assert!(trusts(&bundle, &ra.1) && trusts(&bundle, &rb.1));
        }
    }
}
