//! Structure-aware mutations of JSON documents and byte-level edits of their text,
//! shared by the admission and the `plan`/`explain` targets.
//!
//! A mutation either aims at a field the code under test reads (the caller lists
//! those, so the interesting fields are hit often) or at any node that exists in the
//! document (so fields nobody thought of are hit too). Values are chosen to sit on
//! the edges parsers and validators get wrong: wrong JSON types, out-of-range and
//! boundary numbers, near-miss IPs and enum values, unicode, huge and deeply nested
//! values.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value, json};

/// One change to a document.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    /// Set the member at one of the caller's target paths (parents created as needed).
    SetTarget(Index, Value),
    /// Remove the member at one of the caller's target paths.
    RemoveTarget(Index),
    /// Replace an existing node (any depth) with a value.
    Replace(Index, Value),
    /// Remove an existing node.
    Remove(Index),
    /// Make an existing node big: an array repeats its first element, an object gets
    /// extra members, a string is repeated, anything else becomes an array of copies.
    Grow(Index, usize),
    /// Wrap an existing node in `depth` arrays or objects.
    Nest(Index, usize, bool),
    /// Give a target (`true`) or any node another value of the same JSON type, so the
    /// document still decodes and the change reaches the logic behind the decoder:
    /// a string becomes one of the edge strings, a number an edge number, an array
    /// loses or repeats an element.
    SameType(bool, Index, Index),
}

/// A byte-level edit of a rendered document.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    Flip(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    Truncate(Index),
}

/// Strings that sit next to valid values of the fields under test.
const STRINGS: &[&str] = &[
    "",
    " ",
    "None",
    "none",
    "10.96.0.10",
    "10.96.0.0",
    "10.96.0.255",
    "10.96.0.50",
    "10.96.1.1",
    "10.96.0.010",
    " 10.96.0.11",
    "10.96.0.12/32",
    "::ffff:10.96.0.13",
    "fd00:10:96::a",
    "fd00:10:96::ffff:ffff",
    "FD00:10:96::B",
    "2001:db8::1",
    "1.2.3.4.5",
    "256.1.1.1",
    "１０.９６.０.１",
    "IPv4",
    "IPv6",
    "ipv4",
    "IPv5",
    "SingleStack",
    "PreferDualStack",
    "RequireDualStack",
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "ExternalName",
    "Headless",
    "TCP",
    "UDP",
    "SCTP",
    "tcp",
    "Local",
    "Cluster",
    "ClientIP",
    "http",
    "web",
    "shop",
    "default",
    "Service",
    "v1",
    "kube-system",
    "a-very-long-name-that-is-longer-than-sixty-three-characters-allowed-in-dns",
    "UPPER",
    "-leading-dash",
    "with.dot",
    "x/y",
    "30080",
    "-1",
    "0x1f",
    "1e3",
    "~",
    "null",
    "yes",
    "true",
    ".inf",
    "&anchor",
    "*alias",
    "!!binary",
    "- item",
    "key: value",
    "#comment",
    "\u{0}",
    "\t\r\n",
    "\u{202e}evil",
    "é\u{301}",
    "🚀",
    "\u{feff}",
    "\\u0000",
];

fn numbers() -> Vec<Value> {
    vec![
        json!(0),
        json!(-1),
        json!(1),
        json!(53),
        json!(80),
        json!(65535),
        json!(65536),
        json!(29999),
        json!(30000),
        json!(30005),
        json!(30010),
        json!(30080),
        json!(30099),
        json!(30100),
        json!(32767),
        json!(32768),
        json!(i32::MAX),
        json!(i32::MIN),
        json!(i64::from(i32::MAX) + 1),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1.5),
        json!(-0.0),
        json!(80.0),
        json!(1e300),
    ]
}

/// Any JSON value, small.
pub(crate) fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value to put somewhere: mostly the edge cases above, sometimes anything.
pub(crate) fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::sample::select(STRINGS).prop_map(Value::from),
        3 => prop::sample::select(numbers()),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        1 => prop::collection::vec(prop::sample::select(STRINGS).prop_map(Value::from), 0..4)
            .prop_map(Value::Array),
        1 => prop::collection::vec(prop::sample::select(numbers()), 0..4).prop_map(Value::Array),
        1 => any::<String>().prop_map(Value::from),
        1 => (prop::sample::select(STRINGS), 1usize..20_000)
            .prop_map(|(s, n)| Value::from(format!("{s}x").repeat(n))),
        2 => any_json(),
    ]
}

