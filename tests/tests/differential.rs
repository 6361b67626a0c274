//! Differential suite: the same scenario on two harness instances, one where
//! upstream kube-controller-manager's endpointslice, endpoint and
//! endpointslicemirroring controllers write, one where the shipped `svcplane run`
//! binary does (one process for the whole suite, controllers only). After every
//! step, once both have settled, the stored EndpointSlices and Endpoints must be
//! the same once names, uids, resourceVersions, timestamps and endpoint order are
//! normalised away (see `svcplane_tests::normalize`).
//!
//! Adding a scenario: write an `async fn` with `#[tokio::test]` that builds a
//! [`Scenario`] from the controller's fixtures (`svc`, `pod`, `node`), adds
//! `steps` of [`Change`]s if the scenario is about updates (the slices are
//! compared again after each step), and calls `run`. Node names are prefixed
//! with the test namespace, Pod `nodeName`s follow, ClusterIPs are allocated by
//! the API server, and Pod status is written through the status subresource.
//! Keep changed port groups under 100 endpoints: upstream packs new slices in
//! Go map order, so which slice loses an endpoint is not deterministic.
//! `SVCPLANE_DIFF_PRINT=1` prints svcplane's normalised result per stage.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerPort, Endpoints, Node, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use svcplane_controller::core::fixtures::{epoch, node, pod, svc};
use svcplane_tests::binary::{SharedRun, WriteCounts, svcplane_bin_or_skip};
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::normalize::{normalize, normalize_endpoints};
use svcplane_tests::objects::{
    create_node, create_pods, create_service, get_endpoints, list_slices,
};

/// A time after the fixtures' epoch, for condition transitions.
fn later() -> k8s_openapi::jiff::Timestamp {
    epoch() + k8s_openapi::jiff::SignedDuration::from_secs(3600)
}

/// How long the two may take to agree.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Polls in a row (300 ms apart) both must agree, with svcplane writing nothing.
const STABLE_POLLS: usize = 5;

/// The suite's one `svcplane run`, on the harness without upstream controllers, with
/// the ServiceCIDR controller on as upstream's harness runs kube-controller-manager's.
static OURS: std::sync::OnceLock<SharedRun> = std::sync::OnceLock::new();

fn ours_run(bin: &std::path::Path, ours: &envtest::Cluster) -> &'static SharedRun {
    OURS.get_or_init(|| SharedRun::start(bin, &ours.kubeconfig, &["--controllers=*,servicecidr"]))
}

struct Scenario {
    name: &'static str,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    services: Vec<Service>,
    /// Endpoints objects written by "someone else" (to be mirrored).
    endpoints: Vec<Endpoints>,
    /// Changes made after the first comparison, each followed by another.
    steps: Vec<Vec<Change>>,
}

/// A change to the world between two comparisons.
enum Change {
    /// Create these Pods (status and termination as for the initial ones).
    AddPods(Vec<Pod>),
    /// Delete a Pod at once (grace period 0).
    DeletePod(&'static str),
    /// Replace a Pod's status with this fixture's.
    SetPodStatus(Box<Pod>),
    /// Merge-patch a Pod's metadata (e.g. labels).
    PatchPod(&'static str, Value),
    /// Merge-patch a Service (e.g. its selector or ports).
    PatchService(&'static str, Value),
    /// Merge-patch an Endpoints object (e.g. its subsets or labels).
    PatchEndpoints(&'static str, Value),
}

async fn apply_change(client: &Client, ns: &str, change: &Change) -> anyhow::Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pp = PatchParams::default();
    match change {
        Change::AddPods(list) => create_pods(client, ns, list).await?,
        Change::DeletePod(name) => {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            pods.delete(name, &dp).await?;
        }
        Change::SetPodStatus(pod) => {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let patch = json!({ "status": pod.status });
            pods.patch_status(&name, &pp, &Patch::Merge(&patch)).await?;
        }
        Change::PatchPod(name, patch) => {
            pods.patch(name, &pp, &Patch::Merge(patch)).await?;
        }
        Change::PatchEndpoints(name, patch) => {
            Api::<Endpoints>::namespaced(client.clone(), ns)
                .patch(name, &pp, &Patch::Merge(patch))
                .await?;
        }
        Change::PatchService(name, patch) => {
            Api::<Service>::namespaced(client.clone(), ns)
                .patch(name, &pp, &Patch::Merge(patch))
                .await?;
        }
    }
    Ok(())
}

impl Scenario {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            nodes: vec![
                node("node-a", Some("zone-a")),
                node("node-b", Some("zone-b")),
            ],
            pods: Vec::new(),
            services: Vec::new(),
            endpoints: Vec::new(),
            steps: Vec::new(),
        }
    }
}

async fn populate(client: &Client, ns: &str, s: &Scenario) -> anyhow::Result<()> {
    for n in &s.nodes {
        create_node(client, ns, n).await?;
    }
    create_pods(client, ns, &s.pods).await?;
    for e in &s.endpoints {
        let mut e = e.clone();
        e.metadata.namespace = Some(ns.to_owned());
        Api::<Endpoints>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &e)
            .await?;
    }
    // Services last, so both controllers see a settled world on their first sync.
    for svc in &s.services {
        create_service(client, ns, svc).await?;
    }
    Ok(())
}

