//! The `svcplane` command line (clap derive).
//!
//! Only the definitions live here; `main.rs` parses them and hands the chosen
//! subcommand to the library (`plan::run` for `svcplane plan`).

use std::fmt;
use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::core::endpointslice::{DEFAULT_MAX_ENDPOINTS_PER_SLICE, MAX_ENDPOINTS_PER_SLICE_LIMIT};

/// svcplane: the Kubernetes Service-networking control plane (EndpointSlices,
/// Endpoints, mirroring, ClusterIP/NodePort allocation), in Rust.
#[derive(Debug, Parser)]
#[command(name = "svcplane", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Offline: read cluster objects (a `kubectl get -o yaml` dump) and print
    /// the API writes and events the controllers would make.
    Plan(PlanArgs),
    /// Run the admission webhook alone: assign ClusterIPs and NodePorts to new
    /// Services and reject invalid ones (HTTPS, AdmissionReview v1).
    Webhook(WebhookArgs),
    /// Print the CustomResourceDefinition of svcplane's AllocationClaim (the
    /// webhook's cross-replica lock) as YAML, for `kubectl apply -f -`.
    Crd,
}

/// Flags of `svcplane webhook`.
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// kubeconfig file; without it the in-cluster configuration (or
    /// `$KUBECONFIG` / `~/.kube/config`) is used.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Address the HTTPS webhook server listens on.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:9443",
        env = "SVCPLANE_WEBHOOK_BIND_ADDRESS"
    )]
    pub webhook_bind_address: std::net::SocketAddr,

    /// PEM certificate chain served by the webhook (re-read when it changes).
    #[arg(long, value_name = "FILE", env = "SVCPLANE_TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,

    /// PEM private key of the webhook certificate.
    #[arg(long, value_name = "FILE", env = "SVCPLANE_TLS_PRIVATE_KEY_FILE")]
    pub tls_private_key_file: PathBuf,

    #[command(flatten)]
    pub ranges: AllocatorRanges,

    /// How often the certificate files are checked for changes.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration,
          env = "SVCPLANE_TLS_RELOAD_INTERVAL")]
    pub tls_reload_interval: std::time::Duration,

    /// Per-request deadline; keep it below the webhook configuration's
    /// `timeoutSeconds` so the API server gets an answer, not a timeout.
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = parse_duration,
          env = "SVCPLANE_WEBHOOK_REQUEST_TIMEOUT")]
    pub webhook_request_timeout: std::time::Duration,

    /// An AllocationClaim no Service uses is released once it is this old.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration,
          env = "SVCPLANE_CLAIM_GRACE_PERIOD")]
    pub claim_grace_period: std::time::Duration,

    /// How often unused AllocationClaims are looked for.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration,
          env = "SVCPLANE_CLAIM_REPAIR_INTERVAL")]
    pub claim_repair_interval: std::time::Duration,

    /// Log line format.
    #[arg(long, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "SVCPLANE_LOG_FORMAT")]
    pub log_format: LogFormat,
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

/// Parses durations the way Kubernetes flags spell them: `500ms`, `30s`,
/// `2m`, `1h`, or combinations such as `1m30s`. A bare number is refused so
/// `--claim-grace-period 60` cannot silently mean 60 ns or 60 h.
pub fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    let bad =
        || format!("invalid duration {value:?}: use a number with a unit, e.g. 500ms, 30s, 2m, 1h");
    let mut total = std::time::Duration::ZERO;
    let mut rest = value.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => std::time::Duration::from_millis(n),
            "s" => std::time::Duration::from_secs(n),
            "m" => std::time::Duration::from_secs(n.saturating_mul(60)),
            "h" => std::time::Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Flags of `svcplane plan`.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// Input file: multi-document YAML, `kind: List`, or JSON (one object,
    /// a List, or several concatenated). `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,

    /// Controllers to run, comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_values_t = Controller::ALL.to_vec()
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

    #[command(flatten)]
    pub ranges: AllocatorRanges,
}

