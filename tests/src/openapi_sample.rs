//! Objects with every field set, built from an API server's own OpenAPI v3
//! schemas, and the fields a typed round trip loses.
//!
//! svcplane writes whole typed objects (k8s-openapi structs): a field the API
//! server stores but the types do not know is dropped by a read-modify-write.
//! Building the sample from the running server's schema (not from the types)
//! makes the check follow the server: when a new release adds a field, the
//! round trip of its sample loses it and the test says which.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// How deep a sample nests before it stops (the kinds checked here are far
/// shallower; the bound only keeps a self-referencing schema finite).
const MAX_DEPTH: usize = 12;

/// A value for the schema `name` of `components.schemas` in `doc` (an OpenAPI v3
/// document as `/openapi/v3/<group-version>` serves it) with every property set:
/// one entry in each list and map, `"x"` for strings, timestamps for date-times.
pub fn sample(doc: &Value, name: &str) -> Option<Value> {
    let schema = doc.pointer(&format!("/components/schemas/{}", escape(name)))?;
    Some(sample_schema(doc, schema, 0))
}

fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The schema a `$ref` (direct or as the only `allOf` member) points at.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    let reference = schema.get("$ref").or_else(|| {
        schema
            .get("allOf")
            .and_then(Value::as_array)
            .and_then(|all| all.first())
            .and_then(|first| first.get("$ref"))
    });
    reference
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| doc.pointer(pointer))
        .map_or(schema, |target| resolve(doc, target))
}

fn sample_schema(doc: &Value, schema: &Value, depth: usize) -> Value {
    let schema = resolve(doc, schema);
    if depth > MAX_DEPTH {
        return json!({});
    }
    let format = schema.get("format").and_then(Value::as_str).unwrap_or("");
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || format == "int-or-string"
    {
        return json!(1);
    }
    if format == "quantity" {
        return json!("1");
    }
    let Some(kind) = schema.get("type").and_then(Value::as_str) else {
        // A schema that only lists alternatives (`oneOf`/`anyOf`): the first one.
        let first = ["oneOf", "anyOf"]
            .iter()
            .find_map(|k| schema.get(*k).and_then(Value::as_array)?.first());
        return match first {
            Some(alternative) => sample_schema(doc, alternative, depth + 1),
            None => sample_object(doc, schema, depth),
        };
    };
    match kind {
        "string" => match format {
            "date-time" => json!("2026-01-02T03:04:05Z"),
            "byte" => json!("eA=="),
            _ => json!("x"),
        },
        "integer" => json!(1),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "array" => {
            let items = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type": "string"}));
            json!([sample_schema(doc, &items, depth + 1)])
        }
        _ => sample_object(doc, schema, depth),
    }
}

fn sample_object(doc: &Value, schema: &Value, depth: usize) -> Value {
    let mut out = Map::new();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, property) in properties {
            out.insert(key.clone(), sample_schema(doc, property, depth + 1));
        }
    } else if let Some(values) = schema.get("additionalProperties")
        && values.is_object()
    {
        out.insert("k".into(), sample_schema(doc, values, depth + 1));
    }
    Value::Object(out)
}

/// Every field path in `value` (`spec.ports[].name`), lists collapsed to `[]`.
pub fn field_paths(value: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(value, String::new(), &mut out);
    out
}

fn walk(value: &Value, at: String, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                out.insert(path.clone());
                walk(v, path, out);
            }
        }
        Value::Array(items) => {
            for v in items {
                walk(v, format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// The field paths of `sent` that `returned` lacks.
pub fn lost_fields(sent: &Value, returned: &Value) -> Vec<String> {
    let kept = field_paths(returned);
    field_paths(sent)
        .into_iter()
        .filter(|p| !kept.contains(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        json!({"components": {"schemas": {
            "a.Thing": {"type": "object", "properties": {
                "name": {"type": "string"},
                "when": {"type": "string", "format": "date-time"},
                "port": {"x-kubernetes-int-or-string": true},
                "target": {"allOf": [{"$ref": "#/components/schemas/a.IntOrString"}]},
                "size": {"format": "quantity", "oneOf": [{"type": "string"}, {"type": "number"}]},
                "either": {"oneOf": [{"type": "boolean"}, {"type": "string"}]},
                "items": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/a.Item"}]}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
            "a.IntOrString": {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
            "a.Item": {"type": "object", "properties": {"on": {"type": "boolean"}, "n": {"type": "integer"}}},
        }}})
    }

    #[test]
    fn a_sample_sets_every_property_through_references() {
        let got = sample(&doc(), "a.Thing").unwrap();
        assert_eq!(
            got,
            json!({"name": "x", "when": "2026-01-02T03:04:05Z", "port": 1, "target": 1, "size": "1", "either": true,
                   "items": [{"on": true, "n": 1}], "labels": {"k": "x"}})
        );
        assert!(sample(&doc(), "a.Missing").is_none());
    }

    #[test]
    fn lost_fields_names_what_a_round_trip_dropped() {
        let sent = sample(&doc(), "a.Thing").unwrap();
        let mut back = sent.clone();
        back["items"][0].as_object_mut().unwrap().remove("on");
        back.as_object_mut().unwrap().remove("labels");
        assert_eq!(
            lost_fields(&sent, &back),
            ["items[].on", "labels", "labels.k"]
        );
        assert!(lost_fields(&sent, &sent).is_empty());
    }
}