async fn snapshot(
    client: &Client,
    ns: &str,
    services: &[String],
) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for name in services {
        let slices = list_slices(client, ns, name).await?;
        let endpoints = get_endpoints(client, ns, name).await?;
        out.insert(
            name.clone(),
            json!({
                "endpointSlices": normalize(&slices),
                "endpoints": normalize_endpoints(endpoints.as_ref()),
            }),
        );
    }
    Ok(out)
}

/// Waits until svcplane and upstream store the same and both have settled (equal,
/// unchanged and no svcplane write for [`STABLE_POLLS`] polls), or fails showing the
/// difference.
async fn compare(
    test: &str,
    stage: &str,
    uc: &Client,
    oc: &Client,
    ns: &str,
    names: &[String],
    ours: &SharedRun,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let mut stable = 0;
    let mut last: Option<(BTreeMap<String, Value>, WriteCounts)> = None;
    loop {
        let writes = ours.writes();
        let want = snapshot(oc, ns, names).await?;
        let got = snapshot(uc, ns, names).await?;
        let same_as_last = last
            .as_ref()
            .is_some_and(|(w, n)| *w == want && *n == writes);
        stable = if got == want && same_as_last {
            stable + 1
        } else {
            0
        };
        if stable >= STABLE_POLLS {
            if std::env::var_os("SVCPLANE_DIFF_PRINT").is_some() {
                eprintln!("{test} ({stage}): {}", serde_json::to_string_pretty(&want)?);
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            assert_eq!(
                serde_json::to_string_pretty(&got)?,
                serde_json::to_string_pretty(&want)?,
                "{test} ({stage}): upstream kube-controller-manager (left) vs svcplane run (right)"
            );
        }
        last = Some((want, writes));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn run(s: Scenario) -> anyhow::Result<()> {
    let test = format!("differential::{}", s.name);
    let Some([upstream, ours]) =
        envtest::clusters([Flavor::UpstreamControllers, Flavor::ApiServerOnly], &test)
    else {
        return Ok(());
    };
    let Some(bin) = svcplane_bin_or_skip(&test) else {
        return Ok(());
    };
    let run = ours_run(&bin, &ours);
    let (uc, oc) = (upstream.client().await?, ours.client().await?);
    let ns = envtest::create_namespace(&uc, &format!("diff-{}-", s.name.replace('_', "-"))).await?;
    envtest::create_namespace(&oc, &ns).await?;
    let (a, b) = tokio::join!(populate(&uc, &ns, &s), populate(&oc, &ns, &s));
    a?;
    b?;

    let names: Vec<String> = s
        .services
        .iter()
        .map(|svc| svc.metadata.name.clone().unwrap_or_default())
        .collect();
    compare(&test, "initial", &uc, &oc, &ns, &names, run).await?;
    for (i, step) in s.steps.iter().enumerate() {
        for change in step {
            let (a, b) = tokio::join!(
                apply_change(&uc, &ns, change),
                apply_change(&oc, &ns, change)
            );
            a?;
            b?;
        }
        compare(
            &test,
            &format!("step {}", i + 1),
            &uc,
            &oc,
            &ns,
            &names,
            run,
        )
        .await?;
    }
    envtest::delete_namespace(&uc, &ns).await;
    envtest::delete_namespace(&oc, &ns).await;
    Ok(())
}

/// ES-2.4 and EP-4.2: ready, not ready, terminating, Pods without IPs and
/// finished Pods.
#[tokio::test]
async fn conditions() -> anyhow::Result<()> {
    let mut s = Scenario::new("conditions");
    s.pods = vec![
        pod("ready", "web").ip("10.0.0.1").ready().build(),
        pod("not-ready", "web")
            .node("node-b")
            .ip("10.0.0.2")
            .not_ready()
            .build(),
        pod("terminating", "web")
            .ip("10.0.0.3")
            .ready()
            .terminating()
            .build(),
        pod("terminating-nr", "web")
            .ip("10.0.0.4")
            .not_ready()
            .terminating()
            .build(),
        pod("no-ip", "web").build(),
        pod("succeeded", "web")
            .ip("10.0.0.6")
            .phase("Succeeded")
            .build(),
        pod("failed", "web").ip("10.0.0.7").phase("Failed").build(),
        pod("other", "other").ip("10.0.0.8").ready().build(),
    ];
    s.services = vec![svc("web").label("team", "a").port("http", 80, 8080).build()];
    s.steps = vec![
        vec![
            Change::SetPodStatus(Box::new(
                pod("not-ready", "web")
                    .ip("10.0.0.2")
                    .ready_at(later())
                    .build(),
            )),
            Change::DeletePod("ready"),
        ],
        vec![
            Change::AddPods(vec![pod("new", "web").ip("10.0.0.9").ready().build()]),
            Change::PatchPod("other", json!({"metadata": {"labels": {"app": "web"}}})),
            Change::SetPodStatus(Box::new(
                pod("no-ip", "web").ip("10.0.0.5").not_ready().build(),
            )),
        ],
    ];
    run(s).await
}

/// publishNotReadyAddresses: every endpoint counts as ready.
#[tokio::test]
async fn publish_not_ready_addresses() -> anyhow::Result<()> {
    let mut s = Scenario::new("publish_not_ready");
    s.pods = vec![
        pod("ready", "web").ip("10.0.0.1").ready().build(),
        pod("not-ready", "web").ip("10.0.0.2").not_ready().build(),
        pod("terminating", "web")
            .ip("10.0.0.3")
            .not_ready()
            .terminating()
            .build(),
    ];
    s.services = vec![
        svc("web")
            .publish_not_ready()
            .port("http", 80, 8080)
            .build(),
    ];
    run(s).await
}

/// A named targetPort resolving to different numbers (one slice per port
/// group), and a Pod lacking the name.
#[tokio::test]
async fn named_ports() -> anyhow::Result<()> {
    let mut s = Scenario::new("named_ports");
    for i in 0..3 {
        s.pods.push(
            pod(&format!("v1-{i}"), "web")
                .ip(&format!("10.0.1.{}", i + 1))
                .ready()
                .container_port("http", 8080)
                .build(),
        );
        s.pods.push(
            pod(&format!("v2-{i}"), "web")
                .node("node-b")
                .ip(&format!("10.0.2.{}", i + 1))
                .ready()
                .container_port("http", 9090)
                .build(),
        );
    }
    s.pods
        .push(pod("unnamed", "web").ip("10.0.3.1").ready().build());
    s.services = vec![svc("web").named_port("http", 80, "http").build()];
    run(s).await
}

/// Several ports, one with an appProtocol.
#[tokio::test]
async fn multiple_ports() -> anyhow::Result<()> {
    let mut s = Scenario::new("multiple_ports");
    s.pods = (1..=4)
        .map(|i| {
            pod(&format!("p{i}"), "web")
                .ip(&format!("10.0.0.{i}"))
                .ready()
                .build()
        })
        .collect();
    s.services = vec![
        svc("web")
            .port("http", 80, 8080)
            .port("metrics", 9090, 9090)
            .app_protocol("http")
            .build(),
    ];
    run(s).await
}

/// More than 100 Pods: several slices at the default maximum.
#[tokio::test]
async fn more_than_100_pods() -> anyhow::Result<()> {
    let mut s = Scenario::new("many_pods");
    s.pods = (0..230)
        .map(|i| {
            pod(&format!("p-{i}"), "web")
                .node(if i % 2 == 0 { "node-a" } else { "node-b" })
                .ip(&format!("10.1.{}.{}", i / 200, i % 200 + 1))
                .ready()
                .build()
        })
        .collect();
    s.services = vec![svc("web").port("http", 80, 8080).build()];
    run(s).await
}

/// A dual-stack Service gets one slice per address type; a single-stack one
/// only its family's.
#[tokio::test]
async fn dual_stack() -> anyhow::Result<()> {
    let mut s = Scenario::new("dual_stack");
    s.pods = (1..=3)
        .map(|i| {
            pod(&format!("p{i}"), "web")
                .ips(&[&format!("10.0.0.{i}"), &format!("fd00:1::{i}")])
                .ready()
                .build()
        })
        .collect();
    s.services = vec![
        svc("web")
            .families(&["IPv6", "IPv4"])
            .port("http", 80, 8080)
            .build(),
        svc("v6")
            .selector("app", "web")
            .families(&["IPv6"])
            .port("http", 80, 8080)
            .build(),
    ];
    run(s).await
}

/// Headless Service: hostnames from Pods with hostname and subdomain.
#[tokio::test]
async fn headless_hostnames() -> anyhow::Result<()> {
    let mut s = Scenario::new("headless");
    s.pods = vec![
        pod("a", "db")
            .ip("10.0.0.1")
            .ready()
            .hostname("a", "db")
            .build(),
        pod("b", "db")
            .ip("10.0.0.2")
            .ready()
            .hostname("b", "other")
            .build(),
        pod("c", "db").ip("10.0.0.3").ready().build(),
    ];
    s.services = vec![svc("db").headless().port("pg", 5432, 5432).build()];
    run(s).await
}

/// A Service selecting nothing gets an empty placeholder slice; one without a
/// selector gets none.
#[tokio::test]
async fn placeholder_and_no_selector() -> anyhow::Result<()> {
    let mut s = Scenario::new("placeholder");
    s.pods = vec![pod("x", "other").ip("10.0.0.1").ready().build()];
    s.services = vec![
        svc("empty").port("http", 80, 8080).build(),
        svc("manual").no_selector().port("http", 80, 8080).build(),
    ];
    run(s).await
}

/// Service names may start with a digit (RelaxedServiceNameValidation, GA and
/// always on in 1.37): slices (`generateName` `0web-`, the service-name label),
/// Endpoints and a placeholder follow such a name as for any other.
#[tokio::test]
async fn service_names_starting_with_a_digit() -> anyhow::Result<()> {
    let mut s = Scenario::new("digit_names");
    s.pods = vec![
        pod("web-1", "web").ip("10.0.0.1").ready().build(),
        pod("web-2", "web").ip("10.0.0.2").not_ready().build(),
    ];
    s.services = vec![
        svc("0web")
            .selector("app", "web")
            .port("http", 80, 8080)
            .build(),
        svc("7-empty")
            .selector("app", "nothing")
            .port("http", 80, 8080)
            .build(),
    ];
    s.steps = vec![vec![Change::DeletePod("web-1")]];
    run(s).await
}

/// Service edits: another selector, another port list, then no selector.
#[tokio::test]
async fn service_changes() -> anyhow::Result<()> {
    let mut s = Scenario::new("service_changes");
    s.pods = vec![
        pod("a1", "a").ip("10.0.0.1").ready().build(),
        pod("a2", "a").ip("10.0.0.2").not_ready().build(),
        pod("b1", "b").node("node-b").ip("10.0.0.3").ready().build(),
    ];
    s.services = vec![
        svc("web")
            .selector("app", "a")
            .port("http", 80, 8080)
            .build(),
    ];
    s.steps = vec![
        vec![Change::PatchService(
            "web",
            json!({"spec": {"selector": {"app": "b"}}}),
        )],
        vec![Change::PatchService(
            "web",
            json!({"spec": {"ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}
            ]}}),
        )],
        vec![Change::PatchService(
            "web",
            json!({"metadata": {"labels": {"tier": "front"}}}),
        )],
    ];
    run(s).await
}

/// A Pod whose Node does not exist is left out (and the sync retried).
#[tokio::test]
async fn pod_on_missing_node() -> anyhow::Result<()> {
    let mut s = Scenario::new("missing_node");
    s.pods = vec![
        pod("here", "web").ip("10.0.0.1").ready().build(),
        pod("lost", "web")
            .node("node-gone")
            .ip("10.0.0.2")
            .ready()
            .build(),
    ];
    s.services = vec![svc("web").port("http", 80, 8080).build()];
    run(s).await
}

/// Named ports resolve per protocol: a UDP Service port only matches a UDP
/// container port of that name.
#[tokio::test]
async fn named_ports_per_protocol() -> anyhow::Result<()> {
    let mut s = Scenario::new("protocols");
    let with_ports = |name: &str, ip: &str, ports: &[(&str, i32, &str)]| {
        let mut p = pod(name, "dns").ip(ip).ready().build();
        if let Some(spec) = p.spec.as_mut() {
            spec.containers[0].ports = Some(
                ports
                    .iter()
                    .map(|(n, num, proto)| ContainerPort {
                        name: Some((*n).into()),
                        container_port: *num,
                        protocol: Some((*proto).into()),
                        ..ContainerPort::default()
                    })
                    .collect(),
            );
        }
        p
    };
    s.pods = vec![
        with_ports("udp-only", "10.0.0.1", &[("dns", 5353, "UDP")]),
        with_ports(
            "mixed",
            "10.0.0.2",
            &[("dns", 5353, "UDP"), ("dns-alt", 7373, "TCP")],
        ),
        with_ports("tcp-only", "10.0.0.3", &[("dns", 6363, "TCP")]),
    ];
    let mut service = svc("dns").named_port("dns-tcp", 53, "dns").build();
    if let Some(ports) = service.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        let mut udp = ports[0].clone();
        udp.name = Some("dns-udp".into());
        udp.protocol = Some("UDP".into());
        ports.push(udp);
    }
    s.services = vec![service];
    run(s).await
}

/// More than 1000 Pods (the Endpoints truncation threshold; 11 slices here).
#[tokio::test]
async fn more_than_1000_pods() -> anyhow::Result<()> {
    let mut s = Scenario::new("over_1000");
    s.pods = (0..1001)
        .map(|i| {
            pod(&format!("p-{i}"), "web")
                .ip(&format!("10.3.{}.{}", i / 250, i % 250 + 1))
                .ready()
                .build()
        })
        .collect();
    s.services = vec![svc("web").port("http", 80, 8080).build()];
    run(s).await
}

/// API defaults: an unnamed port without targetPort (defaults to the port),
/// SCTP, and a Pending Pod that already has an IP.
#[tokio::test]
async fn port_defaults_and_pending_pods() -> anyhow::Result<()> {
    let mut s = Scenario::new("defaults");
    s.pods = vec![
        pod("running", "web").ip("10.0.0.1").ready().build(),
        pod("pending", "web")
            .ip("10.0.0.2")
            .phase("Pending")
            .not_ready()
            .build(),
    ];
    let mut unnamed = svc("web").port("", 80, 80).build();
    let mut sctp = svc("sctp")
        .selector("app", "web")
        .port("", 7777, 7777)
        .build();
    for (service, protocol) in [(&mut unnamed, "TCP"), (&mut sctp, "SCTP")] {
        if let Some(port) = service
            .spec
            .as_mut()
            .and_then(|s| s.ports.as_mut())
            .and_then(|p| p.first_mut())
        {
            port.name = None;
            port.target_port = None;
            port.protocol = Some(protocol.into());
        }
    }
    s.services = vec![unnamed, sctp];
    run(s).await
}

fn mirroring_scenario(name: &'static str) -> anyhow::Result<Scenario> {
    let mut s = Scenario::new(name);
    let endpoints = |name: &str, labels: Value| -> anyhow::Result<Endpoints> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "subsets": [{
                "addresses": [{"ip": "10.9.0.1"}, {"ip": "10.9.0.2", "hostname": "two"}],
                "notReadyAddresses": [{"ip": "10.9.0.3"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }, {
                "addresses": [{"ip": "fd00:9::1"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }]
        }))?)
    };
    s.endpoints = vec![
        endpoints("manual", json!({"team": "a"}))?,
        endpoints(
            "skipped",
            json!({"endpointslice.kubernetes.io/skip-mirror": "true"}),
        )?,
    ];
    s.services = vec![
        svc("manual").no_selector().port("http", 80, 8080).build(),
        svc("skipped").no_selector().port("http", 80, 8080).build(),
    ];
    Ok(s)
}

