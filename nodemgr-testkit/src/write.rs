//! The write path of kube-apiserver for create, update, patch and delete, in its order: read
//! the live object and convert it to the request's version; compute the candidate (the body,
//! a merge/JSON/strategic patch, or a server-side apply); for custom resources prune unknown
//! fields (reported per `fieldValidation`: `Strict` refuses, `Warn` — the default — warns,
//! `Ignore` is silent) and apply schema defaults; call mutating webhooks; validate against the
//! version's schema (422 Invalid); convert to the storage version; compute the stored result
//! (a dry run of the store write); call validating webhooks with it; then commit — only if the
//! live object did not change meanwhile, else start over, as the real API server's
//! GuaranteedUpdate retries. Webhooks are called without holding the store lock. See
//! `docs/api-emulator.md`.

use std::sync::Arc;

use axum::http::header;
use axum::response::Response;
use serde_json::{Value, json};

use crate::admission::{self, Attributes, Phase};
use crate::managed::{self, ApplyRequest};
use crate::patch::{json_patch, merge_patch, strategic_merge_patch};
use crate::registry::ResourceType;
use crate::schema::list_kind;
use crate::selector::labels_of;
use crate::server::{ResourceRequest, Shared, check_kind, json_response, parse_body};
use crate::status::ApiError;
use crate::store::{DeleteOptions, Part, Store};
use crate::structural::{self, FieldError};

/// How many times a write is retried when the object changed while webhooks were called.
const MAX_ATTEMPTS: usize = 8;

/// How the store is written once the candidate is known.
#[derive(Debug, Clone)]
enum StoreWrite {
    /// A new object (`managedFields` precomputed by server-side apply, or `None`).
    Create(Option<Value>),
    /// A replacement of `part` (`managedFields` precomputed, or `None`).
    Replace(Part, Option<Value>),
}

/// The result of computing a write: the candidate at the request's version and how it is
/// stored.
struct Candidate {
    object: Value,
    write: StoreWrite,
}

fn part_of(rt: &ResourceType, request: &ResourceRequest) -> Result<Part, ApiError> {
    match request.target.subresource.as_deref() {
        None => Ok(Part::Main),
        Some("status") => Ok(Part::Status),
        Some(other) => Err(ApiError::method_not_allowed(format!(
            "{}/{other} does not support this verb",
            rt.plural
        ))),
    }
}

