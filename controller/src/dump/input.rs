//! Reading a dump (`plan -f`, `explain -f`): files or stdin, split into documents, parsed into
//! `serde_json::Value`s and then decoded into typed objects.
//!
//! Two formats are accepted per source:
//! - JSON, when the first non-blank byte is `{`: one or more concatenated
//!   (or newline-separated) JSON values, each one document;
//! - YAML otherwise: a multi-document stream. Documents are split on
//!   `---` / `...` marker lines (YAML forbids those at the start of a line
//!   inside content, so the split is exact) and each is parsed with
//!   `serde_saphyr`. Line numbers in syntax errors refer to the whole file.
//!
//! Documents are numbered from 1. An empty document (`---` followed by
//! nothing, or only comments) keeps its number but is skipped. A document
//! may be a single object or a List (`kind: List`, or `PodList` etc. as the
//! raw API returns them); a List's items are reported under their own
//! Kind namespace/name.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

/// The name used for stdin in messages.
pub const STDIN_NAME: &str = "<stdin>";

/// Where an object came from: `FILE: document N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub document: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)
    }
}

/// `Kind namespace/name` (or `Kind name` for cluster-scoped objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectId {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = one_line(self.name.as_deref().unwrap_or("<unnamed>"));
        let kind = one_line(&self.kind);
        match &self.namespace {
            Some(ns) => write!(f, "{kind} {}/{name}", one_line(ns)),
            None => write!(f, "{kind} {name}"),
        }
    }
}

/// `s` with control characters written as escapes (`\n`, `\u{7}`): names and values
/// from the input end up in error and warning lines, and a newline in one would split
/// the one line `plan` prints per problem (found by the fuzz target,
/// controller/tests/fuzz).
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(char::is_control) {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// A bad input, formatted as the one stderr line `plan` prints. Boxed: it
/// travels through every `Result` of the input path.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct InputError(Box<InputErrorKind>);

/// The three shapes of a bad-input line.
#[derive(Debug, thiserror::Error)]
pub enum InputErrorKind {
    /// `FILE: reason`: the source could not be read at all.
    #[error("{file}: {reason}")]
    Source { file: String, reason: String },
    /// `FILE: document N: reason`: no object is known (syntax errors, a
    /// document that is not an object, missing kind).
    #[error("{origin}: {reason}")]
    Document { origin: Origin, reason: String },
    /// `FILE: document N (Kind namespace/name): reason`.
    #[error("{origin} ({object}): {reason}")]
    Object {
        origin: Origin,
        object: ObjectId,
        reason: String,
    },
}

impl From<InputErrorKind> for InputError {
    fn from(kind: InputErrorKind) -> Self {
        InputError(Box::new(kind))
    }
}

impl InputError {
    pub fn kind(&self) -> &InputErrorKind {
        &self.0
    }

    pub fn source_file(file: impl Into<String>, reason: impl Into<String>) -> Self {
        InputErrorKind::Source {
            file: file.into(),
            reason: one_line(&reason.into()).into_owned(),
        }
        .into()
    }

    pub fn document(origin: &Origin, reason: impl Into<String>) -> Self {
        InputErrorKind::Document {
            origin: origin.clone(),
            reason: one_line(&reason.into()).into_owned(),
        }
        .into()
    }

    pub fn object(origin: &Origin, object: &ObjectId, reason: impl Into<String>) -> Self {
        InputErrorKind::Object {
            origin: origin.clone(),
            object: object.clone(),
            reason: one_line(&reason.into()).into_owned(),
        }
        .into()
    }
}

/// One raw object with its `apiVersion` and `kind` checked present.
#[derive(Debug, Clone)]
pub struct RawObject {
    pub origin: Origin,
    pub api_version: String,
    pub kind: String,
    pub value: Value,
}

impl RawObject {
    /// The object's identity as far as its metadata says.
    pub fn id(&self) -> ObjectId {
        object_id(&self.kind, &self.value)
    }
}

/// `Kind namespace/name` as the object's metadata says.
pub fn object_id(kind: &str, value: &Value) -> ObjectId {
    let meta = value.get("metadata");
    let field = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    ObjectId {
        kind: kind.to_owned(),
        namespace: field("namespace"),
        name: field("name"),
    }
}

/// Reads one source (`-` is stdin) and returns its objects in order, with
/// Lists flattened.
pub fn read_source(path: &Path, stdin: &mut dyn Read) -> Result<Vec<RawObject>, InputError> {
    let mut bytes = Vec::new();
    let (file, read) = if path.as_os_str() == "-" {
        (STDIN_NAME.to_owned(), stdin.read_to_end(&mut bytes))
    } else {
        let file = path.display().to_string();
        let read = std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes));
        (file, read)
    };
    if let Err(e) = read {
        return Err(InputError::source_file(file, format!("cannot read: {e}")));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        InputError::source_file(&file, format!("not valid UTF-8: {}", e.utf8_error()))
    })?;
    parse_text(&file, &text)
}