/// EndpointSlice mirroring: a selector-less Service whose Endpoints someone
/// else writes is mirrored into slices; `skip-mirror` opts out; an address
/// edit follows.
#[tokio::test]
async fn mirroring() -> anyhow::Result<()> {
    let mut s = mirroring_scenario("mirroring")?;
    s.steps = vec![vec![Change::PatchEndpoints(
        "manual",
        json!({"subsets": [{
            "addresses": [{"ip": "10.9.0.1"}, {"ip": "10.9.0.4"}],
            "notReadyAddresses": [{"ip": "10.9.0.3"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }]}),
    )]];
    run(s).await
}

/// When the mirrored ports change, the old slice is recycled into an update
/// that keeps `metadata.generateName`, as upstream's does (this suite first
/// found svcplane dropping it).
#[tokio::test]
async fn mirroring_port_change() -> anyhow::Result<()> {
    let mut s = mirroring_scenario("mirroring_ports")?;
    s.steps = vec![vec![Change::PatchEndpoints(
        "manual",
        json!({"subsets": [{
            "addresses": [{"ip": "10.9.0.1"}, {"ip": "10.9.0.4"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "https", "port": 8443, "protocol": "TCP"}]
        }]}),
    )]];
    run(s).await
}

/// Topology hints: `service.kubernetes.io/topology-mode: Auto` over three
/// zones with equal capacity and two endpoints per zone.
#[tokio::test]
async fn topology_hints_auto() -> anyhow::Result<()> {
    let mut s = Scenario::new("hints_auto");
    s.nodes.push(node("node-c", Some("zone-c")));
    s.pods = (0..6)
        .map(|i| {
            let n = ["node-a", "node-b", "node-c"][i % 3];
            pod(&format!("p{i}"), "web")
                .node(n)
                .ip(&format!("10.0.0.{}", i + 1))
                .ready()
                .build()
        })
        .collect();
    s.services = vec![
        svc("web")
            .annotation("service.kubernetes.io/topology-mode", "Auto")
            .port("http", 80, 8080)
            .build(),
    ];
    // Too few endpoints for three zones: the hints go away again.
    s.steps = vec![vec![
        Change::DeletePod("p0"),
        Change::DeletePod("p3"),
        Change::DeletePod("p1"),
    ]];
    run(s).await
}

/// `trafficDistribution: PreferClose`: zone hints without capacity maths.
#[tokio::test]
async fn traffic_distribution_prefer_close() -> anyhow::Result<()> {
    let mut s = Scenario::new("prefer_close");
    s.pods = (0..4)
        .map(|i| {
            pod(&format!("p{i}"), "web")
                .node(if i % 2 == 0 { "node-a" } else { "node-b" })
                .ip(&format!("10.0.0.{}", i + 1))
                .ready()
                .build()
        })
        .collect();
    let mut service = svc("web").port("http", 80, 8080).build();
    if let Some(spec) = service.spec.as_mut() {
        spec.traffic_distribution = Some("PreferClose".into());
    }
    s.services = vec![service];
    run(s).await
}

// --- ServiceCIDRs ------------------------------------------------------------------

/// What the ServiceCIDR controller decides about one object, as compared: whether it
/// exists, is being deleted, its finalizers and its conditions (type, status, reason,
/// message; not the transition time).
async fn cidr_view(client: &Client, name: &str) -> anyhow::Result<Value> {
    use k8s_openapi::api::networking::v1::ServiceCIDR;
    let Some(c) = Api::<ServiceCIDR>::all(client.clone())
        .get_opt(name)
        .await?
    else {
        return Ok(json!({"exists": false}));
    };
    let conditions: Vec<Value> = c
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| json!([c.type_, c.status, c.reason, c.message]))
        .collect();
    Ok(json!({
        "exists": true,
        "deleting": c.metadata.deletion_timestamp.is_some(),
        "finalizers": c.metadata.finalizers.unwrap_or_default(),
        "conditions": conditions,
    }))
}

/// Waits until both clusters show the same for `names` and it holds still.
async fn compare_cidrs(
    stage: &str,
    uc: &Client,
    oc: &Client,
    names: &[&str],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let (mut stable, mut last) = (0, None);
    loop {
        let mut got = Vec::new();
        let mut want = Vec::new();
        for n in names {
            got.push(cidr_view(uc, n).await?);
            want.push(cidr_view(oc, n).await?);
        }
        stable = if got == want && last.as_ref() == Some(&want) {
            stable + 1
        } else {
            0
        };
        if stable >= STABLE_POLLS {
            return Ok(());
        }
        if Instant::now() > deadline {
            assert_eq!(
                serde_json::to_string_pretty(&got)?,
                serde_json::to_string_pretty(&want)?,
                "service_cidrs ({stage}): upstream kube-controller-manager (left) vs svcplane run (right)"
            );
        }
        last = Some(want);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// AL-6: the ServiceCIDR controller on both sides — the default
/// `kubernetes` object and a new one get the finalizer and `Ready=True`; deleted while
/// a Service's address depends on it alone, it turns `Ready=False, Terminating` and
/// stays; once the Service is gone it goes (after the 10 s grace).
#[tokio::test]
async fn service_cidr_lifecycle() -> anyhow::Result<()> {
    use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
    let test = "differential::service_cidr_lifecycle".to_owned();
    let Some([upstream, ours]) =
        envtest::clusters([Flavor::UpstreamControllers, Flavor::ApiServerOnly], &test)
    else {
        return Ok(());
    };
    let Some(bin) = svcplane_bin_or_skip(&test) else {
        return Ok(());
    };
    ours_run(&bin, &ours);
    let (uc, oc) = (upstream.client().await?, ours.client().await?);
    let name = "diff-extra";
    let mut cidr = ServiceCIDR::default();
    cidr.metadata.name = Some(name.into());
    cidr.spec = Some(ServiceCIDRSpec {
        cidrs: Some(vec!["10.200.0.0/24".into()]),
    });
    for c in [&uc, &oc] {
        Api::<ServiceCIDR>::all(c.clone())
            .create(&PostParams::default(), &cidr)
            .await?;
    }
    compare_cidrs("created", &uc, &oc, &["kubernetes", name]).await?;

    // A Service takes an address only the new range covers, then the range is deleted.
    let ns = envtest::create_namespace(&uc, "diff-cidr-").await?;
    envtest::create_namespace(&oc, &ns).await?;
    let mut user = svc("user").port("http", 80, 8080).build();
    user.metadata.namespace = Some(ns.clone());
    if let Some(spec) = user.spec.as_mut() {
        spec.cluster_ip = Some("10.200.0.10".into());
        spec.cluster_ips = Some(vec!["10.200.0.10".into()]);
    }
    // The new range must be ready on each side before it serves the address.
    for c in [&uc, &oc] {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            // Not `create_service`: it clears hand-picked addresses.
            let created = Api::<Service>::namespaced(c.clone(), &ns)
                .create(&PostParams::default(), &user)
                .await;
            match created {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    for c in [&uc, &oc] {
        Api::<ServiceCIDR>::all(c.clone())
            .delete(name, &DeleteParams::default())
            .await?;
    }
    compare_cidrs("deleted while in use", &uc, &oc, &[name]).await?;
    let view = cidr_view(&oc, name).await?;
    assert_eq!(view["deleting"], true, "{view}");
    assert_eq!(
        view["conditions"][0][2], "Terminating",
        "kept while the Service's address depends on it: {view}"
    );

    // The Service goes: so does the range, after the grace period.
    for c in [&uc, &oc] {
        Api::<Service>::namespaced(c.clone(), &ns)
            .delete("user", &DeleteParams::default())
            .await?;
    }
    // Each side waits out the grace counted from the start of the deletion.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while cidr_view(&uc, name).await?["exists"] == true && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    compare_cidrs("released", &uc, &oc, &[name]).await?;
    assert_eq!(cidr_view(&oc, name).await?["exists"], false);
    envtest::delete_namespace(&uc, &ns).await;
    envtest::delete_namespace(&oc, &ns).await;
    Ok(())
}

/// Whether svcplane claims to export a sample of this name as upstream does.
fn compared(name: &str) -> bool {
    [
        "endpoint_slice_controller_",
        "endpoint_slice_mirroring_controller_",
        "workqueue_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || [
            "rest_client_requests_total",
            "rest_client_request_duration_seconds",
            "rest_client_rate_limiter_duration_seconds",
        ]
        .contains(&name)
}

/// Sample family name → label names, from a text exposition (histogram samples
/// folded into their family, `le` dropped).
fn label_sets(text: &str) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, labels) = match line.find('{') {
            Some(i) => (
                &line[..i],
                &line[i + 1..line.rfind('}').unwrap_or(line.len())],
            ),
            None => (line.split(' ').next().unwrap_or_default(), ""),
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| text.contains(&format!("{base}_bucket")))
            .unwrap_or(name);
        let names = labels
            .split(',')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_owned()))
            .filter(|k| k != "le" && !k.is_empty());
        out.entry(family.to_owned()).or_default().extend(names);
    }
    out
}

