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

    /// Service ClusterIP range(s) for the allocator: one CIDR, or one per
    /// family separated by a comma (primary family first).
    #[arg(
        long,
        value_name = "CIDRS",
        default_value = svcplane_allocator::DEFAULT_SERVICE_CLUSTER_IP_RANGE,
        value_parser = parse_cluster_ip_ranges
    )]
    pub service_cluster_ip_range: String,

    /// NodePort range for the allocator, `LOW-HIGH` (inclusive).
    #[arg(
        long,
        value_name = "LOW-HIGH",
        default_value = svcplane_allocator::DEFAULT_SERVICE_NODE_PORT_RANGE,
        value_parser = parse_node_port_range
    )]
    pub service_node_port_range: String,
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
        })
    }

    #[test]
    fn plan_defaults() {
        let p = plan(&["-f", "x.yaml"]).unwrap();
        assert_eq!(p.files, vec![PathBuf::from("x.yaml")]);
        assert_eq!(p.controllers, Controller::ALL.to_vec());
        assert!(p.controllers.contains(&Controller::Allocator));
        assert_eq!(p.max_endpoints_per_slice, 100);
        assert_eq!(p.output, OutputFormat::Yaml);
        assert_eq!(p.service_cluster_ip_range, "10.96.0.0/12");
        assert_eq!(p.service_node_port_range, "30000-32767");
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