/// The allocator's range flags, shared by every subcommand that allocates.
#[derive(Debug, Clone, Args)]
pub struct AllocatorRanges {
    /// Service ClusterIP range(s): one CIDR, or one per family separated by a
    /// comma (primary family first). Must match kube-apiserver's.
    #[arg(
        long,
        value_name = "CIDRS",
        default_value = svcplane_allocator::DEFAULT_SERVICE_CLUSTER_IP_RANGE,
        value_parser = parse_cluster_ip_ranges,
        env = "SVCPLANE_SERVICE_CLUSTER_IP_RANGE"
    )]
    pub service_cluster_ip_range: String,

    /// NodePort range, `LOW-HIGH` (inclusive). Must match kube-apiserver's.
    #[arg(
        long,
        value_name = "LOW-HIGH",
        default_value = svcplane_allocator::DEFAULT_SERVICE_NODE_PORT_RANGE,
        value_parser = parse_node_port_range,
        env = "SVCPLANE_SERVICE_NODE_PORT_RANGE"
    )]
    pub service_node_port_range: String,
}

impl AllocatorRanges {
    /// The allocator configuration (both values were validated while parsing).
    pub fn config(
        &self,
    ) -> Result<svcplane_allocator::AllocatorConfig, svcplane_allocator::ConfigError> {
        svcplane_allocator::AllocatorConfig::from_flags(
            &self.service_cluster_ip_range,
            &self.service_node_port_range,
        )
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

/// A controller `plan` can run. Adding one means adding a variant here, to
/// `ALL`, and a match arm in `plan::plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    EndpointSlice,
    Endpoints,
    EndpointSliceMirroring,
    Allocator,
}

impl Controller {
    /// Every implemented controller, in output order.
    pub const ALL: &'static [Controller] = &[
        Controller::EndpointSlice,
        Controller::Endpoints,
        Controller::EndpointSliceMirroring,
        Controller::Allocator,
    ];

    /// The name used on the command line and in the output's `controller`
    /// field (kube-controller-manager's `--controllers` names).
    pub const fn name(self) -> &'static str {
        match self {
            Controller::EndpointSlice => "endpointslice",
            Controller::Endpoints => "endpoints",
            Controller::EndpointSliceMirroring => "endpointslicemirroring",
            Controller::Allocator => "allocator",
        }
    }
}

impl ValueEnum for Controller {
    fn value_variants<'a>() -> &'a [Self] {
        Self::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
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
            Command::Webhook(w) => w,
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
        assert_eq!(w.webhook_bind_address.to_string(), "0.0.0.0:9443");
        assert_eq!(w.webhook_request_timeout, std::time::Duration::from_secs(4));
        assert_eq!(w.tls_reload_interval, std::time::Duration::from_secs(30));
        assert_eq!(w.claim_grace_period, std::time::Duration::from_secs(60));
        assert_eq!(w.claim_repair_interval, std::time::Duration::from_secs(30));
        assert_eq!(w.ranges.service_cluster_ip_range, "10.96.0.0/12");
        assert_eq!(w.ranges.service_node_port_range, "30000-32767");
        assert_eq!(w.log_format, LogFormat::Text);
        assert_eq!(w.kubeconfig, None);
    }

    #[test]
    fn webhook_needs_its_certificate_files() {
        let e = webhook(&[]).unwrap_err();
        assert!(e.to_string().contains("--tls-cert-file"), "{e}");
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

    #[test]
    fn durations_parse_like_kubernetes_flags() {
        use std::time::Duration;
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "60", "5x", "s", "1.5s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn plan_defaults() {
        let p = plan(&["-f", "x.yaml"]).unwrap();
        assert_eq!(p.files, vec![PathBuf::from("x.yaml")]);
        assert_eq!(p.controllers, Controller::ALL.to_vec());
        assert!(p.controllers.contains(&Controller::Allocator));
        assert_eq!(p.max_endpoints_per_slice, 100);
        assert_eq!(p.output, OutputFormat::Yaml);
        assert_eq!(p.ranges.service_cluster_ip_range, "10.96.0.0/12");
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
