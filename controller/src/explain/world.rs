//! The objects `explain` reasons about, and reading them from a dump.
//!
//! A dump is read exactly as `plan` reads it (same parser, same snapshot, same
//! error lines), so `explain -f` and `plan -f` always see the same cluster.
//! One more kind matters to the `ip`/`nodeport` forms and is taken out of the
//! stream before it reaches `plan`'s snapshot: svcplane's own `AllocationClaim`s
//! (kube-apiserver's `IPAddress` objects are in the snapshot). The live reader
//! ([`super::live`]) fills the same [`World`] from an API server.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use svcplane_webhook::claim::AllocationClaim;

use crate::core::migrated::{self, MoveInProgress};
use crate::dump::input::{self, InputError, Origin, RawObject};
use crate::dump::snapshot::{self, Snapshot, SnapshotBuilder};

/// Whether an optional kind could be read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Read (possibly none exist).
    Read,
    /// The API server does not serve the kind (404): none can exist there.
    NotServed,
}

/// Where the objects came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `-f` files, as given.
    Dump(Vec<String>),
    /// A live API server.
    Cluster,
}

impl Source {
    /// ` in FILE` / ` in the cluster`, appended to "not found" messages.
    pub fn where_(&self) -> String {
        match self {
            Source::Dump(files) => format!(" in {}", files.join(", ")),
            Source::Cluster => " in the cluster".to_owned(),
        }
    }
}

/// Everything `explain` knows about the cluster.
#[derive(Debug, Clone)]
pub struct World {
    /// Services, Pods, Nodes, EndpointSlices, Endpoints, ServiceCIDRs and IPAddresses
    /// (as `plan` keeps them).
    pub snapshot: Snapshot,
    /// svcplane's AllocationClaims, by name.
    pub claims: BTreeMap<String, AllocationClaim>,
    pub ip_address_api: Availability,
    pub claim_api: Availability,
    /// Moves of `svcplane migrate --apply` in progress, from their journals.
    pub moves: Vec<MoveInProgress>,
    /// Why the journals could not be read, if they could not.
    pub moves_unread: Option<String>,
    pub source: Source,
}

impl World {
    /// An empty world read from `source`.
    pub fn empty(source: Source) -> Self {
        World {
            snapshot: Snapshot::default(),
            claims: BTreeMap::new(),
            ip_address_api: Availability::Read,
            claim_api: Availability::Read,
            moves: Vec::new(),
            moves_unread: None,
            source,
        }
    }
}

const CLAIM_API_VERSION: &str = "svcplane.io/v1alpha1";

/// Reads every `-f` source (`-` is stdin) into a [`World`], with the warning
/// lines to print (skipped kinds, duplicates).
pub fn read_dump(
    files: &[PathBuf],
    stdin: &mut dyn Read,
) -> Result<(World, Vec<String>), InputError> {
    let mut builder = SnapshotBuilder::default();
    let mut extra = Extra::default();
    for path in files {
        for raw in input::read_source(path, stdin)? {
            match raw.kind.as_str() {
                "AllocationClaim" => extra.claim(raw)?,
                // A journal of `migrate --apply`; other ConfigMaps are plan's to skip.
                "ConfigMap"
                    if raw.value["metadata"]["labels"][migrated::JOURNAL_LABEL].is_string() =>
                {
                    extra.journal(raw);
                }
                _ => builder.add(raw)?,
            }
        }
    }
    let (snapshot, warnings) = builder.finish();
    let mut lines: Vec<String> = warnings
        .iter()
        // The same warning plan prints, naming the command that skips.
        .map(|w| {
            w.to_string()
                .replace("not used by plan", "not used by explain")
        })
        .collect();
    lines.extend(extra.warnings);
    let mut world = World::empty(Source::Dump(
        files.iter().map(|f| f.display().to_string()).collect(),
    ));
    world.snapshot = snapshot;
    world.claims = extra.claims;
    world.moves = extra.moves;
    Ok((world, lines))
}

/// The cluster-scoped kind `plan` does not read.
#[derive(Default)]
struct Extra {
    claims: BTreeMap<String, AllocationClaim>,
    moves: Vec<MoveInProgress>,
    seen: BTreeMap<(String, String), Origin>,
    warnings: Vec<String>,
}

