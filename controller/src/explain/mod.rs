//! `svcplane explain`: why a Pod is or is not an endpoint of a Service, who
//! holds a ClusterIP or NodePort, and how full each Service range and its bands
//! are — from a dump or a live cluster.
//!
//! "Why does my Service have no endpoints?" has an exact answer here because
//! the controllers are pure functions of a snapshot: `explain` runs the very
//! functions that write the slices and answer admission reviews, and reports
//! what they decided and which rule decided it. It implements no rule of its
//! own; where a decision used to be inline in a reconciler it was moved into
//! a named core function that both call
//! ([`endpoint_for`](crate::core::endpointslice::desired::endpoint_for),
//! [`AddressRules::decide`](crate::core::endpoints::desired::AddressRules::decide),
//! [`ineligibility`](crate::core::pod::ineligibility),
//! [`TopologyPolicy::apply_and_decide`](crate::core::topology::TopologyPolicy::apply_and_decide)).
//!
//! Layout, one job per file:
//! - `world`: the objects, read from a dump the way `plan` reads one;
//! - `live`: the same objects listed from an API server (read-only); `migrate`
//!   reads its cluster through these two as well;
//! - `verdict`: one Pod's verdict from the per-Pod decisions;
//! - `slices`, `legacy`, `hints`: the slices, the Endpoints object and the
//!   topology hints of one Service;
//! - `service`, `pod`, `allocation`, `range`: the five forms;
//! - `ports`: the one way every report names a port;
//! - `text`: the human rendering (JSON and YAML serialise the reports).

pub mod allocation;
pub mod hints;
pub mod legacy;
pub mod live;
pub mod pod;
pub mod ports;
pub mod range;
pub mod service;
pub mod slices;
pub mod text;
pub mod verdict;
pub mod world;

#[cfg(test)]
mod tests;

use std::io::{Read, Write};

use serde::Serialize;
use svcplane_allocator::ConfigError;

use crate::cli::{ExplainArgs, ExplainFormat, ExplainWhat};
use crate::dump::input::InputError;

use self::allocation::ValueReport;
use self::pod::PodReport;
use self::range::RangesReport;
use self::service::ServiceReport;
use self::world::World;

