//! Basic e2e against a real kube-apiserver (tests/envtest, or an external
//! cluster via SVCPLANE_E2E_KUBECONFIG): the shipped `svcplane run` binary (one
//! process for this suite, controllers only) writes objects that pass real API
//! validation, come back as expected, and are left alone afterwards; a change is
//! exactly one slice update and one Endpoints write (counted on its `/metrics`).
//! An external cluster must not run kube-controller-manager's endpoint
//! controllers, or both write (the write counts differ). The tests run one at a
//! time (`SERIAL`): they read the shared process' write counters.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};
use kube::Api;
use kube::api::DeleteParams;
use std::time::{Duration, Instant};
use svcplane_controller::core::fixtures::{node, pod, svc};
use svcplane_controller::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
use svcplane_controller::core::slice_endpoints::SliceEndpoints;

use svcplane_tests::binary::{SharedRun, WriteCounts, svcplane_bin_or_skip};
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::objects::{
    create_node, create_pods, create_service, get_endpoints, list_slices, node_name,
};

/// (ready, serving, terminating, nodeName, zone, pod name) per address.
type EndpointView = BTreeMap<String, (bool, bool, bool, String, String, String)>;

fn view(slice: &EndpointSlice) -> EndpointView {
    slice
        .endpoints()
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                e.addresses.join(","),
                (
                    c.ready.unwrap_or_default(),
                    c.serving.unwrap_or_default(),
                    c.terminating.unwrap_or_default(),
                    e.node_name.clone().unwrap_or_default(),
                    e.zone.clone().unwrap_or_default(),
                    e.target_ref
                        .as_ref()
                        .and_then(|t| t.name.clone())
                        .unwrap_or_default(),
                ),
            )
        })
        .collect()
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static RUN: std::sync::OnceLock<SharedRun> = std::sync::OnceLock::new();

/// Waits until `done` holds and `run` has written nothing for two seconds; the
/// writes made since `before`.
async fn settled<F, Fut>(
    run: &SharedRun,
    before: WriteCounts,
    mut done: F,
) -> anyhow::Result<WriteCounts>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = run.writes();
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = run.writes();
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
        if quiet_since.elapsed() >= Duration::from_secs(2) && done().await? {
            return Ok((
                now.0 - before.0,
                now.1 - before.1,
                now.2 - before.2,
                now.3 - before.3,
            ));
        }
        anyhow::ensure!(Instant::now() < deadline, "svcplane run did not settle");
    }
}

/// The suite's shared `svcplane run` (started on first use), a client and a new
/// namespace named from `prefix`; `None` when the suite skips (no harness or binary).
async fn start(prefix: &str) -> anyhow::Result<Option<(&'static SharedRun, kube::Client, String)>> {
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_endpointslice") else {
        return Ok(None);
    };
    let Some(bin) = svcplane_bin_or_skip("e2e_endpointslice") else {
        return Ok(None);
    };
    let run = RUN.get_or_init(|| SharedRun::start(&bin, &cluster.kubeconfig, &[]));
    let client = cluster.client().await?;
    let ns = envtest::create_namespace(&client, prefix).await?;
    Ok(Some((run, client, ns)))
}

