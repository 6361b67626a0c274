//! Request paths and query strings → which resource, namespace, object and subresource.
//!
//! Covers the shapes kube-rs builds: `/api/v1/{plural}`, `/apis/{group}/{version}/{plural}`,
//! with `/namespaces/{ns}` before the plural for namespaced resources, then an optional
//! `/{name}` and `/{subresource}`. `/api/v1/namespaces/{name}[/status]` is the Namespace
//! object itself, as upstream disambiguates. Legacy `/watch/` paths are not served.

use super::registry::Gvr;

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) gvr: Gvr,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
}

/// Parses a request path; `None` for paths outside the resource API.
pub(crate) fn parse_path(path: &str) -> Option<Route> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(|s| decode(s, false))
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let route = |ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>| Route {
        gvr: Gvr::new(group, version, plural),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        subresource: sub.map(str::to_string),
    };
    let core_ns = group.is_empty();
    Some(match rest {
        [plural] => route(None, plural, None, None),
        // The Namespace object and its subresources.
        ["namespaces", name] if core_ns => route(None, "namespaces", Some(name), None),
        ["namespaces", name, sub @ ("status" | "finalize")] if core_ns => {
            route(None, "namespaces", Some(name), Some(sub))
        }
        ["namespaces", ns, plural] => route(Some(ns), plural, None, None),
        ["namespaces", ns, plural, name] => route(Some(ns), plural, Some(name), None),
        ["namespaces", ns, plural, name, sub] => route(Some(ns), plural, Some(name), Some(sub)),
        [plural, name] => route(None, plural, Some(name), None),
        [plural, name, sub] => route(None, plural, Some(name), Some(sub)),
        _ => return None,
    })
}

/// Decoded query parameters, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(query: Option<&str>) -> Self {
        let pairs = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k, true), decode(v, true))
            })
            .collect();
        Self(pairs)
    }

    /// The last value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `true` for `key=true` or `key=1`.
    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// Percent-decoding; in query strings (`plus_is_space`) `+` is also a space.
fn decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', _) if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(ns: Option<&str>, gvr: &str, name: Option<&str>, sub: Option<&str>) -> Option<Route> {
        Some(Route {
            gvr: Gvr::from(gvr),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        })
    }

    #[test]
    fn paths() {
        assert_eq!(parse_path("/api/v1/pods"), r(None, "v1/pods", None, None));
        assert_eq!(
            parse_path("/api/v1/namespaces/ns/services/web/status"),
            r(Some("ns"), "v1/services", Some("web"), Some("status"))
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/kube-system"),
            r(None, "v1/namespaces", Some("kube-system"), None)
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/x/status"),
            r(None, "v1/namespaces", Some("x"), Some("status"))
        );
        assert_eq!(
            parse_path("/apis/networking.k8s.io/v1/ipaddresses/2001:db8::1"),
            r(
                None,
                "networking.k8s.io/v1/ipaddresses",
                Some("2001:db8::1"),
                None
            )
        );
        assert_eq!(
            parse_path("/apis/discovery.k8s.io/v1/namespaces/a/endpointslices"),
            r(Some("a"), "discovery.k8s.io/v1/endpointslices", None, None)
        );
        assert_eq!(parse_path("/healthz"), None);
        assert_eq!(parse_path("/apis/g/v1/a/b/c/d"), None);
    }

    #[test]
    fn query() {
        let q = Query::parse(Some("&labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=1&x"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch"));
        assert!(!q.flag("x"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(decode("100%", false), "100%");
        assert_eq!(decode("a+b", false), "a+b");
    }
}
