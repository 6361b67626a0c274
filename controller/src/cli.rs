//! The `svcplane` command line (clap derive).
//!
//! Only the definitions live here; `main.rs` parses them and hands the chosen
//! subcommand to the library (`plan::run` for `svcplane plan`).
//!
//! Flag names, syntax and semantics follow kube-controller-manager where it has the
//! flag: `--controllers` takes its canonical controller names and their aliases,
//! durations are Go durations ([`crate::duration`]), `-v N` is klog's verbosity
//! ([`crate::logging`]).

use std::fmt;
use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::core::endpointslice::{DEFAULT_MAX_ENDPOINTS_PER_SLICE, MAX_ENDPOINTS_PER_SLICE_LIMIT};
use crate::shell::registry;

/// `--help` headings, so `svcplane run --help` reads by topic.
pub mod heading {
    pub const CONTROLLERS: &str = "Controllers";
    pub const ENDPOINTSLICE: &str = crate::shell::controllers::endpointslice::HEADING;
    pub const ENDPOINTS: &str = crate::shell::controllers::endpoints::HEADING;
    pub const ALLOCATOR: &str = crate::shell::controllers::allocator_repair::HEADING;
    pub const TLS: &str = "Webhook TLS";
    pub const LEADER: &str = "Leader election";
    pub const API: &str = "API client";
    pub const OBSERVABILITY: &str = "Observability";
    pub const LIFECYCLE: &str = "Lifecycle";
    pub const CHECK: &str = "Check";
    pub const INPUT: &str = "Input & output";
    pub const RBAC: &str = "RBAC";
}

const ABOUT: &str = "The control plane of Kubernetes Service networking: \
kube-controller-manager's EndpointSlice, Endpoints and EndpointSlice-mirroring \
controllers, and a ClusterIP/NodePort allocator served as an admission webhook.";

const LONG_ABOUT: &str = "The control plane of Kubernetes Service networking: \
kube-controller-manager's EndpointSlice, Endpoints and EndpointSlice-mirroring \
controllers, and a ClusterIP/NodePort allocator served as an admission webhook.

Start with:
  svcplane plan -f cluster.yaml       offline: what the controllers would write for a cluster dump
  svcplane run --kubeconfig FILE ...  controllers + webhook, as the Helm chart deploys them
  svcplane check -n kube-system       is the installed webhook answering?
  svcplane crd | kubectl apply -f -   the AllocationClaim CRD the webhook needs
  svcplane rbac [RUN FLAGS]           the RBAC objects `run` needs with those flags

Documentation: README.md, docs/ and charts/svcplane/README.md in the repository.";

/// The `svcplane` command line.
#[derive(Debug, Parser)]
#[command(
    name = "svcplane",
    version = crate::build_info::VERSION_LINE,
    about = ABOUT,
    long_about = LONG_ABOUT,
)]
pub struct Cli {
    /// Log verbosity, as klog's `-v`: 0-2 info, 3 svcplane debug, 4 debug, 5 svcplane
    /// trace, 6+ trace. `RUST_LOG` per-target directives refine it.
    #[arg(short = 'v', long = "v", value_name = "N", global = true, env = "SVCPLANE_V",
          value_parser = clap::value_parser!(u8).range(0..=10),
          help_heading = heading::OBSERVABILITY)]
    pub verbosity: Option<u8>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Offline: read cluster objects (a `kubectl get -o yaml` dump) and print
    /// the API writes and events the controllers would make.
    Plan(PlanArgs),
    /// Run the controllers (leader-elected) and the admission webhook against a
    /// cluster, with metrics and health probes.
    Run(Box<RunArgs>),
    /// Run the admission webhook alone: assign ClusterIPs and NodePorts to new
    /// Services and reject invalid ones (HTTPS, AdmissionReview v1).
    Webhook(Box<WebhookArgs>),
    /// Check that the installed webhook answers: a server-side dry-run create of a
    /// probe Service, retried until svcplane's answer shows or the timeout.
    Check(CheckArgs),
    /// Print the RBAC objects (ClusterRole, Roles and their bindings) `svcplane run`
    /// needs when given the same flags, for installs without the chart's RBAC.
    Rbac(Box<RbacArgs>),
    /// Print the CustomResourceDefinition of svcplane's AllocationClaim (the
    /// webhook's cross-replica lock) as YAML, for `kubectl apply -f -`.
    Crd,
    /// Explain why a Pod is or is not an endpoint of a Service, and who holds
    /// a ClusterIP or NodePort; from a dump (`-f`) or a live cluster
    /// (read-only). Also installed as the kubectl plugin `kubectl svcplane`.
    Explain(ExplainArgs),
    /// Plan leaving a Service range: every Service with a ClusterIP in it, its new
    /// addresses in the target, and what must be moved by hand and why; from a dump
    /// (`-f`) or a live cluster (read-only).
    Migrate(MigrateArgs),
}

/// Flags of `svcplane migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// The range to leave: the name of a ServiceCIDR, or a CIDR.
    #[arg(long, value_name = "RANGE")]
    pub from: String,

    /// The range to move to: the name of a ServiceCIDR, or a CIDR.
    #[arg(long, value_name = "RANGE")]
    pub to: String,

    /// Recreate the Services as planned, through the cluster (needs write access:
    /// Services, the two ServiceCIDRs, a ConfigMap journal and Events). Resumable: run
    /// the same command again after an interruption.
    #[arg(long, conflicts_with = "files")]
    pub apply: bool,

    /// With --apply: Services moved at once.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64), requires = "apply")]
    pub max_in_flight: u16,

    /// With --apply: wait between batches.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration, requires = "apply")]
    pub pause: std::time::Duration,

    /// With --apply: how long to wait for a moved Service's EndpointSlices before
    /// going on (and reporting it).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration, requires = "apply")]
    pub slice_timeout: std::time::Duration,

    /// With --apply: the namespace of the journal ConfigMap that makes a run resumable.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kube-system",
        requires = "apply"
    )]
    pub journal_namespace: String,

    /// Where the objects come from, and how the plan prints (as for `explain`).
    #[command(flatten)]
    pub source: ExplainSource,
}

/// `svcplane explain`: what to explain.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    #[command(subcommand)]
    pub what: ExplainWhat,
}

/// The four forms of `svcplane explain`.
#[derive(Debug, Clone, Subcommand)]
pub enum ExplainWhat {
    /// Every Pod the Service's selector matches or nearly matches, with its
    /// verdict; the slices, the Endpoints object and the topology hints.
    Service(ExplainObject),
    /// Every Service that selects the Pod (or nearly does), and what each
    /// does with it.
    Pod(ExplainObject),
    /// Who holds a ClusterIP, which range and band it is in, and whether the
    /// webhook would hand it out.
    Ip(ExplainIp),
    /// Who holds a NodePort, which band it is in, and whether the webhook
    /// would hand it out.
    #[command(name = "nodeport")]
    NodePort(ExplainNodePort),
    /// Every ClusterIP range (the cluster's ServiceCIDRs, or the flags') and the
    /// NodePort range: their static and dynamic bands, used and free, the automatic
    /// picks left before the static band, and the namespaces holding the most.
    Range(ExplainRange),
}

impl ExplainWhat {
    /// The flags every form shares.
    pub fn source(&self) -> &ExplainSource {
        match self {
            ExplainWhat::Service(o) | ExplainWhat::Pod(o) => &o.source,
            ExplainWhat::Ip(i) => &i.source,
            ExplainWhat::NodePort(p) => &p.source,
            ExplainWhat::Range(r) => &r.source,
        }
    }
}

/// `explain service|pod`: the object and the reconciler's settings.
#[derive(Debug, Clone, Args)]
pub struct ExplainObject {
    /// The object, `NAMESPACE/NAME`, or `NAME` in `--namespace`.
    #[arg(value_name = "NAMESPACE/NAME", value_parser = parse_object_ref)]
    pub object: ObjectRef,

