//! The HTTP front: parses kube-apiserver URLs (`/api/v1/namespaces/{ns}/pods/{name}/eviction`,
//! `/apis/{group}/{version}/{plural}`…), maps method + path to a verb, applies injected faults,
//! and answers get, list (pagination, selectors, resourceVersion), watch (resume, 410, bookmarks,
//! timeouts, initial events), create, update, patch (merge, JSON, strategic, apply), delete
//! (preconditions), deletecollection, the status subresource and `pods/eviction`.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use crate::discovery;
use crate::eviction;
use crate::faults::{Fault, take_fault};
use crate::latency::Latency;
use crate::managed::{self, ApplyRequest};
use crate::openapi;
use crate::patch::{json_patch, merge_patch, strategic_merge_patch};
use crate::registry::ResourceType;
use crate::schema::list_kind;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, success_status};
use crate::store::{DeleteOptions, EventType, Part, Store, WatchEvent, WriteContext};
use crate::table::{IncludeObject, to_table, wants_table};

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
struct Target {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
    legacy_watch: bool,
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
    NotFound,
}

fn parse_route(path: &str) -> Route {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Route::Version,
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

/// Decodes `a=b&c=d` with percent-decoding (`+` is a space).
fn parse_query(query: Option<&str>) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match u8::from_str_radix(
                        std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                        16,
                    ) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn json_response(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
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
        Route::Resource(target) => {
            let request = ResourceRequest {
                method: parts.method,
                headers: parts.headers,
                query,
                body,
                target,
            };
            let delay = shared
                .latency()
                .request_delay(request.verb(), &request.resource());
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            serve_resource(&shared, request)
        }
    }
}

struct ResourceRequest {
    method: Method,
    headers: HeaderMap,
    query: BTreeMap<String, String>,
    body: Bytes,
    target: Target,
}

impl ResourceRequest {
    fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn flag(&self, name: &str) -> bool {
        self.query
            .get(name)
            .is_some_and(|v| v == "true" || v == "1")
    }