/// Splits and parses `text` (the content of `file`).
pub fn parse_text(file: &str, text: &str) -> Result<Vec<RawObject>, InputError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut objects = Vec::new();
    if text.trim_start().starts_with('{') {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for (i, doc) in stream.enumerate() {
            let origin = Origin {
                file: file.to_owned(),
                document: i + 1,
            };
            let value = doc.map_err(|e| InputError::document(&origin, e.to_string()))?;
            push_document(&origin, value, &mut objects)?;
        }
    } else {
        for (i, doc) in split_yaml(text).into_iter().enumerate() {
            let origin = Origin {
                file: file.to_owned(),
                document: i + 1,
            };
            let options = serde_saphyr::options! { with_snippet: false };
            let value: Value = serde_saphyr::from_str_with_options(&doc, options)
                .map_err(|e| InputError::document(&origin, e.to_string()))?;
            push_document(&origin, value, &mut objects)?;
        }
    }
    Ok(objects)
}

/// Checks one document and appends its object(s).
fn push_document(
    origin: &Origin,
    value: Value,
    out: &mut Vec<RawObject>,
) -> Result<(), InputError> {
    let map = match value {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(InputError::document(
                origin,
                format!("expected an object, found {}", type_name(&other)),
            ));
        }
    };
    let value = Value::Object(map);
    let (api_version, kind) = type_meta(origin, &value, None)?;
    if !kind.ends_with("List") {
        out.push(RawObject {
            origin: origin.clone(),
            api_version,
            kind,
            value,
        });
        return Ok(());
    }
    // A List: `kind: List` (kubectl) or `<Kind>List` (the raw API, whose items
    // carry no apiVersion/kind of their own).
    let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
    let Value::Object(mut map) = value else {
        return Ok(());
    };
    let items = match map.remove("items") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(InputError::document(
                origin,
                format!("{kind}: items must be a list, found {}", type_name(&other)),
            ));
        }
    };
    for (i, item) in items.into_iter().enumerate() {
        let mut item = match item {
            Value::Object(m) => m,
            other => {
                return Err(InputError::document(
                    origin,
                    format!(
                        "items[{i}]: expected an object, found {}",
                        type_name(&other)
                    ),
                ));
            }
        };
        if let Some(k) = item_kind {
            item.entry("kind").or_insert_with(|| Value::from(k));
            item.entry("apiVersion")
                .or_insert_with(|| Value::from(api_version.clone()));
        }
        let item = Value::Object(item);
        let (item_api_version, item_kind_name) = type_meta(origin, &item, Some(i))?;
        out.push(RawObject {
            origin: origin.clone(),
            api_version: item_api_version,
            kind: item_kind_name,
            value: item,
        });
    }
    Ok(())
}

/// `apiVersion` and `kind`, both required non-empty strings.
fn type_meta(
    origin: &Origin,
    value: &Value,
    item: Option<usize>,
) -> Result<(String, String), InputError> {
    let prefix = item.map(|i| format!("items[{i}]: ")).unwrap_or_default();
    let get = |field: &str| match value.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        None | Some(Value::Null) => Err(format!("{prefix}object has no {field}")),
        Some(Value::String(_)) => Err(format!("{prefix}{field} is empty")),
        Some(other) => Err(format!(
            "{prefix}{field} must be a string, found {}",
            type_name(other)
        )),
    };
    let kind = get("kind").map_err(|r| InputError::document(origin, r))?;
    let api_version =
        get("apiVersion").map_err(|r| InputError::object(origin, &object_id(&kind, value), r))?;
    Ok((api_version, kind))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Splits a YAML stream into documents, each padded with leading newlines so
