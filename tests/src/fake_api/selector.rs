//! Label and field selectors, as `list` and `watch` filter with them.
//!
//! Label selectors follow upstream `labels.Parse`: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//! `k notin (a,b)`, `k`, `!k`, joined by commas (AND). `!=` and `notin` match objects that
//! lack the key, as upstream. Set-based `>`/`<` are not supported (400).
//!
//! Field selectors take `path=value`, `path==value` and `path!=value` for any dotted path
//! into the object (`metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`,
//! ...). Upstream accepts only a per-resource list of paths; this fake accepts all of them, and
//! a missing field compares as the empty string, as upstream does for the ones it supports.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
}

fn key(s: &str) -> Result<String, String> {
    let k = s.trim();
    if valid_key(k) {
        Ok(k.to_string())
    } else {
        Err(format!("invalid label key {k:?}"))
    }
}

fn parse_requirement(term: &str) -> Result<Requirement, String> {
    if let Some(rest) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(key(rest)?));
    }
    if let Some(open) = term.find('(') {
        let head: Vec<&str> = term[..open].split_whitespace().collect();
        let body = term[open + 1..]
            .trim_end()
            .strip_suffix(')')
            .ok_or_else(|| format!("missing ')' in {term:?}"))?;
        let values: Vec<String> = body.split(',').map(|v| v.trim().to_string()).collect();
        return match head.as_slice() {
            [k, "in"] => Ok(Requirement::In(key(k)?, values)),
            [k, "notin"] => Ok(Requirement::NotIn(key(k)?, values)),
            _ => Err(format!("unsupported set operator in {term:?}")),
        };
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(key(k)?, v.trim().to_string()));
    }
    Ok(Requirement::Exists(key(term)?))
}

impl LabelSelector {
    /// Parses the `labelSelector` query value.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        split_top_level(s)
            .into_iter()
            .map(|t| parse_requirement(t.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether an object with these `metadata.labels` matches.
    pub(crate) fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed field selector: `(path, equal?, value)` terms, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    /// Parses the `fieldSelector` query value.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        s.split(',')
            .map(|term| {
                let (path, eq, value) = if let Some((p, v)) = term.split_once("!=") {
                    (p, false, v)
                } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('='))
                {
                    (p, true, v)
                } else {
                    return Err(format!("invalid field selector term {term:?}"));
                };
                let path: Vec<String> = path.trim().split('.').map(str::to_string).collect();
                if path.iter().any(String::is_empty) {
                    return Err(format!("invalid field path in {term:?}"));
                }
                Ok((path, eq, value.trim().to_string()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether the object matches every term.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let found = path.iter().try_fold(obj, |v, seg| v.get(seg));
            let have = match found {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (have == *want) == *eq
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Label and field selector together, plus the namespace of a namespaced request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
}

impl Filter {
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let meta = obj.get("metadata");
        if let Some(ns) = &self.namespace {
            let have = meta
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str);
            if have != Some(ns.as_str()) {
                return false;
            }
        }
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        (self.labels.is_empty() || self.labels.matches(labels))
            && (self.fields.is_empty() || self.fields.matches(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn label_operators() {
        let l = labels(json!({"app": "web", "tier": "fe"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"));
        assert!(m("app in (db, web)"));
        assert!(!m("app notin (db,web)"));
        assert!(m("missing notin (a)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(!m("app=web,tier=be"));
        assert!(m(""));
        assert!(!LabelSelector::parse("app").unwrap().matches(None));
        assert!(LabelSelector::parse("a>1").is_err());
        assert!(LabelSelector::parse("a in (b").is_err());
    }

    #[test]
    fn field_paths() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"n": 3}});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&obj);
        assert!(m("metadata.name=a"));
        assert!(m("metadata.namespace==ns,metadata.name!=b"));
        assert!(!m("metadata.name=b"));
        assert!(m("spec.n=3"));
        assert!(m("spec.missing="));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
