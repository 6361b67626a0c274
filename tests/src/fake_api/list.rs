//! LIST: filtering, ordering (namespace, then name) and `limit`/`continue` paging.
//!
//! Objects live in a `BTreeMap` keyed by `(namespace, name)`, so a page is a range scan from
//! the continue key: paging through N objects costs O(N log N) in total, never O(N²).
//!
//! Difference from upstream: a continued page reads the *current* state after the continue
//! key (upstream reads a consistent snapshot at the first page's resourceVersion). Every
//! page reports the first page's resourceVersion, so a watch started from it replays every
//! change made while paging, and a reflector still converges. `remainingItemCount` is not
//! set.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::meta;
use super::registry::ResourceInfo;
use super::selector::Filter;
use super::status::ApiError;
use super::store::{ObjKey, Store};

/// What a continue token carries.
#[derive(Debug, Serialize, Deserialize)]
struct Token {
    v: String,
    rv: u64,
    start: ObjKey,
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) items: Vec<Arc<Value>>,
    pub(crate) rv: u64,
    pub(crate) continue_token: Option<String>,
}

fn decode(token: &str) -> Result<Token, ApiError> {
    URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Token>(&bytes).ok())
        .ok_or_else(|| ApiError::bad_request(format!("continue key is not valid: {token}")))
}

fn encode(rv: u64, start: ObjKey) -> String {
    let token = Token {
        v: "meta.k8s.io/v1".into(),
        rv,
        start,
    };
    // Serialising a struct of strings and integers cannot fail.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// One page of the objects of `info` that match `filter`.
pub(crate) fn list(
    store: &Store,
    info: &ResourceInfo,
    filter: &Filter,
    limit: Option<usize>,
    continue_token: Option<&str>,
) -> Result<Page, ApiError> {
    let token = continue_token
        .filter(|t| !t.is_empty())
        .map(decode)
        .transpose()?;
    let rv = token.as_ref().map_or(store.rv(), |t| t.rv);
    let Some(objects) = store.objects(&info.gvr) else {
        return Ok(Page {
            items: Vec::new(),
            rv,
            continue_token: None,
        });
    };
    let lower = match (token, &filter.namespace) {
        (Some(t), _) => Bound::Excluded(t.start),
        (None, Some(ns)) => Bound::Included((ns.clone(), String::new())),
        (None, None) => Bound::Unbounded,
    };
    let limit = limit.filter(|l| *l > 0);
    let mut items: Vec<Arc<Value>> = Vec::new();
    let mut last: Option<&ObjKey> = None;
    let mut more = false;
    for (k, obj) in objects.range((lower, Bound::Unbounded)) {
        if filter.namespace.as_ref().is_some_and(|ns| *ns != k.0) {
            break;
        }
        if !filter.matches(obj) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            more = true;
            break;
        }
        items.push(obj.clone());
        last = Some(k);
    }
    let continue_token = match (more, last) {
        (true, Some(k)) => Some(encode(rv, k.clone())),
        _ => None,
    };
    Ok(Page {
        items,
        rv,
        continue_token,
    })
}

#[derive(Serialize)]
struct ListBody<'a> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: ListMeta,
    items: Vec<Cow<'a, Value>>,
}

#[derive(Serialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_token: Option<String>,
}

/// The `<Kind>List` JSON (or `PartialObjectMetadataList` with `meta_only`).
pub(crate) fn render(info: &ResourceInfo, page: &Page, meta_only: bool) -> Vec<u8> {
    let (api_version, kind) = if meta_only {
        (
            "meta.k8s.io/v1".to_string(),
            "PartialObjectMetadataList".to_string(),
        )
    } else {
        (info.gvr.api_version(), format!("{}List", info.kind))
    };
    let items = page
        .items
        .iter()
        .map(|o| {
            if meta_only {
                Cow::Owned(meta::partial(o))
            } else {
                Cow::Borrowed(o.as_ref())
            }
        })
        .collect();
    let body = ListBody {
        api_version,
        kind,
        metadata: ListMeta {
            resource_version: page.rv.to_string(),
            continue_token: page.continue_token.clone(),
        },
        items,
    };
    // Serialising JSON values and strings cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}
