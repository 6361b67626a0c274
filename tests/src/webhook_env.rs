//! Running svcplane's webhook next to a real API server for the e2e suites.
//!
//! Certificates from rcgen (a CA plus a serving certificate for 127.0.0.1), the
//! AllocationClaim CRD, the webhook server itself in-process on a loopback port, and
//! Mutating-/ValidatingWebhookConfigurations that send only one namespace's Services
//! to it — so suites sharing a harness never see each other's webhook.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, PostParams};
use kube::{Client, CustomResourceExt};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use svcplane_webhook::claim::AllocationClaim;

/// PEM files of a throwaway CA and a serving certificate signed by it.
#[derive(Debug, Clone)]
pub struct Certs {
    /// The CA certificate (PEM), for `caBundle` and clients.
    pub ca_pem: String,
    /// Serving certificate chain file.
    pub cert_file: PathBuf,
    /// Serving key file.
    pub key_file: PathBuf,
}

/// Write a CA and a serving certificate for `sans` (DNS names or IP literals) into
/// `dir`.
pub fn certs(dir: &Path, sans: &[&str]) -> anyhow::Result<Certs> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "svcplane-test-ca");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    let cert = params.signed_by(&key, &ca)?;
    let cert_file = dir.join("tls.crt");
    let key_file = dir.join("tls.key");
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    Ok(Certs {
        ca_pem: ca.pem(),
        cert_file,
        key_file,
    })
}

/// Create the AllocationClaim CRD (if absent) and wait until it is served.
pub async fn install_claim_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = AllocationClaim::crd();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("creating the AllocationClaim CRD"),
    }
    let claims: Api<AllocationClaim> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match claims.list(&Default::default()).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e).context("the AllocationClaim CRD was never served");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Names of the webhooks registered by [`register_webhooks`].
pub const MUTATE_WEBHOOK: &str = "mutate.svcplane.io";
/// See [`MUTATE_WEBHOOK`].
pub const VALIDATE_WEBHOOK: &str = "validate.svcplane.io";
/// Services carrying this label skip the mutating webhook (to reach the validating
/// one with a value the mutating one would already refuse).
pub const SKIP_MUTATE_LABEL: &str = "e2e.svcplane.io/skip-mutate";

fn rules() -> Vec<RuleWithOperations> {
    vec![RuleWithOperations {
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec!["services".into()]),
        scope: Some("Namespaced".into()),
    }]
}

fn only_namespace(ns: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([("kubernetes.io/metadata.name".to_owned(), ns.to_owned())].into()),
        ..LabelSelector::default()
    }
}

fn client_config(base_url: &str, path: &str, ca_pem: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        url: Some(format!("{base_url}{path}")),
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        ..WebhookClientConfig::default()
    }
}

/// Register both webhook configurations (named after `ns`) for Services in `ns`,
/// calling `base_url` (e.g. `https://127.0.0.1:9443`).
pub async fn register_webhooks(
    client: &Client,
    ns: &str,
    base_url: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let mutating = MutatingWebhookConfiguration {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("svcplane-{ns}")),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: MUTATE_WEBHOOK.into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "NoneOnDryRun".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(5),
            client_config: client_config(base_url, "/mutate-services", ca_pem),
            namespace_selector: Some(only_namespace(ns)),
            object_selector: Some(LabelSelector {
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: SKIP_MUTATE_LABEL.into(),
                        operator: "DoesNotExist".into(),
                        values: None,
                    },
                ]),
                ..LabelSelector::default()
            }),
            rules: Some(rules()),
            ..MutatingWebhook::default()
        }]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("svcplane-{ns}")),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: VALIDATE_WEBHOOK.into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(5),
            client_config: client_config(base_url, "/validate-services", ca_pem),
            namespace_selector: Some(only_namespace(ns)),
            rules: Some(rules()),
            ..ValidatingWebhook::default()
        }]),
    };
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .context("creating the MutatingWebhookConfiguration")?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .context("creating the ValidatingWebhookConfiguration")?;
    Ok(())
}

/// Run upstream kubectl (built into the envtest harness) with `args`, feeding `stdin`.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: &str) -> anyhow::Result<Output> {
    use std::io::Write;
    let bin = crate::envtest::harness_bin();
    if !bin.exists() {
        bail!("kubectl needs the envtest harness at {}", bin.display());
    }
    let mut child = Command::new(&bin)
        .arg("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} kubectl", bin.display()))?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    child.wait_with_output().context("running kubectl")
}

/// svcplane's webhook as `svcplane webhook` runs it, in this process on a loopback
/// port with rcgen certificates (CA in `certs.ca_pem`), ready when returned.
#[derive(Debug)]
pub struct LocalWebhook {
    pub started: svcplane_webhook::shell::Started,
    pub running: svcplane_webhook::server::Running,
    pub certs: Certs,
    pub cancel: tokio_util::sync::CancellationToken,
    dir: std::path::PathBuf,
}

