//! The document `plan` prints: `{actions: [...], events: [...]}`.
//!
//! Everything here is a typed struct serialised in declaration order, and the
//! Kubernetes objects are k8s-openapi types (fixed field order, `BTreeMap`
//! labels), so the output is byte-stable for a given input.

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Serialize;

use crate::cli::OutputFormat;
use crate::core::event::EventType;
use crate::core::slice_endpoints::SliceEndpoints;

/// The whole output.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PlanDocument {
    pub actions: Vec<Action>,
    pub events: Vec<Event>,
}

/// The API verb of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Create,
    Update,
    Delete,
    /// A strategic merge patch.
    Patch,
    /// A server-side apply.
    Apply,
}

/// The object an action sends. Untagged: it serialises as the object
/// itself, with its own `apiVersion` and `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    EndpointSlice(Box<EndpointSlice>),
    Service(Box<Service>),
    Endpoints(Box<Endpoints>),
    /// The body of a patch or an apply, as sent.
    Patch(serde_json::Value),
}

/// One API write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// The controller's `--controllers` name.
    pub controller: &'static str,
    pub verb: Verb,
    pub kind: &'static str,
    /// The subresource written (`status`), if not the object itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<&'static str>,
    /// Empty (and left out) for a cluster-scoped object.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Absent on a create that uses `metadata.generateName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The complete object sent; absent on delete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Object>,
}

/// One event the controller would record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub reason: String,
    /// `namespace/name` of the object the event is about.
    pub object: String,
    /// Its kind, when it is not the controller's own (a `Pod`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub message: String,
}

/// Errors encoding the document (not expected for these types).
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("cannot encode output as YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
    #[error("cannot encode output as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl PlanDocument {
    /// Renders the document; always ends with a newline.
    pub fn render(&self, format: OutputFormat) -> Result<String, EncodeError> {
        let mut text = match format {
            OutputFormat::Yaml => serde_saphyr::to_string(self)?,
            OutputFormat::Json => serde_json::to_string_pretty(self)?,
        };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        Ok(text)
    }
}

/// Writes counted by (controller, verb, kind), in output order.
type WriteCounts = Vec<((&'static str, Verb, &'static str), usize)>;

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
            Verb::Patch => "patch",
            Verb::Apply => "apply",
        }
    }
}

impl PlanDocument {
    /// The writes by controller, verb and kind: controllers in output order, then
    /// create, update, delete.
    fn write_counts(&self) -> WriteCounts {
        let mut counts: WriteCounts = Vec::new();
        for a in &self.actions {
            let key = (a.controller, a.verb, a.kind);
            match counts.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => counts.push((key, 1)),
            }
        }
        // Stable: controllers keep their order of first appearance.
        let first: Vec<&str> = counts.iter().fold(Vec::new(), |mut seen, ((c, _, _), _)| {
            if !seen.contains(c) {
                seen.push(c);
            }
            seen
        });
        counts.sort_by_key(|((c, v, k), _)| {
            (
                first.iter().position(|f| f == c).unwrap_or(usize::MAX),
                *v as u8,
                *k,
            )
        });
        counts
    }

    /// Events by type: (Normal, Warning).
    fn event_counts(&self) -> (usize, usize) {
        let normal = self
            .events
            .iter()
            .filter(|e| e.event_type == EventType::Normal)
            .count();
        (normal, self.events.len() - normal)
    }

    /// The totals line: `N writes (...), M events (...)`.
    fn totals(&self) -> String {
        let writes = match self.actions.len() {
            0 => "no writes".to_owned(),
            1 => "1 write".to_owned(),
            n => format!("{n} writes"),
        };
        let (normal, warning) = self.event_counts();
        let events = match self.events.len() {
            0 => "no events".to_owned(),
            1 => format!(
                "1 event ({})",
                if normal == 1 { "Normal" } else { "Warning" }
            ),
            n => format!("{n} events ({normal} Normal, {warning} Warning)"),
        };
        format!("{writes}, {events}")
    }

    /// The summary `plan` prints on stderr after the document: the totals, then
    /// one line per controller with its writes by verb and kind. Ends with a newline.
    pub fn summary(&self) -> String {
        let mut out = format!("summary: {}\n", self.totals());
        let mut line: Option<(&str, Vec<String>)> = None;
        for ((controller, verb, kind), n) in self.write_counts() {
            let part = format!("{n} {} {kind}", verb.as_str());
            match &mut line {
                Some((c, parts)) if *c == controller => parts.push(part),
                _ => {
                    if let Some((c, parts)) = line.take() {
                        out.push_str(&format!("  {c}: {}\n", parts.join(", ")));
                    }
                    line = Some((controller, vec![part]));
                }
            }
        }
        if let Some((c, parts)) = line {
            out.push_str(&format!("  {c}: {}\n", parts.join(", ")));
        }
        out
    }

    /// `plan --summary`: a table of the writes (one row per write, with what it
    /// carries), a table of the events, and the totals. Ends with a newline.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        if self.actions.is_empty() {
            out.push_str("no writes\n");
        } else {
            let rows: Vec<Vec<String>> = self
                .actions
                .iter()
                .map(|a| {
                    vec![
                        a.controller.to_owned(),
                        a.verb.as_str().to_owned(),
                        a.kind.to_owned(),
                        a.target(),
                        a.object.as_ref().map(Object::detail).unwrap_or_default(),
                    ]
                })
                .collect();
            table(
                &mut out,
                &["CONTROLLER", "VERB", "KIND", "OBJECT", "CONTENT"],
                &rows,
            );
        }
        out.push('\n');
        if self.events.is_empty() {
            out.push_str("no events\n");
        } else {
            let rows: Vec<Vec<String>> = self
                .events
                .iter()
                .map(|e| {
                    vec![
                        format!("{:?}", e.event_type),
                        e.reason.clone(),
                        e.object.clone(),
                        e.message.clone(),
                    ]
                })
                .collect();
            table(&mut out, &["TYPE", "REASON", "OBJECT", "MESSAGE"], &rows);
        }
        out.push('\n');
        out.push_str(&self.summary());
        out
    }
}

