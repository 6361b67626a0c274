//! Checks of the harness itself that later suites rely on: admission
//! webhooks are called (the webhook suite registers svcplane's webhook this
//! way), the service range is dual-stack, and the hardened admission plugins
//! (OwnerReferencesPermissionEnforcement) are on; and checks of svcplane against
//! the API server's own answers: its refusals are worded as kube-apiserver words
//! them, and its API types keep every field the server's schema has.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use svcplane_controller::core::fixtures::svc;
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::objects::create_service;
use svcplane_tests::skip::{Skip, skip};

#[tokio::test]
async fn admission_webhooks_are_called() -> anyhow::Result<()> {
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_harness") else {
        return Ok(());
    };
    let client = cluster.client().await?;
    let ns = envtest::create_namespace(&client, "svcplane-e2e-webhook-").await?;
    let label = "svcplane.test/webhook";
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {label: &ns}}})),
        )
        .await?;
    // A webhook nobody serves, failing closed, for ConfigMaps in this
    // namespace only.
    let vwc = ValidatingWebhookConfiguration {
        metadata: kube::api::ObjectMeta {
            name: Some(ns.clone()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "unreachable.svcplane.test".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(2),
            client_config: WebhookClientConfig {
                url: Some("https://127.0.0.1:1/validate".into()),
                ..WebhookClientConfig::default()
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some([(label.to_owned(), ns.clone())].into()),
                ..LabelSelector::default()
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["configmaps".into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..ValidatingWebhook::default()
        }]),
    };
    let vwcs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    vwcs.create(&PostParams::default(), &vwc).await?;

    // The API server picks the configuration up asynchronously.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    let refusal = loop {
        i += 1;
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("probe-{i}"));
        match cms.create(&PostParams::default(), &cm).await {
            Err(kube::Error::Api(e)) => break e,
            Err(e) => return Err(e.into()),
            Ok(_) if Instant::now() > deadline => {
                anyhow::bail!("the webhook was never called: ConfigMaps are still admitted")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert!(
        refusal.message.contains("unreachable.svcplane.test"),
        "{refusal:?}"
    );
    vwcs.delete(&ns, &DeleteParams::default()).await?;
    envtest::delete_namespace(&client, &ns).await;
    Ok(())
}

#[tokio::test]
async fn service_range_is_dual_stack() -> anyhow::Result<()> {
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_harness") else {
        return Ok(());
    };
    if cluster.external {
        // Only the harness's service range is known to be dual-stack.
        skip(
            "e2e_harness (dual-stack range)",
            &Skip::not_applicable(
                format!(
                    "{} is set: the cluster's service range is not the harness's",
                    envtest::ENV_EXTERNAL
                ),
                format!(
                    "unset {} to run against the envtest harness",
                    envtest::ENV_EXTERNAL
                ),
            ),
        );
        return Ok(());
    }
    let client = cluster.client().await?;
    let ns = envtest::create_namespace(&client, "svcplane-e2e-range-").await?;
    let created = create_service(
        &client,
        &ns,
        &svc("both")
            .families(&["IPv4", "IPv6"])
            .port("http", 80, 8080)
            .build(),
    )
    .await?;
    let spec = created.spec.unwrap_or_default();
    let ips = spec.cluster_ips.unwrap_or_default();
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(ips[0].starts_with("10.96."), "{ips:?}");
    assert!(ips[1].starts_with("fd00:10:96::"), "{ips:?}");
    let mut np = svc("np").port("http", 80, 8080).build();
    if let Some(spec) = np.spec.as_mut() {
        spec.type_ = Some("NodePort".into());
    }
    let created = create_service(&client, &ns, &np).await?;
    let port = created
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p.first().and_then(|p| p.node_port))
        .unwrap_or_default();
    assert!((30000..=32767).contains(&port), "nodePort {port}");
    envtest::delete_namespace(&client, &ns).await;
    Ok(())
}