/// The metrics kube-controller-manager and svcplane both export carry the same sample
/// names and label names in the same text format (upstream's counters registered
/// without `_total` included); the comparison runs after the same workload (slices,
/// Endpoints and mirroring) on both sides.
#[tokio::test]
async fn metric_names_and_labels_match_kube_controller_manager() -> anyhow::Result<()> {
    let test = "differential::metric_names_and_labels_match_kube_controller_manager".to_owned();
    let Some([upstream, ours]) =
        envtest::clusters([Flavor::UpstreamControllers, Flavor::ApiServerOnly], &test)
    else {
        return Ok(());
    };
    let Some(bin) = svcplane_bin_or_skip(&test) else {
        return Ok(());
    };
    let shared = ours_run(&bin, &ours);
    // A workload that moves every compared family on both sides.
    let mut s = mirroring_scenario("metrics")?;
    s.pods = vec![pod("ready", "web").ip("10.0.0.1").ready().build()];
    s.services.push(svc("web").port("http", 80, 8080).build());
    run(s).await?;

    let url_file = upstream
        .kubeconfig
        .parent()
        .map(|d| d.join("kcm-metrics-url"))
        .ok_or_else(|| anyhow::anyhow!("kubeconfig without a directory"))?;
    let url: http::Uri = std::fs::read_to_string(&url_file)?.trim().parse()?;
    let base: http::Uri = format!(
        "https://{}",
        url.authority().map(ToString::to_string).unwrap_or_default()
    )
    .parse()?;
    let mut config = kube::Config::new(base);
    config.accept_invalid_certs = true;
    let kcm = Client::try_from(config)?
        .request_text(http::Request::get(url.path()).body(Vec::new())?)
        .await?;
    let theirs = label_sets(&kcm);
    let mine = label_sets(&shared.metrics_text());
    let mut problems = Vec::new();
    let mut checked = 0;
    for (name, labels) in theirs.iter().filter(|(n, _)| compared(n)) {
        checked += 1;
        match mine.get(name) {
            None => problems.push(format!("{name}: not exported by svcplane")),
            Some(l) if l != labels => {
                problems.push(format!(
                    "{name}: labels {labels:?} upstream, {l:?} svcplane"
                ));
            }
            Some(_) => {}
        }
    }
    assert!(
        checked >= 10,
        "only {checked} upstream families compared:\n{kcm}"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