fn content_type(request: &ResourceRequest) -> String {
    request
        .header(header::CONTENT_TYPE)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// Computes the candidate of a create (`live` is None and the verb is create), an update, or a
/// patch, at the request's version.
fn compute(
    request: &ResourceRequest,
    rt: &ResourceType,
    verb: &str,
    namespace: &str,
    name: &str,
    body: &Value,
    live: Option<&Value>,
) -> Result<Candidate, ApiError> {
    let version = request.target.version.as_str();
    let kind_of = |path: &[&str]| list_kind(rt, version, path);
    match verb {
        "create" => {
            check_kind(rt, version, body)?;
            Ok(Candidate {
                object: body.clone(),
                write: StoreWrite::Create(None),
            })
        }
        "update" => {
            let part = part_of(rt, request)?;
            check_kind(rt, version, body)?;
            if live.is_none() {
                return Err(ApiError::not_found(&rt.group, &rt.plural, name));
            }
            Ok(Candidate {
                object: body.clone(),
                write: StoreWrite::Replace(part, None),
            })
        }
        _ => {
            let part = part_of(rt, request)?;
            let content_type = content_type(request);
            if content_type == "application/apply-patch+yaml" {
                return compute_apply(request, rt, namespace, name, body, live, part);
            }
            let live = live.ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
            let mut candidate = live.clone();
            match content_type.as_str() {
                "application/merge-patch+json" => merge_patch(&mut candidate, body),
                "application/json-patch+json" => json_patch(&mut candidate, body)?,
                "application/strategic-merge-patch+json" => {
                    if rt.custom {
                        return Err(ApiError::unsupported_media_type(&content_type));
                    }
                    strategic_merge_patch(&mut candidate, body, &kind_of)?;
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            }
            Ok(Candidate {
                object: candidate,
                write: StoreWrite::Replace(part, None),
            })
        }
    }
}

fn compute_apply(
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    body: &Value,
    live: Option<&Value>,
    part: Part,
) -> Result<Candidate, ApiError> {
    let version = request.target.version.as_str();
    let kind_of = |path: &[&str]| list_kind(rt, version, path);
    let manager = request
        .query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                "fieldManager: Required value: is required for apply patch",
            )
        })?;
    check_kind(rt, version, body)?;
    if body.get("apiVersion").is_none() || body.get("kind").is_none() {
        return Err(ApiError::bad_request(
            "apply patches must set apiVersion and kind",
        ));
    }
    let body_name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let mut applied = body.clone();
    match part {
        Part::Main if rt.has_status() => {
            if let Some(m) = applied.as_object_mut() {
                m.remove("status");
            }
        }
        Part::Status => {
            let status = applied.get("status").cloned();
            applied = json!({"apiVersion": applied["apiVersion"], "kind": applied["kind"], "metadata": {"name": name}});
            if let Some(s) = status {
                applied["status"] = s;
            }
        }
        Part::Main => {}
    }
    let apply = ApplyRequest {
        applied: &applied,
        manager,
        force: request.flag("force"),
        api_version: rt.api_version(version),
        subresource: (part == Part::Status).then_some("status"),
    };
    match live {
        Some(live) => {
            let mut merged = managed::apply(live, &apply, &kind_of)?;
            let fields = merged.pointer("/metadata/managedFields").cloned();
            // The applied resourceVersion, if any, is a precondition; otherwise none.
            merged["metadata"]["resourceVersion"] = body
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(json!(""));
            Ok(Candidate {
                object: merged,
                write: StoreWrite::Replace(part, fields),
            })
        }
        None => {
            if part == Part::Status {
                return Err(ApiError::not_found(&rt.group, &rt.plural, name));
            }
            let mut skeleton = json!({"apiVersion": rt.api_version(version), "kind": rt.kind, "metadata": {"name": name}});
            if rt.namespaced {
                skeleton["metadata"]["namespace"] = json!(namespace);
            }
            let merged = managed::apply(&skeleton, &apply, &kind_of)?;
            let fields = merged.pointer("/metadata/managedFields").cloned();
            Ok(Candidate {
                object: merged,
                write: StoreWrite::Create(fields),
            })
        }
    }
}

/// The few defaults of built-in kinds the emulator applies: a Secret's `type` is `Opaque`.
fn builtin_defaults(rt: &ResourceType, object: &mut Value) {
    if rt.group.is_empty()
        && rt.plural == "secrets"
        && object.get("type").is_none_or(|t| t.as_str() == Some(""))
        && let Some(map) = object.as_object_mut()
    {
        map.insert("type".to_owned(), json!("Opaque"));
    }
}

/// `fieldValidation` of the request: `Strict`, `Warn` (the default) or `Ignore`.
fn field_validation(request: &ResourceRequest) -> Result<&'static str, ApiError> {
    match request.query.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => Ok("Warn"),
        Some("Strict") => Ok("Strict"),
        Some("Ignore") => Ok("Ignore"),
        Some(other) => Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
        ))),
    }
}

