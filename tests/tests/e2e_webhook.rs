//! svcplane's admission webhook behind a real kube-apiserver (issue 7's e2e suite).
//!
//! The webhook runs in this process on a loopback port, the API server calls it through
//! real Mutating- and ValidatingWebhookConfigurations, and Services are created the way
//! an operator would, with upstream `kubectl` (built into the envtest harness). The
//! webhook's ClusterIP range (10.96.0.0/17) is half the API server's (10.96.0.0/16), so
//! an address the API server would accept can still be one the webhook refuses — that
//! is how the validating path is reached for a value the mutating one never saw.

// Test helpers outside #[test] functions: a failed fixture should panic loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use svcplane_allocator::{AllocatorConfig, Claim};
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::webhook_env::{
    LocalWebhook, MUTATE_WEBHOOK, SKIP_MUTATE_LABEL, VALIDATE_WEBHOOK, install_claim_crd, kubectl,
    register_webhooks,
};
use svcplane_webhook::claim::{AllocationClaim, claim_name};

const WEBHOOK_RANGES: &str = "10.96.0.0/17,fd00:10:96::/112";
const NODE_PORTS: &str = "30000-32767";

fn service_yaml(name: &str, extra_spec: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{port: 80, targetPort: 8080}}]\n{extra_spec}"
    )
}

