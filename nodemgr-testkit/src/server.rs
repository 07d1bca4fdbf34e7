//! The HTTP front: parses kube-apiserver URLs (`/api/v1/namespaces/{ns}/pods/{name}/eviction`,
//! `/apis/{group}/{version}/{plural}`…), maps method + path to a verb, applies injected faults,
//! and answers get, list (pagination, selectors, resourceVersion), watch (resume, 410, bookmarks,
//! timeouts, initial events), create, update, patch (merge, JSON, strategic, apply), delete
//! (preconditions), deletecollection, the status subresource and `pods/eviction`.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use crate::conversion;
use crate::discovery;
use crate::eviction;
use crate::faults::{Fault, take_fault};
use crate::health;
use crate::latency::Latency;
use crate::media;
use crate::openapi;
use crate::patch::{json_patch, merge_patch};
use crate::query::parse_query;
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, success_status};
use crate::store::{DeleteOptions, EventType, Part, Store, Stored, WatchEvent, WriteContext};
use crate::table::{IncludeObject, to_table, wants_table};
use crate::webhook_client::ServiceRoutes;
use crate::write;

/// Counts of answered requests by (verb, resource[/subresource], HTTP code).
pub type RequestStats = BTreeMap<(String, String, u16), u64>;

/// State shared by all requests.
pub struct Shared {
    /// The objects.
    pub store: Mutex<Store>,
    /// Pending injected faults.
    pub faults: Mutex<Vec<Fault>>,
    /// Injected latency of watch events and requests.
    pub latency: Mutex<Latency>,
    /// Request counters.
    pub stats: Mutex<RequestStats>,
    /// Bumped to end every open watch.
    pub drop_watches: watch::Sender<u64>,
    /// Set to end everything at shutdown.
    pub shutdown: watch::Sender<bool>,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// `host:port` the server listens on.
    pub address: String,
    /// Where webhook `clientConfig.service` references go (see [`crate::webhook_client`]).
    pub services: Mutex<ServiceRoutes>,
    /// Counter behind the uids of AdmissionReviews and ConversionReviews.
    pub review_counter: AtomicU64,
}

