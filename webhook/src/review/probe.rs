//! The install check's probe: proof that *svcplane* answered a dry run.
//!
//! `svcplane check` (the chart's post-install hook and `helm test`) creates, as a
//! server-side dry run, a Service labelled [`PROBE_LABEL`] in the release namespace.
//! The chart's webhook configurations skip the release namespace except for such
//! probes. When svcplane's mutating webhook answers a probe, it adds the annotation
//! [`PROBE_ANSWERED_BY`] (the answering replica) to the dry-run result; a result
//! without it means the API server admitted the Service without svcplane — the webhook
//! is not reachable and `failurePolicy: Ignore` hid that. Nothing is ever written: only
//! dry runs are annotated, so a real Service carrying the label is handled like any
//! other.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use serde_json::{Value, json};

/// Label key (any value) marking a probe Service.
pub const PROBE_LABEL: &str = "svcplane.io/probe";

/// Annotation the webhook adds to a dry-run probe: the replica that answered.
pub const PROBE_ANSWERED_BY: &str = "svcplane.io/probe-answered-by";

/// Does the raw object carry the probe label?
pub fn is_probe(object: &Value) -> bool {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| labels.contains_key(PROBE_LABEL))
}

/// The patch ops that mark a dry-run probe as answered by `identity`; none for
/// anything else (a real write, or a Service without the label).
pub fn probe_ops(object: &Value, dry_run: bool, identity: &str) -> Vec<PatchOperation> {
    if !dry_run || !is_probe(object) {
        return Vec::new();
    }
    let add = |tokens: Vec<&str>, value: Value| {
        PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(tokens),
            value,
        })
    };
    match object.pointer("/metadata/annotations") {
        Some(Value::Object(_)) => vec![add(
            vec!["metadata", "annotations", PROBE_ANSWERED_BY],
            json!(identity),
        )],
        // Absent or null: add the whole map (an op below a missing member fails).
        _ => vec![add(
            vec!["metadata", "annotations"],
            json!({ PROBE_ANSWERED_BY: identity }),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patched(object: &Value, dry_run: bool) -> Value {
        let mut doc = object.clone();
        json_patch::patch(&mut doc, &probe_ops(object, dry_run, "svcplane-abc")).unwrap();
        doc
    }

    #[test]
    fn a_dry_run_probe_is_annotated_with_the_answering_replica() {
        let without =
            json!({"metadata": {"generateName": "svcplane-check-", "labels": {PROBE_LABEL: ""}}});
        assert_eq!(
            patched(&without, true)["metadata"]["annotations"][PROBE_ANSWERED_BY],
            "svcplane-abc"
        );
        let with = json!({"metadata": {"labels": {PROBE_LABEL: "x"}, "annotations": {"a": "b"}}});
        let doc = patched(&with, true);
        assert_eq!(
            doc["metadata"]["annotations"][PROBE_ANSWERED_BY],
            "svcplane-abc"
        );
        assert_eq!(
            doc["metadata"]["annotations"]["a"], "b",
            "other annotations kept"
        );
        let null = json!({"metadata": {"labels": {PROBE_LABEL: ""}, "annotations": null}});
        assert_eq!(
            patched(&null, true)["metadata"]["annotations"][PROBE_ANSWERED_BY],
            "svcplane-abc"
        );
    }

    #[test]
    fn real_writes_and_unlabelled_services_are_never_annotated() {
        let probe = json!({"metadata": {"labels": {PROBE_LABEL: ""}}});
        assert!(probe_ops(&probe, false, "x").is_empty(), "only dry runs");
        let other = json!({"metadata": {"labels": {"app": "web"}}});
        assert!(probe_ops(&other, true, "x").is_empty());
        assert!(probe_ops(&json!({"metadata": {}}), true, "x").is_empty());
    }
}