fn cluster_ip_of(svc: &Service) -> IpAddr {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
        .expect("a ClusterIP")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_assigns_and_refuses_through_a_real_api_server() -> anyhow::Result<()> {
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_webhook") else {
        return Ok(());
    };
    if !envtest::reaches_loopback(&cluster, "e2e_webhook") {
        return Ok(());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = cluster.client().await?;
    install_claim_crd(&client).await?;
    let ns = envtest::create_namespace(&client, "svcplane-e2e-webhook-").await?;

    // The webhook, as `svcplane webhook` runs it.
    let allocator = AllocatorConfig::from_flags(WEBHOOK_RANGES, NODE_PORTS)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let local = LocalWebhook::start(
        &client,
        WEBHOOK_RANGES,
        NODE_PORTS,
        7,
        "svcplane-e2e-webhook",
    )
    .await?;
    register_webhooks(&client, &ns, &local.base_url(), &local.certs.ca_pem).await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let claims: Api<AllocationClaim> = Api::all(client.clone());

    // 1. Out of the webhook's range (inside the API server's): refused by the mutating
    //    webhook with upstream's 422 at spec.clusterIPs. The API server picks the
    //    configuration up asynchronously, so probe until the webhook answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    let refusal = loop {
        i += 1;
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": format!("probe-{i}")},
            "spec": {"clusterIP": "10.96.200.5", "ports": [{"port": 80}]},
        }))?;
        match services.create(&PostParams::default(), &svc).await {
            Err(kube::Error::Api(s)) if s.message.contains("admission webhook") => break s,
            Err(e) => return Err(e.into()),
            Ok(_) => {
                anyhow::ensure!(Instant::now() < deadline, "the webhook was never called");
                services
                    .delete(&format!("probe-{i}"), &DeleteParams::default())
                    .await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(refusal.code, 422, "{refusal:?}");
    assert_eq!(refusal.reason, "Invalid");
    assert!(
        refusal.message.starts_with(&format!("admission webhook \"{MUTATE_WEBHOOK}\" denied the request: Service \"probe-{i}\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.200.5\"]: failed to allocate IP 10.96.200.5: the provided network does not match the current range")),
        "{}",
        refusal.message
    );
    let causes = refusal
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "spec.clusterIPs");
    assert_eq!(causes[0].reason, "FieldValueInvalid");

    // 2. `kubectl create` without a clusterIP: the webhook assigns one from its dynamic
    //    band and claims it.
    let out = kubectl(
        &cluster.kubeconfig,
        &["-n", &ns, "create", "-f", "-"],
        &service_yaml("web", "", ""),
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let web = services.get("web").await?;
    let ip = cluster_ip_of(&web);
    let range = allocator
        .allocators(0)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let v4 = range
        .family(svcplane_allocator::IpFamily::V4)
        .and_then(|f| f.ranges().first().cloned())
        .expect("an IPv4 range");
    assert!(
        v4.in_upper_band(ip),
        "{ip} is not in the webhook's dynamic band"
    );
    let claim = claims.get(&claim_name(Claim::Ip(ip))).await?;
    assert_eq!(claim.spec.service.namespace, ns);
    assert_eq!(claim.spec.service.name, "web");

    // 3. `kubectl create` with a clusterIP outside the configured range: refused. The
    //    API server's own range holds 10.96.200.7, so only the webhook can refuse it;
    //    kubectl renders the 422 exactly as it renders a native one.
    let out = kubectl(
        &cluster.kubeconfig,
        &["-n", &ns, "create", "-f", "-"],
        &service_yaml("outside", "  clusterIP: 10.96.200.7\n", ""),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("The Service \"outside\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.200.7\"]: failed to allocate IP 10.96.200.7: the provided network does not match the current range"),
        "{stderr}"
    );

    // 3b. The same as a server-side dry run: worded as kube-apiserver words its own dry
    //     run (WH-8.7), naming the webhook's range.
    let out = kubectl(
        &cluster.kubeconfig,
        &["-n", &ns, "create", "--dry-run=server", "-f", "-"],
        &service_yaml("outside", "  clusterIP: 10.96.200.7\n", ""),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let want = format!(
        "The Service \"outside\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.200.7\"]: failed to allocate IP 10.96.200.7: the provided IP (10.96.200.7) is not in the valid range. The range of valid IPs is {}",
        v4.cidr()
    );
    assert!(stderr.contains(&want), "{stderr}\nwanted: {want}");

    // 4. A malformed address is reported at spec.clusterIPs[0].
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "garbage"},
        "spec": {"clusterIP": "garbage", "ports": [{"port": 80}]},
    }))?;
    let Err(kube::Error::Api(s)) = services.create(&PostParams::default(), &svc).await else {
        anyhow::bail!("a malformed clusterIP was admitted");
    };
    assert_eq!(s.code, 422, "{s:?}");
    assert!(s.message.contains(MUTATE_WEBHOOK), "{}", s.message);
    let causes = s
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes[0].field, "spec.clusterIPs[0]", "{s:?}");

    // 5. The validating webhook refuses what the API server itself accepted: a value
    //    outside the webhook's range, on a Service the mutating webhook skips.
    let out = kubectl(
        &cluster.kubeconfig,
        &["-n", &ns, "create", "-f", "-"],
        &service_yaml(
            "validated",
            "  clusterIP: 10.96.200.9\n",
            &format!("{SKIP_MUTATE_LABEL}: \"true\""),
        ),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("The Service \"validated\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.200.9\"]: failed to allocate IP 10.96.200.9: the provided network does not match the current range"),
        "{stderr}"
    );
    // The raw answer names the validating webhook.
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "validated2", "labels": {SKIP_MUTATE_LABEL: "true"}},
        "spec": {"clusterIP": "10.96.200.10", "ports": [{"port": 80}]},
    }))?;
    let Err(kube::Error::Api(s)) = services.create(&PostParams::default(), &svc).await else {
        anyhow::bail!("the validating webhook admitted an out-of-range clusterIP");
    };
    assert_eq!(s.code, 422, "{s:?}");
    assert!(
        s.message.starts_with(&format!("admission webhook \"{VALIDATE_WEBHOOK}\" denied the request: Service \"validated2\" is invalid: spec.clusterIPs")),
        "{}",
        s.message
    );

    // 6. A server-side dry run shows real values and leaves no claim.
    let before = claims.list(&Default::default()).await?.items.len();
    let out = kubectl(
        &cluster.kubeconfig,
        &[
            "-n",
            &ns,
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
        ],
        &service_yaml("dry", "  type: NodePort\n", ""),
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dry: Service = serde_json::from_slice(&out.stdout)?;
    let dry_ip = cluster_ip_of(&dry);
    assert!(v4.in_upper_band(dry_ip), "{dry_ip}");
    let dry_port = dry
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p[0].node_port);
    assert!(
        dry_port.is_some_and(|p| (30000..=32767).contains(&p)),
        "{dry_port:?}"
    );
    assert_eq!(claims.list(&Default::default()).await?.items.len(), before);
    assert!(services.get_opt("dry").await?.is_none());

    // 7. A NodePort Service gets a nodePort from the webhook, claimed.
    let out = kubectl(
        &cluster.kubeconfig,
        &["-n", &ns, "create", "-f", "-"],
        &service_yaml("np", "  type: NodePort\n", ""),
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let np = services.get("np").await?;
    let port = np
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p[0].node_port)
        .expect("a nodePort");
    claims.get(&claim_name(Claim::NodePort(port))).await?;

    // 8. Hand-picking an address in the dynamic band works, with a warning.
    let out = kubectl(
        &cluster.kubeconfig,
        &["-n", &ns, "create", "-f", "-"],
        &service_yaml("picked", "  clusterIP: 10.96.50.5\n", ""),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: spec.clusterIPs[0]: 10.96.50.5 is in the dynamic band"),
        "{stderr}"
    );
    assert_eq!(
        cluster_ip_of(&services.get("picked").await?),
        IpAddr::V4(Ipv4Addr::new(10, 96, 50, 5))
    );

    let name = format!("svcplane-{ns}");
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await?;
    envtest::delete_namespace(&client, &ns).await;
    local.stop().await;
    Ok(())
}