impl Shared {
    /// Locks the store (a poisoned lock is recovered: the store stays consistent per request).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Locks the latency settings.
    pub fn latency(&self) -> MutexGuard<'_, Latency> {
        self.latency
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A copy of the service routes (sharing the turn of each service's endpoints).
    pub fn routes(&self) -> ServiceRoutes {
        self.services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A fresh uid for a review.
    pub fn next_uid(&self) -> String {
        let n = self.review_counter.fetch_add(1, Ordering::Relaxed);
        format!("00000000-0000-4000-8000-{:012x}", n & 0xffff_ffff_ffff)
    }

    /// `objects` of `rt` at `version`: through the CRD's conversion webhook when it has one
    /// (objects already at `version` are not sent), else by changing `apiVersion` only.
    ///
    /// # Errors
    /// 500 when the conversion webhook fails.
    pub async fn to_version(
        &self,
        rt: &ResourceType,
        version: &str,
        objects: Vec<Value>,
    ) -> Result<Vec<Value>, ApiError> {
        match &rt.conversion_webhook {
            Some(client_config) if rt.custom => {
                let uid = self.next_uid();
                conversion::convert_by_webhook(
                    client_config,
                    &self.routes(),
                    &rt.kind,
                    &rt.api_version(version),
                    &uid,
                    objects,
                )
                .await
            }
            _ if crate::events::is_events_v1(&rt.group, &rt.plural) => {
                Ok(objects.iter().map(crate::events::to_events_v1).collect())
            }
            _ => Ok(objects.iter().map(|o| present(rt, version, o)).collect()),
        }
    }

    /// The type objects of `rt` are stored as: the core Event type for `events.k8s.io`
    /// Events, `rt` itself otherwise.
    pub fn storage_type(&self, rt: &ResourceType) -> ResourceType {
        if crate::events::is_events_v1(&rt.group, &rt.plural) {
            let store = self.store();
            if let Some(core) = store
                .types()
                .iter()
                .find(|t| t.group.is_empty() && t.plural == "events")
            {
                return core.clone();
            }
        }
        rt.clone()
    }

    /// `objects` of `rt` (at the request's version) in their stored form: converted to the
    /// storage version (through the conversion webhook when the CRD has one), or to the core
    /// shape for `events.k8s.io` Events.
    ///
    /// # Errors
    /// 500 when the conversion webhook fails.
    pub async fn to_storage(
        &self,
        rt: &ResourceType,
        objects: Vec<Value>,
    ) -> Result<Vec<Value>, ApiError> {
        if crate::events::is_events_v1(&rt.group, &rt.plural) {
            return Ok(objects.iter().map(crate::events::to_core).collect());
        }
        self.to_version(rt, &rt.storage_version, objects).await
    }

    /// Whether `object` of `rt` is served at `version` exactly as stored: asked at the version
    /// it is stored at (so no conversion, no `apiVersion` to change), and not through the
    /// `events.k8s.io` view of Events. Then lists and watches send the stored text as it is.
    pub fn served_as_stored(&self, rt: &ResourceType, version: &str, object: &Stored) -> bool {
        if crate::events::is_events_v1(&rt.group, &rt.plural) {
            return false;
        }
        // A stored object is rendered with sorted keys: `apiVersion` comes first.
        let prefix = format!("{{\"apiVersion\":{}", json!(rt.api_version(version)));
        object.json().starts_with(&prefix)
    }

    fn count(&self, verb: &str, resource: &str, code: u16) {
        let mut stats = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *stats
            .entry((verb.to_owned(), resource.to_owned(), code))
            .or_default() += 1;
    }
}

/// A parsed resource URL.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) namespace: Option<String>,
    pub(crate) plural: String,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
    pub(crate) legacy_watch: bool,
}

enum Route {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    Resources(String, String),
    Resource(Target),
    OpenApiRoot,
    OpenApi(String, String),
    Health(health::Endpoint, Option<String>),
    NotFound,
}

fn parse_route(path: &str) -> Route {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Route::Version,
        [endpoint, check @ ..]
            if health::Endpoint::parse(endpoint).is_some() && check.len() <= 1 =>
        {
            return match health::Endpoint::parse(endpoint) {
                Some(e) => Route::Health(e, check.first().map(|c| (*c).to_owned())),
                None => Route::NotFound,
            };
        }
        ["openapi", "v3"] => return Route::OpenApiRoot,
        ["openapi", "v3", "api", v] => return Route::OpenApi(String::new(), (*v).to_owned()),
        ["openapi", "v3", "apis", g, v] => return Route::OpenApi((*g).to_owned(), (*v).to_owned()),
        ["api"] => return Route::CoreVersions,
        ["apis"] => return Route::Groups,
        ["apis", g] => return Route::Group((*g).to_owned()),
        ["api", v] => return Route::Resources(String::new(), (*v).to_owned()),
        ["apis", g, v] => return Route::Resources((*g).to_owned(), (*v).to_owned()),
        ["api", v, rest @ ..] => (String::new(), (*v).to_owned(), rest),
        ["apis", g, v, rest @ ..] => ((*g).to_owned(), (*v).to_owned(), rest),
        _ => return Route::NotFound,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let namespace_subresources = ["status", "finalize"];
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if group.is_empty()
                && !tail.is_empty()
                && !(tail.len() == 1 && namespace_subresources.contains(&tail[0])) =>
        {
            (Some((*ns).to_owned()), tail)
        }
        ["namespaces", ns, tail @ ..] if !group.is_empty() && !tail.is_empty() => {
            (Some((*ns).to_owned()), tail)
        }
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some((*n).to_owned()), None),
        [p, n, s] => (*p, Some((*n).to_owned()), Some((*s).to_owned())),
        _ => return Route::NotFound,
    };
    Route::Resource(Target {
        group,
        version,
        namespace,
        plural: plural.to_owned(),
        name,
        subresource,
        legacy_watch,
    })
}

/// A JSON response from text already rendered.
pub(crate) fn json_text_response(code: u16, body: String) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) fn json_response(code: u16, body: &Value) -> Response {
    json_text_response(code, body.to_string())
}

