//! Self-managed certificates: the Secret, the serving pair and the `caBundle`.
//!
//! [`crate::certs`] decides; this module reads and writes. Every replica runs the same
//! loop, every `interval`:
//! 1. read the Secret; create it if absent (409: another replica was first — read
//!    theirs); when [`crate::certs::next`] wants a change, update it with the
//!    `resourceVersion` just read (409: another replica changed it — read and decide
//!    again). So each change has exactly one writer and all replicas converge on the
//!    Secret's contents: there are never two CAs;
//! 2. serve the Secret's pair (swapped in place, connections in flight keep theirs);
//! 3. make the `caBundle` of every webhook in the Mutating- and
//!    ValidatingWebhookConfiguration named [`SelfManaged::configuration`] equal to the
//!    Secret's bundle (a JSON patch with a `test` of each webhook's name; only
//!    `get`/`patch` on those two names are needed). A configuration that does not
//!    exist is left alone — svcplane never creates one, so deleting them (the emergency
//!    switch) sticks.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::certs::{self, Material, Settings};
use crate::retry::{Backoff, Outage, wait};
use crate::tls::CertReloader;

/// Field manager of svcplane's writes here.
const MANAGER: &str = "svcplane";
/// How many read-decide-write rounds one pass tries before waiting for the next tick.
const MAX_ROUNDS: usize = 5;

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfManagedError {
    /// An API call failed.
    #[error("{action} Secret {namespace}/{name}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Issuing failed (should not happen with valid hosts).
    #[error(transparent)]
    Certs(#[from] certs::CertError),
    /// Other replicas kept changing the Secret.
    #[error("Secret {namespace}/{name} changed under every one of {MAX_ROUNDS} attempts")]
    Contended {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

/// The settings of one replica's certificate loop.
#[derive(Clone)]
pub struct SelfManaged {
    client: Client,
    /// The Secret's namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
    /// The webhook configurations (Mutating and Validating, both this name) whose
    /// `caBundle` follows the Secret; `None`: none.
    pub configuration: Option<String>,
    /// What the certificates must be.
    pub settings: Settings,
}

impl std::fmt::Debug for SelfManaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfManaged")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("configuration", &self.configuration)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn material_of(secret: &Secret) -> Option<Material> {
    let data = secret.data.as_ref()?;
    Material::from_data(|k| data.get(k).map(|b| b.0.clone()))
}

fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

impl SelfManaged {
    /// A loop for the Secret `namespace/name`.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        configuration: Option<String>,
        settings: Settings,
    ) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            name: name.into(),
            configuration: configuration.filter(|c| !c.is_empty()),
            settings,
        }
    }

    /// A label for messages: `secret <ns>/<name>`.
    pub fn label(&self) -> String {
        format!("secret {}/{}", self.namespace, self.name)
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> SelfManagedError {
        SelfManagedError::Api {
            action,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn secret(&self, m: &Material, base: Option<&Secret>) -> Secret {
        let data: BTreeMap<String, ByteString> = m
            .to_data()
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect();
        let mut metadata = base
            .map(|s| s.metadata.clone())
            .unwrap_or_else(|| ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            });
        metadata.managed_fields = None;
        metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("app.kubernetes.io/managed-by".into(), MANAGER.into());
        Secret {
            metadata,
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Secret::default()
        }
    }

    /// One pass over the Secret at time `now` (Unix seconds): create or update it if
    /// [`certs::next`] says so; the material it holds afterwards.
    pub async fn ensure_at(&self, now: i64) -> Result<Material, SelfManagedError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        for _ in 0..MAX_ROUNDS {
            let stored = api
                .get_opt(&self.name)
                .await
                .map_err(|e| self.api_error("reading", e))?;
            let current = stored.as_ref().and_then(material_of);
            let Some((next, why)) = certs::next(current.as_ref(), &self.settings, now)? else {
                if let Some(m) = current {
                    return Ok(m);
                }
                // `next` always acts on missing material; unreachable in practice.
                continue;
            };
            let pp = PostParams {
                field_manager: Some(MANAGER.into()),
                ..PostParams::default()
            };
            let written = match &stored {
                None => api.create(&pp, &self.secret(&next, None)).await,
                Some(s) => {
                    api.replace(&self.name, &pp, &self.secret(&next, Some(s)))
                        .await
                }
            };
            match written {
                Ok(_) => {
                    info!(secret = %self.label(), reason = %why, "wrote the webhook certificates");
                    return Ok(next);
                }
                // Another replica created or changed it first: read theirs, decide again.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    debug!(secret = %self.label(), "another replica wrote the certificates first");
                }
                Err(e) => return Err(self.api_error("writing", e)),
            }
        }
        Err(SelfManagedError::Contended {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        })
    }

    /// [`Self::ensure_at`] now.
    pub async fn ensure(&self) -> Result<Material, SelfManagedError> {
        self.ensure_at(unix_now()).await
    }

    /// Make the configurations' `caBundle` equal to `bundle` (PEM). Returns how many
    /// configurations were patched; absent ones are skipped.
    pub async fn publish(&self, bundle: &str) -> Result<usize, kube::Error> {
        let Some(name) = &self.configuration else {
            return Ok(0);
        };
        let b64 = base64::engine::general_purpose::STANDARD.encode(bundle.as_bytes());
        let mut patched = 0;
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        patched += usize::from(publish_one(&mutating, name, &b64).await?);
        patched += usize::from(publish_one(&validating, name, &b64).await?);
        Ok(patched)
    }

    /// Ensure, serve and publish every `interval` until `cancel`. Failures are logged
    /// (once per distinct message) and retried at the next tick; the last good pair
    /// keeps being served.
    pub async fn run(self, reloader: CertReloader, interval: Duration, cancel: CancellationToken) {
        let mut last_error: Option<String> = None;
        let mut report = |result: Result<(), String>| match result {
            Ok(()) => {
                if last_error.take().is_some() {
                    info!(secret = %self.label(), "certificate loop healthy again");
                }
            }
            Err(e) => {
                if last_error.as_deref() != Some(e.as_str()) {
                    warn!(secret = %self.label(), error = %e, "certificate loop failed; retrying");
                    last_error = Some(e);
                }
            }
        };
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let outcome = async {
                let m = self.ensure().await.map_err(|e| e.to_string())?;
                reloader
                    .install_pem(m.cert.as_bytes(), m.key.as_bytes())
                    .await;
                self.publish(&m.ca_bundle)
                    .await
                    .map_err(|e| format!("publishing the caBundle: {e}"))?;
                Ok(())
            }
            .await;
            report(outcome);
        }
    }
}