    fn context(&self) -> WriteContext {
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

fn serve_resource(shared: &Arc<Shared>, request: ResourceRequest) -> Response {
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
        None => dispatch(shared, &request, verb),
    };
    let response = match result {
        Ok(response) => response,
        Err(error) => error_response(&error),
    };
    shared.count(verb, &resource, response.status().as_u16());
    response
}

fn dispatch(
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
        "list" => list(shared, request, &rt),
        "watch" => watch_response(shared, request, &rt),
        "get" => get(shared, request, &rt, &namespace),
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
            create(shared, request, &rt, &namespace)
        }
        "update" | "patch" if t.subresource.as_deref() == Some("approval") => {
            approve(shared, request, &rt, verb)
        }
        "update" => update(shared, request, &rt, &namespace),
        "patch" => patch(shared, request, &rt, &namespace),
        "delete" => delete(shared, request, &rt, &namespace),
        "deletecollection" => delete_collection(shared, request, &rt),
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

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
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

fn check_kind(rt: &ResourceType, version: &str, body: &Value) -> Result<(), ApiError> {
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
    let fields = FieldSelector::parse(
        request
            .query
            .get("fieldSelector")
            .map_or("", String::as_str),
        |f| rt.supports_field(version, f),
    )?;
    Ok((labels, fields))
}

fn wants_table_response(request: &ResourceRequest) -> bool {
    wants_table(request.header(header::ACCEPT))
}

fn get(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let name = t.name.as_deref().unwrap_or("");
    let object = {
        let store = shared.store();
        store.get(rt, namespace, name).cloned()
    }
    .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let object = present(rt, &t.version, &object);
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

fn list(
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
    let mut matching = store
        .list(rt, t.namespace.as_deref())
        .filter(|o| {
            let key = (
                o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            );
            token
                .as_ref()
                .is_none_or(|tok| key > (tok.ns.as_str(), tok.name.as_str()))
        })
        .filter(|o| labels.matches(o) && fields.matches(o));
    let mut items = Vec::new();
    let mut remaining = 0usize;
    for object in matching.by_ref() {
        if limit > 0 && items.len() == limit {
            remaining = 1;
            break;
        }
        items.push(present(rt, &t.version, object));
    }
    remaining += matching.count();
    drop(store);
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if remaining > 0
        && let Some(last) = items.last()
    {
        let next = ContinueToken {
            rv: list_rv,
            ns: last
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            name: last
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        };
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&next).unwrap_or_default());
        meta["continue"] = json!(encoded);
        meta["remainingItemCount"] = json!(remaining);
    }
    if wants_table_response(request) {
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

fn create(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let body = parse_body(&request.body)?;
    check_kind(rt, &t.version, &body)?;
    let created =
        shared
            .store()
            .create(rt, &t.version, namespace, body, &request.context(), None)?;
    Ok(json_response(201, &present(rt, &t.version, &created)))
}

fn part_of(rt: &ResourceType, target: &Target) -> Result<Part, ApiError> {
    match target.subresource.as_deref() {
        None => Ok(Part::Main),
        Some("status") => Ok(Part::Status),
        Some(other) => Err(ApiError::method_not_allowed(format!(
            "{}/{other} does not support this verb",
            rt.plural
        ))),
    }
}

fn update(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let name = t
        .name
        .as_deref()
        .ok_or_else(|| ApiError::method_not_allowed("update needs a name"))?;
    let part = part_of(rt, t)?;
    let body = parse_body(&request.body)?;
    check_kind(rt, &t.version, &body)?;
    let updated = shared.store().replace(
        rt,
        &t.version,
        namespace,
        name,
        body,
        part,
        &request.context(),
        None,
    )?;
    Ok(json_response(200, &present(rt, &t.version, &updated)))
}

fn patch(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let name = t
        .name
        .as_deref()
        .ok_or_else(|| ApiError::method_not_allowed("patch needs a name"))?;
    let part = part_of(rt, t)?;
    let content_type = request
        .header(header::CONTENT_TYPE)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    let body = parse_body(&request.body)?;
    let ctx = request.context();
    let version = t.version.as_str();
    let kind_of = |path: &[&str]| list_kind(rt, version, path);
    let mut store = shared.store();
    if content_type == "application/apply-patch+yaml" {
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
        check_kind(rt, version, &body)?;
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
        let existing = store.get(rt, namespace, name).cloned();
        let result = match existing {
            Some(live) => {
                let live = present(rt, version, &live);
                let mut merged = managed::apply(&live, &apply, &kind_of)?;
                let fields = merged.pointer("/metadata/managedFields").cloned();
                // The applied resourceVersion, if any, is a precondition; otherwise none.
                merged["metadata"]["resourceVersion"] = body
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(json!(""));
                store.replace(rt, version, namespace, name, merged, part, &ctx, fields)?
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
                let created = store.create(rt, version, namespace, merged, &ctx, fields)?;
                drop(store);
                return Ok(json_response(201, &present(rt, version, &created)));
            }
        };
        drop(store);
        return Ok(json_response(200, &present(rt, version, &result)));
    }
    let live = store
        .get(rt, namespace, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let mut candidate = present(rt, version, &live);
    match content_type.as_str() {
        "application/merge-patch+json" => merge_patch(&mut candidate, &body),
        "application/json-patch+json" => json_patch(&mut candidate, &body)?,
        "application/strategic-merge-patch+json" => {
            if rt.custom {
                return Err(ApiError::unsupported_media_type(&content_type));
            }
            strategic_merge_patch(&mut candidate, &body, &kind_of)?;
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    let updated = store.replace(rt, version, namespace, name, candidate, part, &ctx, None)?;
    drop(store);
    Ok(json_response(200, &present(rt, version, &updated)))
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

fn delete(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    let t = &request.target;
    if t.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "subresources cannot be deleted",
        ));
    }
    let name = t.name.as_deref().unwrap_or("");
    let options = delete_options(request)?;
    let deleted = shared
        .store()
        .delete(rt, namespace, name, &options, &request.context())?;
    Ok(json_response(200, &present(rt, &t.version, &deleted)))
}

fn delete_collection(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    rt: &ResourceType,
) -> Result<Response, ApiError> {
    let t = &request.target;
    let (labels, fields) = selectors(request, rt)?;
    let options = delete_options(request)?;
    let ctx = request.context();
    let mut store = shared.store();
    let victims: Vec<(String, String)> = store
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
        if let Ok(deleted) = store.delete(rt, &ns, &name, &options, &ctx) {
            items.push(present(rt, &t.version, &deleted));
        }
    }
    let rv = store.resource_version();
    drop(store);
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
        .cloned()
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
            .cloned()
            .collect();
        if budgets.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(budget) = budgets.first() {
            let status = eviction::compute_status(budget, store.list(pods, Some(namespace)));
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
        .cloned()
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
    fn matches(&self, object: &Value) -> bool {
        let meta = |k: &str| {
            object
                .pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == meta("namespace"))
            && self.name.as_ref().is_none_or(|n| *n == meta("name"))
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    /// The event a watcher sees for a change, if any: modifications that move an object into
    /// or out of the selection become ADDED or DELETED.
    fn translate(&self, event: &WatchEvent) -> Option<(EventType, Value)> {
        if event.key != self.rt.key() {
            return None;
        }
        let now = self.matches(&event.object);
        match (event.event_type, &event.previous) {
            (EventType::Modified, Some(previous)) => match (self.matches(previous), now) {
                (true, true) => Some((EventType::Modified, event.object.clone())),
                (false, true) => Some((EventType::Added, event.object.clone())),
                (true, false) => Some((EventType::Deleted, event.object.clone())),
                (false, false) => None,
            },
            (kind, _) => now.then(|| (kind, event.object.clone())),
        }
    }

    fn encode(&self, event_type: &str, object: &Value, first: &mut bool) -> Bytes {
        let presented = present(&self.rt, &self.version, object);
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

fn watch_response(
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
    let mut opening: Vec<Bytes> = Vec::new();
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
                            if let Some((kind, object)) = filter.translate(&event) {
                                opening.push(filter.encode(kind.as_str(), &object, &mut first));
                            }
                        }
                    }
                    Err(expired) => {
                        // kube-apiserver answers 200 and a single ERROR event carrying 410.
                        opening.push(filter_error_line(&expired));
                        drop(store);
                        let body =
                            futures::stream::iter(opening.into_iter().map(Ok::<_, Infallible>));
                        return Ok(streaming(Body::from_stream(body)));
                    }
                }
            }
            _ => {
                for object in store.list(rt, t.namespace.as_deref()) {
                    if filter.matches(object) {
                        opening.push(filter.encode("ADDED", object, &mut first));
                    }
                }
                if send_initial {
                    opening.push(filter.bookmark(current, true));
                }
            }
        }
        (store.subscribe(), current)
    };
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
                    if !send_due(&mut delayed, &filter, &tx, &mut first, &mut last_rv).await {
                        return;
                    }
                }
                _ = ticker.tick(), if bookmarks => {
                    // Deliver everything already due before claiming a resourceVersion.
                    while let Ok(event) = receiver.try_recv() {
                        enqueue(&mut delayed, event);
                    }
                    if !send_due(&mut delayed, &filter, &tx, &mut first, &mut last_rv).await {
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
        if let Some((kind, object)) = filter.translate(&event)
            && tx
                .send(Ok(filter.encode(kind.as_str(), &object, first)))
                .await
                .is_err()
        {
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

    #[test]
    fn query_decoding() {
        let q = parse_query(Some(
            "labelSelector=app%20in%20(a%2Cb)&fieldSelector=spec.nodeName%3Dw1&watch=1&x",
        ));
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert_eq!(q["fieldSelector"], "spec.nodeName=w1");
        assert_eq!(q["x"], "");
    }
}