    /// Namespace of a `NAME` given without one.
    #[arg(short = 'n', long, value_name = "NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// Maximum number of endpoints in one EndpointSlice (1..=1000), as
    /// `svcplane run` is configured.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_ENDPOINTS_PER_SLICE as u16,
        value_parser = clap::value_parser!(u16).range(1..=(MAX_ENDPOINTS_PER_SLICE_LIMIT as i64))
    )]
    pub max_endpoints_per_slice: u16,

    #[command(flatten)]
    pub source: ExplainSource,
}

impl ExplainObject {
    /// `(namespace, name)`: the namespace written in the object, else
    /// `--namespace`.
    pub fn key(&self) -> (String, String) {
        let namespace = self
            .object
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        (namespace, self.object.name.clone())
    }
}

/// `explain ip`.
#[derive(Debug, Clone, Args)]
pub struct ExplainIp {
    /// The address, IPv4 or IPv6.
    #[arg(value_name = "IP")]
    pub ip: std::net::IpAddr,

    #[command(flatten)]
    pub ranges: AllocatorRanges,

    #[command(flatten)]
    pub source: ExplainSource,
}

/// `explain nodeport`.
#[derive(Debug, Clone, Args)]
pub struct ExplainNodePort {
    /// The port number.
    #[arg(value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,

    #[command(flatten)]
    pub ranges: AllocatorRanges,

    #[command(flatten)]
    pub source: ExplainSource,
}

/// `explain range`.
#[derive(Debug, Clone, Args)]
pub struct ExplainRange {
    #[command(flatten)]
    pub ranges: AllocatorRanges,

    #[command(flatten)]
    pub source: ExplainSource,
}

/// Where `explain` reads objects from, and how it prints.
#[derive(Debug, Clone, Args)]
pub struct ExplainSource {
    /// Read objects from this dump instead of a cluster (as `plan` reads
    /// them); repeatable, `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// kubeconfig of the cluster to read (list/get only); without it and
    /// without `-f`, the in-cluster configuration, else `$KUBECONFIG` /
    /// `~/.kube/config`.
    #[arg(long, value_name = "FILE", conflicts_with = "files")]
    pub kubeconfig: Option<PathBuf>,

    /// Output format: aligned text for people, JSON or YAML for tools.
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value_t = ExplainFormat::Text)]
    pub output: ExplainFormat,
}

/// `explain -o` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainFormat {
    Text,
    Json,
    Yaml,
}

impl fmt::Display for ExplainFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExplainFormat::Text => "text",
            ExplainFormat::Json => "json",
            ExplainFormat::Yaml => "yaml",
        })
    }
}

/// `NAMESPACE/NAME` or `NAME` on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub namespace: Option<String>,
    pub name: String,
}

fn parse_object_ref(value: &str) -> Result<ObjectRef, String> {
    let bad = || format!("invalid object {value:?}: want NAMESPACE/NAME or NAME");
    let (namespace, name) = match value.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, value),
    };
    if name.is_empty() || name.contains('/') || namespace.is_some_and(str::is_empty) {
        return Err(bad());
    }
    Ok(ObjectRef {
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    })
}

/// Flags of `svcplane webhook`.
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// kubeconfig file; without it the in-cluster configuration (or
    /// `$KUBECONFIG` / `~/.kube/config`) is used.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_KUBECONFIG", help_heading = heading::API)]
    pub kubeconfig: Option<PathBuf>,

    #[command(flatten)]
    pub server: WebhookServerFlags,

    #[command(flatten, next_help_heading = heading::ALLOCATOR)]
    pub ranges: AllocatorRanges,

    #[command(flatten)]
    pub metrics: MetricsServingFlags,

    /// Log line format.
    #[arg(long, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "SVCPLANE_LOG_FORMAT",
          help_heading = heading::OBSERVABILITY)]
    pub log_format: LogFormat,
}

/// Flags of `svcplane rbac`: `run`'s flags, and whom to bind the roles to.
#[derive(Debug, Clone, Args)]
pub struct RbacArgs {
    /// Name of the printed roles and bindings.
    #[arg(long, value_name = "NAME", default_value = "svcplane", help_heading = heading::RBAC)]
    pub name: String,

    /// The ServiceAccount `svcplane run` runs as.
    #[arg(long, value_name = "NAME", default_value = "svcplane", help_heading = heading::RBAC)]
    pub service_account: String,

    /// Its namespace (default: `$POD_NAMESPACE`, else `kube-system`).
    #[arg(long, value_name = "NAMESPACE", help_heading = heading::RBAC)]
    pub service_account_namespace: Option<String>,

    /// The flags `svcplane run` is given.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Flags of `svcplane check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// kubeconfig file; without it the in-cluster configuration (or
    /// `$KUBECONFIG` / `~/.kube/config`) is used.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_KUBECONFIG", help_heading = heading::API)]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the probe Service: the release namespace (the chart's webhook
    /// configurations review probes there and nothing else). Default: `$POD_NAMESPACE`,
    /// else `kube-system`.
    #[arg(short = 'n', long, value_name = "NAMESPACE", env = "SVCPLANE_CHECK_NAMESPACE",
          help_heading = heading::CHECK)]
    pub namespace: Option<String>,

    /// Give up (exit 1) when the webhook has not answered for this long.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_positive_duration,
          env = "SVCPLANE_CHECK_TIMEOUT", help_heading = heading::CHECK)]
    pub timeout: std::time::Duration,

    /// Time between probes.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_positive_duration,
          env = "SVCPLANE_CHECK_INTERVAL", help_heading = heading::CHECK)]
    pub interval: std::time::Duration,

    /// Also require a leader: success only once a replica is seen renewing this Lease
    /// (in the probe's namespace). The chart passes its Lease when leader election is on.
    #[arg(long, value_name = "NAME", env = "SVCPLANE_CHECK_LEADER_LEASE", help_heading = heading::CHECK)]
    pub leader_lease: Option<String>,

    /// Label selector of svcplane's Pods: while no answer has come, fail at once when
    /// none of them can run (image pull errors, crash loops), with the kubelet's reasons.
    #[arg(long, value_name = "SELECTOR", env = "SVCPLANE_CHECK_PODS_SELECTOR", help_heading = heading::CHECK)]
    pub pods_selector: Option<String>,

    /// How long a Pod may stay in a reason the kubelet retries (ImagePullBackOff,
    /// CrashLoopBackOff, ...) before `--pods-selector` counts it as unable to run.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration,
          env = "SVCPLANE_CHECK_STUCK_PATIENCE", help_heading = heading::CHECK)]
    pub stuck_patience: std::time::Duration,
}

/// `--controllers` as kube-controller-manager reads it: `name` enables a controller,
/// `-name` disables it, `*` enables every on-by-default controller not disabled. The names and their
/// aliases (kube-controller-manager's `endpoint`, `endpointslice-controller`, ...)
/// come from the controller registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerList(pub Vec<String>);

impl ControllerList {
    /// Whether the controller `name` (a canonical name) runs.
    pub fn enables(&self, name: &str) -> bool {
        let disabled = |i: &str| {
            i.strip_prefix('-')
                .and_then(registry::canonical)
                .is_some_and(|c| c == name)
        };
        if self.0.iter().any(|i| disabled(i)) {
            return false;
        }
        self.0.iter().any(|i| {
            (i == "*" && registry::default_on(name)) || registry::canonical(i) == Some(name)
        })
    }
}