/// Patch one configuration's webhooks to `b64`; `false` if it is absent or current.
async fn publish_one<K>(api: &Api<K>, name: &str, b64: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Some(config) = api.get_opt(name).await? else {
        debug!(
            configuration = name,
            "webhook configuration absent; not publishing its caBundle"
        );
        return Ok(false);
    };
    let value = serde_json::to_value(&config).map_err(kube::Error::SerdeError)?;
    let ops = bundle_ops(&value, b64);
    if ops.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Json::<()>(patch)).await?;
    info!(
        configuration = name,
        "published the CA bundle to the webhook configuration"
    );
    Ok(true)
}

/// The JSON patch ops (as JSON) setting every webhook's `caBundle` to `b64` in the
/// configuration `config`: a `test` of the webhook's name guards each index against a
/// concurrent reorder. Empty when every `caBundle` already matches.
pub fn bundle_ops(config: &Value, b64: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    let Some(hooks) = config.get("webhooks").and_then(Value::as_array) else {
        return ops;
    };
    for (i, w) in hooks.iter().enumerate() {
        if w.pointer("/clientConfig/caBundle").and_then(Value::as_str) == Some(b64) {
            continue;
        }
        let Some(name) = w.get("name").and_then(Value::as_str) else {
            continue;
        };
        ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}));
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": b64}));
    }
    ops
}