fn error_response(error: &ApiError) -> Response {
    let mut response = json_response(error.code, &error.to_status());
    if let Some(seconds) = error.retry_after
        && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// The single handler behind every path.
pub async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!(
                "failed to read the request body: {e}"
            )));
        }
    };
    let query = parse_query(parts.uri.query());
    let path = parts.uri.path().to_owned();
    if let Some(answer) = crate::auth_reviews::route(&shared.address, &parts.method, &path, &body) {
        return answer;
    }
    tracing::debug!(method = %parts.method, %path, "request");
    match parse_route(&path) {
        Route::Version => json_response(200, &discovery::version()),
        Route::CoreVersions => json_response(200, &discovery::core_versions(&shared.address)),
        Route::Groups => json_response(200, &discovery::group_list(shared.store().types())),
        Route::Group(g) => match discovery::group(shared.store().types(), &g) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::no_route(&path)),
        },
        Route::Resources(g, v) => match discovery::resource_list(shared.store().types(), &g, &v) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::no_route(&path)),
        },
        Route::OpenApiRoot => json_response(200, &openapi::root(shared.store().types())),
        Route::OpenApi(g, v) => match openapi::document_for(shared.store().types(), &g, &v) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::no_route(&path)),
        },
        Route::NotFound => error_response(&ApiError::no_route(&path)),
        Route::Health(endpoint, check) => {
            let answer = health::answer(
                endpoint,
                check.as_deref(),
                &query,
                *shared.shutdown.borrow(),
            );
            let status =
                StatusCode::from_u16(answer.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (status, answer.body).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
        Route::Resource(target) => {
            let header_text = |name: header::HeaderName| {
                parts
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            let mut body = body;
            let mut headers = parts.headers.clone();
            if media::is_protobuf(&header_text(header::CONTENT_TYPE))
                && !body.is_empty()
                && (parts.method == Method::POST || parts.method == Method::PUT)
            {
                // kubectl's typed generators send protobuf: decode the kinds we know.
                match crate::protobuf::decode(&body) {
                    Ok(object) => {
                        body = Bytes::from(object.to_string());
                        headers.insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        );
                    }
                    Err(why) => return error_response(&media::undecoded_protobuf(&why)),
                }
            }
            let header_text = |name: header::HeaderName| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            if let Err(error) = media::negotiate(
                &header_text(header::CONTENT_TYPE),
                &header_text(header::ACCEPT),
                !body.is_empty(),
            ) {
                return error_response(&error);
            }
            let request = ResourceRequest {
                method: parts.method,
                headers,
                query,
                body,
                target,
                warnings: Mutex::new(Vec::new()),
            };
            let delay = shared
                .latency()
                .request_delay(request.verb(), &request.resource());
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            serve_resource(&shared, request).await
        }
    }
}

/// One request to a resource, as the handlers see it.
pub(crate) struct ResourceRequest {
    pub(crate) method: Method,
    pub(crate) headers: HeaderMap,
    pub(crate) query: BTreeMap<String, String>,
    pub(crate) body: Bytes,
    pub(crate) target: Target,
    /// Warnings for the client (`Warning: 299 - "..."` headers).
    pub(crate) warnings: Mutex<Vec<String>>,
}

impl ResourceRequest {
    /// Adds warnings for the client.
    pub(crate) fn warn(&self, warnings: Vec<String>) {
        if warnings.is_empty() {
            return;
        }
        self.warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(warnings);
    }

    pub(crate) fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        crate::query::bool_flag(self.query.get(name).map(String::as_str))
    }

    pub(crate) fn context(&self) -> WriteContext {
        let field_manager = match self.query.get("fieldManager") {
            Some(m) if !m.is_empty() => m.clone(),
            _ => {
                let agent = self.header(header::USER_AGENT);
                agent.split('/').next().unwrap_or("").to_owned()
            }
        };
        WriteContext {
            field_manager,
            dry_run: self.query.get("dryRun").is_some_and(|v| v == "All"),
        }
    }

    /// `plural` or `plural/subresource`, as faults and latency match it.
    fn resource(&self) -> String {
        match &self.target.subresource {
            Some(sub) => format!("{}/{sub}", self.target.plural),
            None => self.target.plural.clone(),
        }
    }

    fn verb(&self) -> &'static str {
        let t = &self.target;
        match (&self.method, t.name.is_some()) {
            (&Method::GET, true) if t.legacy_watch || self.flag("watch") => "watch",
            (&Method::GET, true) => "get",
            (&Method::GET, false) if t.legacy_watch || self.flag("watch") => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => "unknown",
        }
    }
}