impl Action {
    /// `namespace/name`, or `namespace/prefix*` for a create by `generateName`.
    fn target(&self) -> String {
        let generated = || match &self.object {
            Some(Object::EndpointSlice(s)) => s.metadata.generate_name.clone(),
            Some(Object::Service(s)) => s.metadata.generate_name.clone(),
            Some(Object::Endpoints(e)) => e.metadata.generate_name.clone(),
            Some(Object::Patch(_)) | None => None,
        };
        match (&self.name, generated()) {
            (Some(name), _) if self.namespace.is_empty() => name.clone(),
            (Some(name), _) => format!("{}/{name}", self.namespace),
            (None, Some(prefix)) => format!("{}/{prefix}*", self.namespace),
            (None, None) => format!("{}/?", self.namespace),
        }
    }
}

impl Object {
    /// One line on what the object carries.
    fn detail(&self) -> String {
        match self {
            Object::EndpointSlice(s) => {
                let ready = s
                    .endpoints()
                    .iter()
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                    .count();
                let ports: Vec<String> = s
                    .ports
                    .iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{}{}/{}",
                            p.name
                                .as_deref()
                                .filter(|n| !n.is_empty())
                                .map(|n| format!("{n}:"))
                                .unwrap_or_default(),
                            p.port.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
                            p.protocol.as_deref().unwrap_or("TCP")
                        )
                    })
                    .collect();
                format!(
                    "{}, {} ({ready} ready), {}",
                    s.address_type,
                    plural(s.endpoints().len(), "endpoint"),
                    if ports.is_empty() {
                        "no ports".to_owned()
                    } else {
                        format!("ports {}", ports.join(" "))
                    }
                )
            }
            // Only the ServiceCIDR controller patches; its bodies are short.
            Object::Patch(body) => {
                let conditions = body.pointer("/status/conditions/0");
                match conditions {
                    Some(c) => format!(
                        "{}={}{}",
                        c["type"].as_str().unwrap_or_default(),
                        c["status"].as_str().unwrap_or_default(),
                        c["reason"]
                            .as_str()
                            .filter(|r| !r.is_empty())
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    ),
                    None => body["metadata"].to_string(),
                }
            }
            Object::Endpoints(e) => {
                let subsets = e.subsets.as_deref().unwrap_or_default();
                let ready: usize = subsets
                    .iter()
                    .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
                    .sum();
                let not_ready: usize = subsets
                    .iter()
                    .map(|s| s.not_ready_addresses.as_ref().map_or(0, Vec::len))
                    .sum();
                let truncated =
                    e.metadata.annotations.as_ref().is_some_and(|a| {
                        a.contains_key(crate::core::keys::ANNOTATION_OVER_CAPACITY)
                    });
                format!(
                    "{} ({ready} ready, {not_ready} not ready) in {}{}",
                    plural(ready + not_ready, "address"),
                    plural(subsets.len(), "subset"),
                    if truncated { ", truncated" } else { "" }
                )
            }
            Object::Service(svc) => {
                let spec = svc.spec.clone().unwrap_or_default();
                let mut parts = Vec::new();
                if let Some(ips) = spec.cluster_ips.filter(|v| !v.is_empty()) {
                    parts.push(format!("clusterIPs {}", ips.join(",")));
                }
                let node_ports: Vec<String> = spec
                    .ports
                    .iter()
                    .flatten()
                    .filter_map(|p| p.node_port.map(|n| n.to_string()))
                    .collect();
                if !node_ports.is_empty() {
                    parts.push(format!("nodePorts {}", node_ports.join(",")));
                }
                if let Some(h) = spec.health_check_node_port {
                    parts.push(format!("healthCheckNodePort {h}"));
                }
                parts.join(", ")
            }
        }
    }
}

/// `1 endpoint`, `2 endpoints`, `0 addresses`.
fn plural(n: usize, noun: &str) -> String {
    match (n, noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        (_, false) => format!("{n} {noun}s"),
    }
}