/// One mutation; `targets` is how many target paths the caller has (0: none), `most`
/// the largest size a node grows to (bounded by what one case may cost).
pub(crate) fn mutation(targets: usize, most: usize) -> impl Strategy<Value = Mutation> {
    let targeted = targets > 0;
    prop_oneof![
        (if targeted { 5 } else { 0 }) => (any::<Index>(), value()).prop_map(|(i, v)| Mutation::SetTarget(i, v)),
        (if targeted { 1 } else { 0 }) => any::<Index>().prop_map(Mutation::RemoveTarget),
        4 => (any::<Index>(), value()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        2 => any::<Index>().prop_map(Mutation::Remove),
        1 => (any::<Index>(), prop_oneof![2usize..20, (most / 10).max(21)..most.max(22)])
            .prop_map(|(i, n)| Mutation::Grow(i, n)),
        1 => (any::<Index>(), prop_oneof![1usize..8, 100usize..300], any::<bool>())
            .prop_map(|(i, d, arrays)| Mutation::Nest(i, d, arrays)),
        6 => (prop::bool::weighted(if targeted { 0.7 } else { 0.0 }), any::<Index>(), any::<Index>())
            .prop_map(|(t, i, j)| Mutation::SameType(t, i, j)),
    ]
}

/// Tokens that change the structure of YAML or JSON text when inserted.
const TOKENS: &[&str] = &[
    ": ",
    "- ",
    "\n",
    "\n---\n",
    "\n...\n",
    "\t",
    "  ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "'",
    "\"",
    "&a ",
    "*a",
    "!!str ",
    "!!int ",
    "!<tag> ",
    "|",
    ">",
    "? ",
    "<<: *a",
    "%YAML 1.2\n",
    "#",
    "\\",
    "\u{feff}",
    "\u{0}",
    "\r",
    "é",
    "0x",
    "1e999",
    "-",
    "null",
    "~",
];

/// One byte-level edit.
pub(crate) fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        (
            any::<Index>(),
            prop_oneof![
                prop::sample::select(TOKENS).prop_map(|t| t.as_bytes().to_vec()),
                prop::collection::vec(any::<u8>(), 1..8),
            ]
        )
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<Index>(), 1usize..40).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<Index>().prop_map(Edit::Truncate),
    ]
}

/// Apply byte-level edits in order.
pub(crate) fn apply_edits(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        let at = |i: &Index| if len == 0 { 0 } else { i.index(len) };
        match e {
            Edit::Flip(i, b) if len > 0 => {
                let at = at(i);
                bytes[at] ^= b | 1;
            }
            Edit::Flip(..) => {}
            Edit::Insert(i, ins) => {
                let at = if len == 0 { 0 } else { i.index(len + 1) };
                bytes.splice(at..at, ins.iter().copied());
            }
            Edit::Delete(i, n) => {
                let at = at(i);
                let end = (at + n).min(len);
                bytes.drain(at..end);
            }
            Edit::Truncate(i) => bytes.truncate(at(i)),
        }
    }
    bytes
}

/// Every node of `doc` (the root included) as a JSON pointer's tokens.
fn paths(doc: &Value) -> Vec<Vec<String>> {
    fn walk(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(at.clone());
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    at.push(k.clone());
                    walk(child, at, out);
                    at.pop();
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    at.push(i.to_string());
                    walk(child, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(doc, &mut Vec::new(), &mut out);
    out
}

fn node_mut<'a>(doc: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |v, token| match v {
        Value::Object(m) => m.get_mut(token),
        Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
        _ => None,
    })
}

/// Set the member at `path`, creating (or overwriting non-object) parents on the way.
fn set_path(doc: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *doc = value;
        return;
    };
    let mut at = doc;
    for token in parents {
        at = match at {
            Value::Array(items) => match token.parse::<usize>().ok().filter(|&i| i < items.len()) {
                Some(i) => &mut items[i],
                None => return,
            },
            other => {
                if !other.is_object() {
                    *other = Value::Object(Map::new());
                }
                let Value::Object(m) = other else { return };
                m.entry(token.clone()).or_insert_with(|| json!({}))
            }
        };
    }
    match at {
        Value::Array(items) => {
            if let Some(slot) = last.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *slot = value;
            }
        }
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        other => *other = json!({ last.clone(): value }),
    }
}