async fn serve_resource(shared: &Arc<Shared>, request: ResourceRequest) -> Response {
    let verb = request.verb();
    let resource = request.resource();
    let fault = {
        let mut faults = shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        take_fault(&mut faults, verb, &resource)
    };
    let result = match fault {
        Some(error) => Err(error),
        None => dispatch(shared, &request, verb).await,
    };
    let mut response = match result {
        Ok(response) => response,
        Err(error) => error_response(&error),
    };
    let warnings = std::mem::take(
        &mut *request
            .warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut sent: Vec<String> = Vec::new();
    for warning in warnings {
        // Like kube-apiserver's warning recorder, one header per distinct text.
        if sent.contains(&warning) {
            continue;
        }
        sent.push(warning.clone());
        if let Ok(v) = HeaderValue::from_str(&crate::admission::warning_header(&warning)) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    shared.count(verb, &resource, response.status().as_u16());
    response
}

async fn dispatch(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    verb: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let rt = {
        let store = shared.store();
        store.find_type(&t.group, &t.version, &t.plural).cloned()
    }
    .ok_or_else(|| ApiError::no_route(&format!("{}/{}/{}", t.group, t.version, t.plural)))?;
    if t.namespace.is_some() && !rt.namespaced {
        return Err(ApiError::no_route(&format!(
            "{} is not namespaced",
            rt.plural
        )));
    }
    if let Some(sub) = &t.subresource
        && !rt.has_subresource(&t.version, sub)
    {
        return Err(ApiError::no_route(&format!("{}/{sub}", rt.plural)));
    }
    let namespace = t.namespace.clone().unwrap_or_default();
    if rt.namespaced && t.name.is_some() && t.namespace.is_none() {
        return Err(ApiError::no_route(&format!(
            "{} is namespaced: use /namespaces/{{namespace}}/{}",
            rt.plural, rt.plural
        )));
    }
    match verb {
        "list" => list(shared, request, &rt).await,
        "watch" => watch_response(shared, request, &rt).await,
        "get" => get(shared, request, &rt, &namespace).await,
        "create" if t.subresource.as_deref() == Some("eviction") => {
            evict(shared, request, &rt, &namespace)
        }
        "create" => {
            if rt.namespaced && t.namespace.is_none() {
                return Err(ApiError::method_not_allowed(format!(
                    "create {} needs a namespace in the path",
                    rt.plural
                )));
            }
            write::write(shared, request, &rt, &namespace, verb).await
        }
        "update" | "patch" if t.subresource.as_deref() == Some("approval") => {
            approve(shared, request, &rt, verb)
        }
        "update" | "patch" => write::write(shared, request, &rt, &namespace, verb).await,
        "delete" => {
            if t.subresource.is_some() {
                return Err(ApiError::method_not_allowed(
                    "subresources cannot be deleted",
                ));
            }
            let name = t.name.as_deref().unwrap_or("");
            let options = delete_options(request)?;
            let deleted = write::delete(shared, request, &rt, &namespace, name, &options).await?;
            Ok(json_response(200, &deleted))
        }
        "deletecollection" => delete_collection(shared, request, &rt).await,
        _ => Err(ApiError::method_not_allowed(format!(
            "{} is not supported",
            request.method
        ))),
    }
}

/// Sets `apiVersion` and `kind` for the requested version (all versions share storage).
fn present(rt: &ResourceType, version: &str, object: &Value) -> Value {
    let mut out = object.clone();
    out["apiVersion"] = json!(rt.api_version(version));
    out["kind"] = json!(rt.kind);
    out
}

pub(crate) fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => Ok(v),
        Err(json_error) => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the request body is not UTF-8"))?;
            serde_saphyr::from_str::<Value>(text).map_err(|yaml_error| {
                ApiError::bad_request(format!(
                    "the request body is neither JSON ({json_error}) nor YAML ({yaml_error})"
                ))
            })
        }
    }
}

pub(crate) fn check_kind(rt: &ResourceType, version: &str, body: &Value) -> Result<(), ApiError> {
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if (!kind.is_empty() && kind != rt.kind)
        || (!api_version.is_empty() && api_version != rt.api_version(version))
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) or the kind ({kind}) does not match the expected {} {}",
            rt.api_version(version),
            rt.kind
        )));
    }
    Ok(())
}

fn selectors(
    request: &ResourceRequest,
    rt: &ResourceType,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(
        request
            .query
            .get("labelSelector")
            .map_or("", String::as_str),
    )?;
    let version = &request.target.version;
    let mut fields = FieldSelector::parse(
        request
            .query
            .get("fieldSelector")
            .map_or("", String::as_str),
        |f| rt.supports_field(version, f),
    )?;
    if crate::events::is_events_v1(&rt.group, &rt.plural) {
        for requirement in &mut fields.0 {
            requirement.field = crate::events::core_field(&requirement.field);
        }
    }
    Ok((labels, fields))
}

fn wants_table_response(request: &ResourceRequest) -> bool {
    wants_table(request.header(header::ACCEPT))
}

