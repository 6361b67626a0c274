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
}

/// The object an action sends. Untagged: it serialises as the object
/// itself, with its own `apiVersion` and `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    EndpointSlice(Box<EndpointSlice>),
    Service(Box<Service>),
    Endpoints(Box<Endpoints>),
}

/// One API write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// The controller's `--controllers` name.
    pub controller: &'static str,
    pub verb: Verb,
    pub kind: &'static str,
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
                    namespace: "ns".into(),
                    name: None,
                    object: Some(Object::EndpointSlice(Box::default())),
                },
                Action {
                    controller: "endpointslice",
                    verb: Verb::Delete,
                    kind: "EndpointSlice",
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
}