/// The first pass (retried with backoff until it succeeds or `cancel` fires), then the
/// loop in the background: the reloader to serve from, and the loop's task.
pub async fn start(
    managed: SelfManaged,
    interval: Duration,
    cancel: CancellationToken,
) -> Option<(CertReloader, tokio::task::JoinHandle<()>)> {
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    let material = loop {
        match managed.ensure().await {
            Ok(m) => {
                outage.recovered(&managed.label(), "setting up the webhook certificates");
                break m;
            }
            Err(e) => {
                let delay = backoff.next_delay();
                outage.failed(
                    &managed.label(),
                    "cannot set up the webhook certificates",
                    &e,
                    delay,
                );
                if !wait(delay, &cancel).await {
                    return None;
                }
            }
        }
    };
    if let Err(e) = managed.publish(&material.ca_bundle).await {
        warn!(secret = %managed.label(), error = %e, "cannot publish the caBundle yet; retrying in the background");
    }
    let reloader = match CertReloader::from_pem(
        &managed.label(),
        material.cert.as_bytes(),
        material.key.as_bytes(),
    ) {
        Ok(r) => r,
        Err(e) => {
            // The material was just issued or verified by `certs::next`; unusable here
            // would be a bug, and serving nothing is the only safe answer.
            warn!(secret = %managed.label(), error = %e, "the webhook certificate is unusable");
            return None;
        }
    };
    let task = tokio::spawn(managed.run(reloader.clone(), interval, cancel));
    Some((reloader, task))
}

/// Where a webhook process gets its serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertPlan {
    /// PEM files, re-read every reload interval.
    Files {
        /// `--tls-cert-file`.
        cert: std::path::PathBuf,
        /// `--tls-private-key-file`.
        key: std::path::PathBuf,
    },
    /// Self-managed in a Secret ([`SelfManaged`]).
    SelfManaged {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// Webhook configurations to keep the `caBundle` of (`None`: none).
        configuration: Option<String>,
        /// What the certificates must be.
        settings: Settings,
    },
}

/// The server's certificate source for `plan`: files as they are, or the first pass
/// of the self-managed loop (which then runs in the background until `cancel`).
/// `None` when `cancel` fired before a certificate existed.
pub async fn prepare(
    plan: &CertPlan,
    client: &Client,
    interval: Duration,
    cancel: CancellationToken,
) -> Option<(crate::server::Certs, Option<tokio::task::JoinHandle<()>>)> {
    match plan {
        CertPlan::Files { cert, key } => Some((
            crate::server::Certs::Files {
                cert_file: cert.clone(),
                key_file: key.clone(),
            },
            None,
        )),
        CertPlan::SelfManaged {
            namespace,
            name,
            configuration,
            settings,
        } => {
            let managed = SelfManaged::new(
                client.clone(),
                namespace.clone(),
                name.clone(),
                configuration.clone(),
                settings.clone(),
            );
            let (reloader, task) = start(managed, interval, cancel).await?;
            Some((crate::server::Certs::Loaded(reloader), Some(task)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_ops_set_every_stale_ca_bundle_guarded_by_the_webhook_name() {
        let config = json!({"webhooks": [
            {"name": "mutate.services.svcplane.io", "clientConfig": {"service": {"name": "s"}}},
            {"name": "second", "clientConfig": {"caBundle": "Q0E="}},
        ]});
        let ops = bundle_ops(&config, "Q0E=");
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/webhooks/0/name", "value": "mutate.services.svcplane.io"}),
                json!({"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="}),
            ]
        );
        let mut doc = config.clone();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        assert!(
            bundle_ops(&doc, "Q0E=").is_empty(),
            "current: nothing to do"
        );
        assert!(bundle_ops(&json!({}), "x").is_empty());
    }
}