/// The harness's kube-apiserver runs `OwnerReferencesPermissionEnforcement` (as
/// OpenShift and hardened clusters do): a user allowed to create EndpointSlices but
/// not to update the owning Service's finalizers cannot create a slice owned by the
/// Service with `blockOwnerDeletion`, and can once `services/finalizers` is granted.
/// The chart's RBAC is tested on this API server (`e2e_chart_rbac`), so without the
/// plugin that suite could not see a missing finalizers grant.
#[tokio::test]
async fn owner_references_permission_enforcement_is_on() -> anyhow::Result<()> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_harness") else {
        return Ok(());
    };
    if cluster.external {
        skip(
            "e2e_harness::owner_references_permission_enforcement_is_on",
            &Skip::not_applicable(
                "an external cluster's admission plugins are its own",
                "unset SVCPLANE_E2E_KUBECONFIG to check the envtest harness",
            ),
        );
        return Ok(());
    }
    let admin = cluster.client().await?;
    let ns = envtest::create_namespace(&admin, "svcplane-e2e-ownerrefs-").await?;
    let service = create_service(&admin, &ns, &svc("owner").port("http", 80, 8080).build()).await?;
    let user = "svcplane-e2e-slice-writer";
    let rule = |resources: &[&str], verbs: &[&str], group: &str| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    };
    let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
    let meta = |name: &str| kube::api::ObjectMeta {
        name: Some(name.to_owned()),
        ..Default::default()
    };
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("slice-writer"),
                rules: Some(vec![rule(
                    &["endpointslices"],
                    &["create"],
                    "discovery.k8s.io",
                )]),
            },
        )
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("slice-writer"),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "slice-writer".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: user.into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    ..Subject::default()
                }]),
            },
        )
        .await?;
    let kubeconfig = Kubeconfig::read_from(&cluster.kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some(user.to_owned());
    let as_user: Api<EndpointSlice> = Api::namespaced(kube::Client::try_from(config)?, &ns);
    let slice = |name: &str| -> anyhow::Result<EndpointSlice> {
        Ok(EndpointSlice {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    name: "owner".into(),
                    uid: service.metadata.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(vec![]),
            ports: None,
        })
    };
    let refused = as_user
        .create(&PostParams::default(), &slice("refused")?)
        .await;
    match refused {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("blockOwnerDeletion"), "{}", s.message);
        }
        other => panic!("a slice owned with blockOwnerDeletion was not refused: {other:?}"),
    }
    roles
        .patch(
            "slice-writer",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"rules": [
                rule(&["endpointslices"], &["create"], "discovery.k8s.io"),
                rule(&["services/finalizers"], &["update"], ""),
            ]})),
        )
        .await?;
    // RBAC changes reach the authorizer's cache within moments.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match as_user
            .create(&PostParams::default(), &slice("admitted")?)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 403 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    envtest::delete_namespace(&admin, &ns).await;
    Ok(())
}

/// Differential: kube-apiserver's own refusals of hand-picked values (no webhook in
/// the way: a namespace no configuration reviews) equal svcplane's review of the same
/// request against the same ranges, word for word, for a real create and a
/// server-side dry run (WH-8, WH-8.7, AL-2.5, AL-7.1). Where kube-apiserver's dry run
/// admits what its real create refuses (a nodePort out of range), svcplane refuses
/// the dry run with the real create's words (WH-8.7). Ranges: the harness's
/// defaults, `10.96.0.0/16,fd00:10:96::/112` and `30000-32767`.
#[tokio::test]
async fn refusals_are_worded_as_kube_apiserver_words_them() -> anyhow::Result<()> {
    use svcplane_allocator::AllocatorConfig;
    use svcplane_webhook::review::{Decoded, MutateDecision, decode, mutate};
    use svcplane_webhook::state::AllocationState;

    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_harness") else {
        return Ok(());
    };
    if cluster.external {
        skip(
            "e2e_harness::refusals_are_worded_as_kube_apiserver_words_them",
            &Skip::not_applicable(
                "an external cluster's ranges are its own",
                "unset SVCPLANE_E2E_KUBECONFIG to compare with the envtest harness",
            ),
        );
        return Ok(());
    }
    let client = cluster.client().await?;
    let ns = envtest::create_namespace(&client, "svcplane-e2e-words-").await?;
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, &ns);
    let cases = [
        (
            "outside",
            serde_json::json!({"clusterIP": "10.97.0.5", "ports": [{"port": 80}]}),
        ),
        (
            "network",
            serde_json::json!({"clusterIP": "10.96.0.0", "ports": [{"port": 80}]}),
        ),
        (
            "port",
            serde_json::json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 40000}]}),
        ),
        // WH-8.8: strict IP forms (StrictIPCIDRValidation).
        (
            "leading-zeros",
            serde_json::json!({"clusterIP": "10.96.0.010", "ports": [{"port": 80}]}),
        ),
        (
            "ipv4-mapped",
            serde_json::json!({"clusterIP": "::ffff:10.96.0.10", "ports": [{"port": 80}]}),
        ),
    ];
    for (name, spec) in cases {
        let mut real_refusal = String::new();
        for dry_run in [false, true] {
            let object = serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": &ns}, "spec": spec,
            });
            let params = PostParams {
                dry_run,
                ..PostParams::default()
            };
            let svc = serde_json::from_value(object.clone())?;
            let upstream = match services.create(&params, &svc).await {
                Err(kube::Error::Api(s)) => s.message,
                Ok(_) if dry_run && name == "port" => real_refusal.clone(),
                other => anyhow::bail!("{name} (dry run {dry_run}) was not refused: {other:?}"),
            };
            if !dry_run {
                real_refusal = upstream.clone();
            }
            let review = serde_json::json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "u", "name": name, "namespace": &ns, "operation": "CREATE",
                    "kind": {"group": "", "version": "v1", "kind": "Service"},
                    "resource": {"group": "", "version": "v1", "resource": "services"},
                    "userInfo": {"username": "e2e"}, "object": object, "dryRun": dry_run,
                },
            });
            let Decoded::Service(req) =
                decode(&serde_json::to_vec(&review)?).map_err(|e| anyhow::anyhow!("{e:?}"))?
            else {
                anyhow::bail!("not decoded as a Service review");
            };
            let allocators =
                AllocatorConfig::from_flags("10.96.0.0/16,fd00:10:96::/112", "30000-32767")?
                    .allocators(1)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            let ours = match mutate(&req, &mut AllocationState::new(allocators)) {
                MutateDecision::Deny(e) => e.to_string(),
                other => anyhow::bail!("svcplane admitted {name} (dry run {dry_run}): {other:?}"),
            };
            assert_eq!(ours, upstream, "{name}, dry run {dry_run}");
        }
    }
    envtest::delete_namespace(&services.into_client(), &ns).await;
    Ok(())
}