impl Extra {
    fn claim(&mut self, raw: RawObject) -> Result<(), InputError> {
        let (name, obj) = self.decode::<AllocationClaim>(raw, CLAIM_API_VERSION)?;
        self.claims.insert(name, obj);
        Ok(())
    }

    fn journal(&mut self, raw: RawObject) {
        let journal = serde_json::from_value(raw.value.clone())
            .ok()
            .and_then(|cm| migrated::move_in_progress(&cm));
        match journal {
            Some(j) => self.moves.push(j),
            None => self.warnings.push(format!(
                "warning: {} ({}): a migrate journal without its from/to annotations, skipped",
                raw.origin,
                raw.id()
            )),
        }
    }

    /// Checks the apiVersion, decodes and names a cluster-scoped object, with
    /// `plan`'s error and duplicate lines.
    fn decode<T: DeserializeOwned>(
        &mut self,
        raw: RawObject,
        want: &str,
    ) -> Result<(String, T), InputError> {
        let mut object = raw.id();
        object.namespace = None;
        if raw.api_version != want {
            return Err(InputError::object(
                &raw.origin,
                &object,
                format!(
                    "apiVersion {} is not supported for {}, want {want}",
                    raw.api_version, raw.kind
                ),
            ));
        }
        let Some(name) = object.name.clone().filter(|n| !n.is_empty()) else {
            return Err(InputError::object(
                &raw.origin,
                &object,
                "metadata.name is missing",
            ));
        };
        let decoded: T = snapshot::decode(raw.value)
            .map_err(|reason| InputError::object(&raw.origin, &object, reason))?;
        if let Some(previous) = self
            .seen
            .insert((raw.kind.clone(), name.clone()), raw.origin.clone())
        {
            self.warnings.push(format!(
                "warning: {} ({object}): also defined in {previous}, this one is used",
                raw.origin
            ));
        }
        Ok((name, decoded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `text` as stdin (`-f -`), as the CLI would.
    fn read(text: &str) -> Result<(World, Vec<String>), InputError> {
        read_dump(&[PathBuf::from("-")], &mut text.as_bytes())
    }

    #[test]
    fn ip_addresses_and_claims_are_read_beside_plans_kinds() {
        let (world, warnings) = read(
            "apiVersion: networking.k8s.io/v1\nkind: IPAddress\nmetadata: {name: 10.96.0.10}\n\
             spec: {parentRef: {group: '', resource: services, namespace: shop, name: web}}\n---\n\
             apiVersion: svcplane.io/v1alpha1\nkind: AllocationClaim\nmetadata: {name: nodeport-30080}\n\
             spec: {kind: NodePort, value: '30080', service: {namespace: shop, name: web}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: shop}\n",
        )
        .unwrap();
        assert!(world.snapshot.ip_addresses.contains_key("10.96.0.10"));
        assert!(world.claims.contains_key("nodeport-30080"));
        assert_eq!(world.snapshot.services.len(), 1);
        assert_eq!(
            warnings,
            ["warning: <stdin>: document 4 (ConfigMap shop/c): kind not used by explain, skipped"]
        );
    }

    #[test]
    fn a_claim_of_another_version_is_an_error_naming_it() {
        let err = read(
            "apiVersion: svcplane.io/v1\nkind: AllocationClaim\nmetadata: {name: ip-10.0.0.1}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "<stdin>: document 1 (AllocationClaim ip-10.0.0.1): apiVersion svcplane.io/v1 is not supported for AllocationClaim, want svcplane.io/v1alpha1"
        );
    }

    /// Found by the plan/explain fuzz target (controller/tests/fuzz): these two kinds
    /// were decoded without a field path, so the line named the value but not where
    /// it was, unlike every error of `plan`'s kinds.
    #[test]
    fn an_undecodable_ip_address_or_claim_names_the_field() {
        let err = read(
            "apiVersion: networking.k8s.io/v1\nkind: IPAddress\nmetadata: {name: 10.96.41.17}\n\
             spec: {parentRef: {group: false, resource: services, name: web}}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "<stdin>: document 1 (IPAddress 10.96.41.17): spec.parentRef.group: invalid type: boolean `false`, expected a string"
        );
        let err = read(
            "apiVersion: svcplane.io/v1alpha1\nkind: AllocationClaim\nmetadata: {name: nodeport-30080}\n\
             spec: {kind: NodePort, value: 30080, service: [web]}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("<stdin>: document 1 (AllocationClaim nodeport-30080): spec."),
            "{err}"
        );
    }
}
