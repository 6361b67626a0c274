//! Write semantics: create, update, patch, delete, and the direct upsert behind
//! [`FakeApi::insert`](super::FakeApi::insert), following the upstream generic registry.
//!
//! Each function runs under the store lock and either commits (new resourceVersion, one
//! watch event) or returns the `Status` error upstream would; with `dry_run` it returns the
//! same answer and commits nothing. Upstream behaviour kept on purpose:
//! - server-owned metadata (`uid`, `creationTimestamp`, `deletionTimestamp`, `generation`)
//!   cannot be changed by clients; `generation` starts at 1 and grows when anything outside
//!   `metadata`/`status` changes;
//! - an update that changes nothing is not a write (same resourceVersion, no event);
//! - resources with a status subresource drop status on create (except Nodes), keep the stored
//!   status on main-resource writes, and take only status from `/status` writes;
//! - delete of an object with finalizers sets `deletionTimestamp`; the update that empties the
//!   finalizers removes it (one DELETED event).
//!
//! Not modelled: validation beyond required names, namespace existence, pod graceful
//! deletion (pods go at once), managedFields, deletecollection.

use std::sync::Arc;

use serde_json::Value;

use super::meta;
use super::patch::{self, PatchKind};
use super::registry::ResourceInfo;
use super::status::ApiError;
use super::store::{ObjKey, Store, key};

/// Upstream truncates a `generateName` prefix so prefix + 5 characters fit in 63.
const MAX_GENERATE_PREFIX: usize = 58;
/// How often a colliding generated name is retried before answering AlreadyExists.
const GENERATE_ATTEMPTS: usize = 8;

fn stamp_type(info: &ResourceInfo, obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), Value::from(info.gvr.api_version()));
        m.insert("kind".into(), Value::from(info.kind.clone()));
    }
}

fn require_object(obj: &Value) -> Result<(), ApiError> {
    if obj.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ))
    }
}