#[tokio::test]
async fn reconciler_writes_pass_validation_and_converge() -> anyhow::Result<()> {
    let _one = SERIAL.lock().await;
    let Some((run, client, ns)) = start("svcplane-e2e-").await? else {
        return Ok(());
    };
    let node_a = node_name(&ns, "node-a");
    let node_b = node_name(&ns, "node-b");

    create_node(&client, &ns, &node("node-a", Some("zone-a"))).await?;
    create_node(&client, &ns, &node("node-b", Some("zone-b"))).await?;
    create_pods(
        &client,
        &ns,
        &[
            pod("web-1", "web")
                .node("node-a")
                .ip("10.0.0.1")
                .ready()
                .build(),
            pod("web-2", "web")
                .node("node-b")
                .ip("10.0.0.2")
                .not_ready()
                .build(),
            pod("web-3", "web")
                .node("node-a")
                .ip("10.0.0.3")
                .ready()
                .terminating()
                .build(),
            // No IP yet: not an endpoint.
            pod("web-4", "web").node("node-b").build(),
            pod("other", "other").ip("10.0.0.9").ready().build(),
        ],
    )
    .await?;
    let before = run.writes();
    let service = create_service(
        &client,
        &ns,
        &svc("web").label("team", "a").port("http", 80, 8080).build(),
    )
    .await?;

    let written = settled(run, before, || async {
        Ok(!list_slices(&client, &ns, "web").await?.is_empty()
            && get_endpoints(&client, &ns, "web").await?.is_some())
    })
    .await?;
    assert_eq!(
        written,
        (1, 0, 0, 1),
        "one slice create and one Endpoints create, nothing more (the stored, defaulted \
         objects need no rewrite)"
    );

    let stored = list_slices(&client, &ns, "web").await?;
    assert_eq!(stored.len(), 1, "{stored:#?}");
    let slice = &stored[0];
    assert_eq!(slice.address_type, "IPv4");
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(LABEL_MANAGED_BY).map(String::as_str),
        Some("endpointslice-controller.k8s.io")
    );
    assert_eq!(
        labels.get(LABEL_SERVICE_NAME).map(String::as_str),
        Some("web")
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    let owners = slice.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "Service");
    assert_eq!(Some(&owners[0].uid), service.metadata.uid.as_ref());
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(
        slice.ports,
        Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }])
    );
    let expected: EndpointView = [
        ("10.0.0.1", true, true, false, &node_a, "zone-a", "web-1"),
        ("10.0.0.2", false, false, false, &node_b, "zone-b", "web-2"),
        ("10.0.0.3", false, true, true, &node_a, "zone-a", "web-3"),
    ]
    .into_iter()
    .map(|(ip, r, s, t, n, z, p)| (ip.to_owned(), (r, s, t, n.clone(), z.into(), p.into())))
    .collect();
    assert_eq!(view(slice), expected);

    // The Endpoints object: ready and not-ready addresses; terminating Pods
    // are left out (no publishNotReadyAddresses).
    let endpoints = get_endpoints(&client, &ns, "web")
        .await?
        .ok_or_else(|| anyhow::anyhow!("no Endpoints stored for web"))?;
    let subsets = endpoints.subsets.clone().unwrap_or_default();
    assert_eq!(subsets.len(), 1, "{subsets:#?}");
    let ips = |a: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>| {
        a.iter().flatten().map(|a| a.ip.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ips(&subsets[0].addresses), ["10.0.0.1"]);
    assert_eq!(ips(&subsets[0].not_ready_addresses), ["10.0.0.2"]);
    assert_eq!(
        endpoints
            .metadata
            .labels
            .unwrap_or_default()
            .get("endpoints.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpoint-controller")
    );

    // The world changes, one change at a time; each is exactly one slice update and
    // one Endpoints update. web-1 goes away for good:
    let before = run.writes();
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    pods.delete(
        "web-1",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await?;
    let written = settled(run, before, || async {
        let s = list_slices(&client, &ns, "web").await?;
        Ok(s.len() == 1 && !view(&s[0]).contains_key("10.0.0.1"))
    })
    .await?;
    // kube-apiserver reports a deleted Pod in two watch events, even with a grace
    // period of 0: first the Pod with a deletionTimestamp (the endpoint becomes
    // terminating), then its removal. Upstream's controller writes once per event it
    // sees separately, so one or two slice updates are both upstream behaviour; the
    // Endpoints object drops the terminating Pod at the first event.
    assert!(
        matches!(written, (0, 1..=2, 0, 1)),
        "a deleted Pod: {written:?}"
    );
    // web-5 arrives, ready:
    let before = run.writes();
    create_pods(
        &client,
        &ns,
        &[pod("web-5", "web")
            .node("node-b")
            .ip("10.0.0.5")
            .ready()
            .build()],
    )
    .await?;
    let written = settled(run, before, || async {
        let s = list_slices(&client, &ns, "web").await?;
        Ok(s.len() == 1 && view(&s[0]).contains_key("10.0.0.5"))
    })
    .await?;
    assert_eq!(written, (0, 1, 0, 1), "a new ready Pod");
    let stored = list_slices(&client, &ns, "web").await?;
    assert_eq!(stored.len(), 1);
    let got = view(&stored[0]);
    assert_eq!(
        got.keys().map(String::as_str).collect::<Vec<_>>(),
        ["10.0.0.2", "10.0.0.3", "10.0.0.5"]
    );

    envtest::delete_namespace(&client, &ns).await;
    Ok(())
}

#[tokio::test]
async fn dual_stack_and_many_pods_pass_validation() -> anyhow::Result<()> {
    let _one = SERIAL.lock().await;
    let Some((run, client, ns)) = start("svcplane-e2e-").await? else {
        return Ok(());
    };
    create_node(&client, &ns, &node("node-a", Some("zone-a"))).await?;
    let pods: Vec<Pod> = (0..150)
        .map(|i| {
            pod(&format!("p-{i}"), "big")
                .ips(&[
                    &format!("10.2.{}.{}", i / 200, i % 200 + 1),
                    &format!("fd00:2::{:x}", i + 1),
                ])
                .ready()
                .build()
        })
        .collect();
    create_pods(&client, &ns, &pods).await?;
    create_service(
        &client,
        &ns,
        &svc("big")
            .families(&["IPv4", "IPv6"])
            .port("http", 80, 8080)
            .build(),
    )
    .await?;
    let before = run.writes();
    settled(run, before, || async {
        Ok(list_slices(&client, &ns, "big").await?.len() == 4)
    })
    .await?;
    let stored = list_slices(&client, &ns, "big").await?;
    let mut sizes: Vec<(String, usize)> = stored
        .iter()
        .map(|s| (s.address_type.clone(), s.endpoints().len()))
        .collect();
    sizes.sort();
    assert_eq!(
        sizes,
        [
            ("IPv4".to_owned(), 50),
            ("IPv4".to_owned(), 100),
            ("IPv6".to_owned(), 50),
            ("IPv6".to_owned(), 100)
        ]
    );
    envtest::delete_namespace(&client, &ns).await;
    Ok(())
}

/// A Service deleted and created again at once under the same name, its Pods
/// untouched (ES-2.14; upstream's bug kubernetes#141593, fixed in 1.38 only): every
/// slice it ends with is owned by the new Service, so the garbage collector, which
/// deletes slices owned by the old uid, leaves it its endpoints. Both the Service
/// with endpoints and one with none (a placeholder) are recreated. The deleted
/// Services' Endpoints go too: since 1.37 kube-apiserver leaves them, and
/// svcplane's Endpoints controller deletes them (EP-4.1).
#[tokio::test]
async fn a_service_recreated_at_once_gets_slices_owned_by_the_new_service() -> anyhow::Result<()> {
    let _one = SERIAL.lock().await;
    let Some((run, client, ns)) = start("svcplane-e2e-recreate-").await? else {
        return Ok(());
    };
    create_node(&client, &ns, &node("node-a", Some("zone-a"))).await?;
    create_pods(
        &client,
        &ns,
        &[
            pod("web-1", "web").ip("10.0.0.1").ready().build(),
            pod("web-2", "web").ip("10.0.0.2").ready().build(),
        ],
    )
    .await?;
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns);
    let owned_by = |slices: &[EndpointSlice], uid: &str| {
        !slices.is_empty()
            && slices.iter().all(|s| {
                s.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .all(|o| o.uid == uid)
            })
    };
    for (name, selector, want) in [("web", "web", 2usize), ("empty", "nothing", 0)] {
        let spec = svc(name)
            .selector("app", selector)
            .port("http", 80, 8080)
            .build();
        let first = create_service(&client, &ns, &spec).await?;
        let first_uid = first.metadata.uid.clone().unwrap_or_default();
        let before = run.writes();
        settled(run, before, || async {
            Ok(
                owned_by(&list_slices(&client, &ns, name).await?, &first_uid)
                    && get_endpoints(&client, &ns, name).await?.is_some(),
            )
        })
        .await?;

        // Deleted: the Endpoints object goes with it, deleted by svcplane.
        services.delete(name, &DeleteParams::default()).await?;
        let before = run.writes();
        settled(run, before, || async {
            Ok(get_endpoints(&client, &ns, name).await?.is_none())
        })
        .await?;

        // Recreated at once, before anything removes the old slices.
        let second = create_service(&client, &ns, &spec).await?;
        let second_uid = second.metadata.uid.clone().unwrap_or_default();
        assert_ne!(first_uid, second_uid);
        let before = run.writes();
        settled(run, before, || async {
            Ok(owned_by(
                &list_slices(&client, &ns, name).await?,
                &second_uid,
            ))
        })
        .await?;
        let slices = list_slices(&client, &ns, name).await?;
        let endpoints: usize = slices.iter().map(|s| s.endpoints().len()).sum();
        assert_eq!(endpoints, want, "{name}: {slices:#?}");
        assert_eq!(slices.len(), 1, "{name}: one slice (or the placeholder)");
        assert!(get_endpoints(&client, &ns, name).await?.is_some());
    }
    envtest::delete_namespace(&client, &ns).await;
    Ok(())
}
