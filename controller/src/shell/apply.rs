//! Carrying writes out: the one place API errors are classified.
//!
//! Every create, update and delete the controllers make goes through [`Writer`], which
//! counts it by verb and resource, maps the API's answer to a [`WriteError`] whose
//! [`WriteErrorKind`] tells the caller what to do (409: re-read and retry; 404 on
//! delete: done; `NamespaceTerminating`: stop quietly; 422: our bug, logged with the
//! object; 429/5xx: retry with backoff), and never panics on a server's answer.

use std::fmt;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::metrics::Metrics;

/// What a failed write means for the sync that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteErrorKind {
    /// 409: someone else wrote first (or our cache was behind); re-read and retry.
    Conflict,
    /// 403 with cause `NamespaceTerminating`: creates into a dying namespace are
    /// dropped silently (ES-2.9, EP-4.6).
    NamespaceTerminating,
    /// 404 on update: the object went away; the next sync re-reads.
    NotFound,
    /// 422 (or 400): the API server refused the object. A bug in svcplane or input
    /// the reconcilers did not defend against; logged with the object.
    Invalid,
    /// 429, 5xx, timeouts, connection failures: retry with backoff.
    Transient,
    /// Anything else (401/403 without the cause above, ...).
    Other,
}

impl WriteErrorKind {
    /// A short, stable label for metrics and logs.
    pub(crate) fn label(self) -> &'static str {
        match self {
            WriteErrorKind::Conflict => "conflict",
            WriteErrorKind::NamespaceTerminating => "namespace_terminating",
            WriteErrorKind::NotFound => "not_found",
            WriteErrorKind::Invalid => "invalid",
            WriteErrorKind::Transient => "transient",
            WriteErrorKind::Other => "other",
        }
    }
}

/// A failed write, naming the verb and the object.
#[derive(Debug, thiserror::Error)]
pub(crate) struct WriteError {
    pub kind: WriteErrorKind,
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The API server's own message is what operators search for.
        let detail = match &self.source {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        };
        write!(
            f,
            "{} {} {}/{}: {detail}",
            self.verb, self.resource, self.namespace, self.name
        )
    }
}

/// Classifies an API error.
pub(crate) fn classify(error: &kube::Error, verb: &str) -> WriteErrorKind {
    let kube::Error::Api(status) = error else {
        return WriteErrorKind::Transient;
    };
    let terminating = status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"));
    match status.code {
        409 => WriteErrorKind::Conflict,
        403 if terminating => WriteErrorKind::NamespaceTerminating,
        404 if verb != "create" => WriteErrorKind::NotFound,
        400 | 422 => WriteErrorKind::Invalid,
        429 | 500..=599 => WriteErrorKind::Transient,
        _ => WriteErrorKind::Other,
    }
}

/// Makes the controllers' writes and counts them.
#[derive(Clone)]
pub(crate) struct Writer {
    client: Client,
    metrics: Metrics,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    pub(crate) fn new(client: Client, metrics: Metrics) -> Self {
        Self { client, metrics }
    }

    fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn fail(
        &self,
        verb: &'static str,
        resource: &'static str,
        namespace: &str,
        name: &str,
        source: kube::Error,
    ) -> WriteError {
        let kind = classify(&source, verb);
        self.metrics.api_write_error(verb, resource, kind.label());
        WriteError {
            kind,
            verb,
            resource,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }
    }

    /// POST `obj` (named, or with `generateName`); returns the stored object.
    pub(crate) async fn create<K>(
        &self,
        resource: &'static str,
        namespace: &str,
        obj: &K,
    ) -> Result<K, WriteError>
    where
        K: Resource<Scope = NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + fmt::Debug,
        K::DynamicType: Default,
    {
        self.metrics.api_write("create", resource);
        let name = obj
            .meta()
            .name
            .clone()
            .or_else(|| obj.meta().generate_name.clone())
            .unwrap_or_default();
        self.api::<K>(namespace)
            .create(&PostParams::default(), obj)
            .await
            .map_err(|e| self.fail("create", resource, namespace, &name, e))
    }

    /// PUT `obj` (its resourceVersion, if any, is the precondition).
    pub(crate) async fn replace<K>(
        &self,
        resource: &'static str,
        namespace: &str,
        obj: &K,
    ) -> Result<K, WriteError>
    where
        K: Resource<Scope = NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + fmt::Debug,
        K::DynamicType: Default,
    {
        self.metrics.api_write("update", resource);
        let name = obj.meta().name.clone().unwrap_or_default();
        self.api::<K>(namespace)
            .replace(&name, &PostParams::default(), obj)
            .await
            .map_err(|e| self.fail("update", resource, namespace, &name, e))
    }

    /// DELETE with an optional uid precondition; a 404 counts as success.
    pub(crate) async fn delete<K>(
        &self,
        resource: &'static str,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), WriteError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + fmt::Debug,
        K::DynamicType: Default,
    {
        self.metrics.api_write("delete", resource);
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api::<K>(namespace).delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(self.fail("delete", resource, namespace, name, e)),
        }
    }

    /// PATCH a cluster-scoped object (or its status); a 404 counts as success (the
    /// object is gone, nothing left to change).
    pub(crate) async fn patch_cluster<K>(
        &self,
        resource: &'static str,
        name: &str,
        params: &PatchParams,
        patch: &Patch<serde_json::Value>,
        status: bool,
    ) -> Result<(), WriteError>
    where
        K: Resource<Scope = ClusterResourceScope> + Clone + DeserializeOwned + fmt::Debug,
        K::DynamicType: Default,
    {
        self.metrics.api_write("patch", resource);
        let api: Api<K> = Api::all(self.client.clone());
        let result = if status {
            api.patch_status(name, params, patch).await.map(|_| ())
        } else {
            api.patch(name, params, patch).await.map(|_| ())
        };
        match result {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(self.fail("patch", resource, "", name, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, cause: Option<&str>) -> kube::Error {
        let causes: Vec<serde_json::Value> = cause
            .map(|c| serde_json::json!({"reason": c}))
            .into_iter()
            .collect();
        let s: Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "boom", "reason": "Reason", "code": code,
            "details": {"causes": causes},
        }))
        .unwrap();
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn api_errors_are_classified_once() {
        use WriteErrorKind::*;
        assert_eq!(classify(&api(409, None), "update"), Conflict);
        assert_eq!(
            classify(&api(403, Some("NamespaceTerminating")), "create"),
            NamespaceTerminating
        );
        assert_eq!(classify(&api(403, None), "create"), Other);
        assert_eq!(classify(&api(404, None), "update"), NotFound);
        assert_eq!(classify(&api(404, None), "create"), Other);
        assert_eq!(classify(&api(422, None), "create"), Invalid);
        assert_eq!(classify(&api(429, None), "create"), Transient);
        assert_eq!(classify(&api(503, None), "delete"), Transient);
        assert_eq!(
            classify(&kube::Error::LinesCodecMaxLineLengthExceeded, "create"),
            Transient
        );
    }
}
