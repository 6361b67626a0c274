//! Which namespaces a ServiceCIDR serves (beyond upstream).
//!
//! Upstream hands every Service an address from any ServiceCIDR. A cluster with several
//! may want a tenant's Services to come from a range of its own (firewalls, routing,
//! chargeback). svcplane reads a label selector over namespaces from the ServiceCIDR's
//! [`NAMESPACE_SELECTOR`] annotation, written as `kubectl -l` takes one
//! (`team=payments`, `env in (prod,staging)`, `!legacy`), and binds the namespaces it
//! selects to that range: their automatic ClusterIPs come only from the ServiceCIDRs
//! that select them, and an address they ask for elsewhere is refused. Namespaces no
//! selector picks keep the ServiceCIDRs without one, as today.

use std::collections::BTreeMap;
use std::fmt;

/// Annotation on a ServiceCIDR: the namespaces it serves, as a label selector.
pub const NAMESPACE_SELECTOR: &str = "svcplane.io/namespace-selector";

/// A parsed label selector over namespace labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSelector {
    text: String,
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// Why a selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{NAMESPACE_SELECTOR}: {text:?} is not a label selector: {why}")]
pub struct SelectorError {
    /// The annotation's value.
    pub text: String,
    /// What is wrong.
    pub why: String,
}

impl NamespaceSelector {
    /// Parse a selector in `kubectl -l` syntax: comma-separated requirements, each
    /// `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (a,b)` or
    /// `key notin (a,b)`. An empty selector is refused: it would select every namespace,
    /// which a ServiceCIDR without the annotation already does.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let fail = |why: String| SelectorError {
            text: text.to_owned(),
            why,
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(fail)? {
            requirements.push(requirement(part).map_err(fail)?);
        }
        if requirements.is_empty() {
            return Err(fail(
                "it is empty; remove the annotation to serve every namespace".to_owned(),
            ));
        }
        Ok(Self {
            text: text.trim().to_owned(),
            requirements,
        })
    }

    /// Does a namespace with these labels match every requirement?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.op {
                Op::Equals(v) => value == Some(v),
                Op::NotEquals(v) => value != Some(v),
                Op::In(vs) => value.is_some_and(|x| vs.contains(x)),
                Op::NotIn(vs) => !value.is_some_and(|x| vs.contains(x)),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
            }
        })
    }
}

impl fmt::Display for NamespaceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The requirements of `text`, split at commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_owned());
    }
    parts.push(&text[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect())
}

fn requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement {
            key: label_key(key.trim())?,
            op: Op::DoesNotExist,
        });
    }
    for (sep, make) in [
        ("!=", Op::NotEquals as fn(String) -> Op),
        ("==", Op::Equals),
        ("=", Op::Equals),
    ] {
        if let Some((key, value)) = part.split_once(sep) {
            return Ok(Requirement {
                key: label_key(key.trim())?,
                op: make(label_value(value.trim())?),
            });
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim();
        let (set_op, list) = if let Some(l) = rest.strip_prefix("notin") {
            (Op::NotIn as fn(Vec<String>) -> Op, l)
        } else if let Some(l) = rest.strip_prefix("in") {
            (Op::In as fn(Vec<String>) -> Op, l)
        } else {
            return Err(format!("{part:?}: expected in (...) or notin (...)"));
        };
        let list = list
            .trim()
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(|| format!("{part:?}: the values go in parentheses"))?;
        let values = list
            .split(',')
            .map(|v| label_value(v.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Requirement {
            key: label_key(key)?,
            op: set_op(values),
        });
    }
    Ok(Requirement {
        key: label_key(part)?,
        op: Op::Exists,
    })
}

fn label_key(key: &str) -> Result<String, String> {
    let ok = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_owned())
    } else {
        Err(format!("{key:?} is not a label key"))
    }
}

fn label_value(value: &str) -> Result<String, String> {
    let ok = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(value.to_owned())
    } else {
        Err(format!("{value:?} is not a label value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_kubectl_requirement_form_selects_as_kubernetes_does() {
        let ns = labels(&[("team", "payments"), ("env", "prod")]);
        for (selector, want) in [
            ("team=payments", true),
            ("team==payments", true),
            ("team!=payments", false),
            ("team=web", false),
            ("env in (prod, staging)", true),
            ("env notin (prod)", false),
            ("env notin (dev)", true),
            ("missing notin (x)", true),
            ("missing in (x)", false),
            ("team", true),
            ("!team", false),
            ("!legacy", true),
            ("team=payments,env=prod", true),
            ("team=payments, env in (dev,staging)", false),
        ] {
            let s = NamespaceSelector::parse(selector).unwrap();
            assert_eq!(s.matches(&ns), want, "{selector}");
        }
    }

    #[test]
    fn a_malformed_or_empty_selector_names_the_annotation_and_what_is_wrong() {
        for (selector, why) in [
            ("", "empty"),
            ("env in (prod", "unbalanced"),
            ("env in prod", "parentheses"),
            ("env within (a)", "expected in"),
            ("te am=x", "not a label key"),
            ("team=pay ments", "not a label value"),
        ] {
            let e = NamespaceSelector::parse(selector).unwrap_err().to_string();
            assert!(
                e.contains(NAMESPACE_SELECTOR) && e.contains(why),
                "{selector}: {e}"
            );
        }
    }
}
