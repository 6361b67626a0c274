//! Faults on a real control plane, with the shipped `svcplane` binary (issue 30).
//!
//! Each case gets a fresh envtest harness of its own ([`envtest::launch`]), because
//! the faults are done to that harness: its control socket
//! (`tests/envtest/control.go`) kills and restarts kube-apiserver, compacts etcd and
//! kills kube-controller-manager. The endpoint cases share one shape:
//!
//! 1. a namespace with [`SERVICES`] Services of [`PODS_PER_SERVICE`] ready Pods each
//!    on three Nodes, then the controller, and its initial convergence;
//! 2. the **fault phase**: readiness churn (one Pod's Ready condition flipped through
//!    the status subresource every [`CHURN_EVERY`], as the kubelet writes it) starts,
//!    the fault is injected [`LEAD_IN`] later, and the churn stops when the fault ends
//!    (the API server answers `/readyz` again, the controller is back, the last
//!    tampering write is made). Writes that failed during an outage are read back
//!    afterwards, so the test knows what the cluster really holds;
//! 3. convergence, timed from the end of the fault ([`converge`]): the first moment
//!    the stored state is exact, confirmed by [`QUIET`] without a write;
//! 4. the **baseline phase**: the same number of successful flips at the same pace
//!    with no fault, converged the same way, for the write comparison.
//!
//! "Exact" ([`problems`]) is two independent judgements of the stored objects: a
//! fresh pure plan of them (`svcplane plan`'s code path, [`floor::check`]) writes
//! nothing, and every Pod is in its Services' slices and Endpoints with the readiness
//! it has now ([`state::check`]). Every readiness change that ended up in the final
//! state is therefore reflected: none was lost. Beside that each case checks that no
//! two Services share a ClusterIP or nodePort, and the webhook case that no
//! AllocationClaim outlives its Service.
//!
//! Writes are counted by the API server itself (`apiserver_request_total` for
//! EndpointSlices, Endpoints and AllocationClaims, successful POST/PUT/PATCH/DELETE),
//! read before every deliberate kill so no incarnation's count is lost; the same
//! meter serves kube-controller-manager, which has no per-resource write counter.
//!
//! `bench_faults_side_by_side_with_kube_controller_manager` (ignored; run it with
//! `--ignored --nocapture`) runs the cases that apply to upstream
//! kube-controller-manager (the harness's `--kube-controller-manager`) and svcplane
//! alike and prints one table.
//!
//! The cases run one at a time (`SERIAL`): each is timed, and two control planes on
//! a shared two-core runner would time each other.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use svcplane_controller::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE;
use svcplane_controller::core::fixtures::{node, pod, svc};
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_controller::dump::snapshot::Snapshot;
use svcplane_tests::binary::{SvcplaneProcess, free_port, http_get, lease_holder};
use svcplane_tests::envtest;
use svcplane_tests::objects::{create_node, create_pods, create_service};
use svcplane_tests::sim::floor;
use svcplane_tests::versus::state;
use svcplane_tests::webhook_env::{Certs, certs, install_claim_crd, register_webhooks};
use svcplane_webhook::claim::AllocationClaim;
use tokio::time::Instant;

/// Held for a whole case; tokio's mutex works across the tests' separate runtimes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SERVICES: usize = 30;
const PODS_PER_SERVICE: usize = 10;
/// One readiness flip this often during the churn.
const CHURN_EVERY: Duration = Duration::from_millis(100);
/// Churn before the fault is injected, so it hits a controller with work in flight.
const LEAD_IN: Duration = Duration::from_secs(2);
/// No write for this long, with the state exact, ends a convergence.
const QUIET: Duration = Duration::from_secs(3);
/// A convergence that takes longer fails the case.
const CONVERGE_LIMIT: Duration = Duration::from_secs(90);
/// The long outage: beyond the clients' 30 s connect timeout and a 15 s Lease.
const LONG_OUTAGE_SECS: &str = "35";
/// Services the webhook case creates, half through each replica.
const WEBHOOK_CREATES: usize = 200;