async fn get(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let name = t.name.as_deref().unwrap_or("");
    let object = {
        let store = shared.store();
        store.get(rt, namespace, name)
    }
    .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let object = shared
        .to_version(rt, &t.version, vec![object])
        .await?
        .pop()
        .unwrap_or(Value::Null);
    if wants_table_response(request) && t.subresource.is_none() {
        let include = IncludeObject::parse(request.query.get("includeObject").map(String::as_str));
        let meta = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
        return Ok(json_response(
            200,
            &to_table(rt, &t.version, &[object], include, true, meta),
        ));
    }
    Ok(json_response(200, &object))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

async fn list(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let (labels, fields) = selectors(request, rt)?;
    let limit: usize = match request.query.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        _ => 0,
    };
    let token = match request.query.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()
                .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok())
                .ok_or_else(|| ApiError::bad_request("invalid continue token"))?,
        ),
        None => None,
    };
    let (items, remaining, list_rv) = {
        let store = shared.store();
        let current = store.resource_version();
        if let Some(rv) = request
            .query
            .get("resourceVersion")
            .filter(|v| !v.is_empty() && *v != "0")
        {
            let rv: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?;
            match request
                .query
                .get("resourceVersionMatch")
                .map(String::as_str)
            {
                Some("Exact") if rv != current => {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({current}): the emulator serves only the latest state"
                    )));
                }
                _ if rv > current => {
                    return Err(ApiError::new(504, "Timeout", format!("Too large resource version: {rv}, current: {current}"))
                    .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]})));
                }
                _ => {}
            }
        }
        let list_rv = match &token {
            Some(tok) if tok.rv < store.compacted() => {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            Some(tok) => tok.rv,
            None => current,
        };
        let after = token
            .as_ref()
            .map(|tok| (tok.ns.as_str(), tok.name.as_str()));
        let mut matching = store
            .list_after(rt, t.namespace.as_deref(), after)
            .filter(|o| stored_matches(o, &labels, &fields));
        let mut items: Vec<Stored> = Vec::new();
        let mut remaining = 0usize;
        for object in matching.by_ref() {
            if limit > 0 && items.len() == limit {
                remaining = 1;
                break;
            }
            items.push(object.clone());
        }
        remaining += matching.count();
        (items, remaining, list_rv)
    };
    // The position of the last item, for the next page.
    let last_key = items.last().map(|last| {
        let ns = if rt.namespaced {
            last.value()
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        } else {
            String::new()
        };
        (ns, last.name().to_owned())
    });
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if remaining > 0
        && let Some((ns, name)) = last_key
    {
        let next = ContinueToken {
            rv: list_rv,
            ns,
            name,
        };
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&next).unwrap_or_default());
        meta["continue"] = json!(encoded);
        meta["remainingItemCount"] = json!(remaining);
    }
    let table = wants_table_response(request);
    if !table
        && items
            .iter()
            .all(|o| shared.served_as_stored(rt, &t.version, o))
    {
        // The stored text is what would be served: spliced in, not parsed and re-rendered.
        let mut body = json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(&t.version),
            "metadata": meta,
        })
        .to_string();
        body.pop();
        body.push_str(",\"items\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(item.json());
        }
        body.push_str("]}");
        return Ok(json_text_response(200, body));
    }
    let items = shared
        .to_version(rt, &t.version, items.iter().map(Stored::value).collect())
        .await?;
    if table {
        let include = IncludeObject::parse(request.query.get("includeObject").map(String::as_str));
        return Ok(json_response(
            200,
            &to_table(rt, &t.version, &items, include, true, meta),
        ));
    }
    let body = json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(&t.version),
        "metadata": meta,
        "items": items,
    });
    Ok(json_response(200, &body))
}

/// Whether a stored object matches label and field selectors (labels from the stored
/// object, fields — rarely given — from the parsed object).
fn stored_matches(object: &Stored, labels: &LabelSelector, fields: &FieldSelector) -> bool {
    (labels.is_empty() || labels.matches_labels(object.labels()))
        && (fields.0.is_empty() || fields.matches(&object.value()))
}

fn delete_options(request: &ResourceRequest) -> Result<DeleteOptions, ApiError> {
    let body = parse_body(&request.body)?;
    let text = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Ok(DeleteOptions {
        uid: text("/preconditions/uid"),
        resource_version: text("/preconditions/resourceVersion"),
    })
}