/// Fills the namespace from the path (namespaced) or clears it (cluster-scoped).
fn place(info: &ResourceInfo, ns: Option<&str>, obj: &mut Value) -> Result<(), ApiError> {
    match (info.namespaced, ns) {
        (true, Some(ns)) => {
            if meta::field(obj, "namespace").is_some_and(|have| have != ns) {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta::set(obj, "namespace", Value::from(ns));
            Ok(())
        }
        (true, None) => Err(ApiError::method_not_allowed()),
        (false, _) => {
            meta::remove(obj, "namespace");
            Ok(())
        }
    }
}

fn take_status(from: &Value, to: &mut Value) {
    if let Some(m) = to.as_object_mut() {
        match from.get("status") {
            Some(s) => m.insert("status".into(), s.clone()),
            None => m.remove("status"),
        };
    }
}

fn name_of(
    info: &ResourceInfo,
    store: &mut Store,
    ns: Option<&str>,
    obj: &Value,
) -> Result<String, ApiError> {
    if let Some(name) = meta::field(obj, "name") {
        return Ok(name.to_string());
    }
    let Some(prefix) = meta::field(obj, "generateName") else {
        return Err(ApiError::invalid(
            info,
            "",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    };
    let prefix: String = prefix.chars().take(MAX_GENERATE_PREFIX).collect();
    let mut name = String::new();
    for _ in 0..GENERATE_ATTEMPTS {
        name = format!("{prefix}{}", store.rng.name_suffix());
        if store.get(&info.gvr, &key(ns, &name)).is_none() {
            break;
        }
    }
    Ok(name)
}

/// POST: 201 with the stored object.
pub(crate) fn create(
    store: &mut Store,
    info: &ResourceInfo,
    ns: Option<&str>,
    mut obj: Value,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    require_object(&obj)?;
    if meta::field(&obj, "resourceVersion").is_some() {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    place(info, ns, &mut obj)?;
    if info.status
        && !info.create_keeps_status
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    let name = name_of(info, store, ns, &obj)?;
    let k = key(ns, &name);
    if store.get(&info.gvr, &k).is_some() {
        return Err(ApiError::already_exists(info, &name));
    }
    stamp_type(info, &mut obj);
    meta::set(&mut obj, "name", Value::from(name));
    let uid = store.uid(dry_run);
    meta::set(&mut obj, "uid", Value::from(uid));
    meta::set(&mut obj, "creationTimestamp", Value::from(store.now()));
    meta::set(&mut obj, "generation", Value::from(1));
    meta::remove(&mut obj, "deletionTimestamp");
    meta::remove(&mut obj, "deletionGracePeriodSeconds");
    if dry_run {
        return Ok(Arc::new(obj));
    }
    Ok(store.put(&info.gvr, k, obj))
}

/// Server-owned metadata that a client write cannot change.
const OWNED_BY_SERVER: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
];

/// The common tail of update and patch: keep server-owned fields, bump generation, skip
/// no-ops, finish deletions whose finalizers are gone, commit.
fn commit_update(
    store: &mut Store,
    info: &ResourceInfo,
    k: ObjKey,
    old: &Arc<Value>,
    mut new: Value,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    stamp_type(info, &mut new);
    for field in OWNED_BY_SERVER {
        meta::copy(old, &mut new, field);
    }
    if meta::spec_changed(old, &new) {
        let generation = meta::meta(old)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta::set(&mut new, "generation", Value::from(generation + 1));
    }
    if new == **old {
        return Ok(old.clone());
    }
    if dry_run {
        return Ok(Arc::new(new));
    }
    if meta::field(&new, "deletionTimestamp").is_some() && !meta::has_finalizers(&new) {
        // Invariant: `old` was read from this table under the same lock, so it is present.
        if let Some(gone) = store.remove(&info.gvr, &k, Some(new.clone())) {
            return Ok(gone);
        }
    }
    Ok(store.put(&info.gvr, k, new))
}

fn current(store: &Store, info: &ResourceInfo, k: &ObjKey) -> Result<Arc<Value>, ApiError> {
    store
        .get(&info.gvr, k)
        .ok_or_else(|| ApiError::not_found(info, &k.1))
}

/// PUT (`status_only`: PUT on `/status`). A resourceVersion in the body is a precondition.
pub(crate) fn update(
    store: &mut Store,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    mut body: Value,
    status_only: bool,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    require_object(&body)?;
    if let Some(given) = meta::field(&body, "name")
        && given != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    place(info, ns, &mut body)?;
    let k = key(ns, name);
    let old = current(store, info, &k)?;
    if let Some(rv) = meta::field(&body, "resourceVersion")
        && Some(rv) != meta::field(&old, "resourceVersion")
    {
        return Err(ApiError::stale(info, name));
    }
    let new = if status_only {
        let mut new = (*old).clone();
        take_status(&body, &mut new);
        new
    } else {
        if info.status {
            take_status(&old, &mut body);
        }
        body
    };
    commit_update(store, info, k, &old, new, dry_run)
}

/// PATCH (`status_only`: PATCH on `/status`). A resourceVersion the patch sets is a
/// precondition.
#[allow(clippy::too_many_arguments)] // one per request part; a struct would only rename them
pub(crate) fn patch(
    store: &mut Store,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    kind: PatchKind,
    body: &[u8],
    status_only: bool,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    let k = key(ns, name);
    let old = current(store, info, &k)?;
    let mut patched = (*old).clone();
    patch::apply(kind, &mut patched, body)?;
    require_object(&patched)?;
    if let Some(rv) = meta::field(&patched, "resourceVersion")
        && Some(rv) != meta::field(&old, "resourceVersion")
    {
        return Err(ApiError::stale(info, name));
    }
    let new = if status_only {
        let mut new = (*old).clone();
        take_status(&patched, &mut new);
        new
    } else {
        if info.status {
            take_status(&old, &mut patched);
        }
        patched
    };
    commit_update(store, info, k, &old, new, dry_run)
}

/// `DeleteOptions.preconditions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Preconditions {
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
}

/// DELETE: the deleted object, or the object now carrying `deletionTimestamp`.
pub(crate) fn delete(
    store: &mut Store,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    pre: &Preconditions,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    let k = key(ns, name);
    let old = current(store, info, &k)?;
    let checks = [
        ("UID", "uid", &pre.uid),
        ("ResourceVersion", "resourceVersion", &pre.resource_version),
    ];
    for (label, field, want) in checks {
        if let Some(want) = want {
            let have = meta::field(&old, field).unwrap_or_default();
            if want != have {
                let why = format!(
                    "Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"
                );
                return Err(ApiError::conflict(info, name, &why));
            }
        }
    }
    if meta::has_finalizers(&old) {
        if meta::field(&old, "deletionTimestamp").is_some() {
            return Ok(old);
        }
        let mut new = (*old).clone();
        meta::set(&mut new, "deletionTimestamp", Value::from(store.now()));
        meta::set(&mut new, "deletionGracePeriodSeconds", Value::from(0));
        if dry_run {
            return Ok(Arc::new(new));
        }
        return Ok(store.put(&info.gvr, k, new));
    }
    if dry_run {
        return Ok(old);
    }
    Ok(store.remove(&info.gvr, &k, None).unwrap_or(old))
}

/// Direct insert: create, or replace unconditionally, keeping status and any
/// `deletionTimestamp` as given. Namespaced objects without a namespace go to `default`.
pub(crate) fn upsert(
    store: &mut Store,
    info: &ResourceInfo,
    mut obj: Value,
) -> Result<Arc<Value>, ApiError> {
    require_object(&obj)?;
    stamp_type(info, &mut obj);
    meta::remove(&mut obj, "resourceVersion");
    let ns = if info.namespaced {
        let ns = meta::field(&obj, "namespace")
            .unwrap_or("default")
            .to_string();
        meta::set(&mut obj, "namespace", Value::from(ns.clone()));
        Some(ns)
    } else {
        meta::remove(&mut obj, "namespace");
        None
    };
    let name = name_of(info, store, ns.as_deref(), &obj)?;
    meta::set(&mut obj, "name", Value::from(name.clone()));
    let k = key(ns.as_deref(), &name);
    let Some(old) = store.get(&info.gvr, &k) else {
        if meta::field(&obj, "uid").is_none() {
            let uid = store.uid(false);
            meta::set(&mut obj, "uid", Value::from(uid));
        }
        if meta::field(&obj, "creationTimestamp").is_none() {
            meta::set(&mut obj, "creationTimestamp", Value::from(store.now()));
        }
        if meta::meta(&obj).and_then(|m| m.get("generation")).is_none() {
            meta::set(&mut obj, "generation", Value::from(1));
        }
        return Ok(store.put(&info.gvr, k, obj));
    };
    let given_generation = meta::meta(&obj).and_then(|m| m.get("generation")).cloned();
    for field in ["uid", "creationTimestamp", "generation", "resourceVersion"] {
        meta::copy(&old, &mut obj, field);
    }
    if let Some(generation) = given_generation {
        meta::set(&mut obj, "generation", generation);
    } else if meta::spec_changed(&old, &obj) {
        let generation = meta::meta(&old)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta::set(&mut obj, "generation", Value::from(generation + 1));
    }
    if obj == *old {
        return Ok(old);
    }
    if meta::field(&obj, "deletionTimestamp").is_some() && !meta::has_finalizers(&obj) {
        return Ok(store.remove(&info.gvr, &k, Some(obj)).unwrap_or(old));
    }
    Ok(store.put(&info.gvr, k, obj))
}