/// Writes are whole typed objects (k8s-openapi, the baseline release's feature), so
/// a field the API server stores but the types lack would be dropped by every
/// read-modify-write. For each kind svcplane writes or reads back to write, an object
/// with every field of the server's own OpenAPI schema set goes through the type
/// and back; nothing may be lost. A newer API server that adds a field fails here,
/// naming it, until the types follow.
#[tokio::test]
async fn every_field_the_api_server_stores_survives_svcplanes_types() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
    use svcplane_tests::openapi_sample::{lost_fields, sample};

    fn round_trip<K>(doc: &serde_json::Value, schema: &str) -> anyhow::Result<Vec<String>>
    where
        K: k8s_openapi::Resource + serde::Serialize + serde::de::DeserializeOwned,
    {
        let mut sent = sample(doc, schema)
            .ok_or_else(|| anyhow::anyhow!("the API server has no schema {schema}"))?;
        sent["apiVersion"] = K::API_VERSION.into();
        sent["kind"] = K::KIND.into();
        let typed: K = serde_json::from_value(sent.clone())
            .map_err(|e| anyhow::anyhow!("{schema}: the sample does not decode: {e}"))?;
        let back = serde_json::to_value(&typed)?;
        Ok(lost_fields(&sent, &back)
            .into_iter()
            .map(|f| format!("{}: {f}", K::KIND))
            .collect())
    }

    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_harness") else {
        return Ok(());
    };
    let client = cluster.client().await?;
    let mut docs = std::collections::BTreeMap::new();
    for gv in [
        "api/v1",
        "apis/discovery.k8s.io/v1",
        "apis/networking.k8s.io/v1",
        "apis/coordination.k8s.io/v1",
        "apis/events.k8s.io/v1",
    ] {
        let text = client
            .request_text(http::Request::get(format!("/openapi/v3/{gv}")).body(Vec::new())?)
            .await?;
        docs.insert(gv, serde_json::from_str::<serde_json::Value>(&text)?);
    }
    let mut lost = Vec::new();
    lost.extend(round_trip::<EndpointSlice>(
        &docs["apis/discovery.k8s.io/v1"],
        "io.k8s.api.discovery.v1.EndpointSlice",
    )?);
    lost.extend(round_trip::<Endpoints>(
        &docs["api/v1"],
        "io.k8s.api.core.v1.Endpoints",
    )?);
    lost.extend(round_trip::<Service>(
        &docs["api/v1"],
        "io.k8s.api.core.v1.Service",
    )?);
    lost.extend(round_trip::<ServiceCIDR>(
        &docs["apis/networking.k8s.io/v1"],
        "io.k8s.api.networking.v1.ServiceCIDR",
    )?);
    lost.extend(round_trip::<IPAddress>(
        &docs["apis/networking.k8s.io/v1"],
        "io.k8s.api.networking.v1.IPAddress",
    )?);
    lost.extend(round_trip::<Lease>(
        &docs["apis/coordination.k8s.io/v1"],
        "io.k8s.api.coordination.v1.Lease",
    )?);
    lost.extend(round_trip::<Event>(
        &docs["apis/events.k8s.io/v1"],
        "io.k8s.api.events.v1.Event",
    )?);
    assert!(
        lost.is_empty(),
        "fields the API server stores that svcplane's types drop:\n{}",
        lost.join("\n")
    );
    Ok(())
}