/// parser line numbers match the file.
///
/// A `---` line starts an explicit document (always counted, even when
/// empty); a `...` line ends the current one. Text outside explicit
/// documents counts as a document only when it has content; comment-only or
/// directive-only text is carried into the next document.
fn split_yaml(text: &str) -> Vec<String> {
    struct Chunk {
        first_line: usize,
        text: String,
        explicit: bool,
        content: bool,
    }
    impl Chunk {
        fn new(first_line: usize, explicit: bool) -> Self {
            Chunk {
                first_line,
                text: String::new(),
                explicit,
                content: false,
            }
        }
        fn finish(self, docs: &mut Vec<String>) -> Option<Chunk> {
            if self.explicit || self.content {
                let mut doc = "\n".repeat(self.first_line);
                doc.push_str(&self.text);
                docs.push(doc);
                None
            } else {
                Some(self)
            }
        }
    }
    fn is_marker(line: &str, marker: &str) -> bool {
        line.strip_prefix(marker)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
    }

    let mut docs = Vec::new();
    let mut current = Chunk::new(0, false);
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if is_marker(bare, "---") {
            let carried = std::mem::replace(&mut current, Chunk::new(n, true)).finish(&mut docs);
            if let Some(prefix) = carried {
                // Directives/comments before `---` belong to this document.
                current.first_line = prefix.first_line;
                current.text = prefix.text;
            }
            current.text.push_str(line);
            let after = bare.trim_start_matches('-').trim();
            current.content |= !after.is_empty() && !after.starts_with('#');
        } else if is_marker(bare, "...") {
            current.text.push_str(line);
            // A `...` after comment-only text ends nothing: that text is dropped.
            let _ = std::mem::replace(&mut current, Chunk::new(n + 1, false)).finish(&mut docs);
        } else {
            if current.text.is_empty() && !current.explicit {
                current.first_line = n;
            }
            current.text.push_str(line);
            let t = bare.trim_start();
            current.content |= !t.is_empty() && !t.starts_with('#') && !bare.starts_with('%');
        }
    }
    let _ = current.finish(&mut docs);
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(usize, String)> {
        parse_text("t.yaml", text)
            .unwrap()
            .into_iter()
            .map(|o| (o.origin.document, o.kind))
            .collect()
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n";

    #[test]
    fn documents_are_numbered_including_empty_ones() {
        let text = format!("---\n{POD}---\n---\n# only a comment\n---\n{POD}");
        assert_eq!(kinds(&text), vec![(1, "Pod".into()), (4, "Pod".into())]);
    }

    #[test]
    fn leading_comments_are_not_a_document() {
        let text = format!("# header\n\n---\n{POD}");
        assert_eq!(kinds(&text), vec![(1, "Pod".into())]);
        assert_eq!(kinds(POD), vec![(1, "Pod".into())]);
    }

    #[test]
    fn document_end_markers_split_documents() {
        let text = format!("{POD}...\n{POD}...\n");
        assert_eq!(kinds(&text), vec![(1, "Pod".into()), (2, "Pod".into())]);
    }

    #[test]
    fn syntax_error_lines_refer_to_the_whole_file() {
        let text = format!("{POD}---\n{POD}  bad: [\n");
        let err = parse_text("t.yaml", &text).unwrap_err().to_string();
        assert!(err.starts_with("t.yaml: document 2: "), "{err}");
        assert!(err.contains("line 8"), "{err}");
    }

    #[test]
    fn lists_are_flattened_and_typed_lists_fill_in_kind() {
        let text =
            "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n";
        let objs = parse_text("t.yaml", text).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].kind, "Pod");
        assert_eq!(objs[1].api_version, "v1");
        assert_eq!(objs[1].id().to_string(), "Pod b");
    }

    #[test]
    fn concatenated_json_documents() {
        let text =
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}\n{\"apiVersion\":\"v1\",\"kind\":\"Node\"}";
        assert_eq!(kinds(text), vec![(1, "Pod".into()), (2, "Node".into())]);
    }

    #[test]
    fn missing_kind_names_the_document() {
        let err = parse_text("t.yaml", "---\n---\napiVersion: v1\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t.yaml: document 2: object has no kind");
        let err = parse_text("t.yaml", "kind: Pod\nmetadata: {namespace: a, name: b}\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (Pod a/b): object has no apiVersion"
        );
    }
}