/// What the server keeps of a candidate before validating it: a write to the main resource
/// keeps the live status, a write to `/status` keeps everything else (as the strategies'
/// PrepareForCreate/PrepareForUpdate do).
fn prepare(rt: &ResourceType, write: &StoreWrite, candidate: &mut Value, live: Option<&Value>) {
    if !rt.has_status() {
        return;
    }
    match (write, live) {
        (StoreWrite::Create(_), _) => {
            if let Some(m) = candidate.as_object_mut() {
                m.remove("status");
            }
        }
        (StoreWrite::Replace(Part::Main, _), Some(live)) => match live.get("status") {
            Some(s) => candidate["status"] = s.clone(),
            None => {
                if let Some(m) = candidate.as_object_mut() {
                    m.remove("status");
                }
            }
        },
        (StoreWrite::Replace(Part::Status, _), Some(live)) => {
            let status = candidate.get("status").cloned();
            let metadata = candidate.get("metadata").cloned();
            *candidate = live.clone();
            match status {
                Some(s) => candidate["status"] = s,
                None => {
                    if let Some(m) = candidate.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(rv) = metadata.as_ref().and_then(|m| m.get("resourceVersion")) {
                candidate["metadata"]["resourceVersion"] = rv.clone();
            }
        }
        _ => {}
    }
}

/// Prunes unknown fields and applies defaults; returns the unknown fields' paths. Fields
/// already unknown in the live object (seeded without validation) are not the client's doing
/// and are pruned without being returned.
fn prune_and_default(schema: &Value, candidate: &mut Value, live: Option<&Value>) -> Vec<String> {
    let already: Vec<String> = live
        .map(|l| structural::prune(schema, &mut l.clone()))
        .unwrap_or_default();
    let unknown: Vec<String> = structural::prune(schema, candidate)
        .into_iter()
        .filter(|p| !already.contains(p))
        .collect();
    structural::apply_defaults(schema, candidate);
    structural::prune(schema, candidate);
    unknown
}

/// What `fieldValidation` makes of unknown and duplicate fields: `Strict` refuses the write
/// (400, worded as the strict decoder — or, for server-side apply, the field manager — words
/// it), `Warn` returns warnings, `Ignore` nothing.
fn field_problems(
    request: &ResourceRequest,
    rt: &ResourceType,
    unknown: &[String],
    duplicates: &[String],
    apply: bool,
) -> Result<Vec<String>, ApiError> {
    let mode = field_validation(request)?;
    let mut problems: Vec<String> = duplicates
        .iter()
        .map(|p| format!("duplicate field {p:?}"))
        .collect();
    problems.extend(unknown.iter().map(|p| format!("unknown field {p:?}")));
    if problems.is_empty() || mode == "Ignore" {
        return Ok(Vec::new());
    }
    if mode != "Strict" {
        return Ok(problems);
    }
    let version = &request.target.version;
    let message = if apply && !unknown.is_empty() {
        let fields: Vec<String> = unknown
            .iter()
            .map(|p| format!(".{p}: field not declared in schema"))
            .collect();
        format!(
            "failed to create typed patch object ({}/{}; {}, Kind={}): {}",
            request.target.namespace.as_deref().unwrap_or(""),
            request.target.name.as_deref().unwrap_or(""),
            rt.api_version(version),
            rt.kind,
            fields.join(", ")
        )
    } else {
        format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            problems.join(", "),
            kind = rt.kind
        )
    };
    Err(ApiError::bad_request(message))
}

/// 422 Invalid listing field errors as kube-apiserver does.
pub(crate) fn invalid_fields(rt: &ResourceType, name: &str, errors: &[FieldError]) -> ApiError {
    let messages: Vec<String> = errors.iter().map(FieldError::message).collect();
    let text = if messages.len() == 1 {
        messages.join("")
    } else {
        format!("[{}]", messages.join(", "))
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.detail, "field": e.field}))
        .collect();
    ApiError::new(
        422,
        "Invalid",
        format!("{}.{} {name:?} is invalid: {text}", rt.kind, rt.group),
    )
    .with_details(json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}))
}

