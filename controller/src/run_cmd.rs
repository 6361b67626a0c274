//! `svcplane run`: the controllers and the admission webhook in one process.
//!
//! Every replica serves the webhook and the admin endpoints; only the replica holding
//! the leader Lease runs the controllers and the repair loops, so exactly one process
//! writes EndpointSlices and Endpoints at a time. Lifecycle:
//! 1. wait until the API server answers (retrying with the shared jittered backoff; one
//!    warning per outage, WH-15);
//! 2. start the webhook's watches and HTTPS server, and the admin server;
//! 3. campaign for the Lease; on winning, start the controllers;
//! 4. on SIGTERM: `/readyz` fails, the controllers stop taking work and finish the
//!    writes in flight, the Lease is released (the other replica takes over at once),
//!    the webhook drains, the process exits 0 — all within `--shutdown-grace-period`;
//! 5. a leader that cannot renew its Lease before the renew deadline exits with an
//!    error, so a cut-off replica never keeps writing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::Client;
use svcplane_allocator::AllocatorConfig;
use svcplane_webhook::metrics::WebhookMetrics;
use svcplane_webhook::retry::{Backoff, Outage, wait};
use svcplane_webhook::shell::repair::RepairConfig;
use svcplane_webhook::shell::{
    KubeClaims, ServiceSource, Started, Webhook, WebhookOptions, start_watches,
};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cli::RunArgs;
use crate::kube_client::{self, Clients, users};
use crate::leader::{self, LeaderElector};
use crate::process::{AdminError, AdminServers, Serving, ServingState, serve_webhook};
use crate::shell::admin;
use crate::shell::cache::{Cache, Resource};
use crate::shell::metrics::Metrics;
use crate::shell::runtime::{self, ControllerOptions, Controllers};
use crate::shell::secure_metrics::SecureMetrics;

/// How long releasing the Lease may take at shutdown (on top of the grace period).
pub const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The webhook side of a run.
#[derive(Debug, Clone)]
pub struct WebhookRun {
    /// Where and how it serves HTTPS.
    pub serving: Serving,
    pub options: WebhookOptions,
}

/// Leader election settings.
#[derive(Debug, Clone)]
pub struct LeaderRun {
    pub namespace: String,
    pub name: String,
    pub params: leader::Params,
}

/// Everything `run` needs, independent of the command line.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub controllers: ControllerOptions,
    pub webhook: Option<WebhookRun>,
    pub leader: Option<LeaderRun>,
    /// Admin server address; `None` serves none (tests).
    pub metrics_bind: Option<std::net::SocketAddr>,
    /// The secure metrics port, if on (then the admin server serves probes only).
    pub secure_metrics: Option<SecureMetrics>,
    pub shutdown_grace: Duration,
    pub identity: String,
}