/// Appends `rows` under `header`, columns padded to their widest cell (the last
/// column is not padded).
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            text.push_str(cell);
            if i < last {
                text.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document() {
        let doc = PlanDocument::default();
        assert_eq!(
            doc.render(OutputFormat::Yaml).unwrap(),
            "actions: []\nevents: []\n"
        );
        assert_eq!(
            doc.render(OutputFormat::Json).unwrap(),
            "{\n  \"actions\": [],\n  \"events\": []\n}\n"
        );
    }

    #[test]
    fn delete_has_no_object_and_create_no_name() {
        let doc = PlanDocument {
            actions: vec![
                Action {
                    controller: "endpointslice",
                    verb: Verb::Create,
                    kind: "EndpointSlice",
                    subresource: None,
                    namespace: "ns".into(),
                    name: None,
                    object: Some(Object::EndpointSlice(Box::default())),
                },
                Action {
                    controller: "endpointslice",
                    verb: Verb::Delete,
                    kind: "EndpointSlice",
                    subresource: None,
                    namespace: "ns".into(),
                    name: Some("web-abc".into()),
                    object: None,
                },
            ],
            events: vec![Event {
                event_type: EventType::Warning,
                reason: "FailedToUpdateEndpointSlices".into(),
                object: "ns/web".into(),
                kind: None,
                message: "boom".into(),
            }],
        };
        let yaml = doc.render(OutputFormat::Yaml).unwrap();
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&doc.render(OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(back, json);
        assert_eq!(json["actions"][0].get("name"), None);
        assert_eq!(json["actions"][0]["object"]["kind"], "EndpointSlice");
        assert_eq!(
            json["actions"][0]["object"]["apiVersion"],
            "discovery.k8s.io/v1"
        );
        assert_eq!(json["actions"][1].get("object"), None);
        assert_eq!(json["actions"][1]["verb"], "delete");
        assert_eq!(json["events"][0]["type"], "Warning");
    }

    fn action(controller: &'static str, verb: Verb, kind: &'static str, name: &str) -> Action {
        Action {
            controller,
            verb,
            kind,
            subresource: None,
            namespace: "ns".into(),
            name: Some(name.into()),
            object: None,
        }
    }

    #[test]
    fn summary_counts_writes_by_controller_verb_and_kind_and_events_by_type() {
        let doc = PlanDocument {
            actions: vec![
                action("endpointslice", Verb::Update, "EndpointSlice", "a"),
                action("endpointslice", Verb::Create, "EndpointSlice", "b"),
                action("endpointslice", Verb::Create, "EndpointSlice", "c"),
                action("endpoints", Verb::Delete, "Endpoints", "d"),
                action("allocator", Verb::Update, "Service", "e"),
            ],
            events: vec![
                Event {
                    event_type: EventType::Warning,
                    reason: "R".into(),
                    object: "ns/x".into(),
                    kind: None,
                    message: "m".into(),
                },
                Event {
                    event_type: EventType::Normal,
                    reason: "R".into(),
                    object: "ns/x".into(),
                    kind: None,
                    message: "m".into(),
                },
            ],
        };
        assert_eq!(
            doc.summary(),
            "summary: 5 writes, 2 events (1 Normal, 1 Warning)\n\
             \x20 endpointslice: 2 create EndpointSlice, 1 update EndpointSlice\n\
             \x20 endpoints: 1 delete Endpoints\n\
             \x20 allocator: 1 update Service\n"
        );
        assert_eq!(
            PlanDocument::default().summary(),
            "summary: no writes, no events\n"
        );
    }

    #[test]
    fn table_lists_every_write_and_event_then_the_summary() {
        let mut slice = EndpointSlice {
            address_type: "IPv4".into(),
            ..EndpointSlice::default()
        };
        slice.metadata.generate_name = Some("web-".into());
        let doc = PlanDocument {
            actions: vec![
                Action {
                    controller: "endpointslice",
                    verb: Verb::Create,
                    kind: "EndpointSlice",
                    subresource: None,
                    namespace: "ns".into(),
                    name: None,
                    object: Some(Object::EndpointSlice(Box::new(slice))),
                },
                action("endpointslice", Verb::Delete, "EndpointSlice", "web-old"),
            ],
            events: vec![Event {
                event_type: EventType::Warning,
                reason: "FailedToUpdateEndpointSlices".into(),
                object: "ns/web".into(),
                kind: None,
                message: "boom".into(),
            }],
        };
        assert_eq!(
            doc.render_table(),
            "CONTROLLER     VERB    KIND           OBJECT      CONTENT\n\
             endpointslice  create  EndpointSlice  ns/web-*    IPv4, 0 endpoints (0 ready), no ports\n\
             endpointslice  delete  EndpointSlice  ns/web-old\n\
             \n\
             TYPE     REASON                        OBJECT  MESSAGE\n\
             Warning  FailedToUpdateEndpointSlices  ns/web  boom\n\
             \n\
             summary: 2 writes, 1 event (Warning)\n\
             \x20 endpointslice: 1 create EndpointSlice, 1 delete EndpointSlice\n"
        );
    }
}
