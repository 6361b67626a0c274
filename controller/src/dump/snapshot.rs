//! The cluster snapshot `plan` and `explain` read: every decoded
//! object, keyed and sorted, so iteration order never depends on input order
//! or hashing.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::Metadata;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;
use svcplane_allocator::service_cidrs::ServiceCidrView;

use super::input::{InputError, ObjectId, Origin, RawObject, object_id};

/// `namespace/name` of a namespaced object; sorts by namespace, then name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Everything `plan` knows about the cluster.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub services: BTreeMap<Key, Arc<Service>>,
    pub pods: BTreeMap<Key, Arc<Pod>>,
    pub nodes: BTreeMap<String, Arc<Node>>,
    pub endpoint_slices: BTreeMap<Key, Arc<EndpointSlice>>,
    /// Not read by the EndpointSlice controller; kept for the Endpoints and
    /// mirroring controllers.
    pub endpoints: BTreeMap<Key, Arc<Endpoints>>,
    /// `networking.k8s.io/v1` ServiceCIDRs, by name: where present they are the
    /// cluster's ClusterIP ranges (for the allocator).
    pub service_cidrs: BTreeMap<String, Arc<ServiceCIDR>>,
    /// `networking.k8s.io/v1` IPAddresses, by name: what holds a ServiceCIDR that is
    /// being deleted (the ServiceCIDR controller), and who owns an address (`explain`).
    pub ip_addresses: BTreeMap<String, Arc<IPAddress>>,
}

fn in_namespace<T>(map: &BTreeMap<Key, Arc<T>>, namespace: &str) -> Vec<Arc<T>> {
    map.iter()
        .skip_while(|(k, _)| k.namespace.as_str() < namespace)
        .take_while(|(k, _)| k.namespace == namespace)
        .map(|(_, v)| Arc::clone(v))
        .collect()
}

impl Snapshot {
    /// The Pods of `namespace`, sorted by name.
    pub fn pods_in(&self, namespace: &str) -> Vec<Arc<Pod>> {
        in_namespace(&self.pods, namespace)
    }

    /// The allocator's view of every ServiceCIDR, in name order.
    pub fn service_cidr_views(&self) -> Vec<ServiceCidrView> {
        self.service_cidrs
            .values()
            .map(|c| ServiceCidrView::of(c))
            .collect()
    }

    /// The EndpointSlices of `namespace`, sorted by name.
    pub fn endpoint_slices_in(&self, namespace: &str) -> Vec<Arc<EndpointSlice>> {
        in_namespace(&self.endpoint_slices, namespace)
    }
}

/// A non-fatal note about the input, printed as one stderr line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A kind `plan` does not read.
    SkippedKind { origin: Origin, object: ObjectId },
    /// The same object appeared twice; the later one is used.
    Duplicate {
        origin: Origin,
        object: ObjectId,
        previous: Origin,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::SkippedKind { origin, object } => {
                write!(
                    f,
                    "warning: {origin} ({object}): kind not used by plan, skipped"
                )
            }
            Warning::Duplicate {
                origin,
                object,
                previous,
            } => write!(
                f,
                "warning: {origin} ({object}): also defined in {previous}, this one is used"
            ),
        }
    }
}

/// The kinds `plan` reads, with the apiVersion each must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Service,
    Pod,
    Node,
    EndpointSlice,
    Endpoints,
    ServiceCidr,
    IpAddress,
}

impl Kind {
    fn parse(kind: &str) -> Option<Kind> {
        Some(match kind {
            "Service" => Kind::Service,
            "Pod" => Kind::Pod,
            "Node" => Kind::Node,
            "EndpointSlice" => Kind::EndpointSlice,
            "Endpoints" => Kind::Endpoints,
            "ServiceCIDR" => Kind::ServiceCidr,
            "IPAddress" => Kind::IpAddress,
            _ => return None,
        })
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::ServiceCidr | Kind::IpAddress => "networking.k8s.io/v1",
            Kind::Service | Kind::Pod | Kind::Node | Kind::Endpoints => "v1",
        }
    }

    fn namespaced(self) -> bool {
        !matches!(self, Kind::Node | Kind::ServiceCidr | Kind::IpAddress)
    }
}

/// Builds a [`Snapshot`] from raw objects, in input order.
#[derive(Debug, Default)]
pub struct SnapshotBuilder {
    snapshot: Snapshot,
    seen: BTreeMap<(Kind, String, String), Origin>,
    warnings: Vec<Warning>,
}

impl SnapshotBuilder {
    /// Decodes and adds one object. Namespaced objects without a namespace
    /// are put in `default`, as `kubectl apply` would.
    pub fn add(&mut self, raw: RawObject) -> Result<(), InputError> {
        let RawObject {
            origin,
            api_version,
            kind: kind_name,
            mut value,
        } = raw;
        let Some(kind) = Kind::parse(&kind_name) else {
            let object = object_id(&kind_name, &value);
            self.warnings.push(Warning::SkippedKind { origin, object });
            return Ok(());
        };
        if kind.namespaced() {
            default_namespace(&mut value);
        }
        let mut object = object_id(&kind_name, &value);
        if !kind.namespaced() {
            object.namespace = None;
        }
        if api_version != kind.api_version() {
            return Err(InputError::object(
                &origin,
                &object,
                format!(
                    "apiVersion {api_version} is not supported for {}, want {}",
                    object.kind,
                    kind.api_version()
                ),
            ));
        }
        let stored = match kind {
            Kind::Service => insert(&mut self.snapshot.services, value),
            Kind::Pod => insert(&mut self.snapshot.pods, value),
            Kind::EndpointSlice => insert(&mut self.snapshot.endpoint_slices, value),
            Kind::Endpoints => insert(&mut self.snapshot.endpoints, value),
            Kind::Node => insert_by_name(&mut self.snapshot.nodes, value),
            Kind::ServiceCidr => insert_by_name(&mut self.snapshot.service_cidrs, value),
            Kind::IpAddress => insert_by_name(&mut self.snapshot.ip_addresses, value),
        };
        let key = stored.map_err(|reason| InputError::object(&origin, &object, reason))?;
        if let Some(previous) = self
            .seen
            .insert((kind, key.namespace, key.name), origin.clone())
        {
            self.warnings.push(Warning::Duplicate {
                origin,
                object,
                previous,
            });
        }
        Ok(())
    }

