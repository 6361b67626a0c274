//! Label key and value syntax (Kubernetes' `IsQualifiedName` / `IsValidLabelValue`).
//!
//! A real API server refuses Services whose selector breaks these rules, so upstream's
//! controllers never see one. svcplane's runtime checks anyway: an API server without
//! full validation (a generic control plane, a fake) could store one, and a selector
//! that can never match must be reported, not silently treated as "no Pods".

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= NAME_MAX
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// A DNS-1123 subdomain: lower-case alphanumeric labels joined by dots.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= PREFIX_MAX
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// Why `key` is not a valid label key, if it is not.
pub fn key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return Some(format!(
            "label key {key:?}: prefix must be a DNS subdomain of at most {PREFIX_MAX} characters"
        ));
    }
    (!is_name(name)).then(|| {
        format!(
            "label key {key:?}: name must be 1-{NAME_MAX} characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric"
        )
    })
}

/// Why `value` is not a valid label value, if it is not.
pub fn value_error(value: &str) -> Option<String> {
    (!value.is_empty() && !is_name(value)).then(|| {
        format!(
            "label value {value:?}: must be empty or 1-{NAME_MAX} characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric"
        )
    })
}

/// Every problem of a selector, one message per bad key or value.
pub fn selector_errors<'a>(
    selector: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<String> {
    selector
        .into_iter()
        .flat_map(|(k, v)| key_error(k).into_iter().chain(value_error(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn valid_keys_and_values_pass() {
        for k in ["app", "app.kubernetes.io/name", "a", "x_y-z.1", "k8s.io/a"] {
            assert_eq!(key_error(k), None, "{k}");
        }
        for v in ["", "web", "v1.2_3-x"] {
            assert_eq!(value_error(v), None, "{v}");
        }
    }

    #[test]
    fn invalid_keys_and_values_are_named() {
        for k in [
            "",
            "-app",
            "app-",
            "a b",
            "Upper.Case/x",
            "/x",
            &"x".repeat(64),
        ] {
            assert!(key_error(k).is_some_and(|e| e.contains("label key")), "{k}");
        }
        for v in ["-v", "a b", "v!", &"v".repeat(64)] {
            assert!(
                value_error(v).is_some_and(|e| e.contains(&format!("{v:?}"))),
                "{v}"
            );
        }
        let sel = BTreeMap::from([
            ("a b".to_owned(), "ok".to_owned()),
            ("ok".to_owned(), "x y".to_owned()),
        ]);
        assert_eq!(selector_errors(&sel).len(), 2);
    }
}