/// Why `run` ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("leader election: {0}")]
    Leader(#[from] leader::LeaderError),
    #[error("leader election stopped while leading")]
    LeadershipEnded,
    #[error("webhook: {0}")]
    Webhook(String),
    #[error(transparent)]
    Admin(#[from] AdminError),
}

impl RunOptions {
    /// Options from the command line; the identity comes from `POD_NAME` or the host.
    pub fn from_args(args: &RunArgs) -> anyhow::Result<Self> {
        let allocator: AllocatorConfig = args
            .ranges
            .config()
            .map_err(|e| anyhow::anyhow!("allocator ranges: {e}"))?;
        let identity = leader::identity_from_env();
        let seed = kube_client::random_seed();
        let enabled = crate::shell::registry::names()
            .filter(|name| args.controllers.enables(name))
            .collect();
        let shared = crate::shell::flag_group::Shared {
            allocator: allocator.clone(),
            follow_service_cidrs: args.ranges.follow_cluster(),
            seed,
        };
        let controllers = ControllerOptions {
            enabled,
            settings: crate::shell::registry::settings(&args.controller_flags.0, &shared)
                .map_err(|e| anyhow::anyhow!("controller flags: {e}"))?,
            identity: identity.clone(),
            list_page_size: 500,
        };
        let webhook = if args.webhook {
            let w = &args.webhook_server;
            let serving = Serving::from_flags(w)
                .map_err(|e| anyhow::anyhow!("{e} (or run with --webhook=false)"))?;
            Some(WebhookRun {
                serving,
                options: WebhookOptions {
                    allocator,
                    seed,
                    repair: RepairConfig {
                        interval: w.claim_repair_interval,
                        grace: w.claim_grace_period,
                    },
                    retain_released_values: w.retain_released_values,
                    // Replaced by the process' own counters when the webhook starts.
                    metrics: WebhookMetrics::default(),
                    // The process watches Services (and ServiceCIDRs) once, for the
                    // controllers too.
                    services: ServiceSource::External,
                    explicit_ranges: args.ranges.explicit_cluster_ip_ranges(),
                    follow_service_cidrs: args.ranges.follow_cluster(),
                    identity: identity.clone(),
                },
            })
        } else {
            None
        };
        let leader = if args.leader_elect {
            let params = leader::Params {
                lease_duration: args.leader_elect_lease_duration,
                renew_deadline: args.leader_elect_renew_deadline,
                retry_period: args.leader_elect_retry_period,
            };
            params.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
            let namespace =
                crate::process::namespace_or_pod(args.leader_elect_resource_namespace.as_deref());
            Some(LeaderRun {
                namespace,
                name: args.leader_elect_resource_name.clone(),
                params,
            })
        } else {
            None
        };
        Ok(Self {
            controllers,
            webhook,
            leader,
            metrics_bind: Some(args.metrics.metrics_bind_address),
            secure_metrics: args.metrics.secure().map_err(|e| anyhow::anyhow!(e))?,
            shutdown_grace: args.shutdown_grace_period,
            identity,
        })
    }

    /// `svcplane run`'s defaults, as the command line gives them, for tests and the
    /// simulator: every default controller, no webhook, no leader election, no admin
    /// server, a fixed identity and allocator seed, and `allocator`'s ranges.
    #[cfg(any(test, feature = "test-support"))]
    pub fn for_tests(allocator: AllocatorConfig) -> Self {
        use clap::Parser;
        let cli = crate::cli::Cli::parse_from(["svcplane", "run", "--webhook=false"]);
        let crate::cli::Command::Run(args) = cli.command else {
            unreachable!("`svcplane run` parses as the run command");
        };
        // The defaults parse: `from_args` only fails on bad flags or leader timings.
        #[allow(clippy::expect_used)]
        let mut options = Self::from_args(&args).expect("the default run flags are valid");
        if let Some(repair) = options
            .controllers
            .settings
            .get_mut::<crate::shell::options::AllocatorRepairConfig>()
        {
            repair.allocator = allocator;
            repair.seed = 1;
        }
        options.controllers.identity = "svcplane-test".into();
        options.identity = "svcplane-test".into();
        options.leader = None;
        options.metrics_bind = None;
        options
    }
}

/// What a running process exposes to its embedder (tests, the simulator). It holds
/// the controllers weakly: only `run` owns them, so dropping `run` stops them.
#[derive(Debug, Default)]
pub struct RunHandle {
    controllers: std::sync::Mutex<std::sync::Weak<Controllers>>,
    metrics: Metrics,
    webhook: std::sync::OnceLock<Arc<Webhook<KubeClaims>>>,
}

impl RunHandle {
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The admission webhook, once started (every replica serves it).
    pub fn webhook(&self) -> Option<&Arc<Webhook<KubeClaims>>> {
        self.webhook.get()
    }

    /// The running controllers, while this process leads.
    pub async fn controllers(&self) -> Option<Arc<Controllers>> {
        self.slot().upgrade()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, std::sync::Weak<Controllers>> {
        self.controllers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Aborts the tasks it holds when dropped: if `run` itself is dropped (a crash
/// simulated in tests, a panic), nothing it spawned keeps running headless.
#[derive(Debug, Default)]
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// Waits until the API server answers, logging each failure; `false` if `shutdown`
/// fired first.
async fn wait_for_api(client: &Client, shutdown: &CancellationToken) -> bool {
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        match client.apiserver_version().await {
            Ok(v) => {
                outage.recovered("apiserver", "waiting for the API server");
                info!(version = %v.git_version, "API server reachable");
                return true;
            }
            // An HTTP error status is still an answer: the server is there (an API
            // server without `/version`, a 403 for an unusual RBAC setup).
            Err(kube::Error::Api(s)) if s.code < 500 => {
                outage.recovered("apiserver", "waiting for the API server");
                info!(code = s.code, "API server reachable (no /version)");
                return true;
            }
            Err(e) => {
                let delay = backoff.next_delay();
                outage.failed("apiserver", "API server unreachable", &e, delay);
                if !wait(delay, shutdown).await {
                    return false;
                }
            }
        }
    }
}

/// Runs until `shutdown` fires (Ok) or leadership is lost (Err).
pub async fn run(
    clients: impl Into<Clients>,
    options: RunOptions,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    run_with_handle(clients, options, shutdown, Arc::new(RunHandle::default())).await
}

/// As [`run`], publishing the running pieces into `handle`.
pub async fn run_with_handle(
    clients: impl Into<Clients>,
    options: RunOptions,
    shutdown: CancellationToken,
    handle: Arc<RunHandle>,
) -> Result<(), RunError> {
    let clients: Clients = clients.into();
    let metrics = handle.metrics.clone();
    let api_ok = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The webhook side, if any: filled in once started, read by /readyz.
    let webhook_state = ServingState::default();
    let ready: admin::ReadinessCheck = {
        let (api_ok, webhook_state) = (api_ok.clone(), webhook_state.clone());
        let with_webhook = options.webhook.is_some();
        Arc::new(move || {
            if !api_ok.load(std::sync::atomic::Ordering::Acquire) {
                return Err("API server not reached yet".into());
            }
            if with_webhook {
                webhook_state.readiness()
            } else {
                Ok(Vec::new())
            }
        })
    };
    let admin = AdminServers::start(
        options.metrics_bind,
        options
            .secure_metrics
            .as_ref()
            .map(|s| (s, clients.get(users::METRICS_AUTH))),
        metrics.clone(),
        ready,
        shutdown.clone(),
    )
    .await?;

    let result = run_inner(
        clients,
        &options,
        &shutdown,
        &handle,
        &api_ok,
        &webhook_state,
    )
    .await;
    admin.stop().await;
    result
}

async fn run_inner(
    clients: Clients,
    options: &RunOptions,
    shutdown: &CancellationToken,
    handle: &Arc<RunHandle>,
    api_ok: &Arc<std::sync::atomic::AtomicBool>,
    webhook_state: &ServingState,
) -> Result<(), RunError> {
    let client = clients.get(users::WEBHOOK);
    if !wait_for_api(&clients.get(users::INFORMERS), shutdown).await {
        return Ok(());
    }
    api_ok.store(true, std::sync::atomic::Ordering::Release);
    let metrics = handle.metrics.clone();

    let mut spawned = AbortOnDrop::default();
    // One cache for the process: the Service watch feeds the webhook (every replica)
    // and, on the leader, the controllers, which add the watches only they need.
    let cache = Arc::new(Cache::default());
    // Webhook: every replica. Its watches outlive the server's drain.
    let webhook_watches = CancellationToken::new();
    let mut webhook: Option<(Started, tokio::task::JoinHandle<Result<(), String>>)> = None;
    if let Some(w) = &options.webhook {
        let mut webhook_options = w.options.clone();
        webhook_options.metrics = metrics.webhook().clone();
        let started = start_watches(client.clone(), webhook_options, webhook_watches.clone())
            .await
            .map_err(RunError::Webhook)?;
        let _ = handle.webhook.set(started.webhook.clone());
        spawned
            .0
            .extend(started.tasks.iter().map(|t| t.abort_handle()));
        cache.services.attach(Arc::new(started.service_sink()));
        cache
            .service_cidrs
            .attach(started.service_cidr_sink().clone());
        for resource in [Resource::Services, Resource::ServiceCidrs] {
            if let Some(t) = runtime::watch(
                &cache,
                resource,
                &clients.get(users::INFORMERS),
                options.controllers.list_page_size,
                &webhook_watches,
            ) {
                spawned.0.push(t.abort_handle());
            }
        }
        // The HTTPS server in the background: a self-managed certificate may take a
        // while (or need RBAC fixed), and the controllers must not wait for it.
        let serving = {
            let (w, client, webhook, ranges, state, shutdown) = (
                w.serving.clone(),
                client.clone(),
                started.webhook.clone(),
                started.service_cidr_sink().clone(),
                webhook_state.clone(),
                shutdown.clone(),
            );
            tokio::spawn(async move {
                serve_webhook(&w, &client, webhook, ranges, state, shutdown).await
            })
        };
        spawned.0.push(serving.abort_handle());
        webhook = Some((started, serving));
    }

    // Leadership.
    let lead_stop = CancellationToken::new();
    let mut elector_task = None;
    let mut leadership = None;
    if let Some(l) = &options.leader {
        let elector = LeaderElector::new(leader::Config {
            client: clients.get(users::LEADER_ELECTION),
            namespace: l.namespace.clone(),
            name: l.name.clone(),
            identity: options.identity.clone(),
            params: l.params,
            holder_pods: leader::pods_hold_the_lease(&options.identity, &l.namespace),
        })?;
        let rx = elector.subscribe();
        leadership = Some(rx);
        let task = tokio::spawn(elector.run(lead_stop.clone()));
        spawned.0.push(task.abort_handle());
        elector_task = Some(task);
    }
    let lease_name = options.leader.as_ref().map_or("", |l| l.name.as_str());
    if options.leader.is_some() {
        // Followers export the series too, at 0.
        metrics.set_leader(lease_name, false);
    }

    let mut outcome: Result<(), RunError> = Ok(());
    // Wait to lead (or lead at once without election).
    let leading = match leadership.as_mut() {
        None => true,
        Some(rx) => loop {
            if rx.borrow().is_leader {
                break true;
            }
            tokio::select! {
                () = shutdown.cancelled() => break false,
                changed = rx.changed() => if changed.is_err() { break false },
            }
        },
    };
    let mut controllers: Option<Arc<Controllers>> = None;
    let repair_stop = CancellationToken::new();
    if leading && !shutdown.is_cancelled() {
        if options.leader.is_some() {
            metrics.set_leader(lease_name, true);
        }
        info!(identity = %options.identity, "leading: starting controllers");
        let c = Arc::new(Controllers::start(
            &clients,
            cache.clone(),
            options.controllers.clone(),
            metrics.clone(),
        ));
        *handle.slot() = Arc::downgrade(&c);
        controllers = Some(c);
        // Claim repair belongs to the webhook, not to the `allocator-repair` controller:
        // without it no claim of a deleted Service would ever be deleted.
        if let Some((started, _)) = &webhook {
            spawned
                .0
                .push(tokio::spawn(started.repair_loop(repair_stop.clone())).abort_handle());
        }
        // Run until shutdown or loss of leadership.
        if let Some(rx) = leadership.as_mut() {
            loop {
                if !rx.borrow().is_leader {
                    break;
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    changed = rx.changed() => if changed.is_err() { break },
                }
            }
        } else {
            shutdown.cancelled().await;
        }
    }

    let lost = !shutdown.is_cancelled();
    if lost {
        error!("leadership lost; stopping so no stale leader keeps writing");
    } else {
        info!("shutting down");
    }
    // 1) the controllers stop. After a lost Lease at once (another replica may
    //    already lead); on SIGTERM they finish the writes in flight first.
    repair_stop.cancel();
    if options.leader.is_some() {
        metrics.set_leader(lease_name, false);
    }
    if let Some(c) = controllers.take() {
        *handle.slot() = std::sync::Weak::new();
        if lost {
            c.abort();
        } else {
            c.shutdown(options.shutdown_grace).await;
        }
    }
    // 2) release the Lease so another replica takes over at once.
    lead_stop.cancel();
    if let Some(t) = elector_task {
        match tokio::time::timeout(LEASE_RELEASE_TIMEOUT, t).await {
            Ok(Ok(Err(e))) => outcome = Err(RunError::Leader(e)),
            Ok(Ok(Ok(()))) => {}
            Ok(Err(e)) => error!(error = %e, "leader election task failed"),
            Err(_) => warn!("releasing the Lease timed out"),
        }
    }
    if lost && outcome.is_ok() {
        outcome = Err(RunError::LeadershipEnded);
    }
    // 3) the webhook drains (its token is the shutdown token; on a lost lease the
    //    process exits and the kubelet restarts it).
    if let Some((_, serving)) = webhook {
        if lost {
            shutdown.cancel();
        }
        match serving.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if outcome.is_ok() {
                    outcome = Err(RunError::Webhook(e));
                }
            }
            Err(e) => error!(error = %e, "webhook server task"),
        }
    }
    webhook_watches.cancel();
    outcome
}

/// `svcplane run` from the command line: build the client (with the QPS limit),
/// handle signals, run.
pub fn main(args: &RunArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let options = RunOptions::from_args(args)?;
        let clients = kube_client::connect_limited(
            args.kubeconfig.as_deref(),
            args.kube_api_qps,
            args.kube_api_burst,
        )
        .await?;
        let shutdown = CancellationToken::new();
        tokio::spawn(kube_client::cancel_on_signal(shutdown.clone()));
        run(clients, options, shutdown)
            .await
            .map_err(anyhow::Error::from)
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn from_flags(flags: &[&str]) -> RunOptions {
        let mut argv = vec!["svcplane", "run"];
        argv.extend_from_slice(flags);
        let crate::cli::Command::Run(args) = crate::cli::Cli::parse_from(argv).command else {
            panic!("not the run command");
        };
        RunOptions::from_args(&args).unwrap()
    }

    #[test]
    fn the_webhook_of_run_is_fed_by_the_process_service_watch() {
        let o = from_flags(&["--tls-cert-file=c", "--tls-private-key-file=k"]);
        let w = o.webhook.expect("the webhook is on by default");
        assert_eq!(w.options.services, ServiceSource::External);
    }

    #[test]
    fn controllers_come_from_the_registry_and_honour_aliases() {
        let o = from_flags(&["--webhook=false"]);
        let mut on: Vec<&str> = crate::shell::registry::names()
            .filter(|n| crate::shell::registry::default_on(n))
            .collect();
        on.sort_unstable();
        assert_eq!(
            o.controllers.enabled.iter().copied().collect::<Vec<_>>(),
            on,
            "the default list is every on-by-default controller"
        );
        let o = from_flags(&["--webhook=false", "--controllers=*,-endpoints-controller"]);
        assert!(!o.controllers.enabled.contains("endpoints"));
        assert!(o.controllers.enabled.contains("endpointslice"));
        assert!(
            !o.controllers.enabled.contains("servicecidr"),
            "* = on by default"
        );
        let o = from_flags(&["--webhook=false", "--controllers=*,service-cidr-controller"]);
        assert!(o.controllers.enabled.contains("servicecidr"));
    }
}