    /// The snapshot and the warnings collected, in input order.
    pub fn finish(self) -> (Snapshot, Vec<Warning>) {
        (self.snapshot, self.warnings)
    }
}

fn default_namespace(value: &mut Value) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        let missing = matches!(meta.get("namespace"), None | Some(Value::Null))
            || meta.get("namespace").and_then(Value::as_str) == Some("");
        if missing {
            meta.insert("namespace".into(), Value::from("default"));
        }
    }
}

/// Decodes `value`; an error names the field it is about (`spec.ports[0].port:
/// invalid type: ...`), the object itself when the path is empty. `explain` decodes
/// the kinds only it reads with this too.
pub(crate) fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

/// The key of a decoded object; a name is required.
fn key_of<T: Metadata<Ty = ObjectMeta>>(obj: &T) -> Result<Key, String> {
    let meta = obj.metadata();
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => Ok(Key {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: name.to_owned(),
        }),
        _ => Err("metadata.name is missing".to_owned()),
    }
}

/// Decodes a cluster-scoped object and stores it under its name; returns its key.
fn insert_by_name<T: DeserializeOwned + Metadata<Ty = ObjectMeta>>(
    map: &mut BTreeMap<String, Arc<T>>,
    value: Value,
) -> Result<Key, String> {
    let obj: T = decode(value)?;
    let key = key_of(&obj)?;
    map.insert(key.name.clone(), Arc::new(obj));
    Ok(key)
}

/// Decodes `value` and stores it under its key, which it returns.
fn insert<T: DeserializeOwned + Metadata<Ty = ObjectMeta>>(
    map: &mut BTreeMap<Key, Arc<T>>,
    value: Value,
) -> Result<Key, String> {
    let obj: T = decode(value)?;
    let key = key_of(&obj)?;
    map.insert(key.clone(), Arc::new(obj));
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::input::parse_text;

    fn build(text: &str) -> Result<(Snapshot, Vec<Warning>), InputError> {
        let mut b = SnapshotBuilder::default();
        for raw in parse_text("t.yaml", text)? {
            b.add(raw)?;
        }
        Ok(b.finish())
    }

    #[test]
    fn objects_are_keyed_and_namespaces_defaulted() {
        let (snap, warnings) = build(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: x}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n\
             apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
        )
        .unwrap();
        assert!(warnings.is_empty());
        assert_eq!(snap.pods_in("default").len(), 1);
        assert_eq!(snap.pods_in("x").len(), 1);
        assert!(snap.pods_in("y").is_empty());
        assert!(snap.nodes.contains_key("n1"));
    }

    #[test]
    fn undecodable_object_is_named() {
        let err = build(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: nginx}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (Pod ns/p): spec.containers: invalid type: string \"nginx\", expected a sequence"
        );
    }

    #[test]
    fn decode_errors_name_the_field() {
        let err = build(
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ns}\n\
             spec: {ports: [{port: 80}, {port: eighty}]}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (Service ns/web): spec.ports[1].port: invalid type: string \"eighty\", expected i32"
        );
        let err = build("apiVersion: v1\nkind: Node\nmetadata: {name: node1, labels: [a]}\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (Node node1): metadata.labels: invalid type: sequence, expected a map"
        );
    }

    #[test]
    fn wrong_api_version_and_missing_name_are_errors() {
        let err = build(
            "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: s}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (EndpointSlice default/s): apiVersion discovery.k8s.io/v1beta1 is not supported for EndpointSlice, want discovery.k8s.io/v1"
        );
        let err = build("apiVersion: v1\nkind: Node\nmetadata: {}\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (Node <unnamed>): metadata.name is missing"
        );
    }

    /// Found by the fuzz target (controller/tests/fuzz): an apiVersion or a name with a
    /// newline split the error into two lines, the second one written by the input.
    #[test]
    fn control_characters_in_names_and_values_stay_on_the_error_line() {
        let err =
            build("apiVersion: \"v1\\nx\"\nkind: Node\nmetadata: {name: \"a\\nerror: forged\"}\n")
                .unwrap_err()
                .to_string();
        assert_eq!(
            err,
            "t.yaml: document 1 (Node a\\nerror: forged): apiVersion v1\\nx is not supported for Node, want v1"
        );
    }

    #[test]
    fn other_kinds_and_duplicates_warn() {
        let (_, warnings) = build(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\n---\n\
             apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n\
             apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
        )
        .unwrap();
        let lines: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "warning: t.yaml: document 1 (ConfigMap ns/c): kind not used by plan, skipped",
                "warning: t.yaml: document 3 (Node n1): also defined in t.yaml: document 2, this one is used",
            ]
        );
    }
}