impl ControllerList {
    /// Every controller the registry runs by default (what `*` enables).
    pub fn registry_default() -> Self {
        Self(
            registry::names()
                .filter(|n| registry::default_on(n))
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// `--controllers`'s help: every registered controller, whether `*` includes it, and
/// kube-controller-manager's names for it.
fn controllers_help() -> String {
    let names: Vec<String> = registry::names()
        .map(|name| {
            let off = if registry::default_on(name) {
                ""
            } else {
                ", off by default"
            };
            match registry::aliases_of(name) {
                [] if off.is_empty() => name.to_owned(),
                [] => format!("{name} ({})", &off[2..]),
                aliases => format!(
                    "{name} (kube-controller-manager: {}{off})",
                    aliases.join(", ")
                ),
            }
        })
        .collect();
    format!(
        "Controllers to run: names, `-name` to disable one, `*` for every controller on by \
         default. Names: {}",
        names.join("; ")
    )
}

impl fmt::Display for ControllerList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

fn parse_controller_list(value: &str) -> Result<ControllerList, String> {
    let mut items = Vec::new();
    for raw in value.split(',') {
        let item = raw.trim();
        let name = item.strip_prefix('-').unwrap_or(item);
        let known = item == "*" || registry::canonical(name).is_some();
        if !known {
            return Err(format!(
                "unknown controller {item:?}; known: {} (or kube-controller-manager's {}), \
                 `*` for all, `-name` to disable one",
                registry::names().collect::<Vec<_>>().join(", "),
                registry::aliases().collect::<Vec<_>>().join(", ")
            ));
        }
        items.push(item.to_owned());
    }
    Ok(ControllerList(items))
}

/// The flag groups of every controller in the registry, as one part of `run`'s
/// command line: what it holds is `run`'s whole parsed command line, which each
/// group reads its settings from ([`crate::shell::registry::settings`]).
#[derive(Debug, Clone)]
pub struct ControllerFlags(pub clap::ArgMatches);

impl clap::Args for ControllerFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        registry::CONTROLLERS
            .iter()
            .fold(cmd, |cmd, d| (d.make.flags)(cmd))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for ControllerFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self(matches.clone()))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0 = matches.clone();
        Ok(())
    }
}

impl ControllerFlags {
    /// One controller's flags as given (tests; the controllers read their settings).
    pub fn group<F: clap::FromArgMatches>(&self) -> Result<F, clap::Error> {
        F::from_arg_matches(&self.0)
    }
}

/// Flags of `svcplane run` (kube-controller-manager's names where it has them).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    // The help and the default come from the controller registry, so a controller
    // added there is named here too.
    #[arg(long, value_name = "LIST", env = "SVCPLANE_CONTROLLERS",
          help = controllers_help(), default_value_t = ControllerList::registry_default(),
          value_parser = parse_controller_list, help_heading = heading::CONTROLLERS)]
    pub controllers: ControllerList,

    // Each registered controller's flag group (kube-controller-manager's
    // per-controller options), which turns its flags into its settings.
    #[command(flatten)]
    pub controller_flags: ControllerFlags,

    #[command(flatten, next_help_heading = heading::ALLOCATOR)]
    pub ranges: AllocatorRanges,

    /// Serve the admission webhook (`--webhook=false` to run the controllers only).
    #[arg(long, value_name = "BOOL", env = "SVCPLANE_WEBHOOK", default_value_t = true,
          action = clap::ArgAction::Set, help_heading = heading::ALLOCATOR)]
    pub webhook: bool,

    #[command(flatten)]
    pub webhook_server: WebhookServerFlags,

    /// Elect a leader among replicas; only the leader runs controllers and writes.
    #[arg(long, value_name = "BOOL", env = "SVCPLANE_LEADER_ELECT", default_value_t = true,
          action = clap::ArgAction::Set, help_heading = heading::LEADER)]
    pub leader_elect: bool,

    /// How long a Lease stays valid without renewal; followers wait this long after
    /// the last renewal they saw before taking over.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_positive_duration,
          env = "SVCPLANE_LEADER_ELECT_LEASE_DURATION", help_heading = heading::LEADER)]
    pub leader_elect_lease_duration: std::time::Duration,

    /// A leader that cannot renew within this long stops (the process exits).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration,
          env = "SVCPLANE_LEADER_ELECT_RENEW_DEADLINE", help_heading = heading::LEADER)]
    pub leader_elect_renew_deadline: std::time::Duration,

    /// Time between acquire and renew attempts.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_positive_duration,
          env = "SVCPLANE_LEADER_ELECT_RETRY_PERIOD", help_heading = heading::LEADER)]
    pub leader_elect_retry_period: std::time::Duration,

    /// Name of the Lease.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "svcplane",
        env = "SVCPLANE_LEADER_ELECT_RESOURCE_NAME",
        help_heading = heading::LEADER
    )]
    pub leader_elect_resource_name: String,

    /// Namespace of the Lease (default: `$POD_NAMESPACE`, else `kube-system`).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "SVCPLANE_LEADER_ELECT_RESOURCE_NAMESPACE",
        help_heading = heading::LEADER
    )]
    pub leader_elect_resource_namespace: Option<String>,

    /// kubeconfig file; without it the in-cluster configuration (or
    /// `$KUBECONFIG` / `~/.kube/config`) is used.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_KUBECONFIG", help_heading = heading::API)]
    pub kubeconfig: Option<PathBuf>,

    /// Average API requests per second (client-side limit); 0 disables the limit.
    #[arg(long, value_name = "QPS", env = "SVCPLANE_KUBE_API_QPS", default_value_t = 20.0,
          value_parser = parse_qps, help_heading = heading::API)]
    pub kube_api_qps: f64,

    /// API requests allowed in a burst above the QPS.
    #[arg(long, value_name = "N", env = "SVCPLANE_KUBE_API_BURST", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..), help_heading = heading::API)]
    pub kube_api_burst: u32,

    #[command(flatten)]
    pub metrics: MetricsServingFlags,

    /// Time allowed after SIGTERM for in-flight writes and the webhook drain.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = parse_duration,
          env = "SVCPLANE_SHUTDOWN_GRACE_PERIOD", help_heading = heading::LIFECYCLE)]
    pub shutdown_grace_period: std::time::Duration,

    /// Log line format.
    #[arg(long, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "SVCPLANE_LOG_FORMAT",
          help_heading = heading::OBSERVABILITY)]
    pub log_format: LogFormat,
}

impl RunArgs {
    /// Checks clap cannot express: a certificate source is required unless
    /// `--webhook=false`.
    pub fn check(&self) -> Result<(), String> {
        if self.webhook {
            self.webhook_server
                .cert_source()
                .map_err(|e| format!("{e} (or run with --webhook=false)"))?;
        }
        Ok(())
    }
}

/// Where `/metrics` and the probes are served, shared by `svcplane run` and
/// `svcplane webhook`.
#[derive(Debug, Clone, Args)]
pub struct MetricsServingFlags {
    /// Plain-HTTP address for `/livez`, `/readyz` and, unless the secure port is on,
    /// `/metrics`.
    #[arg(
        long,
        value_name = "ADDR",
        env = "SVCPLANE_METRICS_BIND_ADDRESS",
        default_value = "0.0.0.0:8080",
        help_heading = heading::OBSERVABILITY
    )]
    pub metrics_bind_address: std::net::SocketAddr,

    /// Serve `/metrics` over HTTPS on this address instead, to callers the cluster's
    /// RBAC allows `get` on the non-resource URL `/metrics` (checked with TokenReview
    /// and SubjectAccessReview, as kube-controller-manager's --secure-port). Off when
    /// unset.
    #[arg(long, value_name = "ADDR", env = "SVCPLANE_SECURE_METRICS_BIND_ADDRESS",
          help_heading = heading::OBSERVABILITY)]
    pub secure_metrics_bind_address: Option<std::net::SocketAddr>,

    /// PEM certificate of the secure metrics port (re-read when it changes); without
    /// it a self-signed certificate is generated at start.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_METRICS_TLS_CERT_FILE",
          requires = "metrics_tls_private_key_file", help_heading = heading::OBSERVABILITY)]
    pub metrics_tls_cert_file: Option<PathBuf>,

    /// PEM private key of `--metrics-tls-cert-file`.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_METRICS_TLS_PRIVATE_KEY_FILE",
          requires = "metrics_tls_cert_file", help_heading = heading::OBSERVABILITY)]
    pub metrics_tls_private_key_file: Option<PathBuf>,
}

