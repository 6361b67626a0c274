//! Small accessors for `metadata` inside a JSON object, so the store can stay generic over
//! resources without typed structs.

use serde_json::{Map, Value};

/// `metadata`, if the object has one.
pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata`, created empty if missing. `None` only if `obj` is not a JSON object.
pub(crate) fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let map = obj.as_object_mut()?;
    let entry = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

/// A string field of `metadata` (`None` when missing or empty).
pub(crate) fn field<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    meta(obj)
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Sets a `metadata` field (no-op on a non-object, which the callers rule out first).
pub(crate) fn set(obj: &mut Value, key: &str, value: Value) {
    if let Some(m) = meta_mut(obj) {
        m.insert(key.to_string(), value);
    }
}

/// Removes a `metadata` field.
pub(crate) fn remove(obj: &mut Value, key: &str) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove(key);
    }
}

/// Copies a `metadata` field from `from` (or removes it if `from` lacks it).
pub(crate) fn copy(from: &Value, to: &mut Value, key: &str) {
    match meta(from).and_then(|m| m.get(key)) {
        Some(v) => set(to, key, v.clone()),
        None => remove(to, key),
    }
}

/// Whether `metadata.finalizers` is non-empty.
pub(crate) fn has_finalizers(obj: &Value) -> bool {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Everything but `metadata`, `status` and type fields differs: upstream bumps `generation`.
pub(crate) fn spec_changed(old: &Value, new: &Value) -> bool {
    let rest = |v: &Value| -> Vec<(String, Value)> {
        v.as_object()
            .map(|m| {
                let mut kv: Vec<(String, Value)> = m
                    .iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                kv.sort_by(|a, b| a.0.cmp(&b.0));
                kv
            })
            .unwrap_or_default()
    };
    rest(old) != rest(new)
}

/// The object as `PartialObjectMetadata` (what `Api::list_metadata` and metadata watchers ask for).
pub(crate) fn partial(obj: &Value) -> Value {
    let mut m = Map::new();
    m.insert("apiVersion".into(), Value::from("meta.k8s.io/v1"));
    m.insert("kind".into(), Value::from("PartialObjectMetadata"));
    m.insert(
        "metadata".into(),
        obj.get("metadata")
            .cloned()
            .unwrap_or(Value::Object(Map::new())),
    );
    Value::Object(m)
}