/// Why `explain` did not print an explanation.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The Service or Pod does not exist (exit 1).
    #[error("{kind} {namespace}/{name} not found{where_}{retained}")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
        where_: String,
        /// For a deleted Service: the values retained for its name, as a sentence.
        retained: String,
    },
    /// Bad input; the message is `plan`'s `FILE: document N (...): reason` line.
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    Connect(String),
    #[error("{what}: {message}")]
    Api { what: String, message: String },
    /// A bad range flag (normally caught by clap first).
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("allocator ranges: {0}")]
    Ranges(String),
    #[error("encoding the output as {format}: {message}")]
    Encode {
        format: &'static str,
        message: String,
    },
    #[error("cannot write output: {0}")]
    Write(#[source] std::io::Error),
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl ExplainError {
    /// The process exit code: 2 for bad flags, 1 otherwise (a missing object
    /// included).
    pub fn exit_code(&self) -> u8 {
        match self {
            ExplainError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// One explanation, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Service(Box<ServiceReport>),
    Pod(Box<PodReport>),
    Value(Box<ValueReport>),
    Ranges(Box<RangesReport>),
}

impl Report {
    /// The output text in `format`.
    pub fn render(&self, format: ExplainFormat) -> Result<String, ExplainError> {
        match format {
            ExplainFormat::Text => Ok(match self {
                Report::Service(r) => text::service(r),
                Report::Pod(r) => text::pod(r),
                Report::Value(r) => text::value(r),
                Report::Ranges(r) => text::ranges(r),
            }),
            ExplainFormat::Json => match self {
                Report::Service(r) => json(r),
                Report::Pod(r) => json(r),
                Report::Value(r) => json(r),
                Report::Ranges(r) => json(r),
            },
            ExplainFormat::Yaml => match self {
                Report::Service(r) => yaml(r),
                Report::Pod(r) => yaml(r),
                Report::Value(r) => yaml(r),
                Report::Ranges(r) => yaml(r),
            },
        }
    }
}

fn json<T: Serialize>(value: &T) -> Result<String, ExplainError> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| ExplainError::Encode {
            format: "JSON",
            message: e.to_string(),
        })
}

fn yaml<T: Serialize>(value: &T) -> Result<String, ExplainError> {
    serde_saphyr::to_string(value).map_err(|e| ExplainError::Encode {
        format: "YAML",
        message: e.to_string(),
    })
}

/// The explanation `what` asks for, from `world`.
pub fn explain(what: &ExplainWhat, world: &World) -> Result<Report, ExplainError> {
    let not_found = |kind, (namespace, name): (String, String)| ExplainError::NotFound {
        kind,
        retained: if kind == "Service" {
            allocation::retained_for(world, &namespace, &name)
        } else {
            String::new()
        },
        namespace,
        name,
        where_: world.source.where_(),
    };
    match what {
        ExplainWhat::Service(o) => {
            let (namespace, name) = o.key();
            service::explain_service(
                &world.snapshot,
                &namespace,
                &name,
                usize::from(o.max_endpoints_per_slice),
            )
            .map(|r| Report::Service(Box::new(r)))
            .ok_or_else(|| not_found("Service", (namespace, name)))
        }
        ExplainWhat::Pod(o) => {
            let (namespace, name) = o.key();
            pod::explain_pod(
                &world.snapshot,
                &namespace,
                &name,
                usize::from(o.max_endpoints_per_slice),
            )
            .map(|r| Report::Pod(Box::new(r)))
            .ok_or_else(|| not_found("Pod", (namespace, name)))
        }
        ExplainWhat::Ip(i) => {
            let (config, _) = allocation::ranges_of(world, &i.ranges)?;
            allocation::explain_ip(world, &config, i.ip)
                .map(|r| Report::Value(Box::new(r)))
                .map_err(ExplainError::Ranges)
        }
        ExplainWhat::NodePort(p) => {
            let (config, _) = allocation::ranges_of(world, &p.ranges)?;
            allocation::explain_node_port(world, &config, i32::from(p.port))
                .map(|r| Report::Value(Box::new(r)))
                .map_err(ExplainError::Ranges)
        }
        ExplainWhat::Range(r) => {
            let (config, from_cluster) = allocation::ranges_of(world, &r.ranges)?;
            range::explain_ranges(world, &config, from_cluster)
                .map(|r| Report::Ranges(Box::new(r)))
                .map_err(ExplainError::Ranges)
        }
    }
}

/// Reads the objects `what` needs: the `-f` files, else the cluster.
/// Returns the warning lines to print.
fn read_world(
    what: &ExplainWhat,
    stdin: &mut dyn Read,
) -> Result<(World, Vec<String>), ExplainError> {
    let source = what.source();
    if !source.files.is_empty() {
        return Ok(world::read_dump(&source.files, stdin)?);
    }
    let scope = match what {
        ExplainWhat::Service(o) | ExplainWhat::Pod(o) => live::Scope::Namespace(o.key().0),
        ExplainWhat::Ip(_) | ExplainWhat::NodePort(_) | ExplainWhat::Range(_) => {
            live::Scope::Allocations
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ExplainError::Runtime)?;
    let world = runtime.block_on(async {
        let client = crate::kube_client::connect(source.kubeconfig.as_deref(), "explain")
            .await
            .map_err(|e| ExplainError::Connect(format!("{e:#}")))?;
        let mut world = live::load(client.clone(), &scope).await?;
        // A Service that is gone may have values retained for its name: say so.
        if let ExplainWhat::Service(o) = what {
            let (namespace, name) = o.key();
            let key = crate::dump::snapshot::Key { namespace, name };
            if !world.snapshot.services.contains_key(&key) {
                live::add_claims(client, &mut world).await;
            }
        }
        Ok::<World, ExplainError>(world)
    })?;
    Ok((world, Vec::new()))
}

/// Runs `svcplane explain`: reads the objects, prints warning lines on
/// `stderr` and the explanation on `stdout`.
pub fn run(
    args: &ExplainArgs,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), ExplainError> {
    let (world, warnings) = read_world(&args.what, stdin)?;
    for w in &warnings {
        // Best effort: a closed stderr must not fail the explanation.
        let _ = writeln!(stderr, "{w}");
    }
    let report = explain(&args.what, &world)?;
    let text = report.render(args.what.source().output)?;
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(ExplainError::Write)
}