async fn delete_collection(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let (labels, fields) = selectors(request, rt)?;
    let options = delete_options(request)?;
    let victims: Vec<(String, String)> = shared
        .store()
        .list(rt, t.namespace.as_deref())
        .filter(|o| labels.matches(o) && fields.matches(o))
        .map(|o| {
            (
                o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    let mut items = Vec::new();
    for (ns, name) in victims {
        match write::delete(shared, request, rt, &ns, &name, &options).await {
            Ok(deleted) => items.push(deleted),
            // Gone meanwhile, or a failed precondition: skipped, as before.
            Err(error) if error.code == 404 || error.code == 409 => {}
            Err(error) => return Err(error),
        }
    }
    let rv = shared.store().resource_version();
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(&t.version),
        "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}

/// `POST pods/{name}/eviction`: deletes the pod unless a PodDisruptionBudget forbids it (429).
fn evict(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    pods: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let name = request.target.name.as_deref().unwrap_or("");
    let body = parse_body(&request.body)?;
    if let Some(body_name) = body.pointer("/metadata/name").and_then(Value::as_str)
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object ({body_name} != {name})"
        )));
    }
    let text = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let options = DeleteOptions {
        uid: text("/deleteOptions/preconditions/uid"),
        resource_version: text("/deleteOptions/preconditions/resourceVersion"),
    };
    let mut ctx = request.context();
    ctx.dry_run |= body
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|x| x == "All"));
    let mut store = shared.store();
    let pod = store
        .get(pods, namespace, name)
        .ok_or_else(|| ApiError::not_found("", "pods", name))?;
    if !eviction::eviction_ignores_budget(&pod) {
        let pdb_type = store
            .types()
            .iter()
            .find(|t| t.group == "policy" && t.plural == "poddisruptionbudgets")
            .cloned()
            .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not served"))?;
        let budgets: Vec<Value> = store
            .list(&pdb_type, Some(namespace))
            .filter(|b| eviction::budget_covers(b, &pod))
            .collect();
        if budgets.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(budget) = budgets.first() {
            let covered = store
                .list_after(pods, Some(namespace), None)
                .filter(|p| eviction::budget_covers_labels(budget, p.labels()))
                .map(Stored::value);
            let status = eviction::compute_status(budget, covered);
            if status.disruptions_allowed <= 0 {
                let budget_name = budget
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                return Err(ApiError::new(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
                    .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": format!(
                        "The disruption budget {budget_name} needs {} healthy pods and has {} currently",
                        status.desired_healthy, status.current_healthy)}]})));
            }
        }
    }
    store.delete(pods, namespace, name, &options, &ctx)?;
    drop(store);
    Ok(json_response(201, &success_status()))
}

