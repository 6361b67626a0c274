//! JSON Patch for the values a mutation assigned.
//!
//! The patch addresses the raw `request.object`, never a re-serialised typed Service:
//! k8s-openapi drops fields it does not know, and a "replace the whole spec" patch would
//! silently delete them. Every op is an `add` on one allocation-owned member (`add`
//! replaces an existing member, so it also overwrites `""`/`0`/`null` placeholders), and
//! only values this request was assigned are written (WH-13.1): a value
//! the client omitted on UPDATE is copied from the old object by the API server itself.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Value, json};
use svcplane_allocator::Claim;
use svcplane_allocator::range::parse_ip_sloppy;
use svcplane_allocator::view::SvcView;

/// Which kind of write produced `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// CREATE: every value that differs from the request was assigned now.
    Create,
    /// UPDATE: `after` also carries values copied from the old object; only those in
    /// the transaction's `allocated` list are new.
    Update,
}

/// Ops turning the raw object (`before` is its typed view) into one carrying the values
/// `after` was assigned. `allocated` is the transaction's list of newly taken values.
pub(crate) fn allocation_patch(
    raw: &Value,
    before: &SvcView,
    after: &SvcView,
    allocated: &[Claim],
    mode: Mode,
) -> Patch {
    let mut ops: Vec<PatchOperation> = Vec::new();
    let is_new = |c: Claim| mode == Mode::Create || allocated.contains(&c);

    // ClusterIP fields move together: once we pick an address, clusterIP, clusterIPs,
    // ipFamilies and ipFamilyPolicy must be consistent in the patched object or the API
    // server's own family resolution rejects it (e.g. two IPs under a defaulted
    // SingleStack policy). If every address came from the client, the API server derives
    // the same families itself and nothing is written.
    let requested = requested_ips(before);
    let picked_ip = allocated.iter().any(|c| match c {
        Claim::Ip(ip) => !requested.contains(ip),
        Claim::NodePort(_) => false,
    });
    if picked_ip {
        if after.cluster_ip != before.cluster_ip && !after.cluster_ip.is_empty() {
            add(&mut ops, &["spec", "clusterIP"], json!(after.cluster_ip));
        }
        if after.cluster_ips != before.cluster_ips && !after.cluster_ips.is_empty() {
            add(&mut ops, &["spec", "clusterIPs"], json!(after.cluster_ips));
        }
        if after.ip_families != before.ip_families && !after.ip_families.is_empty() {
            add(&mut ops, &["spec", "ipFamilies"], json!(after.ip_families));
        }
        if after.ip_family_policy != before.ip_family_policy
            && let Some(p) = &after.ip_family_policy
        {
            add(&mut ops, &["spec", "ipFamilyPolicy"], json!(p));
        }
    }

    for (i, (a, b)) in after.ports.iter().zip(&before.ports).enumerate() {
        let np = a.node_port;
        if np != 0 && np != b.node_port && is_new(Claim::NodePort(np)) {
            let idx = i.to_string();
            add(&mut ops, &["spec", "ports", &idx, "nodePort"], json!(np));
        }
    }

    let hc = after.health_check_node_port;
    if hc != 0 && hc != before.health_check_node_port && is_new(Claim::NodePort(hc)) {
        add(&mut ops, &["spec", "healthCheckNodePort"], json!(hc));
    }

    // A review object always has a spec (scheme defaulting creates one), but an op on a
    // missing parent fails the whole patch in the API server, so guard anyway.
    if !ops.is_empty() && !raw.get("spec").is_some_and(Value::is_object) {
        ops.insert(
            0,
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["spec"]),
                value: json!({}),
            }),
        );
    }
    Patch(ops)
}

/// The addresses the client asked for: `clusterIPs`, or `clusterIP` for old clients that
/// only set the singular field. Unparsable entries are ignored (they fail validation).
fn requested_ips(v: &SvcView) -> Vec<std::net::IpAddr> {
    let list: &[String] = if v.cluster_ips.is_empty() {
        std::slice::from_ref(&v.cluster_ip)
    } else {
        &v.cluster_ips
    };
    list.iter().filter_map(|s| parse_ip_sloppy(s)).collect()
}

fn add(ops: &mut Vec<PatchOperation>, path: &[&str], value: Value) {
    ops.push(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    }));
}