impl MetricsServingFlags {
    /// The secure port's settings, if it is on; certificate files without the port
    /// are an error naming both flags.
    pub fn secure(&self) -> Result<Option<crate::shell::secure_metrics::SecureMetrics>, String> {
        let files = self
            .metrics_tls_cert_file
            .clone()
            .zip(self.metrics_tls_private_key_file.clone());
        match self.secure_metrics_bind_address {
            Some(bind) => Ok(Some(crate::shell::secure_metrics::SecureMetrics {
                bind,
                cert_files: files,
            })),
            None if files.is_some() => Err(
                "--metrics-tls-cert-file and --metrics-tls-private-key-file need \
                 --secure-metrics-bind-address (the port they would serve)"
                    .to_owned(),
            ),
            None => Ok(None),
        }
    }
}

pub use crate::duration::{parse_duration, parse_positive_duration};

fn parse_qps(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(q) if q.is_finite() && q >= 0.0 => Ok(q),
        _ => Err(format!(
            "invalid QPS {value:?}: use a number >= 0 (0 disables the limit)"
        )),
    }
}

/// The webhook server's flags, shared by `svcplane webhook` and `svcplane run`.
#[derive(Debug, Clone, Args)]
pub struct WebhookServerFlags {
    /// Address the HTTPS webhook server listens on.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:9443",
        env = "SVCPLANE_WEBHOOK_BIND_ADDRESS",
        help_heading = heading::ALLOCATOR
    )]
    pub webhook_bind_address: std::net::SocketAddr,

    /// PEM certificate chain served by the webhook (re-read when it changes). One
    /// certificate source is required whenever the webhook runs: these two files, or
    /// `--tls-secret-name`.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_TLS_CERT_FILE", help_heading = heading::TLS)]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of the webhook certificate (with `--tls-cert-file`).
    #[arg(long, value_name = "FILE", env = "SVCPLANE_TLS_PRIVATE_KEY_FILE", help_heading = heading::TLS)]
    pub tls_private_key_file: Option<PathBuf>,

    /// svcplane manages its own certificates in this Secret: it creates a CA and a
    /// serving certificate, rotates both before they expire, and keeps the caBundle
    /// of `--webhook-configuration-name` current. Replicas share the Secret (one
    /// writer wins each change; never two CAs).
    #[arg(long, value_name = "NAME", env = "SVCPLANE_TLS_SECRET_NAME", help_heading = heading::TLS)]
    pub tls_secret_name: Option<String>,

    /// Namespace of `--tls-secret-name` (default: `$POD_NAMESPACE`, else `kube-system`);
    /// also the webhook Service's namespace in the certificate's names.
    #[arg(long, value_name = "NAMESPACE", env = "SVCPLANE_TLS_SECRET_NAMESPACE", help_heading = heading::TLS)]
    pub tls_secret_namespace: Option<String>,

    /// With `--tls-secret-name`: the webhook Service the API server calls; the serving
    /// certificate is issued for `<name>.<namespace>.svc` and `...svc.cluster.local`.
    #[arg(long, value_name = "NAME", default_value = "svcplane-webhook",
          env = "SVCPLANE_WEBHOOK_SERVICE_NAME", help_heading = heading::TLS)]
    pub webhook_service_name: String,

    /// With `--tls-secret-name`: extra names (DNS names or IP addresses) for the
    /// serving certificate, comma-separated (e.g. when the API server calls a URL).
    #[arg(long, value_name = "HOSTS", value_delimiter = ',', env = "SVCPLANE_TLS_EXTRA_HOSTS",
          help_heading = heading::TLS)]
    pub tls_extra_hosts: Vec<String>,

    /// With `--tls-secret-name`: the Mutating- and ValidatingWebhookConfiguration
    /// (both of this name) whose `caBundle` svcplane keeps current; empty: none.
    #[arg(long, value_name = "NAME", default_value = "svcplane",
          env = "SVCPLANE_WEBHOOK_CONFIGURATION_NAME", help_heading = heading::TLS)]
    pub webhook_configuration_name: String,

    /// With `--tls-secret-name`: lifetime of the CA; it is replaced once two thirds
    /// of it have passed (the old CA stays trusted until it expires).
    #[arg(long, value_name = "DURATION", default_value = "87600h", value_parser = parse_positive_duration,
          env = "SVCPLANE_TLS_CA_VALIDITY", help_heading = heading::TLS)]
    pub tls_ca_validity: std::time::Duration,

    /// With `--tls-secret-name`: lifetime of the serving certificate; it is re-issued
    /// once two thirds of it have passed.
    #[arg(long, value_name = "DURATION", default_value = "8760h", value_parser = parse_positive_duration,
          env = "SVCPLANE_TLS_CERT_VALIDITY", help_heading = heading::TLS)]
    pub tls_cert_validity: std::time::Duration,

    /// How often the certificate (files or Secret) is checked for changes.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration,
          env = "SVCPLANE_TLS_RELOAD_INTERVAL", help_heading = heading::TLS)]
    pub tls_reload_interval: std::time::Duration,

    /// Per-request deadline; keep it below the webhook configuration's
    /// `timeoutSeconds` so the API server gets an answer, not a timeout.
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = parse_positive_duration,
          env = "SVCPLANE_WEBHOOK_REQUEST_TIMEOUT", help_heading = heading::ALLOCATOR)]
    pub webhook_request_timeout: std::time::Duration,

    /// An AllocationClaim no Service uses is released once it is this old.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration,
          env = "SVCPLANE_CLAIM_GRACE_PERIOD", help_heading = heading::ALLOCATOR)]
    pub claim_grace_period: std::time::Duration,

    /// How long a deleted Service's ClusterIPs and nodePorts stay retained for its
    /// namespace and name (given back when it is created again; other Services get
    /// other values). `0`: released at once, as upstream. The
    /// `svcplane.io/retain-released-values` annotation of a Service, else of its
    /// namespace, overrides it.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration,
          env = "SVCPLANE_RETAIN_RELEASED_VALUES", help_heading = heading::ALLOCATOR)]
    pub retain_released_values: std::time::Duration,

    /// How often unused AllocationClaims are looked for (by the leader, in `run`).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration,
          env = "SVCPLANE_CLAIM_REPAIR_INTERVAL", help_heading = heading::ALLOCATOR)]
    pub claim_repair_interval: std::time::Duration,
}

/// Where the webhook's serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// `--tls-cert-file` and `--tls-private-key-file`, re-read every reload interval.
    Files { cert: PathBuf, key: PathBuf },
    /// `--tls-secret-name`: self-managed CA and certificate in a Secret.
    Secret {
        /// The Secret's name.
        name: String,
        /// Its namespace (`None`: `$POD_NAMESPACE`, else `kube-system`).
        namespace: Option<String>,
    },
}

impl WebhookServerFlags {
    /// The certificate source, or which flags are missing or clash (clap's
    /// conditional requirements ignore defaults, so this is checked after parsing).
    pub fn cert_source(&self) -> Result<CertSource, String> {
        let secret = self.tls_secret_name.as_deref().filter(|n| !n.is_empty());
        match (&self.tls_cert_file, &self.tls_private_key_file, secret) {
            (Some(c), Some(k), None) => Ok(CertSource::Files {
                cert: c.clone(),
                key: k.clone(),
            }),
            (None, None, Some(name)) => Ok(CertSource::Secret {
                name: name.to_owned(),
                namespace: self.tls_secret_namespace.clone().filter(|n| !n.is_empty()),
            }),
            (c, k, Some(_)) if c.is_some() || k.is_some() => Err(
                "--tls-secret-name cannot be combined with --tls-cert-file/--tls-private-key-file"
                    .to_owned(),
            ),
            (c, k, _) => {
                let missing: Vec<&str> = [
                    ("--tls-cert-file", c.is_none()),
                    ("--tls-private-key-file", k.is_none()),
                ]
                .into_iter()
                .filter_map(|(flag, absent)| absent.then_some(flag))
                .collect();
                Err(format!(
                    "the webhook needs {} (or --tls-secret-name for self-managed certificates)",
                    missing.join(" and ")
                ))
            }
        }
    }
}