// --- the cases --------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// kube-apiserver SIGKILLed, started again 5 s later.
    ApiServerKilled,
    /// kube-apiserver down for [`LONG_OUTAGE_SECS`].
    ApiServerDownLong,
    /// etcd compacted with the watch cache off, then the API server restarted: every
    /// watch resumes from a compacted revision and gets 410 Gone.
    CompactionExpiresWatches,
    /// The controller SIGKILLed mid-churn, restarted 2 s later.
    ControllerKilled,
    /// Two replicas; the leader SIGKILLed (restarted 2 s later, as a kubelet would).
    LeaderKilled,
    /// A second writer flips endpoints' readiness in, and deletes, the controller's
    /// EndpointSlices.
    SecondWriter,
}

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::ApiServerKilled => "kube-apiserver SIGKILL, back after 5 s",
            Case::ApiServerDownLong => "kube-apiserver down 35 s",
            Case::CompactionExpiresWatches => "etcd compaction + watch expiry (410)",
            Case::ControllerKilled => "controller SIGKILL, restarted after 2 s",
            Case::LeaderKilled => "leader SIGKILL, two replicas",
            Case::SecondWriter => "second writer edits / deletes slices",
        }
    }

    /// Does the case apply to upstream kube-controller-manager as the harness runs it
    /// (one instance, no leader election)?
    fn upstream_too(self) -> bool {
        self != Case::LeaderKilled
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Svcplane,
    Upstream,
}

/// What one case measured.
#[derive(Debug, Clone, Default)]
struct Figures {
    /// From the end of the fault to the first exact state.
    converged: Duration,
    /// Controller writes from the start of the churn to convergence, with the fault
    /// and in the baseline (same successful flips, no fault).
    writes_fault: u64,
    writes_baseline: u64,
    /// Readiness flips the API server accepted during the fault phase.
    flips: u64,
    /// Flips refused (or lost) because the API server was down.
    refused: u64,
}

impl Figures {
    fn line(&self, side: &str, case: &str) -> String {
        format!(
            "e2e_faults [{side}] {case}: converged {:.1} s after the fault; {} writes \
             (baseline without the fault: {}) for {} flips ({} refused during the fault)",
            self.converged.as_secs_f64(),
            self.writes_fault,
            self.writes_baseline,
            self.flips,
            self.refused
        )
    }
}

