//! Putting fixture-built objects into a real API server.
//!
//! The controller's fixtures build objects as an API server would store them
//! (uids, creation times, status). A real server assigns identity itself and
//! only takes status through the status subresource, so these helpers strip
//! what it owns, create, then write status, and delete Pods that the fixture
//! marked as terminating (with a long grace period, so they stay terminating:
//! no kubelet will ever confirm the deletion).

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;

/// Image used for containers that have none (never pulled: there is no kubelet).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// How many creates run at once.
const CONCURRENCY: usize = 16;

fn fresh_meta(meta: &ObjectMeta, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        generate_name: meta.generate_name.clone(),
        namespace: namespace.map(str::to_owned),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        ..ObjectMeta::default()
    }
}

/// The per-test name of a cluster-scoped Node (Nodes are shared by every test
/// on a cluster, so they carry the test namespace as a prefix).
pub fn node_name(namespace: &str, name: &str) -> String {
    format!("{namespace}-{name}")
}

/// Creates a Node (renamed with [`node_name`]) and writes its status.
pub async fn create_node(client: &Client, namespace: &str, node: &Node) -> anyhow::Result<Node> {
    let api = Api::<Node>::all(client.clone());
    let name = node_name(namespace, node.metadata.name.as_deref().unwrap_or("node"));
    let mut meta = fresh_meta(&node.metadata, None);
    meta.name = Some(name.clone());
    let body = Node {
        metadata: meta,
        spec: node.spec.clone(),
        status: None,
    };
    api.create(&PostParams::default(), &body)
        .await
        .with_context(|| format!("creating node {name}"))?;
    let status = serde_json::json!({ "status": node.status });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("writing status of node {name}"))
}

/// Creates a Service in `namespace`. Fixture ClusterIPs other than `None` are
/// dropped so the API server allocates (tests share the service range), and a
/// two-family Service asks for dual-stack.
pub async fn create_service(
    client: &Client,
    namespace: &str,
    service: &Service,
) -> anyhow::Result<Service> {
    let mut spec = service.spec.clone().unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    if !headless {
        spec.cluster_ip = None;
        spec.cluster_ips = None;
    }
    if spec.ip_families.as_ref().is_some_and(|f| f.len() > 1) && spec.ip_family_policy.is_none() {
        spec.ip_family_policy = Some("RequireDualStack".into());
    }
    let body = Service {
        metadata: fresh_meta(&service.metadata, Some(namespace)),
        spec: Some(spec),
        status: None,
    };
    Api::<Service>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &body)
        .await
        .with_context(|| format!("creating service {:?}", service.metadata.name))
}

/// Creates a Pod in `namespace` with its Node renamed by [`node_name`], writes
/// its status through the status subresource, and deletes it gracefully when
/// the fixture has a deletionTimestamp.
pub async fn create_pod(client: &Client, namespace: &str, pod: &Pod) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut spec = pod.spec.clone().unwrap_or_default();
    if let Some(node) = spec.node_name.as_mut() {
        *node = node_name(namespace, node);
    }
    for c in &mut spec.containers {
        if c.image.is_none() {
            c.image = Some(PAUSE_IMAGE.into());
        }
    }
    let body = Pod {
        metadata: fresh_meta(&pod.metadata, Some(namespace)),
        spec: Some(spec),
        status: None,
    };
    api.create(&PostParams::default(), &body)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    if let Some(status) = &pod.status {
        let patch = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("writing status of pod {name}"))?;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        let dp = DeleteParams {
            grace_period_seconds: Some(3600),
            ..DeleteParams::default()
        };
        api.delete(&name, &dp)
            .await
            .with_context(|| format!("deleting pod {name}"))?;
    }
    Ok(())
}

/// Creates many Pods, a few at a time.
pub async fn create_pods(client: &Client, namespace: &str, pods: &[Pod]) -> anyhow::Result<()> {
    futures::stream::iter(pods)
        .map(|p| create_pod(client, namespace, p))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

/// The EndpointSlices stored for Service `name` (by the service-name label,
/// so mirrored slices too).
pub async fn list_slices(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<EndpointSlice>> {
    let api = Api::<EndpointSlice>::namespaced(client.clone(), namespace);
    let mut items = api
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={name}")))
        .await
        .with_context(|| format!("listing endpointslices of {name}"))?
        .items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(items)
}

/// The Endpoints object `name`, if stored.
pub async fn get_endpoints(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Endpoints>> {
    Api::<Endpoints>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("getting endpoints {name}"))
}

/// Creates the ServiceAccount `name` in `namespace` (if missing) and returns a token
/// for it from the TokenRequest API, as a pod's projected token would be.
pub async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    if accounts.get_opt(name).await?.is_none() {
        let mut sa = ServiceAccount::default();
        sa.metadata.name = Some(name.to_owned());
        accounts.create(&PostParams::default(), &sa).await?;
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    issued
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| anyhow::anyhow!("TokenRequest for {namespace}/{name} returned no token"))
}