impl LocalWebhook {
    /// Starts the webhook for `ranges` (ClusterIP CIDRs) and `node_ports`, claims
    /// through `client`, certificates in a fresh temporary directory named after
    /// `label`.
    pub async fn start(
        client: &Client,
        ranges: &str,
        node_ports: &str,
        seed: u64,
        label: &str,
    ) -> anyhow::Result<Self> {
        use svcplane_webhook::handler::AdmissionHandler;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cancel = tokio_util::sync::CancellationToken::new();
        let allocator = svcplane_allocator::AllocatorConfig::from_flags(ranges, node_ports)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = svcplane_webhook::shell::start(
            client.clone(),
            svcplane_webhook::shell::WebhookOptions {
                allocator,
                seed,
                retain_released_values: std::time::Duration::ZERO,
                repair: svcplane_webhook::shell::repair::RepairConfig {
                    interval: Duration::from_secs(3600),
                    grace: Duration::from_secs(60),
                },
                metrics: Default::default(),
                services: Default::default(),
                explicit_ranges: None,
                follow_service_cidrs: false,
                identity: "svcplane-test".into(),
            },
            cancel.clone(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let dir = std::env::temp_dir().join(format!("{label}-{}", std::process::id()));
        let certs = certs(&dir, &["127.0.0.1"])?;
        let running = svcplane_webhook::server::bind(
            started.webhook.clone(),
            svcplane_webhook::server::ServerConfig {
                bind_address: "127.0.0.1:0".parse()?,
                certs: svcplane_webhook::server::Certs::Files {
                    cert_file: certs.cert_file.clone(),
                    key_file: certs.key_file.clone(),
                },
                request_timeout: Duration::from_secs(4),
                reload_interval: Duration::from_secs(30),
                drain: Duration::from_secs(1),
            },
            cancel.clone(),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !started.webhook.is_ready() {
            anyhow::ensure!(Instant::now() < deadline, "webhook never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self {
            started,
            running,
            certs,
            cancel,
            dir,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.running.local_addr)
    }

    /// Stops the server (after its drain) and removes the certificates.
    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = self.running.wait().await;
        let _ = std::fs::remove_dir_all(self.dir);
    }
}

/// The objects of a multi-document YAML text (a rendered chart); empty documents and
/// comments-only ones are left out.
pub fn yaml_documents(text: &str) -> Vec<serde_json::Value> {
    text.split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
        .filter(serde_json::Value::is_object)
        .collect()
}

/// Objects as one multi-document text `kubectl apply -f -` reads (JSON is YAML).
pub fn as_yaml(docs: &[serde_json::Value]) -> String {
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// [`kubectl`] that must succeed: its stdout, or a panic with both outputs.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: &str) -> String {
    let out = kubectl(kubeconfig, args, stdin)
        .unwrap_or_else(|e| panic!("kubectl {args:?} could not run: {e:#}"));
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the suites that run the shipped binary behind webhook configurations share:
/// the envtest cluster (one the API server can call back from), the binary, an admin
/// client, serving certificates for 127.0.0.1 and a scratch directory. Holds the
/// suite's serial lock for as long as it lives: those suites act on cluster-wide
/// objects (claims, ServiceCIDRs, webhook configurations).
#[allow(missing_debug_implementations)] // kube::Client is not Debug
pub struct BinaryEnv {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    pub bin: PathBuf,
    pub cluster: crate::envtest::Cluster,
    pub client: Client,
    pub certs: Certs,
    pub dir: PathBuf,
}

impl BinaryEnv {
    /// `None` (the test skips) when the harness or the binary is unavailable, or the
    /// API server cannot reach 127.0.0.1.
    pub async fn new(test: &str, serial: &'static tokio::sync::Mutex<()>) -> Option<Self> {
        let guard = serial.lock().await;
        let cluster = crate::envtest::cluster(crate::envtest::Flavor::ApiServerOnly, test)?;
        if !crate::envtest::reaches_loopback(&cluster, test) {
            return None;
        }
        let bin = crate::binary::svcplane_bin_or_skip(test)?;
        let client = cluster
            .client()
            .await
            .unwrap_or_else(|e| panic!("{test}: a client of the harness: {e:#}"));
        let dir = std::env::temp_dir().join(format!("{test}-{}", std::process::id()));
        let certs = certs(&dir, &["127.0.0.1"])
            .unwrap_or_else(|e| panic!("{test}: test certificates: {e:#}"));
        Some(Self {
            _serial: guard,
            bin,
            cluster,
            client,
            certs,
            dir,
        })
    }
}