// --- the tests --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_sigkill_for_5s_loses_no_transition() {
    endpoint_test(Case::ApiServerKilled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_down_past_client_timeouts_loses_no_transition() {
    endpoint_test(Case::ApiServerDownLong).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_with_watch_cache_off_relists_to_the_exact_state() {
    endpoint_test(Case::CompactionExpiresWatches).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svcplane_sigkilled_mid_churn_restarts_to_the_exact_state() {
    endpoint_test(Case::ControllerKilled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_of_two_replicas_hands_over_without_loss() {
    endpoint_test(Case::LeaderKilled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_editing_and_deleting_slices_is_repaired() {
    endpoint_test(Case::SecondWriter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_replicas_survive_an_apiserver_restart_during_200_creates() {
    let Some(bin) = prerequisites("e2e_faults webhook") else {
        return;
    };
    let _one = SERIAL.lock().await;
    let f = webhook_case(&bin).await.unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "e2e_faults [svcplane] webhook: {} Services through 2 replicas across a kube-apiserver \
         restart; claims exact {:.1} s after it; {} claim writes (baseline: {}); {} create \
         attempts refused during the restart",
        WEBHOOK_CREATES,
        f.converged.as_secs_f64(),
        f.writes_fault,
        f.writes_baseline,
        f.refused
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a bench: minutes of two controllers side by side; run with --ignored --nocapture"]
async fn bench_faults_side_by_side_with_kube_controller_manager() {
    let Some(bin) = prerequisites("e2e_faults bench") else {
        return;
    };
    let _one = SERIAL.lock().await;
    let cases = [
        Case::ApiServerKilled,
        Case::ApiServerDownLong,
        Case::CompactionExpiresWatches,
        Case::ControllerKilled,
        Case::LeaderKilled,
        Case::SecondWriter,
    ];
    let mut rows = Vec::new();
    for case in cases {
        let mut cells = Vec::new();
        for side in [Side::Upstream, Side::Svcplane] {
            if side == Side::Upstream && !case.upstream_too() {
                cells.push("n/a (one instance, no leader election)".to_owned());
                continue;
            }
            let cell = match run_endpoint_case(case, side, &bin).await {
                Ok(f) => format!(
                    "{:.1} s / {} (baseline {})",
                    f.converged.as_secs_f64(),
                    f.writes_fault,
                    f.writes_baseline
                ),
                Err(e) => format!("FAILED: {e:#}"),
            };
            cells.push(cell);
        }
        rows.push((case.label(), cells));
    }
    let mut table = String::from(
        "| fault | kube-controller-manager: converged after the fault / writes | svcplane |\n\
         | --- | --- | --- |\n",
    );
    for (label, cells) in rows {
        table.push_str(&format!("| {label} | {} | {} |\n", cells[0], cells[1]));
    }
    eprintln!("{table}");
}

/// The harness and the binary, or `None` after a skip.
fn prerequisites(test: &str) -> Option<PathBuf> {
    if let Some(kubeconfig) = envtest::external_kubeconfig() {
        svcplane_tests::skip::skip(
            test,
            &svcplane_tests::skip::Skip::not_applicable(
                format!(
                    "{} is set ({}): the faults are done to a harness of the suite's own",
                    envtest::ENV_EXTERNAL,
                    kubeconfig.display()
                ),
                format!("unset {} to run them", envtest::ENV_EXTERNAL),
            ),
        );
        return None;
    }
    let bin = svcplane_tests::binary::svcplane_bin_or_skip(test)?;
    if let Err(why) = envtest::build::harness() {
        svcplane_tests::skip::skip(test, &why);
        return None;
    }
    Some(bin)
}

async fn endpoint_test(case: Case) {
    let Some(bin) = prerequisites(&format!("e2e_faults {case:?}")) else {
        return;
    };
    let _one = SERIAL.lock().await;
    let f = run_endpoint_case(case, Side::Svcplane, &bin)
        .await
        .unwrap_or_else(|e| panic!("{}: {e:#}", case.label()));
    eprintln!("{}", f.line("svcplane", case.label()));
}

// --- the endpoint cases -----------------------------------------------------------

async fn run_endpoint_case(case: Case, side: Side, bin: &Path) -> anyhow::Result<Figures> {
    let mut args = vec!["--timeout=15m".to_owned()];
    if case == Case::CompactionExpiresWatches {
        args.push("--watch-cache=false".into());
    }
    if side == Side::Upstream {
        args.push("--kube-controller-manager".into());
        args.push("--controllers=endpointslice,endpoint,endpointslicemirroring".into());
    }
    let harness = envtest::launch(&args)?;
    let client = harness.cluster().client().await?;
    let ns = envtest::create_namespace(&client, "faults").await?;
    let mut pods = setup_workload(&client, &ns).await?;
    let logs = std::env::temp_dir().join(format!("e2e-faults-{}-{case:?}", std::process::id()));
    std::fs::create_dir_all(&logs)?;

    let replicas = match side {
        Side::Upstream => Vec::new(),
        Side::Svcplane => {
            let n = if case == Case::LeaderKilled { 2 } else { 1 };
            let lease_ns = if n > 1 {
                Some(envtest::create_namespace(&client, "faults-lease").await?)
            } else {
                None
            };
            (0..n)
                .map(|i| {
                    Replica::start(
                        bin,
                        &format!("svcplane-{i}"),
                        run_args(&harness.kubeconfig, lease_ns.as_deref()),
                        &logs,
                    )
                })
                .collect()
        }
    };
    for r in &replicas {
        r.wait_ready(Duration::from_secs(60)).await?;
    }
    let mut meter = WriteMeter::new(&client, &["endpointslices", "endpoints"]).await?;
    let start = Instant::now();
    converge(&client, &meter, start).await?;

    // The fault phase.
    let before = meter.total(&client).await?;
    let churn = Churn::start(client.clone(), ns.clone(), pods.clone(), None);
    tokio::time::sleep(LEAD_IN).await;
    let mut tampering = 0;
    let fault_end = match case {
        Case::ApiServerKilled | Case::ApiServerDownLong => {
            let secs = if case == Case::ApiServerKilled {
                "5"
            } else {
                LONG_OUTAGE_SECS
            };
            meter.carry(&client).await?;
            harness.control("stop-apiserver-for", &[secs]).await?;
            wait_apiserver(&client).await?
        }
        Case::CompactionExpiresWatches => {
            // A little more history first, so every resource's last resourceVersion is
            // older than the compaction.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let rev = harness.control("compact-etcd", &[]).await?;
            meter.carry(&client).await?;
            harness.control("restart-apiserver", &[]).await?;
            eprintln!("e2e_faults: compacted etcd to revision {rev}, API server restarted");
            Instant::now()
        }
        Case::ControllerKilled => {
            match side {
                Side::Svcplane => {
                    replicas[0].kill_and_restart_after(Duration::from_secs(2));
                    replicas[0].wait_restarted(Duration::from_secs(60)).await?;
                }
                Side::Upstream => {
                    harness.control("kill-kcm", &[]).await?;
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    harness.control("start-kcm", &[]).await?;
                }
            }
            Instant::now()
        }
        Case::LeaderKilled => {
            let lease_ns = replicas[0].lease_ns.clone().unwrap_or_default();
            let leader = leader_of(&client, &lease_ns).await?;
            let r = replicas
                .iter()
                .find(|r| r.name == leader)
                .ok_or_else(|| anyhow::anyhow!("the Lease names {leader}, not a replica"))?;
            // The fault is the kill itself; the churn stops with it, and the
            // convergence that follows includes the handover.
            r.kill_and_restart_after(Duration::from_secs(2));
            Instant::now()
        }
        Case::SecondWriter => {
            tampering = tamper(&client, &ns).await?;
            Instant::now()
        }
    };
    let outcome = churn.stop(&client).await;
    pods = outcome.pods;
    let converged = converge(&client, &meter, fault_end).await?;
    let writes_fault = (meter.total(&client).await? - before).saturating_sub(tampering);

    // The baseline: as many accepted flips, at the same pace, and no fault.
    let before = meter.total(&client).await?;
    let baseline = Churn::start(client.clone(), ns.clone(), pods, Some(outcome.flips));
    let baseline = baseline.finish(&client).await;
    converge(&client, &meter, Instant::now()).await?;
    let writes_baseline = meter.total(&client).await? - before;
    anyhow::ensure!(
        baseline.refused == 0,
        "{} baseline flips refused",
        baseline.refused
    );

    for r in &replicas {
        // Without leader election nothing but a crash ends a replica; with it, only
        // a kill (the follower keeps running, the new leader keeps its Lease).
        anyhow::ensure!(
            r.alive() && r.unexpected_restarts() == 0,
            "{} exited {} times on its own (log: {})",
            r.name,
            r.unexpected_restarts(),
            r.log.display()
        );
    }
    let snap = state::snapshot(&client).await?;
    let dup = duplicate_allocations(
        &snap
            .services
            .values()
            .map(|s| (**s).clone())
            .collect::<Vec<_>>(),
    );
    anyhow::ensure!(dup.is_empty(), "duplicate allocations: {dup:?}");
    drop(replicas);
    drop(harness);
    if std::env::var_os("SVCPLANE_FAULTS_DEBUG").is_none() {
        let _ = std::fs::remove_dir_all(&logs);
    }
    Ok(Figures {
        converged,
        writes_fault,
        writes_baseline,
        flips: outcome.flips,
        refused: outcome.refused,
    })
}

/// `svcplane run` as a Deployment would run it (endpoint controllers, no webhook):
/// without leader election for one replica, as the harness runs kube-controller-manager,
/// with it (and short Lease timings, to keep the case short) for two.
fn run_args(kubeconfig: &Path, lease_ns: Option<&str>) -> Vec<String> {
    let mut args = vec![
        "run".to_owned(),
        "--webhook=false".into(),
        "--controllers=endpointslice,endpoints,endpointslicemirroring".into(),
        format!("--kubeconfig={}", kubeconfig.display()),
    ];
    match lease_ns {
        None => args.push("--leader-elect=false".into()),
        Some(ns) => args.extend([
            format!("--leader-elect-resource-namespace={ns}"),
            "--leader-elect-lease-duration=4s".into(),
            "--leader-elect-renew-deadline=3s".into(),
            "--leader-elect-retry-period=1s".into(),
        ]),
    }
    args
}

/// The Nodes, Services and ready Pods of the workload; the Pods' names and readiness.
async fn setup_workload(client: &Client, ns: &str) -> anyhow::Result<Vec<(String, bool)>> {
    for (i, zone) in ["zone-a", "zone-b", "zone-c"].iter().enumerate() {
        create_node(client, ns, &node(&format!("node-{i}"), Some(zone))).await?;
    }
    let mut pods = Vec::new();
    for s in 0..SERVICES {
        let name = format!("svc-{s}");
        create_service(client, ns, &svc(&name).port("http", 80, 8080).build()).await?;
        for p in 0..PODS_PER_SERVICE {
            let n = s * PODS_PER_SERVICE + p;
            pods.push(
                pod(&format!("{name}-{p}"), &name)
                    .node(&format!("node-{}", n % 3))
                    .ip(&format!("10.1.{}.{}", n / 200, n % 200 + 1))
                    .ready()
                    .build(),
            );
        }
    }
    create_pods(client, ns, &pods).await?;
    Ok(pods.iter().map(|p| (p.name_any(), true)).collect())
}

/// The second writer: every endpoint of four of the controller's slices set not
/// ready, and four other slices deleted. Its write count (subtracted from the
/// controller's).
async fn tamper(client: &Client, ns: &str) -> anyhow::Result<u64> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    let mut writes = 0;
    for name in names.iter().take(4) {
        // A second writer that lost a race with svcplane's own write of the slice
        // reads it again and edits the new version, as `kubectl edit` makes one do.
        for attempt in 1.. {
            let Some(mut s) = api.get_opt(name).await? else {
                break;
            };
            for e in s.endpoints_mut() {
                e.conditions.get_or_insert_default().ready = Some(false);
            }
            s.metadata.managed_fields = None;
            match api.replace(name, &PostParams::default(), &s).await {
                Ok(_) => {
                    writes += 1;
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < 10 => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
    for name in names.iter().skip(4).take(4) {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => writes += 1,
            // Deleted by svcplane meanwhile: nothing to tamper with.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(writes)
}

// --- the webhook case -------------------------------------------------------------

/// The webhook's own ranges, inside the harness's 10.96.0.0/16 and 30000-32767: room
/// for both phases' Services (2 × 200) and the warm-up.
const WEBHOOK_CIDR: &str = "10.96.64.0/22";
const WEBHOOK_PORTS: &str = "30000-30999";

async fn webhook_case(bin: &Path) -> anyhow::Result<Figures> {
    let harness = envtest::launch(&["--timeout=15m".to_owned()])?;
    let client = harness.cluster().client().await?;
    install_claim_crd(&client).await?;
    let dir = std::env::temp_dir().join(format!("e2e-faults-{}-webhook", std::process::id()));
    let tls = certs(&dir, &["127.0.0.1"])?;
    let lease_ns = envtest::create_namespace(&client, "faults-lease").await?;
    let replicas: Vec<(Replica, String)> = (0..2)
        .map(|i| {
            let port = free_port();
            // The default Lease timings here: a restart of a few seconds stays within
            // the 10 s renew deadline, as it does in a real cluster.
            let mut args = run_args(&harness.kubeconfig, Some(&lease_ns));
            args.retain(|a| {
                a != "--webhook=false"
                    && !a.starts_with("--leader-elect-lease-duration")
                    && !a.starts_with("--leader-elect-renew-deadline")
                    && !a.starts_with("--leader-elect-retry-period")
            });
            args.extend([
                format!("--webhook-bind-address=127.0.0.1:{port}"),
                format!("--tls-cert-file={}", tls.cert_file.display()),
                format!("--tls-private-key-file={}", tls.key_file.display()),
                format!("--service-cluster-ip-range={WEBHOOK_CIDR}"),
                format!("--service-node-port-range={WEBHOOK_PORTS}"),
                "--service-ranges-from=flags".into(),
                "--claim-repair-interval=1s".into(),
                "--claim-grace-period=5s".into(),
            ]);
            (
                Replica::start(bin, &format!("svcplane-{i}"), args, &dir),
                format!("https://127.0.0.1:{port}"),
            )
        })
        .collect();
    for (r, _) in &replicas {
        r.wait_ready(Duration::from_secs(60)).await?;
    }
    let mut meter = WriteMeter::new(&client, &["allocationclaims"]).await?;

    // The baseline: 200 creates, no fault.
    let before = meter.total(&client).await?;
    let base_ns = webhook_namespaces(&client, &replicas, &tls, "faults-base").await?;
    let base = create_services(&client, &base_ns).await?;
    claims_exact(&client, Instant::now()).await?;
    let writes_baseline = meter.total(&client).await? - before;
    anyhow::ensure!(
        base.refused == 0,
        "{} baseline creates refused",
        base.refused
    );

    // The same with kube-apiserver restarted while they run.
    let before = meter.total(&client).await?;
    let fault_ns = webhook_namespaces(&client, &replicas, &tls, "faults-hook").await?;
    let restarted = Arc::new(tokio::sync::Mutex::new(None));
    let fault = {
        let (harness, restarted, client) = (&harness, restarted.clone(), client.clone());
        async move {
            // Once the first creates are in flight.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let carried = meter.carry(&client).await;
            harness.control("restart-apiserver", &[]).await?;
            *restarted.lock().await = Some(Instant::now());
            carried.map(|()| meter)
        }
    };
    let (created, meter) = tokio::join!(create_services(&client, &fault_ns), fault);
    let (created, meter) = (created?, meter?);
    let fault_end = restarted
        .lock()
        .await
        .ok_or_else(|| anyhow::anyhow!("no restart"))?;
    let converged = claims_exact(&client, fault_end).await?;
    let writes_fault = meter.total(&client).await? - before;
    for (r, _) in &replicas {
        anyhow::ensure!(
            r.alive() && r.unexpected_restarts() == 0,
            "{} exited {} times on its own (log: {})",
            r.name,
            r.unexpected_restarts(),
            r.log.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Figures {
        converged,
        writes_fault,
        writes_baseline,
        flips: WEBHOOK_CREATES as u64,
        refused: created.refused,
    })
}

/// Two namespaces named from `prefix`, each sent to one replica's webhook, so both
/// replicas allocate from the same ranges at once. Waits until the API server calls
/// them (it picks up new configurations asynchronously).
async fn webhook_namespaces(
    client: &Client,
    replicas: &[(Replica, String)],
    tls: &Certs,
    prefix: &str,
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, (_, url)) in replicas.iter().enumerate() {
        let ns = envtest::create_namespace(client, &format!("{prefix}-{i}")).await?;
        register_webhooks(client, &ns, url, &tls.ca_pem).await?;
        let api: Api<Service> = Api::namespaced(client.clone(), &ns);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = api
                .create(&PostParams::default(), &node_port_service("warm-up"))
                .await?;
            api.delete("warm-up", &DeleteParams::default()).await?;
            if in_webhook_range(&s) {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the webhook never took over {ns}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        out.push(ns);
    }
    Ok(out)
}

fn node_port_service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "NodePort", "selector": {"app": name},
                 "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap_or_default()
}

fn in_webhook_range(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok())
        .is_some_and(|ip| {
            let o = ip.octets();
            o[0] == 10 && o[1] == 96 && (64..68).contains(&o[2])
        })
}

#[derive(Debug, Default)]
struct Created {
    /// Attempts that failed (API server or webhook unreachable) and were retried.
    refused: u64,
}

/// [`WEBHOOK_CREATES`] NodePort Services spread over `namespaces`, all at once; each
/// retried until it exists (a 409 after a lost reply means it does). Every one must
/// have its ClusterIP from the webhook's range: none slipped past it.
async fn create_services(client: &Client, namespaces: &[String]) -> anyhow::Result<Created> {
    let jobs: Vec<(String, String)> = (0..WEBHOOK_CREATES)
        .map(|i| (namespaces[i % namespaces.len()].clone(), format!("svc-{i}")))
        .collect();
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(jobs)
        .map(|(ns, name)| {
            let (client, refused) = (client.clone(), refused.clone());
            async move {
                let api: Api<Service> = Api::namespaced(client, &ns);
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    match api
                        .create(&PostParams::default(), &node_port_service(&name))
                        .await
                    {
                        Ok(_) => return Ok(()),
                        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                        Err(e) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            anyhow::ensure!(Instant::now() < deadline, "creating {ns}/{name}: {e}");
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                    }
                }
            }
        })
        .buffer_unordered(WEBHOOK_CREATES)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    for ns in namespaces {
        let api: Api<Service> = Api::namespaced(client.clone(), ns);
        for s in api.list(&ListParams::default()).await?.items {
            anyhow::ensure!(
                in_webhook_range(&s),
                "{ns}/{} got {:?}, not from the webhook",
                s.name_any(),
                s.spec.and_then(|s| s.cluster_ip)
            );
        }
    }
    Ok(Created {
        refused: refused.load(Ordering::Relaxed),
    })
}

/// Waits until the stored claims are exactly those of the live Services (none leaked,
/// none missing) and no two Services share a value; the time from `since`.
async fn claims_exact(client: &Client, since: Instant) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + CONVERGE_LIMIT;
    loop {
        let services = Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let dup = duplicate_allocations(&services);
        anyhow::ensure!(dup.is_empty(), "duplicate allocations: {dup:?}");
        let want: BTreeSet<String> = services
            .iter()
            .filter(|s| in_webhook_range(s))
            .flat_map(|s| {
                let spec = s.spec.clone().unwrap_or_default();
                let ip = spec.cluster_ip.unwrap_or_default();
                let ports: Vec<String> = spec
                    .ports
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|p| p.node_port)
                    .map(|p| format!("nodeport-{p}"))
                    .collect();
                std::iter::once(format!("ip-{ip}")).chain(ports)
            })
            .collect();
        let have: BTreeSet<String> = Api::<AllocationClaim>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        if want == have {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "claims not exact: leaked {:?}, missing {:?}",
            have.difference(&want).collect::<Vec<_>>(),
            want.difference(&have).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// --- shared machinery -------------------------------------------------------------

/// ClusterIPs and nodePorts held by more than one Service.
fn duplicate_allocations(services: &[Service]) -> Vec<String> {
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in services {
        let who = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        let spec = s.spec.clone().unwrap_or_default();
        for ip in spec.cluster_ips.unwrap_or_default() {
            if ip != "None" && !ip.is_empty() {
                owners
                    .entry(format!("ip {ip}"))
                    .or_default()
                    .push(who.clone());
            }
        }
        for p in spec.ports.unwrap_or_default() {
            if let Some(n) = p.node_port {
                owners
                    .entry(format!("nodePort {n}/{}", p.protocol.unwrap_or_default()))
                    .or_default()
                    .push(who.clone());
            }
        }
    }
    owners
        .into_iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, v)| format!("{k}: {v:?}"))
        .collect()
}

/// What is wrong with the stored endpoint state (empty: exact).
fn problems(snap: &Snapshot) -> Vec<String> {
    let mut p = floor::check(snap, DEFAULT_MAX_ENDPOINTS_PER_SLICE, 10);
    p.extend(state::check(snap, 10));
    p
}

/// Waits for the first exact state (measured from `since`), then for [`QUIET`] with
/// no controller write, and checks it is still exact. The first figure is at the
/// resolution of one snapshot (a few hundred ms on a loaded runner).
async fn converge(client: &Client, meter: &WriteMeter, since: Instant) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + CONVERGE_LIMIT;
    let mut first: Option<Duration> = None;
    let mut last = meter.total(client).await?;
    let mut quiet_since = Instant::now();
    loop {
        let snap = state::snapshot(client).await?;
        let found = problems(&snap);
        let writes = meter.total(client).await?;
        if writes != last {
            last = writes;
            quiet_since = Instant::now();
        }
        if found.is_empty() {
            let at = *first.get_or_insert_with(|| since.elapsed());
            if quiet_since.elapsed() >= QUIET {
                return Ok(at);
            }
        } else {
            first = None;
            if std::env::var_os("SVCPLANE_FAULTS_DEBUG").is_some() {
                eprintln!("{:.1} s: {found:?}", since.elapsed().as_secs_f64());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "not exact after {CONVERGE_LIMIT:?}: {found:#?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls until the API server answers again after an outage; when it did.
async fn wait_apiserver(client: &Client) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    // Down first: the stop was asked for, but give it a moment to take effect.
    tokio::time::sleep(Duration::from_millis(200)).await;
    loop {
        let probe = client
            .request_text(http::Request::get("/readyz").body(Vec::new())?)
            .await;
        if probe.is_ok() {
            return Ok(Instant::now());
        }
        anyhow::ensure!(Instant::now() < deadline, "the API server never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn leader_of(client: &Client, lease_ns: &str) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(h) = lease_holder(client, lease_ns).await {
            return Ok(h);
        }
        anyhow::ensure!(Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Controller writes as kube-apiserver counts them (`apiserver_request_total`,
/// successful writes to `resources`). The counter restarts with the API server, so
/// [`Self::carry`] banks it just before each deliberate kill.
#[derive(Debug)]
struct WriteMeter {
    resources: Vec<String>,
    carried: u64,
}

impl WriteMeter {
    async fn new(client: &Client, resources: &[&str]) -> anyhow::Result<Self> {
        let m = Self {
            resources: resources.iter().map(|r| (*r).to_owned()).collect(),
            carried: 0,
        };
        m.scrape(client).await?;
        Ok(m)
    }

    async fn scrape(&self, client: &Client) -> anyhow::Result<u64> {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        let label = |line: &str, name: &str| -> Option<String> {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let len = line[start..].find('"')?;
            Some(line[start..start + len].to_owned())
        };
        let mut n = 0.0;
        for line in text.lines() {
            if !line.starts_with("apiserver_request_total{") {
                continue;
            }
            let resource = label(line, "resource").unwrap_or_default();
            let verb = label(line, "verb").unwrap_or_default();
            let code = label(line, "code").unwrap_or_default();
            if self.resources.contains(&resource)
                && ["POST", "PUT", "PATCH", "DELETE", "APPLY"].contains(&verb.as_str())
                && code.starts_with('2')
                && label(line, "subresource").unwrap_or_default().is_empty()
                && label(line, "dry_run").unwrap_or_default().is_empty()
            {
                n += line
                    .rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0);
            }
        }
        Ok(n as u64)
    }

    /// Banks the current incarnation's count (call just before killing the server).
    async fn carry(&mut self, client: &Client) -> anyhow::Result<()> {
        self.carried += self.scrape(client).await?;
        Ok(())
    }

    async fn total(&self, client: &Client) -> anyhow::Result<u64> {
        Ok(self.carried + self.scrape(client).await?)
    }
}

/// Readiness churn on a task of its own: one flip every [`CHURN_EVERY`], the Pod
/// picked by a fixed sequence, until stopped or `limit` flips were accepted.
struct Churn {
    ns: String,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<ChurnOutcome>,
}

#[derive(Debug, Default)]
struct ChurnOutcome {
    /// Names and readiness as the cluster holds them at the end.
    pods: Vec<(String, bool)>,
    flips: u64,
    refused: u64,
    /// Pods whose last write failed: they may or may not have changed.
    uncertain: BTreeSet<usize>,
}

impl Churn {
    fn start(client: Client, ns: String, pods: Vec<(String, bool)>, limit: Option<u64>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let namespace = ns.clone();
        let task = tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let mut out = ChurnOutcome {
                pods,
                ..ChurnOutcome::default()
            };
            // A fixed multiplicative sequence: the same Pods in the same order every
            // run, spread over every Service.
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            while !flag.load(Ordering::Relaxed) && limit.is_none_or(|l| out.flips < l) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % out.pods.len() as u64) as usize;
                let ready = !out.pods[i].1;
                let status = if ready { "True" } else { "False" };
                let body = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
                let sent = tokio::time::timeout(
                    Duration::from_secs(5),
                    api.patch_status(
                        &out.pods[i].0,
                        &PatchParams::default(),
                        &Patch::Strategic(&body),
                    ),
                )
                .await;
                match sent {
                    Ok(Ok(_)) => {
                        out.pods[i].1 = ready;
                        out.flips += 1;
                        out.uncertain.remove(&i);
                    }
                    _ => {
                        out.refused += 1;
                        out.uncertain.insert(i);
                    }
                }
                tokio::time::sleep(CHURN_EVERY).await;
            }
            out
        });
        Self { ns, stop, task }
    }

    /// Stops the churn and reads back what failed writes left.
    async fn stop(self, client: &Client) -> ChurnOutcome {
        self.stop.store(true, Ordering::Relaxed);
        self.finish(client).await
    }

    /// Waits for the churn to end; reads back the uncertain Pods.
    async fn finish(self, client: &Client) -> ChurnOutcome {
        let mut out = self.task.await.unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &self.ns);
        for &i in &out.uncertain.clone() {
            if let Ok(p) = api.get(&out.pods[i].0).await {
                out.pods[i].1 = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            }
        }
        out.uncertain.clear();
        out
    }
}

/// One `svcplane run` replica kept running as a kubelet would keep a container:
/// restarted when it exits (after a lost Lease, or a kill), with the same flags and
/// ports. Stopped (killed) when dropped.
struct Replica {
    name: String,
    admin: SocketAddr,
    lease_ns: Option<String>,
    log: PathBuf,
    pid: Arc<AtomicU32>,
    starts: Arc<AtomicU32>,
    kills: AtomicU32,
    /// Delay before the next restart, in ms (set by a deliberate kill).
    delay_ms: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    fn start(bin: &Path, name: &str, mut args: Vec<String>, dir: &Path) -> Self {
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        args.push(format!("--metrics-bind-address={admin}"));
        let lease_ns = args
            .iter()
            .find_map(|a| a.strip_prefix("--leader-elect-resource-namespace="))
            .map(str::to_owned);
        let log = dir.join(format!("{name}.log"));
        let (pid, starts, delay_ms, stop) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicU32::new(1000)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (bin, name, log) = (bin.to_owned(), name.to_owned(), log.clone());
            let (pid, starts, delay_ms, stop) =
                (pid.clone(), starts.clone(), delay_ms.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let file = File::options()
                        .create(true)
                        .append(true)
                        .open(&log)
                        .unwrap();
                    let mut p = SvcplaneProcess::spawn_with_stderr(
                        &bin,
                        &name,
                        &args,
                        Some(admin),
                        file.into(),
                    );
                    pid.store(p.pid(), Ordering::SeqCst);
                    starts.fetch_add(1, Ordering::SeqCst);
                    while !p.exited() && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    drop(p);
                    let delay = delay_ms.swap(1000, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(u64::from(delay)));
                }
            })
        };
        Self {
            name: name.to_owned(),
            admin,
            lease_ns,
            log,
            pid,
            starts,
            kills: AtomicU32::new(0),
            delay_ms,
            stop,
            thread: Some(thread),
        }
    }

    async fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let admin = self.admin;
        loop {
            let probe = tokio::task::spawn_blocking(move || http_get(admin, "/readyz")).await?;
            if matches!(probe, Ok((200, _))) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} not ready after {limit:?} (log: {})",
                self.name,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL; the next start comes `after` later.
    fn kill_and_restart_after(&self, after: Duration) {
        self.delay_ms
            .store(after.as_millis() as u32, Ordering::SeqCst);
        self.kills.fetch_add(1, Ordering::SeqCst);
        let pid = self.pid.load(Ordering::SeqCst);
        let ok = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -KILL {} ({pid})", self.name);
    }

    /// Waits for the start after a kill, and for it to be ready.
    async fn wait_restarted(&self, limit: Duration) -> anyhow::Result<()> {
        let before = self.starts.load(Ordering::SeqCst);
        let deadline = Instant::now() + limit;
        while self.starts.load(Ordering::SeqCst) == before {
            anyhow::ensure!(Instant::now() < deadline, "{} never restarted", self.name);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.wait_ready(limit).await
    }

    /// Its supervisor still runs.
    fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Exits the test did not cause (a lost Lease, a crash).
    fn unexpected_restarts(&self) -> u32 {
        let starts = self.starts.load(Ordering::SeqCst);
        starts.saturating_sub(1 + self.kills.load(Ordering::SeqCst))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