impl WebhookArgs {
    /// Checks clap cannot express: a certificate source is required.
    pub fn check(&self) -> Result<(), String> {
        self.server.cert_source().map(|_| ())
    }
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Flags of `svcplane plan`.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// Input file: multi-document YAML, `kind: List`, or JSON (one object,
    /// a List, or several concatenated). `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,

    /// Controllers to plan, comma-separated: `run`'s (the same names and defaults) and
    /// `allocator`, the webhook's allocations.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_values_t = Controller::defaults()
    )]
    pub controllers: Vec<Controller>,

    /// Maximum number of endpoints in one EndpointSlice (1..=1000).
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_ENDPOINTS_PER_SLICE as u16,
        value_parser = clap::value_parser!(u16).range(1..=(MAX_ENDPOINTS_PER_SLICE_LIMIT as i64))
    )]
    pub max_endpoints_per_slice: u16,

    /// Output format.
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,

    /// Print a table of the writes and events (one line each) instead of the
    /// objects.
    #[arg(long, conflicts_with = "output")]
    pub summary: bool,

    /// The time the plan is made at, RFC 3339 (`2026-11-29T08:00:00Z`): the ServiceCIDR
    /// controller writes it into `Ready` conditions and waits out its deletion grace
    /// from it. Default: now; give it for a byte-stable plan of ServiceCIDRs.
    #[arg(long, value_name = "TIME", value_parser = parse_timestamp)]
    pub now: Option<k8s_openapi::jiff::Timestamp>,

    #[command(flatten, next_help_heading = "Allocator")]
    pub ranges: AllocatorRanges,
}

/// Reads `--now`.
fn parse_timestamp(value: &str) -> Result<k8s_openapi::jiff::Timestamp, String> {
    value
        .parse()
        .map_err(|e| format!("{value:?} is not an RFC 3339 time such as 2026-11-29T08:00:00Z: {e}"))
}

/// The allocator's range flags, shared by every subcommand that allocates.
#[derive(Debug, Clone, Args)]
pub struct AllocatorRanges {
    /// Service ClusterIP range(s): one CIDR, or one per family separated by a
    /// comma (primary family first). Against an API server with ServiceCIDR
    /// objects (Kubernetes 1.33+) the ranges come from those and this is only a
    /// fallback; default 10.96.0.0/12.
    #[arg(
        long,
        value_name = "CIDRS",
        value_parser = parse_cluster_ip_ranges,
        env = "SVCPLANE_SERVICE_CLUSTER_IP_RANGE"
    )]
    pub service_cluster_ip_range: Option<String>,

    /// NodePort range, `LOW-HIGH` (inclusive). Must match kube-apiserver's.
    #[arg(
        long,
        value_name = "LOW-HIGH",
        default_value = svcplane_allocator::DEFAULT_SERVICE_NODE_PORT_RANGE,
        value_parser = parse_node_port_range,
        env = "SVCPLANE_SERVICE_NODE_PORT_RANGE"
    )]
    pub service_node_port_range: String,

    /// Where ClusterIP ranges come from: `cluster` (the ServiceCIDR objects where the
    /// API server has them, else `--service-cluster-ip-range`) or `flags`
    /// (`--service-cluster-ip-range` always: an explicit override, e.g. to keep
    /// svcplane to a part of the cluster's ranges).
    #[arg(
        long,
        value_name = "SOURCE",
        default_value_t = RangesFrom::Cluster,
        env = "SVCPLANE_SERVICE_RANGES_FROM"
    )]
    pub service_ranges_from: RangesFrom,
}

/// `--service-ranges-from` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RangesFrom {
    Cluster,
    Flags,
}

impl fmt::Display for RangesFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RangesFrom::Cluster => "cluster",
            RangesFrom::Flags => "flags",
        })
    }
}

impl AllocatorRanges {
    /// Whether the cluster's ServiceCIDR objects decide the ClusterIP ranges.
    pub fn follow_cluster(&self) -> bool {
        self.service_ranges_from == RangesFrom::Cluster
    }

    /// The allocator configuration (both values were validated while parsing).
    pub fn config(
        &self,
    ) -> Result<svcplane_allocator::AllocatorConfig, svcplane_allocator::ConfigError> {
        svcplane_allocator::AllocatorConfig::from_flags(
            self.service_cluster_ip_range
                .as_deref()
                .unwrap_or(svcplane_allocator::DEFAULT_SERVICE_CLUSTER_IP_RANGE),
            &self.service_node_port_range,
        )
    }

    /// The ClusterIP ranges the operator gave, if any (to tell them apart from the
    /// cluster's ServiceCIDRs).
    pub fn explicit_cluster_ip_ranges(&self) -> Option<Vec<svcplane_allocator::Cidr>> {
        self.service_cluster_ip_range.as_ref()?;
        self.config().ok().map(|c| c.cluster_ip_ranges)
    }
}

/// Validates `--service-cluster-ip-range` with the allocator's own parser,
/// so a bad value is a usage error (exit 2) naming the flag and value.
fn parse_cluster_ip_ranges(value: &str) -> Result<String, String> {
    svcplane_allocator::AllocatorConfig::from_flags(
        value,
        svcplane_allocator::DEFAULT_SERVICE_NODE_PORT_RANGE,
    )
    .map(|_| value.to_owned())
    .map_err(|e| e.to_string())
}

/// Validates `--service-node-port-range` (see `parse_cluster_ip_ranges`).
fn parse_node_port_range(value: &str) -> Result<String, String> {
    svcplane_allocator::AllocatorConfig::from_flags(
        svcplane_allocator::DEFAULT_SERVICE_CLUSTER_IP_RANGE,
        value,
    )
    .map(|_| value.to_owned())
    .map_err(|e| e.to_string())
}

/// A controller `plan` runs: each controller of `run`'s registry (in its order), then
/// the admission webhook's allocator (`allocator`, which `run` serves with
/// `--webhook`). `plan` has a planner for each; its unit tests fail for a registered
/// controller without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Controller {
    /// Output order.
    rank: usize,
    name: &'static str,
}

/// Every controller `plan` runs, built once from the registry (clap needs a slice
/// that lives for the whole program).
static PLAN_CONTROLLERS: std::sync::LazyLock<Vec<Controller>> = std::sync::LazyLock::new(|| {
    registry::names()
        .chain([Controller::ALLOCATOR])
        .enumerate()
        .map(|(rank, name)| Controller { rank, name })
        .collect()
});

impl Controller {
    /// The webhook's allocations, planned as if each Service had just been admitted.
    pub const ALLOCATOR: &'static str = "allocator";

    /// Every controller `plan` runs, in output order.
    pub fn all() -> &'static [Controller] {
        &PLAN_CONTROLLERS
    }

    /// The controller `name` (canonical or kube-controller-manager's) names.
    pub fn named(name: &str) -> Option<Controller> {
        let canonical = if name == Self::ALLOCATOR {
            Self::ALLOCATOR
        } else {
            registry::canonical(name)?
        };
        Self::all().iter().copied().find(|c| c.name == canonical)
    }

    /// What `plan` runs without `--controllers`: what `run` runs by default, and the
    /// allocator.
    pub fn defaults() -> Vec<Controller> {
        Self::all()
            .iter()
            .copied()
            .filter(|c| c.name == Self::ALLOCATOR || registry::default_on(c.name))
            .collect()
    }

    /// The name used on the command line and in the output's `controller`
    /// field (`run`'s `--controllers` names).
    pub const fn name(self) -> &'static str {
        self.name
    }
}