/// `PUT` or `PATCH certificatesigningrequests/{name}/approval`: changes only
/// `status.conditions` (see [`crate::approval`]).
fn approve(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    verb: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let name = t.name.as_deref().unwrap_or("");
    let body = parse_body(&request.body)?;
    let mut store = shared.store();
    let live = store
        .get(rt, "", name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let candidate = if verb == "patch" {
        let mut candidate = present(rt, &t.version, &live);
        match request
            .header(header::CONTENT_TYPE)
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
        {
            "application/merge-patch+json" => merge_patch(&mut candidate, &body),
            "application/json-patch+json" => json_patch(&mut candidate, &body)?,
            other => return Err(ApiError::unsupported_media_type(other)),
        }
        candidate
    } else {
        check_kind(rt, &t.version, &body)?;
        body
    };
    let merged = crate::approval::approval_update(&live, &candidate)?;
    let updated = store.replace(
        rt,
        &t.version,
        "",
        name,
        merged,
        Part::Status,
        &request.context(),
        None,
    )?;
    drop(store);
    Ok(json_response(200, &present(rt, &t.version, &updated)))
}

// ---------------------------------------------------------------------------------------
// Watch
// ---------------------------------------------------------------------------------------

struct WatchFilter {
    rt: ResourceType,
    version: String,
    namespace: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    table: Option<IncludeObject>,
}

impl WatchFilter {
    fn matches(&self, namespace: &str, object: &Stored) -> bool {
        self.namespace.as_ref().is_none_or(|ns| ns == namespace)
            && self.name.as_ref().is_none_or(|n| n == object.name())
            && stored_matches(object, &self.labels, &self.fields)
    }

    /// The event a watcher sees for a change, if any: modifications that move an object into
    /// or out of the selection become ADDED or DELETED.
    fn translate(&self, event: &WatchEvent) -> Option<(EventType, Stored)> {
        if event.key != self.rt.key() {
            return None;
        }
        let now = self.matches(&event.namespace, &event.object);
        match (event.event_type, &event.previous) {
            (EventType::Modified, Some(previous)) => {
                match (self.matches(&event.namespace, previous), now) {
                    (true, true) => Some((EventType::Modified, event.object.clone())),
                    (false, true) => Some((EventType::Added, event.object.clone())),
                    (true, false) => Some((EventType::Deleted, event.object.clone())),
                    (false, false) => None,
                }
            }
            (kind, _) => now.then(|| (kind, event.object.clone())),
        }
    }

    /// Encodes one event with the stored object as it is served (`serves_stored`).
    fn encode_stored(event_type: &str, object: &Stored) -> Bytes {
        let mut line = String::with_capacity(object.json().len() + 32);
        line.push_str("{\"type\":\"");
        line.push_str(event_type);
        line.push_str("\",\"object\":");
        line.push_str(object.json());
        line.push_str("}\n");
        Bytes::from(line)
    }

    /// Encodes one event; `presented` is the object at the watched version.
    fn encode(&self, event_type: &str, presented: Value, first: &mut bool) -> Bytes {
        let object = match self.table {
            Some(include) if event_type != "BOOKMARK" && event_type != "ERROR" => {
                let meta = json!({"resourceVersion": presented.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
                let table = to_table(&self.rt, &self.version, &[presented], include, *first, meta);
                *first = false;
                table
            }
            _ => presented,
        };
        let mut line = json!({"type": event_type, "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
    }

    fn bookmark(&self, resource_version: u64, initial_events_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": resource_version.to_string()});
        if initial_events_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(&self.version), "metadata": meta});
        let mut line = json!({"type": "BOOKMARK", "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
    }
}

async fn watch_response(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let (labels, mut fields) = selectors(request, rt)?;
    // A watch on a single name (legacy /watch/.../name) is a metadata.name field selector.
    let name = t.name.clone();
    if let Some(n) = &name {
        fields.0.push(crate::selector::FieldRequirement {
            field: "metadata.name".into(),
            value: n.clone(),
            negated: false,
        });
    }
    let table = wants_table_response(request)
        .then(|| IncludeObject::parse(request.query.get("includeObject").map(String::as_str)));
    let filter = WatchFilter {
        rt: rt.clone(),
        version: t.version.clone(),
        namespace: t.namespace.clone(),
        name,
        labels,
        fields,
        table,
    };
    let bookmarks = request.flag("allowWatchBookmarks");
    let send_initial = request.flag("sendInitialEvents");
    let timeout = match request.query.get("timeoutSeconds") {
        Some(s) if !s.is_empty() => {
            Some(Duration::from_secs(s.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {s:?}"))
            })?))
        }
        _ => None,
    };
    let requested_rv = request
        .query
        .get("resourceVersion")
        .filter(|v| !v.is_empty())
        .cloned();

    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let mut first = true;
    let mut opening: Vec<(EventType, Stored)> = Vec::new();
    let mut opening_end: Option<Bytes> = None;
    let (receiver, start_rv) = {
        let store = shared.store();
        let current = store.resource_version();
        match requested_rv.as_deref() {
            Some(rv) if rv != "0" && !send_initial => {
                let rv: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                })?;
                match store.history_since(&rt.key(), rv) {
                    Ok(events) => {
                        for event in events {
                            if let Some(change) = filter.translate(&event) {
                                opening.push(change);
                            }
                        }
                    }
                    Err(expired) => {
                        // kube-apiserver answers 200 and a single ERROR event carrying 410.
                        drop(store);
                        let body = futures::stream::iter(
                            [filter_error_line(&expired)]
                                .into_iter()
                                .map(Ok::<_, Infallible>),
                        );
                        return Ok(streaming(Body::from_stream(body)));
                    }
                }
            }
            _ => {
                for object in store.list_after(rt, t.namespace.as_deref(), None) {
                    let namespace = if rt.namespaced {
                        object
                            .value()
                            .pointer("/metadata/namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned()
                    } else {
                        String::new()
                    };
                    if filter.matches(&namespace, object) {
                        opening.push((EventType::Added, object.clone()));
                    }
                }
                if send_initial {
                    opening_end = Some(filter.bookmark(current, true));
                }
            }
        }
        (store.subscribe(), current)
    };
    let raw = filter.table.is_none()
        && opening
            .iter()
            .all(|(_, o)| shared.served_as_stored(rt, &t.version, o));
    let mut opening: Vec<Bytes> = if raw {
        opening
            .iter()
            .map(|(kind, object)| WatchFilter::encode_stored(kind.as_str(), object))
            .collect()
    } else {
        let (kinds, objects): (Vec<EventType>, Vec<Value>) = opening
            .into_iter()
            .map(|(kind, object)| (kind, object.value()))
            .unzip();
        let objects = shared.to_version(rt, &t.version, objects).await?;
        kinds
            .into_iter()
            .zip(objects)
            .map(|(kind, object)| filter.encode(kind.as_str(), object, &mut first))
            .collect()
    };
    opening.extend(opening_end);
    let mut drop_signal = shared.drop_watches.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    let interval = shared.bookmark_interval;
    let shared = Arc::clone(shared);
    let plural = rt.plural.clone();
    tokio::spawn(async move {
        let mut receiver = receiver;
        // The resourceVersion of the last change sent (or skipped by the filter): a BOOKMARK
        // never claims more than what the watcher was given.
        let mut last_rv = start_rv;
        // Changes received but not yet due (an injected watch delay), oldest first; due
        // times never decrease, so events leave in resourceVersion order.
        let mut delayed = DelayedEvents::new();
        let enqueue = |delayed: &mut DelayedEvents, event: Arc<WatchEvent>| {
            let delay = shared.latency().watch_delay(&plural);
            let mut due = tokio::time::Instant::now() + delay;
            if let Some((last, _)) = delayed.back() {
                due = due.max(*last);
            }
            delayed.push_back((due, event));
        };
        for line in opening {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            let sleep_until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let next_due = delayed.front().map(|(due, _)| *due);
            let sleep_until_due = async {
                match next_due {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                received = receiver.recv() => match received {
                    Ok(event) => enqueue(&mut delayed, event),
                    // A watcher too slow to keep up is closed; its client resumes from the last
                    // resourceVersion it saw, as with a real API server.
                    Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
                },
                () = sleep_until_due => {
                    if !send_due(&shared, &mut delayed, &filter, &tx, &mut first, &mut last_rv).await {
                        return;
                    }
                }
                _ = ticker.tick(), if bookmarks => {
                    // Deliver everything already due before claiming a resourceVersion.
                    while let Ok(event) = receiver.try_recv() {
                        enqueue(&mut delayed, event);
                    }
                    if !send_due(&shared, &mut delayed, &filter, &tx, &mut first, &mut last_rv).await {
                        return;
                    }
                    if tx.send(Ok(filter.bookmark(last_rv, false))).await.is_err() {
                        return;
                    }
                }
                () = sleep_until_deadline => return,
                _ = drop_signal.changed() => return,
                _ = shutdown.changed() => return,
                () = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(streaming(Body::from_stream(stream)))
}

/// Changes received by a watch and the instant each is due (see [`crate::latency`]).
type DelayedEvents = VecDeque<(tokio::time::Instant, Arc<WatchEvent>)>;

/// Sends the watcher every delayed change that is due, in order; `false` when the client went
/// away.
async fn send_due(
    shared: &Shared,
    delayed: &mut DelayedEvents,
    filter: &WatchFilter,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    first: &mut bool,
    last_rv: &mut u64,
) -> bool {
    let now = tokio::time::Instant::now();
    while delayed.front().is_some_and(|(due, _)| *due <= now) {
        let Some((_, event)) = delayed.pop_front() else {
            break;
        };
        *last_rv = event.resource_version;
        let Some((kind, object)) = filter.translate(&event) else {
            continue;
        };
        if filter.table.is_none() && shared.served_as_stored(&filter.rt, &filter.version, &object) {
            if tx
                .send(Ok(WatchFilter::encode_stored(kind.as_str(), &object)))
                .await
                .is_err()
            {
                return false;
            }
            continue;
        }
        let line = match shared
            .to_version(&filter.rt, &filter.version, vec![object.value()])
            .await
        {
            Ok(mut converted) => {
                filter.encode(kind.as_str(), converted.pop().unwrap_or(Value::Null), first)
            }
            Err(error) => {
                // kube-apiserver ends a watch whose objects cannot be converted with an ERROR.
                let _ = tx.send(Ok(filter_error_line(&error))).await;
                return false;
            }
        };
        if tx.send(Ok(line)).await.is_err() {
            return false;
        }
    }
    true
}

fn filter_error_line(error: &ApiError) -> Bytes {
    let mut line = json!({"type": "ERROR", "object": error.to_status()}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn streaming(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let Route::Resource(t) = parse_route("/api/v1/namespaces/default/pods/p1/eviction") else {
            panic!()
        };
        assert_eq!(
            (
                t.namespace.as_deref(),
                t.plural.as_str(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            (Some("default"), "pods", Some("p1"), Some("eviction"))
        );
        let Route::Resource(t) = parse_route("/api/v1/namespaces/default") else {
            panic!()
        };
        assert_eq!(
            (t.namespace, t.plural.as_str(), t.name.as_deref()),
            (None, "namespaces", Some("default"))
        );
        let Route::Resource(t) = parse_route("/api/v1/namespaces/default/status") else {
            panic!()
        };
        assert_eq!(
            (t.plural.as_str(), t.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let Route::Resource(t) = parse_route("/apis/deckhouse.io/v1/nodegroups/workers/status")
        else {
            panic!()
        };
        assert_eq!(
            (
                t.group.as_str(),
                t.plural.as_str(),
                t.subresource.as_deref()
            ),
            ("deckhouse.io", "nodegroups", Some("status"))
        );
        let Route::Resource(t) = parse_route("/api/v1/watch/namespaces/kube-system/pods") else {
            panic!()
        };
        assert!(t.legacy_watch && t.namespace.as_deref() == Some("kube-system"));
        assert!(matches!(parse_route("/apis/policy"), Route::Group(g) if g == "policy"));
        assert!(matches!(parse_route("/openapi/v2"), Route::NotFound));
    }
}