/// Remove the node at `path` (the root becomes null).
fn remove_path(doc: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        *doc = Value::Null;
        return;
    };
    match node_mut(doc, parents) {
        Some(Value::Object(m)) => {
            m.remove(last);
        }
        Some(Value::Array(items)) => {
            if let Some(i) = last.parse::<usize>().ok().filter(|&i| i < items.len()) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

fn grow(v: &mut Value, n: usize) {
    match v {
        Value::Array(items) => {
            let first = items.first().cloned().unwrap_or(Value::Null);
            items.extend(std::iter::repeat_n(first, n));
        }
        Value::Object(m) => {
            for i in 0..n {
                m.insert(format!("extra{i}"), json!(i));
            }
        }
        Value::String(s) => *s = s.repeat(n.min(2_000)),
        other => *other = Value::Array(vec![other.clone(); n]),
    }
}

fn same_type(v: &mut Value, pick: &Index) {
    match v {
        Value::String(s) => *s = STRINGS[pick.index(STRINGS.len())].to_owned(),
        Value::Number(_) => {
            let all = numbers();
            *v = all[pick.index(all.len())].clone();
        }
        Value::Bool(b) => *b = !*b,
        Value::Array(items) if !items.is_empty() => {
            let i = pick.index(items.len());
            if pick.index(2) == 0 {
                items.remove(i);
            } else {
                items.push(items[i].clone());
            }
        }
        Value::Object(m) if !m.is_empty() => {
            let key = m.keys().nth(pick.index(m.len())).cloned();
            if let Some(child) = key.and_then(|k| m.get_mut(&k)) {
                same_type(child, pick);
            }
        }
        _ => {}
    }
}

fn nest(v: &mut Value, depth: usize, arrays: bool) {
    for _ in 0..depth {
        let inner = v.take();
        *v = if arrays {
            Value::Array(vec![inner])
        } else {
            json!({ "a": inner })
        };
    }
}

/// Apply `mutations` in order; `targets` are JSON pointers (`/a/b/0`) of the fields
/// the caller wants hit often.
pub(crate) fn apply(doc: &mut Value, targets: &[&str], mutations: &[Mutation]) {
    let target = |i: &Index| -> Vec<String> {
        targets[i.index(targets.len())]
            .split('/')
            .skip(1)
            .map(str::to_owned)
            .collect()
    };
    for m in mutations {
        match m {
            Mutation::SetTarget(i, v) if !targets.is_empty() => {
                set_path(doc, &target(i), v.clone())
            }
            Mutation::RemoveTarget(i) if !targets.is_empty() => remove_path(doc, &target(i)),
            Mutation::SetTarget(..) | Mutation::RemoveTarget(_) => {}
            Mutation::Replace(i, v) => {
                let all = paths(doc);
                if let Some(node) = node_mut(doc, &all[i.index(all.len())]) {
                    *node = v.clone();
                }
            }
            Mutation::Remove(i) => {
                let all = paths(doc);
                // Never the root: that only tests "not an object", once is enough.
                if all.len() > 1 {
                    remove_path(doc, &all[1 + i.index(all.len() - 1)]);
                }
            }
            Mutation::Grow(i, n) => {
                let all = paths(doc);
                if let Some(node) = node_mut(doc, &all[i.index(all.len())]) {
                    grow(node, *n);
                }
            }
            Mutation::SameType(true, i, pick) if !targets.is_empty() => {
                if let Some(node) = node_mut(doc, &target(i)) {
                    same_type(node, pick);
                }
            }
            Mutation::SameType(_, i, pick) => {
                let all = paths(doc);
                if let Some(node) = node_mut(doc, &all[i.index(all.len())]) {
                    same_type(node, pick);
                }
            }
            Mutation::Nest(i, depth, arrays) => {
                let all = paths(doc);
                if let Some(node) = node_mut(doc, &all[i.index(all.len())]) {
                    nest(node, *depth, *arrays);
                }
            }
        }
    }
}