impl ValueEnum for Controller {
    fn value_variants<'a>() -> &'a [Self] {
        Self::all()
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        // kube-controller-manager's names are accepted too (`--controllers` of `run`).
        let aliases = registry::aliases_of(self.name()).iter().copied();
        Some(PossibleValue::new(self.name()).aliases(aliases))
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `-o` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OutputFormat::Yaml => "yaml",
            OutputFormat::Json => "json",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::controllers::allocator_repair::AllocatorRepairFlags;
    use crate::shell::controllers::endpoints::EndpointsFlags;
    use crate::shell::controllers::endpointslice::EndpointSliceFlags;
    use crate::shell::controllers::mirroring::MirroringFlags;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    fn plan(args: &[&str]) -> Result<PlanArgs, clap::Error> {
        let argv = ["svcplane", "plan"].iter().chain(args).copied();
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Plan(p) => p,
            other => panic!("parsed as {other:?}"),
        })
    }

    fn webhook(args: &[&str]) -> Result<WebhookArgs, clap::Error> {
        let argv = ["svcplane", "webhook"].iter().chain(args).copied();
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Webhook(w) => *w,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn webhook_defaults_match_the_documented_ones() {
        let w = webhook(&[
            "--tls-cert-file",
            "c.pem",
            "--tls-private-key-file",
            "k.pem",
        ])
        .unwrap();
        assert_eq!(w.server.webhook_bind_address.to_string(), "0.0.0.0:9443");
        assert_eq!(
            w.server.webhook_request_timeout,
            std::time::Duration::from_secs(4)
        );
        assert_eq!(
            w.server.tls_reload_interval,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            w.server.claim_grace_period,
            std::time::Duration::from_secs(60)
        );
        assert_eq!(
            w.server.claim_repair_interval,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            w.ranges.service_cluster_ip_range, None,
            "the cluster's ranges"
        );
        assert_eq!(
            w.ranges.config().unwrap().cluster_ip_ranges[0].to_string(),
            "10.96.0.0/12",
            "the fallback"
        );
        assert_eq!(w.ranges.explicit_cluster_ip_ranges(), None);
        assert_eq!(w.ranges.service_node_port_range, "30000-32767");
        assert_eq!(w.log_format, LogFormat::Text);
        assert_eq!(w.kubeconfig, None);
    }

    #[test]
    fn webhook_needs_a_certificate_source() {
        let e = webhook(&[]).unwrap().check().unwrap_err();
        assert!(
            e.contains("--tls-cert-file") && e.contains("--tls-private-key-file"),
            "{e}"
        );
        let e = webhook(&["--claim-repair-interval", "0s"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--claim-repair-interval") && e.contains("greater than zero"),
            "{e}"
        );
    }

    #[test]
    fn webhook_bad_values_name_the_flag_and_value() {
        let base = ["--tls-cert-file", "c", "--tls-private-key-file", "k"];
        for (flag, value) in [
            ("--service-cluster-ip-range", "10.96.0.0/33"),
            ("--service-node-port-range", "40000-30000"),
            ("--claim-grace-period", "60"),
            ("--webhook-bind-address", "nowhere"),
        ] {
            let mut args = base.to_vec();
            args.extend([flag, value]);
            let e = webhook(&args).unwrap_err().to_string();
            assert!(e.contains(flag) && e.contains(value), "{flag}: {e}");
        }
    }

    fn run(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = ["svcplane", "run"].iter().chain(args).copied();
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Run(r) => *r,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn the_secure_metrics_port_is_off_unless_asked_and_its_files_come_in_pairs() {
        let base = ["--webhook=false"];
        let on = run(&[
            &base[..],
            &["--secure-metrics-bind-address", "0.0.0.0:10257"],
        ]
        .concat())
        .unwrap();
        let secure = on.metrics.secure().unwrap().expect("on");
        assert_eq!(secure.bind.to_string(), "0.0.0.0:10257");
        assert_eq!(secure.cert_files, None, "a generated certificate");

        let half = run(&[
            &base[..],
            &[
                "--secure-metrics-bind-address",
                "127.0.0.1:1",
                "--metrics-tls-cert-file",
                "c",
            ],
        ]
        .concat());
        assert!(half.is_err(), "a certificate without its key");
        let lonely = run(&[
            &base[..],
            &[
                "--metrics-tls-cert-file",
                "c",
                "--metrics-tls-private-key-file",
                "k",
            ],
        ]
        .concat())
        .unwrap();
        let err = lonely.metrics.secure().unwrap_err();
        assert!(err.contains("--secure-metrics-bind-address"), "{err}");
        let full = run(&[
            &base[..],
            &[
                "--secure-metrics-bind-address",
                "127.0.0.1:10257",
                "--metrics-tls-cert-file",
                "c",
                "--metrics-tls-private-key-file",
                "k",
            ],
        ]
        .concat())
        .unwrap();
        assert_eq!(
            full.metrics.secure().unwrap().and_then(|s| s.cert_files),
            Some(("c".into(), "k".into()))
        );
    }

    #[test]
    fn run_defaults_match_kube_controller_manager_and_the_issue() {
        let r = run(&["--tls-cert-file", "c", "--tls-private-key-file", "k"]).unwrap();
        for name in registry::names() {
            assert_eq!(
                r.controllers.enables(name),
                registry::default_on(name),
                "{name}"
            );
        }
        let endpoint_slice: EndpointSliceFlags = r.controller_flags.group().unwrap();
        let endpoints: EndpointsFlags = r.controller_flags.group().unwrap();
        let mirroring: MirroringFlags = r.controller_flags.group().unwrap();
        let allocator_repair: AllocatorRepairFlags = r.controller_flags.group().unwrap();
        assert_eq!(endpoint_slice.max_endpoints_per_slice, 100);
        assert_eq!(mirroring.mirroring_max_endpoints_per_subset, 1000);
        assert_eq!(
            endpoints.endpoint_updates_batch_period,
            std::time::Duration::ZERO
        );
        assert_eq!(endpoint_slice.endpointslice_updates_batch_period, None);
        assert_eq!(endpoint_slice.concurrent_service_endpoint_syncs, 5);
        assert_eq!(r.kube_api_qps, 20.0);
        assert_eq!(r.kube_api_burst, 30);
        assert_eq!(r.metrics.metrics_bind_address.to_string(), "0.0.0.0:8080");
        assert_eq!(r.metrics.secure(), Ok(None));
        assert!(r.webhook && r.leader_elect);
        assert_eq!(
            r.leader_elect_lease_duration,
            std::time::Duration::from_secs(15)
        );
        assert_eq!(
            r.leader_elect_renew_deadline,
            std::time::Duration::from_secs(10)
        );
        assert_eq!(
            r.leader_elect_retry_period,
            std::time::Duration::from_secs(2)
        );
        assert_eq!(r.leader_elect_resource_name, "svcplane");
        assert_eq!(r.leader_elect_resource_namespace, None);
        assert_eq!(
            allocator_repair.allocator_repair_interval,
            std::time::Duration::from_secs(180)
        );
        assert_eq!(r.log_format, LogFormat::Text);
    }

    #[test]
    fn controllers_help_and_default_name_every_registered_controller() {
        let help = controllers_help();
        for name in registry::names() {
            assert!(help.contains(name), "{name} missing from: {help}");
            for alias in registry::aliases_of(name) {
                assert!(help.contains(alias), "{alias} missing from: {help}");
            }
        }
        assert!(
            help.contains(
                "servicecidr (kube-controller-manager: service-cidr-controller, off by default)"
            ),
            "{help}"
        );
        let default = ControllerList::registry_default();
        assert_eq!(
            default.to_string(),
            "endpointslice,endpoints,endpointslicemirroring,allocator-repair"
        );
        let parsed = run(&["--webhook=false"]).unwrap();
        assert_eq!(parsed.controllers, default);
    }

    #[test]
    fn run_controllers_follow_kube_controller_manager_syntax() {
        let base = ["--webhook=false"];
        let only = run(&[base[0], "--controllers", "endpointslice"]).unwrap();
        assert!(only.controllers.enables("endpointslice"));
        assert!(!only.controllers.enables("endpoints"));
        let all_but = run(&[base[0], "--controllers", "*,-endpoint,-allocator-repair"]).unwrap();
        assert!(all_but.controllers.enables("endpointslice"));
        assert!(all_but.controllers.enables("endpointslicemirroring"));
        assert!(
            !all_but.controllers.enables("endpoints"),
            "`endpoint` is KCM's name for it"
        );
        assert!(!all_but.controllers.enables("allocator-repair"));
        let e = run(&[base[0], "--controllers", "endpointslice,nope"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--controllers") && e.contains("\"nope\""), "{e}");
    }

    #[test]
    fn run_needs_certificates_only_with_the_webhook() {
        let e = run(&[]).unwrap().check().unwrap_err();
        assert!(
            e.contains("--tls-cert-file") && e.contains("--tls-private-key-file"),
            "{e}"
        );
        let e = run(&["--tls-cert-file", "c"]).unwrap().check().unwrap_err();
        assert!(
            !e.contains("--tls-cert-file") && e.contains("--tls-private-key-file"),
            "{e}"
        );
        let r = run(&["--webhook=false"]).unwrap();
        assert!(!r.webhook && r.webhook_server.tls_cert_file.is_none());
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn run_bad_values_name_the_flag_and_value() {
        for (flag, value) in [
            ("--max-endpoints-per-slice", "1001"),
            ("--concurrent-service-endpoint-syncs", "51"),
            ("--kube-api-qps", "-1"),
            ("--kube-api-burst", "0"),
            ("--leader-elect-retry-period", "0s"),
            ("--endpoint-updates-batch-period", "5"),
            ("--metrics-bind-address", "nowhere"),
            ("--service-cluster-ip-range", "10.0.0.0/33"),
        ] {
            let arg = format!("{flag}={value}");
            let e = run(&["--webhook=false", &arg]).unwrap_err().to_string();
            assert!(e.contains(flag) && e.contains(value), "{flag}: {e}");
        }
    }

    #[test]
    fn durations_parse_like_kubernetes_flags() {
        use std::time::Duration;
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "60", "5x", "s", "-5s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    fn explain(args: &[&str]) -> Result<ExplainWhat, clap::Error> {
        let argv = ["svcplane", "explain"].iter().chain(args).copied();
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Explain(e) => e.what,
            other => panic!("parsed as {other:?}"),
        })
    }

    /// Every duration flag of every subcommand takes Go's syntax, as kube-controller-manager's do.
    #[test]
    fn every_duration_flag_takes_go_durations() {
        let run_flags = [
            "--endpoint-updates-batch-period",
            "--endpointslice-updates-batch-period",
            "--mirroring-endpointslice-updates-batch-period",
            "--allocator-repair-interval",
            "--leader-elect-lease-duration",
            "--leader-elect-renew-deadline",
            "--leader-elect-retry-period",
            "--shutdown-grace-period",
            "--tls-reload-interval",
            "--webhook-request-timeout",
            "--claim-grace-period",
            "--claim-repair-interval",
            "--tls-ca-validity",
            "--tls-cert-validity",
        ];
        for (value, nanos) in [
            ("1.5s", 1_500_000_000u64),
            ("500ms", 500_000_000),
            ("1m30s", 90_000_000_000),
            ("1h2m3.5s", 3_723_500_000_000),
            ("300us", 300_000),
            ("300µs", 300_000),
            ("250ns", 250),
        ] {
            for flag in run_flags {
                let arg = format!("{flag}={value}");
                let r = run(&["--webhook=false", &arg])
                    .unwrap_or_else(|e| panic!("{flag}={value}: {e}"));
                let flags = &r.controller_flags;
                let got = match flag {
                    "--endpoint-updates-batch-period" => {
                        flags
                            .group::<EndpointsFlags>()
                            .unwrap()
                            .endpoint_updates_batch_period
                    }
                    "--endpointslice-updates-batch-period" => flags
                        .group::<EndpointSliceFlags>()
                        .unwrap()
                        .endpointslice_updates_batch_period
                        .unwrap(),
                    "--mirroring-endpointslice-updates-batch-period" => flags
                        .group::<MirroringFlags>()
                        .unwrap()
                        .mirroring_endpointslice_updates_batch_period
                        .unwrap(),
                    "--allocator-repair-interval" => {
                        flags
                            .group::<AllocatorRepairFlags>()
                            .unwrap()
                            .allocator_repair_interval
                    }
                    "--leader-elect-lease-duration" => r.leader_elect_lease_duration,
                    "--leader-elect-renew-deadline" => r.leader_elect_renew_deadline,
                    "--leader-elect-retry-period" => r.leader_elect_retry_period,
                    "--shutdown-grace-period" => r.shutdown_grace_period,
                    "--tls-reload-interval" => r.webhook_server.tls_reload_interval,
                    "--webhook-request-timeout" => r.webhook_server.webhook_request_timeout,
                    "--claim-grace-period" => r.webhook_server.claim_grace_period,
                    "--claim-repair-interval" => r.webhook_server.claim_repair_interval,
                    "--tls-ca-validity" => r.webhook_server.tls_ca_validity,
                    "--tls-cert-validity" => r.webhook_server.tls_cert_validity,
                    other => panic!("{other}"),
                };
                assert_eq!(got.as_nanos(), u128::from(nanos), "{flag}={value}");
            }
        }
        // Zero where a zero makes sense, refused where it does not; unitless and
        // negative values are refused everywhere.
        assert!(run(&["--webhook=false", "--endpoint-updates-batch-period=0"]).is_ok());
        assert!(run(&["--webhook=false", "--shutdown-grace-period=0"]).is_ok());
        for flag in run_flags {
            for bad in ["5", "-1s", "", "1d"] {
                let arg = format!("{flag}={bad}");
                let e = run(&["--webhook=false", &arg]).unwrap_err().to_string();
                assert!(e.contains(flag), "{arg}: {e}");
            }
        }
        let c = check(&["--timeout=1m30s", "--interval=1.5s"]).unwrap();
        assert_eq!(c.timeout.as_secs(), 90);
        assert_eq!(c.interval.as_millis(), 1500);
    }

    fn check(args: &[&str]) -> Result<CheckArgs, clap::Error> {
        let argv = ["svcplane", "check"].iter().chain(args).copied();
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Check(c) => c,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn explain_forms_and_flags() {
        let ExplainWhat::Service(s) = explain(&["service", "shop/web", "-f", "x.yaml"]).unwrap()
        else {
            panic!("not a service");
        };
        assert_eq!(s.key(), ("shop".to_owned(), "web".to_owned()));
        assert_eq!(s.source.files, vec![PathBuf::from("x.yaml")]);
        assert_eq!(s.source.output, ExplainFormat::Text);
        assert_eq!(s.max_endpoints_per_slice, 100);
        let ExplainWhat::Pod(p) = explain(&["pod", "web-1", "-n", "shop", "-o", "json"]).unwrap()
        else {
            panic!("not a pod");
        };
        assert_eq!(p.key(), ("shop".to_owned(), "web-1".to_owned()));
        assert_eq!(p.source.output, ExplainFormat::Json);
        let ExplainWhat::Ip(i) = explain(&["ip", "fd00::1", "-o", "yaml"]).unwrap() else {
            panic!("not an ip");
        };
        assert_eq!(i.ip.to_string(), "fd00::1");
        assert_eq!(
            i.ranges.config().unwrap().cluster_ip_ranges[0].to_string(),
            "10.96.0.0/12"
        );
        let ExplainWhat::NodePort(n) = explain(&["nodeport", "30080"]).unwrap() else {
            panic!("not a nodeport");
        };
        assert_eq!(n.port, 30080);
    }

    #[test]
    fn explain_usage_errors() {
        for bad in [
            &["service"][..],
            &["service", "a/b/c"],
            &["service", "/web"],
            &["service", "shop/"],
            &["ip", "10.0.0.300"],
            &["nodeport", "0"],
            &["nodeport", "70000"],
            &["service", "a/b", "-f", "x", "--kubeconfig", "k"],
            &["service", "a/b", "-o", "xml"],
            &["volume", "x"],
        ] {
            assert!(explain(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn check_defaults() {
        let c = check(&[]).unwrap();
        assert_eq!(c.timeout.as_secs(), 120);
        assert_eq!(c.interval.as_secs(), 2);
        assert_eq!(c.namespace, None);
        assert_eq!(
            check(&["-n", "svc"]).unwrap().namespace.as_deref(),
            Some("svc")
        );
        assert!(check(&["--timeout=0s"]).is_err());
    }

    #[test]
    fn kube_controller_manager_canonical_controller_names_are_accepted() {
        // kube-controller-manager 1.28+ names, with `-` to disable.
        let r = run(&[
            "--webhook=false",
            "--controllers=endpointslice-controller,endpoints-controller,endpointslice-mirroring-controller",
        ])
        .unwrap();
        assert!(r.controllers.enables("endpointslice"));
        assert!(r.controllers.enables("endpoints"));
        assert!(r.controllers.enables("endpointslicemirroring"));
        assert!(!r.controllers.enables("allocator-repair"));
        let r = run(&[
            "--webhook=false",
            "--controllers=*,-endpointslice-controller,-endpointslice-mirroring-controller",
        ])
        .unwrap();
        assert!(!r.controllers.enables("endpointslice"));
        assert!(!r.controllers.enables("endpointslicemirroring"));
        assert!(r.controllers.enables("endpoints"));
        assert!(r.controllers.enables("allocator-repair"));
        // KCM's older alias `endpoint` and svcplane's short names still work.
        let r = run(&["--webhook=false", "--controllers=endpoint"]).unwrap();
        assert!(r.controllers.enables("endpoints"));
        for (alias, short) in [
            ("endpointslice-controller", "endpointslice"),
            ("endpoints-controller", "endpoints"),
            (
                "endpointslice-mirroring-controller",
                "endpointslicemirroring",
            ),
            ("service-cidr-controller", "servicecidr"),
        ] {
            assert_eq!(crate::shell::registry::canonical(alias), Some(short));
        }
        let e = run(&["--webhook=false", "--controllers=endpointslices-controller"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("endpointslice-mirroring-controller"),
            "lists the names: {e}"
        );
        // `plan --controllers` takes them too.
        let p = plan(&[
            "-f",
            "a",
            "--controllers",
            "endpointslice-controller,endpoints-controller",
        ])
        .unwrap();
        let names = |p: &PlanArgs| p.controllers.iter().map(|c| c.name()).collect::<Vec<_>>();
        assert_eq!(names(&p), ["endpointslice", "endpoints"]);
        let p = plan(&[
            "-f",
            "a",
            "--controllers",
            "endpointslice-mirroring-controller,endpoint",
        ])
        .unwrap();
        assert_eq!(names(&p), ["endpointslicemirroring", "endpoints"]);
        // Every controller `run` has, the off-by-default one included.
        let p = plan(&[
            "-f",
            "a",
            "--controllers",
            "service-cidr-controller,allocator",
        ])
        .unwrap();
        assert_eq!(names(&p), ["servicecidr", "allocator"]);
    }

    #[test]
    fn v_is_klog_verbosity_before_or_after_the_subcommand() {
        let cli = Cli::try_parse_from(["svcplane", "-v", "4", "plan", "-f", "a"]).unwrap();
        assert_eq!(cli.verbosity, Some(4));
        let cli = Cli::try_parse_from(["svcplane", "run", "--webhook=false", "--v=2"]).unwrap();
        assert_eq!(cli.verbosity, Some(2));
        let cli = Cli::try_parse_from(["svcplane", "webhook", "-v3"]).unwrap();
        assert_eq!(cli.verbosity, Some(3));
        let cli = Cli::try_parse_from(["svcplane", "check"]).unwrap();
        assert_eq!(cli.verbosity, None);
        let e = Cli::try_parse_from(["svcplane", "-v", "11", "check"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
    }

    #[test]
    fn help_is_written_for_users_and_grouped() {
        let mut cmd = Cli::command();
        let help = cmd.render_long_help().to_string();
        assert!(
            help.starts_with("The control plane of Kubernetes Service networking"),
            "{help}"
        );
        assert!(
            !help.contains("Pure reconcilers"),
            "not the Cargo description: {help}"
        );
        assert!(help.contains("svcplane check"), "{help}");
        let version = cmd.render_version().to_string();
        assert_eq!(
            version.trim(),
            format!("svcplane {}", crate::build_info::VERSION_LINE)
        );
        assert!(version.contains("(commit "), "{version}");
        // Every `run` flag sits under a heading; every heading of the list is used.
        let run = cmd.find_subcommand_mut("run").unwrap();
        let mut used = std::collections::BTreeSet::new();
        for a in run.get_arguments() {
            let id = a.get_id().as_str();
            if id == "help" {
                continue;
            }
            let h = a
                .get_help_heading()
                .unwrap_or_else(|| panic!("--{id} has no help heading"));
            used.insert(h.to_owned());
        }
        for h in [
            heading::CONTROLLERS,
            heading::ENDPOINTSLICE,
            heading::ENDPOINTS,
            heading::ALLOCATOR,
            heading::TLS,
            heading::LEADER,
            heading::API,
            heading::OBSERVABILITY,
            heading::LIFECYCLE,
        ] {
            assert!(used.contains(h), "no `run` flag under {h}: {used:?}");
        }
        let text = run.render_help().to_string();
        assert!(text.contains("Leader election:"), "{text}");
        assert!(
            text.find("Controllers:") < text.find("Leader election:"),
            "headings in topic order: {text}"
        );
    }

    #[test]
    fn certificates_come_from_files_or_a_self_managed_secret_not_both() {
        let r = run(&["--tls-secret-name", "svcplane-webhook-tls"]).unwrap();
        assert_eq!(
            r.webhook_server.cert_source(),
            Ok(CertSource::Secret {
                name: "svcplane-webhook-tls".into(),
                namespace: None
            })
        );
        assert_eq!(r.check(), Ok(()));
        assert_eq!(r.webhook_server.webhook_service_name, "svcplane-webhook");
        assert_eq!(r.webhook_server.webhook_configuration_name, "svcplane");
        assert_eq!(r.webhook_server.tls_ca_validity.as_secs(), 87600 * 3600);
        assert_eq!(r.webhook_server.tls_cert_validity.as_secs(), 8760 * 3600);
        let e = run(&["--tls-secret-name", "s", "--tls-cert-file", "c"])
            .unwrap()
            .check()
            .unwrap_err();
        assert!(e.contains("cannot be combined"), "{e}");
        let w = webhook(&[
            "--tls-secret-name=s",
            "--tls-secret-namespace=ns",
            "--tls-extra-hosts=127.0.0.1,webhook.example",
        ])
        .unwrap();
        assert_eq!(w.check(), Ok(()));
        assert_eq!(w.server.tls_extra_hosts, ["127.0.0.1", "webhook.example"]);
    }

    #[test]
    fn plan_defaults() {
        let p = plan(&["-f", "x.yaml"]).unwrap();
        assert_eq!(p.files, vec![PathBuf::from("x.yaml")]);
        assert_eq!(p.controllers, Controller::defaults());
        let names: Vec<&str> = p.controllers.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "endpointslice",
                "endpoints",
                "endpointslicemirroring",
                "allocator-repair",
                "allocator"
            ],
            "run's defaults in registry order, then the webhook's allocator"
        );
        assert_eq!(p.max_endpoints_per_slice, 100);
        assert_eq!(p.output, OutputFormat::Yaml);
        assert_eq!(
            p.ranges.config().unwrap().cluster_ip_ranges[0].to_string(),
            "10.96.0.0/12"
        );
        assert_eq!(p.ranges.service_node_port_range, "30000-32767");
    }

    #[test]
    fn plan_flags() {
        let p = plan(&[
            "-f",
            "a",
            "-f",
            "-",
            "--controllers",
            "endpointslice",
            "--max-endpoints-per-slice",
            "1000",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(p.files, vec![PathBuf::from("a"), PathBuf::from("-")]);
        assert_eq!(p.max_endpoints_per_slice, 1000);
        assert_eq!(p.output, OutputFormat::Json);
    }

    #[test]
    fn plan_rejects_out_of_range_and_unknown_values() {
        for bad in [
            &["-f", "a", "--max-endpoints-per-slice", "0"][..],
            &["-f", "a", "--max-endpoints-per-slice", "1001"],
            &["-f", "a", "--controllers", "nope"],
            &["-f", "a", "-o", "xml"],
            &[],
        ] {
            assert!(plan(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
