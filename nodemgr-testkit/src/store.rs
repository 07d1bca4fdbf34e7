//! The in-memory object store: JSON objects keyed by resource type, namespace and name, one
//! global monotonically increasing resourceVersion, uids, creation timestamps, generation bumps
//! on spec changes, deletion with finalizers, a bounded history of watch events (so watches
//! resume from a resourceVersion or get 410 Gone), and the side effects of a few kinds:
//! CustomResourceDefinitions register types, namespaces cascade, PodDisruptionBudget status
//! follows the pods it covers.
//!
//! All versions of a type share storage (like a CRD with conversion strategy `None`): objects
//! are kept at the storage version and served with the requested `apiVersion`.
//!
//! Objects are kept as their JSON text ([`Stored`]), with their name and labels at hand for
//! selectors, and parsed when read: a parsed object takes ten times its text (`serde_json`'s
//! maps), which at 150,000 pods is tens of GiB. The watch history shares the stored text.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::eviction;
use crate::managed;
use crate::registry::{ResourceKey, ResourceType, builtin_types, type_from_crd};
use crate::schema::list_kind;
use crate::status::ApiError;
use crate::time::now_rfc3339;

/// Namespaces that exist from the start, as in a fresh cluster.
pub const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// An object was created (or started matching a selector).
    Added,
    /// An object changed.
    Modified,
    /// An object was removed (or stopped matching a selector).
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`…).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// An object as the store keeps it: its JSON text, its name and its labels (what selectors
/// read without parsing it). Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Stored(Arc<StoredObject>);

#[derive(Debug)]
struct StoredObject {
    json: Box<str>,
    name: Box<str>,
    labels: BTreeMap<String, String>,
}

impl Stored {
    /// Keeps `object`.
    pub fn new(object: &Value) -> Stored {
        Stored(Arc::new(StoredObject {
            json: object.to_string().into_boxed_str(),
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            labels: crate::selector::labels_of(object),
        }))
    }

    /// The object.
    pub fn value(&self) -> Value {
        // The text is `serde_json`'s own rendering of a `Value`: it parses back, at any depth.
        let mut parser = serde_json::Deserializer::from_str(&self.0.json);
        parser.disable_recursion_limit();
        serde::Deserialize::deserialize(&mut parser).unwrap_or(Value::Null)
    }

    /// The object's JSON text.
    pub fn json(&self) -> &str {
        &self.0.json
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// `metadata.labels` (string values).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.0.labels
    }
}

/// One change, as kept in the history and sent to watchers.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// The resourceVersion the change produced.
    pub resource_version: u64,
    /// Which type changed.
    pub key: ResourceKey,
    /// Namespace of the object (`""` for cluster-scoped).
    pub namespace: String,
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for deletes: its last state with the new resourceVersion).
    pub object: Stored,
    /// The object before the change (modifications only), so selector watches can turn a
    /// change into ADDED/DELETED when the object starts or stops matching.
    pub previous: Option<Stored>,
}

/// Who writes, and how: carried by every mutation.
#[derive(Debug, Clone, Default)]
pub struct WriteContext {
    /// `fieldManager` (or derived from the User-Agent); owner of changed fields.
    pub field_manager: String,
    /// `dryRun=All`: validate and compute, but persist nothing.
    pub dry_run: bool,
}

/// Which part of an object an update may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main endpoint: everything but `status` when the type has a status subresource.
    Main,
    /// The `/status` subresource: only `status`.
    Status,
}

/// Preconditions and options of a delete (`metav1.DeleteOptions`).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Delete only if the uid matches.
    pub uid: Option<String>,
    /// Delete only if the resourceVersion matches.
    pub resource_version: Option<String>,
}

/// The store. Lock it (it lives in a `Mutex`) for each request.
pub struct Store {
    resource_version: u64,
    types: Vec<ResourceType>,
    objects: HashMap<ResourceKey, BTreeMap<(String, String), Stored>>,
    history: VecDeque<Arc<WatchEvent>>,
    history_limit: usize,
    compacted: u64,
    sender: broadcast::Sender<Arc<WatchEvent>>,
    rng: u64,
}

impl Store {
    /// An empty cluster with the built-in types and the initial namespaces, keeping the last
    /// `history_limit` events for watch resumption.
    pub fn new(history_limit: usize) -> Self {
        let (sender, _) = broadcast::channel(16_384);
        let mut store = Store {
            resource_version: 0,
            types: builtin_types(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            sender,
            rng: 0x9E37_79B9_7F4A_7C15 ^ u64::try_from(crate::time::now_unix()).unwrap_or(0),
        };
        let namespaces = store
            .types
            .iter()
            .find(|t| t.plural == "namespaces")
            .cloned();
        if let Some(ns_type) = namespaces {
            for name in INITIAL_NAMESPACES {
                let ns =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
                // Creating a fresh namespace in an empty store cannot fail.
                let _ = store.create(
                    &ns_type,
                    "v1",
                    "",
                    ns,
                    &WriteContext {
                        field_manager: "emulator".into(),
                        dry_run: false,
                    },
                    None,
                );
            }
        }
        store
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// The oldest resourceVersion a watch may resume from.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// All served types.
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    /// The type served at `group/version` under `plural`.
    pub fn find_type(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.plural == plural && t.version(version).is_some())
    }

    /// The type and version for an object's `apiVersion` and `kind`.
    pub fn find_type_by_kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Option<(&ResourceType, String)> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.types
            .iter()
            .find(|t| t.group == group && t.kind == kind && t.version(version).is_some())
            .map(|t| (t, version.to_owned()))
    }

    /// Subscribes to all future changes.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.sender.subscribe()
    }

    /// The kept events of `key` after `resource_version`.
    ///
    /// # Errors
    /// 410 Expired when events after `resource_version` are no longer kept.
    pub fn history_since(
        &self,
        key: &ResourceKey,
        resource_version: u64,
    ) -> Result<Vec<Arc<WatchEvent>>, ApiError> {
        if resource_version < self.compacted {
            return Err(ApiError::expired(format!(
                "too old resource version: {resource_version} ({})",
                self.compacted
            )));
        }
        Ok(self
            .history
            .iter()
            .filter(|e| e.resource_version > resource_version && &e.key == key)
            .cloned()
            .collect())
    }

    /// One object at storage version.
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        self.get_stored(rt, namespace, name).map(Stored::value)
    }

    /// One object at storage version, as kept.
    pub fn get_stored(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Stored> {
        self.objects
            .get(&rt.key())?
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Objects of a type, in (namespace, name) order; all namespaces when `namespace` is None.
    pub fn list<'a>(
        &'a self,
        rt: &ResourceType,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = Value> + 'a {
        self.list_after(rt, namespace, None).map(Stored::value)
    }

    /// [`Store::list`] from just after the object `after` (`(namespace, name)`, a continue
    /// token's position). Seeks, in the order objects are kept, to the namespace or to
    /// `after`: a page of a list costs the page, not the objects before it.
    pub fn list_after<'a>(
        &'a self,
        rt: &ResourceType,
        namespace: Option<&'a str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = &'a Stored> + 'a {
        use std::ops::Bound;
        let start = match (after, namespace) {
            (Some((ns, name)), _) => Bound::Excluded((ns.to_owned(), name.to_owned())),
            (None, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.objects
            .get(&rt.key())
            .into_iter()
            .flat_map(move |m| m.range((start.clone(), Bound::Unbounded)))
            .skip_while(move |((ns, _), _)| namespace.is_some_and(|want| ns.as_str() < want))
            .take_while(move |((ns, _), _)| namespace.is_none_or(|want| ns == want))
            .map(|(_, v)| v)
    }

    /// Number of objects of a type.
    pub fn count(&self, rt: &ResourceType) -> usize {
        self.objects.get(&rt.key()).map_or(0, BTreeMap::len)
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: unique-enough uids and generated names for a test double.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn new_uid(&mut self) -> String {
        let (a, b) = (self.next_random(), self.next_random());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn generated_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut r = self.next_random();
        (0..5)
            .map(|_| {
                let c = ALPHABET[usize::try_from(r % 27).unwrap_or(0)] as char;
                r /= 27;
                c
            })
            .collect()
    }

    fn record(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        event_type: EventType,
        object: Stored,
        previous: Option<Stored>,
    ) {
        let event = Arc::new(WatchEvent {
            resource_version: self.resource_version,
            key: rt.key(),
            namespace: namespace.to_owned(),
            event_type,
            object,
            previous,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.resource_version;
            }
        }
        // No receivers is fine.
        let _ = self.sender.send(event);
    }

    fn bump(&mut self, object: &mut Value) {
        self.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
    }

    fn kind_of<'a>(
        rt: &'a ResourceType,
        version: &'a str,
    ) -> impl Fn(&[&str]) -> crate::schema::ListKind + 'a {
        move |path: &[&str]| list_kind(rt, version, path)
    }

    /// Creates an object (stored at the type's storage version).
    ///
    /// # Errors
    /// 409 AlreadyExists; 404 when the namespace does not exist; 422 for a missing name or an
    /// invalid CRD; 400 when the object's namespace contradicts the request's.
    ///
    /// `fields` are precomputed managedFields (server-side apply); `None` records the whole
    /// object as an `Update` by `ctx.field_manager`.
    pub fn create(
        &mut self,
        rt: &ResourceType,
        version: &str,
        namespace: &str,
        mut object: Value,
        ctx: &WriteContext,
        fields: Option<Value>,
    ) -> Result<Value, ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the body of a create must be a JSON object",
            ));
        }
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = json!({});
        }
        let body_ns = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if rt.namespaced {
            if !body_ns.is_empty() && body_ns != namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            if !self.namespace_exists(namespace) {
                return Err(ApiError::not_found("", "namespaces", namespace));
            }
            if self.namespace_terminating(namespace) {
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!(
                        "unable to create new content in namespace {namespace} because it is being terminated"
                    ),
                ));
            }
            object["metadata"]["namespace"] = json!(namespace);
        } else if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        let mut name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if name.is_empty() {
            let prefix = object
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            name = format!("{prefix}{}", self.generated_suffix());
            object["metadata"]["name"] = json!(name);
        }
        if self.get_stored(rt, namespace, &name).is_some() {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        if rt.custom
            && rt.has_status()
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if rt.plural == "namespaces" {
            object["status"] = json!({"phase": "Active"});
            if object.pointer("/spec/finalizers").is_none() {
                object["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
        let new_type =
            if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
                let t = type_from_crd(&object)?;
                if self
                    .types
                    .iter()
                    .any(|o| o.group == t.group && o.plural == t.plural)
                {
                    return Err(ApiError::invalid(
                        &rt.group,
                        &rt.kind,
                        &name,
                        format!(
                            "spec.names.plural: Invalid value: {:?}: already served",
                            t.plural
                        ),
                    ));
                }
                object["status"] = crd_status(&object, &t);
                Some(t)
            } else {
                None
            };
        object["apiVersion"] = json!(rt.api_version(&rt.storage_version));
        object["kind"] = json!(rt.kind);
        let uid = self.new_uid();
        let meta = &mut object["metadata"];
        meta["uid"] = json!(uid);
        meta["creationTimestamp"] = json!(now_rfc3339());
        meta["generation"] = json!(1);
        if let Some(m) = meta.as_object_mut() {
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("managedFields");
        }
        match fields {
            Some(list) => object["metadata"]["managedFields"] = list,
            None => managed::record_update(
                None,
                &mut object,
                &ctx.field_manager,
                &Self::kind_of(rt, version),
                rt.api_version(version),
                None,
            ),
        }
        if ctx.dry_run {
            return Ok(object);
        }
        self.bump(&mut object);
        let stored = Stored::new(&object);
        self.objects
            .entry(rt.key())
            .or_default()
            .insert((namespace.to_owned(), name), stored.clone());
        self.record(rt, namespace, EventType::Added, stored.clone(), None);
        if let Some(t) = new_type {
            self.types.push(t);
        }
        self.after_change(rt, namespace, None, Some(&stored));
        Ok(object)
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects
            .get(&ResourceKey {
                group: String::new(),
                plural: "namespaces".into(),
            })
            .is_some_and(|m| m.contains_key(&(String::new(), namespace.to_owned())))
    }

    fn namespace_terminating(&self, namespace: &str) -> bool {
        self.objects
            .get(&ResourceKey {
                group: String::new(),
                plural: "namespaces".into(),
            })
            .and_then(|m| m.get(&(String::new(), namespace.to_owned())))
            .is_some_and(|ns| ns.value().pointer("/metadata/deletionTimestamp").is_some())
    }

    /// Replaces an object with `candidate` (PUT, and the result of every patch), enforcing
    /// optimistic concurrency, the status subresource split, generation bumps, immutable
    /// metadata, managed fields and finalizer-driven deletion. A change that changes nothing
    /// keeps the resourceVersion (no event), as kube-apiserver does.
    ///
    /// `fields` tells how managedFields are maintained: `None` records the change for
    /// `ctx.field_manager` as an `Update`; `Some(..)` is a precomputed list (server-side apply).
    ///
    /// # Errors
    /// 404 NotFound; 409 Conflict on a stale resourceVersion; 400 when names contradict.
    #[allow(clippy::too_many_arguments)]
    pub fn replace(
        &mut self,
        rt: &ResourceType,
        version: &str,
        namespace: &str,
        name: &str,
        mut candidate: Value,
        part: Part,
        ctx: &WriteContext,
        fields: Option<Value>,
    ) -> Result<Value, ApiError> {
        let old_stored = self
            .get_stored(rt, namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        let old = old_stored.value();
        if !candidate.is_object() {
            return Err(ApiError::bad_request(
                "the body of an update must be a JSON object",
            ));
        }
        if !candidate.get("metadata").is_some_and(Value::is_object) {
            candidate["metadata"] = json!({});
        }
        let body_name = candidate
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(name);
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = candidate
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace);
        if rt.namespaced && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        match candidate
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            Some(rv)
                if !rv.is_empty()
                    && Some(rv)
                        != old
                            .pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str) =>
            {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            _ => {}
        }
        let mut new = match part {
            Part::Status => {
                let mut merged = old.clone();
                match candidate.get("status") {
                    Some(status) => merged["status"] = status.clone(),
                    None => {
                        if let Some(m) = merged.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                merged
            }
            Part::Main => {
                let mut merged = candidate;
                if rt.has_status() {
                    match old.get("status") {
                        Some(status) => merged["status"] = status.clone(),
                        None => {
                            if let Some(m) = merged.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                merged
            }
        };
        new["apiVersion"] = json!(rt.api_version(&rt.storage_version));
        new["kind"] = json!(rt.kind);
        // Immutable and server-owned metadata.
        for key in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "name",
            "namespace",
        ] {
            match old["metadata"].get(key) {
                Some(v) => new["metadata"][key] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(key);
                    }
                }
            }
        }
        if spec_changed(&old, &new) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            new["metadata"]["generation"] = json!(generation + 1);
        }
        let new_type =
            if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
                let t = type_from_crd(&new)?;
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
                new["status"] = crd_status(&new, &t);
                Some(t)
            } else {
                None
            };
        let subresource = (part == Part::Status).then_some("status");
        match fields {
            Some(list) => new["metadata"]["managedFields"] = list,
            None => {
                new["metadata"]["managedFields"] = old
                    .pointer("/metadata/managedFields")
                    .cloned()
                    .unwrap_or(json!([]));
                managed::record_update(
                    Some(&old),
                    &mut new,
                    &ctx.field_manager,
                    &Self::kind_of(rt, version),
                    rt.api_version(version),
                    subresource,
                );
            }
        }
        if same_content(&old, &new) {
            return Ok(old);
        }
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_left = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if deleting && !finalizers_left {
            if ctx.dry_run {
                return Ok(new);
            }
            return Ok(self.remove_now(rt, namespace, name, new));
        }
        if ctx.dry_run {
            return Ok(new);
        }
        self.bump(&mut new);
        let stored = Stored::new(&new);
        self.objects
            .entry(rt.key())
            .or_default()
            .insert((namespace.to_owned(), name.to_owned()), stored.clone());
        self.record(
            rt,
            namespace,
            EventType::Modified,
            stored.clone(),
            Some(old_stored.clone()),
        );
        if let Some(t) = new_type
            && let Some(slot) = self
                .types
                .iter_mut()
                .find(|o| o.custom && o.group == t.group && o.plural == t.plural)
        {
            *slot = t;
        }
        self.after_change(rt, namespace, Some(&old_stored), Some(&stored));
        Ok(new)
    }

    /// Deletes an object: at once, or — when it has finalizers — by setting
    /// `deletionTimestamp` and waiting for the finalizers to be removed.
    ///
    /// # Errors
    /// 404 NotFound; 409 Conflict when a uid or resourceVersion precondition fails.
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
        ctx: &WriteContext,
    ) -> Result<Value, ApiError> {
        let old_stored = self
            .get_stored(rt, namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        let old = old_stored.value();
        let meta = |key: &str| {
            old["metadata"]
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        if let Some(uid) = &options.uid
            && *uid != meta("uid")
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta("uid")
                ),
            ));
        }
        if let Some(rv) = &options.resource_version
            && *rv != meta("resourceVersion")
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta("resourceVersion")
                ),
            ));
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers || rt.plural == "namespaces" {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(old);
            }
            let mut marked = old.clone();
            marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if rt.plural == "namespaces" {
                marked["status"]["phase"] = json!("Terminating");
            }
            if ctx.dry_run {
                return Ok(marked);
            }
            self.bump(&mut marked);
            let stored = Stored::new(&marked);
            self.objects
                .entry(rt.key())
                .or_default()
                .insert((namespace.to_owned(), name.to_owned()), stored.clone());
            self.record(
                rt,
                namespace,
                EventType::Modified,
                stored.clone(),
                Some(old_stored.clone()),
            );
            if rt.plural == "namespaces" {
                self.empty_namespace(name);
                if !has_finalizers {
                    return Ok(self.remove_now(rt, namespace, name, marked));
                }
            }
            self.after_change(rt, namespace, Some(&old_stored), Some(&stored));
            return Ok(marked);
        }
        if ctx.dry_run {
            return Ok(old);
        }
        Ok(self.remove_now(rt, namespace, name, old))
    }

    /// Removes an object for good and records the DELETED event.
    fn remove_now(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut last: Value,
    ) -> Value {
        let removed = self
            .objects
            .get_mut(&rt.key())
            .and_then(|m| m.remove(&(namespace.to_owned(), name.to_owned())));
        self.bump(&mut last);
        let stored = Stored::new(&last);
        self.record(rt, namespace, EventType::Deleted, stored.clone(), None);
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && let Ok(t) = type_from_crd(&last)
        {
            let key = t.key();
            let victims: Vec<(String, String)> = self
                .objects
                .get(&key)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for (ns, n) in victims {
                if let Some(obj) = self
                    .objects
                    .get_mut(&key)
                    .and_then(|m| m.remove(&(ns.clone(), n)))
                {
                    let mut obj = obj.value();
                    self.bump(&mut obj);
                    self.record(&t, &ns, EventType::Deleted, Stored::new(&obj), None);
                }
            }
            self.types
                .retain(|o| !(o.custom && o.group == t.group && o.plural == t.plural));
        }
        self.after_change(rt, namespace, removed.as_ref(), Some(&stored));
        last
    }

    /// Deletes every namespaced object in `namespace` (no finalizers honoured).
    fn empty_namespace(&mut self, namespace: &str) {
        let types: Vec<ResourceType> = self
            .types
            .iter()
            .filter(|t| t.namespaced)
            .cloned()
            .collect();
        for t in types {
            let names: Vec<String> = self
                .objects
                .get(&t.key())
                .map(|m| {
                    m.keys()
                        .filter(|(ns, _)| ns == namespace)
                        .map(|(_, n)| n.clone())
                        .collect()
                })
                .unwrap_or_default();
            for n in names {
                if let Some(obj) = self.get(&t, namespace, &n) {
                    self.remove_now(&t, namespace, &n, obj);
                }
            }
        }
    }

    /// Side effects after a change of `rt` in `namespace` (`before` and `after` are the
    /// object's states around it): budgets follow their pods. Only the budgets the change can
    /// concern are recomputed: a changed budget, or the budgets whose selector matches the
    /// changed pod's labels before or after.
    fn after_change(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        before: Option<&Stored>,
        after: Option<&Stored>,
    ) {
        if rt.group.is_empty() && rt.plural == "pods" {
            let labels: Vec<BTreeMap<String, String>> = [before, after]
                .into_iter()
                .flatten()
                .map(|s| s.labels().clone())
                .collect();
            self.refresh_budgets_where(namespace, |budget| {
                labels
                    .iter()
                    .any(|l| eviction::budget_covers_labels(budget, l))
            });
        } else if rt.group == "policy" && rt.plural == "poddisruptionbudgets" {
            let names: Vec<&str> = [before, after]
                .into_iter()
                .flatten()
                .map(Stored::name)
                .collect();
            let names: Vec<String> = names.into_iter().map(str::to_owned).collect();
            self.refresh_budgets_where(namespace, |budget| {
                let name = budget
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                names.iter().any(|n| n == name)
            });
        }
    }

    /// Recomputes the status of every PodDisruptionBudget in `namespace`, writing (with a new
    /// resourceVersion and a MODIFIED event) only those whose status changed.
    pub fn refresh_budgets(&mut self, namespace: &str) {
        self.refresh_budgets_where(namespace, |_| true);
    }

    /// [`Store::refresh_budgets`] for the budgets `which` selects.
    fn refresh_budgets_where(&mut self, namespace: &str, which: impl Fn(&Value) -> bool) {
        let Some(pdb_type) = self
            .types
            .iter()
            .find(|t| t.group == "policy" && t.plural == "poddisruptionbudgets")
            .cloned()
        else {
            return;
        };
        let Some(pod_type) = self
            .types
            .iter()
            .find(|t| t.group.is_empty() && t.plural == "pods")
            .cloned()
        else {
            return;
        };
        let budgets: Vec<(Stored, Value)> = self
            .list_after(&pdb_type, Some(namespace), None)
            .map(|s| (s.clone(), s.value()))
            .filter(|(_, b)| which(b))
            .collect();
        for (old_stored, old) in budgets {
            let covered = self
                .list_after(&pod_type, Some(namespace), None)
                .filter(|p| eviction::budget_covers_labels(&old, p.labels()))
                .map(Stored::value);
            let status = eviction::compute_status(&old, covered);
            let mut new = old.clone();
            if eviction::write_status(&mut new, status) {
                let name = new
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                self.bump(&mut new);
                let stored = Stored::new(&new);
                self.objects
                    .entry(pdb_type.key())
                    .or_default()
                    .insert((namespace.to_owned(), name), stored.clone());
                self.record(
                    &pdb_type,
                    namespace,
                    EventType::Modified,
                    stored,
                    Some(old_stored),
                );
            }
        }
    }
}

/// Whether anything outside `metadata` and `status` differs (what bumps `generation`).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
        m
    };
    strip(old) != strip(new)
}

/// Whether two versions of an object are the same apart from managedFields timestamps.
fn same_content(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(fields) = v
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            for entry in fields {
                if let Some(e) = entry.as_object_mut() {
                    e.remove("time");
                }
            }
        }
        v
    };
    strip(old) == strip(new)
}

/// The status kube-apiserver gives an accepted CRD: Established, NamesAccepted, stored versions.
fn crd_status(crd: &Value, t: &ResourceType) -> Value {
    let now = now_rfc3339();
    let condition = |kind: &str, reason: &str, message: &str| json!({"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": [t.storage_version],
    })
}