fn name_of(object: &Value) -> String {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn resource_version(object: Option<&Value>) -> Option<String> {
    object.map(|o| {
        o.pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    })
}

/// The pieces of [`Attributes`] that do not change between attempts.
fn attributes(
    shared: &Shared,
    request: &ResourceRequest,
    rt: &ResourceType,
    operation: &'static str,
    namespace: &str,
    name: &str,
) -> Attributes {
    let namespace_labels = if rt.namespaced {
        let store = shared.store();
        store
            .types()
            .iter()
            .find(|t| t.group.is_empty() && t.plural == "namespaces")
            .cloned()
            .and_then(|ns_type| store.get(&ns_type, "", namespace).map(|ns| labels_of(&ns)))
            .unwrap_or_default()
    } else {
        Default::default()
    };
    let options_kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" if request.method == axum::http::Method::PATCH => "PatchOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(manager) = request.query.get("fieldManager") {
        options["fieldManager"] = json!(manager);
    }
    Attributes {
        operation,
        group: rt.group.clone(),
        version: request.target.version.clone(),
        resource: rt.plural.clone(),
        subresource: request.target.subresource.clone().unwrap_or_default(),
        kind: rt.kind.clone(),
        namespace: namespace.to_owned(),
        namespaced: rt.namespaced,
        name: name.to_owned(),
        object: None,
        old_object: None,
        dry_run: request.context().dry_run,
        options,
        namespace_labels,
    }
}

fn configurations(shared: &Shared, phase: Phase) -> Vec<Value> {
    let plural = match phase {
        Phase::Mutating => "mutatingwebhookconfigurations",
        Phase::Validating => "validatingwebhookconfigurations",
    };
    let store = shared.store();
    let Some(rt) = store
        .types()
        .iter()
        .find(|t| t.group == "admissionregistration.k8s.io" && t.plural == plural)
        .cloned()
    else {
        return Vec::new();
    };
    store.list(&rt, None).collect()
}

/// Calls the matching webhooks of `phase`. Mutating webhooks may change `attrs.object` (their
/// JSONPatches are applied in order). Warnings go to the request.
async fn run_webhooks(
    shared: &Shared,
    request: &ResourceRequest,
    rt: &ResourceType,
    attrs: &mut Attributes,
    phase: Phase,
) -> Result<(), ApiError> {
    // Admission webhook configurations are not themselves admitted (as upstream).
    if rt.group == "admissionregistration.k8s.io" {
        return Ok(());
    }
    let configurations = configurations(shared, phase);
    if configurations.is_empty() {
        return Ok(());
    }
    let served: Vec<String> = rt.versions.iter().map(|v| v.name.clone()).collect();
    let webhooks = admission::matching(&configurations, attrs, &served);
    let routes = shared.routes();
    for webhook in webhooks {
        let convert = |o: &Option<Value>| {
            let o = o.clone();
            let version = webhook.version.clone();
            async move {
                match o {
                    Some(o) => shared
                        .to_version(rt, &version, vec![o])
                        .await
                        .map(|mut v| v.pop()),
                    None => Ok(None),
                }
            }
        };
        let object = convert(&attrs.object).await?;
        let old_object = convert(&attrs.old_object).await?;
        let uid = shared.next_uid();
        let review = admission::review(
            &uid,
            attrs,
            &webhook.version,
            object.as_ref(),
            old_object.as_ref(),
        );
        let Some(verdict) =
            admission::call(&webhook, &routes, &uid, &review, phase, attrs.dry_run).await?
        else {
            continue;
        };
        request.warn(verdict.warnings);
        if let (Some(patch), Some(mut patched)) = (verdict.patch, object) {
            json_patch(&mut patched, &patch).map_err(|e| {
                admission::failed_call(
                    &webhook.name,
                    &format!("the webhook's JSONPatch does not apply: {}", e.message),
                )
            })?;
            attrs.object = Some(
                shared
                    .to_version(rt, &attrs.version, vec![patched])
                    .await?
                    .pop()
                    .unwrap_or(Value::Null),
            );
        }
    }
    Ok(())
}

fn store_write(
    store: &mut Store,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    object: Value,
    write: &StoreWrite,
    ctx: &crate::store::WriteContext,
) -> Result<Value, ApiError> {
    let storage = rt.storage_version.clone();
    match write {
        StoreWrite::Create(fields) => {
            store.create(rt, &storage, namespace, object, ctx, fields.clone())
        }
        StoreWrite::Replace(part, fields) => store.replace(
            rt,
            &storage,
            namespace,
            name,
            object,
            *part,
            ctx,
            fields.clone(),
        ),
    }
}

/// Create, update or patch through admission, schema and conversion (see the module doc).
pub(crate) async fn write(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
    verb: &str,
) -> Result<Response, ApiError> {
    let body = parse_body(&request.body)?;
    let duplicates = if verb == "patch" && content_type(request) == "application/json-patch+json" {
        Vec::new()
    } else {
        crate::duplicates::duplicate_fields(&request.body)
    };
    let is_apply = verb == "patch" && content_type(request) == "application/apply-patch+yaml";
    let url_name = request.target.name.clone().unwrap_or_default();
    let ctx = request.context();
    let schema = rt
        .version(&request.target.version)
        .and_then(|v| v.schema.clone())
        .filter(|_| rt.custom);
    for _ in 0..MAX_ATTEMPTS {
        let live_storage = if url_name.is_empty() {
            None
        } else {
            shared.store().get(rt, namespace, &url_name)
        };
        let live_rv = resource_version(live_storage.as_ref());
        let live = match live_storage {
            Some(o) => shared
                .to_version(rt, &request.target.version, vec![o])
                .await?
                .pop(),
            None => None,
        };
        let Candidate { mut object, write } = compute(
            request,
            rt,
            verb,
            namespace,
            &url_name,
            &body,
            live.as_ref(),
        )?;
        let creating = matches!(write, StoreWrite::Create(_));
        builtin_defaults(rt, &mut object);
        let unknown = match &schema {
            Some(schema) => prune_and_default(schema, &mut object, live.as_ref()),
            None => Vec::new(),
        };
        request.warn(field_problems(
            request,
            rt,
            &unknown,
            &duplicates,
            is_apply,
        )?);
        let name = if url_name.is_empty() {
            name_of(&object)
        } else {
            url_name.clone()
        };
        let operation = if creating { "CREATE" } else { "UPDATE" };
        let mut attrs = attributes(shared, request, rt, operation, namespace, &name);
        attrs.old_object = live.clone();
        attrs.object = Some(object);
        run_webhooks(shared, request, rt, &mut attrs, Phase::Mutating).await?;
        let mut object = attrs.object.take().unwrap_or(Value::Null);
        if let Some(schema) = &schema {
            structural::prune(schema, &mut object);
            structural::apply_defaults(schema, &mut object);
            let mut checked = object.clone();
            prepare(rt, &write, &mut checked, live.as_ref());
            let errors = structural::validate_update(schema, &checked, live.as_ref());
            if !errors.is_empty() {
                return Err(invalid_fields(rt, &name, &errors));
            }
        }
        let storage_object = shared
            .to_storage(rt, vec![object])
            .await?
            .pop()
            .unwrap_or(Value::Null);
        let storage_rt = shared.storage_type(rt);
        let mut storage_object = storage_object;
        let mut name = name;
        // Validating webhooks see the stored result (a dry run of the store write); without
        // any (admission configurations never admit themselves) the dry run is skipped.
        if rt.group != "admissionregistration.k8s.io"
            && !configurations(shared, Phase::Validating).is_empty()
        {
            let dry_ctx = crate::store::WriteContext {
                dry_run: true,
                ..ctx.clone()
            };
            let would_be = {
                let mut store = shared.store();
                store_write(
                    &mut store,
                    &storage_rt,
                    namespace,
                    &name,
                    storage_object.clone(),
                    &write,
                    &dry_ctx,
                )?
            };
            // A generated name is chosen once: admission sees the name that is stored.
            if name.is_empty() {
                name = name_of(&would_be);
                storage_object["metadata"]["name"] = json!(name);
                attrs.name.clone_from(&name);
            }
            attrs.object = shared
                .to_version(rt, &request.target.version, vec![would_be])
                .await?
                .pop();
            run_webhooks(shared, request, rt, &mut attrs, Phase::Validating).await?;
        }
        let stored = {
            let mut store = shared.store();
            let current = resource_version(store.get(rt, namespace, &name).as_ref());
            let unchanged = if creating {
                url_name.is_empty() || current.is_none() || verb == "create"
            } else {
                current == live_rv
            };
            if !unchanged {
                None
            } else {
                Some(store_write(
                    &mut store,
                    &storage_rt,
                    namespace,
                    &name,
                    storage_object,
                    &write,
                    &ctx,
                )?)
            }
        };
        let Some(stored) = stored else {
            continue;
        };
        let presented = shared
            .to_version(rt, &request.target.version, vec![stored])
            .await?
            .pop()
            .unwrap_or(Value::Null);
        return Ok(json_response(if creating { 201 } else { 200 }, &presented));
    }
    Err(ApiError::conflict(
        &rt.group,
        &rt.plural,
        &url_name,
        "the object kept changing while admission webhooks were called; try again",
    ))
}

/// Delete through validating (and mutating, which cannot change a delete) webhooks.
pub(crate) async fn delete(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<Value, ApiError> {
    let live_storage = shared
        .store()
        .get(rt, namespace, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let live = shared
        .to_version(rt, &request.target.version, vec![live_storage])
        .await?
        .pop();
    let mut attrs = attributes(shared, request, rt, "DELETE", namespace, name);
    attrs.old_object = live;
    run_webhooks(shared, request, rt, &mut attrs, Phase::Validating).await?;
    let deleted = shared
        .store()
        .delete(rt, namespace, name, options, &request.context())?;
    Ok(shared
        .to_version(rt, &request.target.version, vec![deleted])
        .await?
        .pop()
        .unwrap_or(Value::Null))
}
