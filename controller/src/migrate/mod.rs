//! `svcplane migrate`: leaving a Service range without rebuilding the cluster.
//!
//! A ClusterIP cannot be changed, so leaving a range means recreating each Service
//! in it. This command plans that move, offline on a dump (as `plan` reads one) or
//! live (read-only): every Service with an address in the old range, the addresses
//! it gets in the target, the nodePorts it keeps, and the Services left to the
//! operator with why and how ([`plan`]). With `--apply` it recreates them through the
//! cluster, resumably ([`apply`]).
//!
//! - `plan`: the pure plan over a snapshot;
//! - `recreate`: the object a moved Service becomes, and the journal's rules (pure);
//! - `apply`: the move through the API server;
//! - `text`: plan and report for people (JSON and YAML serialise them).

pub mod apply;
pub mod plan;
pub mod recreate;
pub mod text;

use std::io::{Read, Write};

use crate::cli::{ExplainFormat, MigrateArgs};
use crate::explain::live::{self, Scope};
use crate::explain::world::{self, World};

/// Seed of the target's random picks: fixed, so a plan is reproducible.
pub const SEED: u64 = 0x5eed;

/// Why `migrate` printed no plan (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error(transparent)]
    Read(#[from] crate::explain::ExplainError),
    #[error("encoding the plan: {0}")]
    Encode(String),
    #[error("cannot write output: {0}")]
    Write(#[source] std::io::Error),
    /// `--apply` could not start or stopped.
    #[error("{0}")]
    Apply(String),
}

impl MigrateError {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        1
    }
}

/// Runs `work` against the cluster `--kubeconfig` (or the usual fallbacks) names, on a
/// runtime of its own: `migrate` is a command, not a server.
fn on_cluster<T, F, Fut>(args: &MigrateArgs, work: F) -> Result<T, MigrateError>
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, MigrateError>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| MigrateError::Read(crate::explain::ExplainError::Runtime(e)))?;
    runtime.block_on(async {
        let client = crate::kube_client::connect(args.source.kubeconfig.as_deref(), "migrate")
            .await
            .map_err(|e| crate::explain::ExplainError::Connect(format!("{e:#}")))?;
        work(client).await
    })
}

/// What a plan reads from a live cluster: every Service, IPAddress, claim and
/// ServiceCIDR, and the endpoints of Services without a selector (which a recreate
/// would lose).
pub(crate) async fn live_world(
    client: kube::Client,
) -> Result<World, crate::explain::ExplainError> {
    let mut world = live::load(client.clone(), &Scope::Allocations).await?;
    live::add_selectorless_endpoints(client, &mut world).await?;
    Ok(world)
}

fn read_world(
    args: &MigrateArgs,
    stdin: &mut dyn Read,
) -> Result<(World, Vec<String>), MigrateError> {
    if !args.source.files.is_empty() {
        return world::read_dump(&args.source.files, stdin)
            .map_err(|e| MigrateError::Read(e.into()));
    }
    let world = on_cluster(args, |client| async move { Ok(live_world(client).await?) })?;
    Ok((world, Vec::new()))
}

/// Runs `svcplane migrate`: reads the cluster, prints warning lines on `stderr` and
/// the plan on `stdout`.
pub fn run(
    args: &MigrateArgs,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), MigrateError> {
    if args.apply {
        return run_apply(args, stdout, stderr);
    }
    let (world, warnings) = read_world(args, stdin)?;
    for w in &warnings {
        let _ = writeln!(
            stderr,
            "{}",
            w.replace("not used by explain", "not used by migrate")
        );
    }
    let where_ = world.source.where_();
    let from = plan::side("from", &args.from, &world.snapshot, &where_)?;
    let to = plan::side("to", &args.to, &world.snapshot, &where_)?;
    let p = plan::plan(&world.snapshot, from, to, SEED)?;
    write(stdout, args.source.output, &p, text::render)
}

/// `--apply`: moves the Services, printing progress on `stderr` and the report on
/// `stdout`.
fn run_apply(
    args: &MigrateArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), MigrateError> {
    let options = apply::ApplyOptions {
        max_in_flight: usize::from(args.max_in_flight),
        pause: args.pause,
        slice_timeout: args.slice_timeout,
        journal_namespace: args.journal_namespace.clone(),
    };
    let report = on_cluster(args, |client| async move {
        // Progress as it happens: an operator watches a long move.
        let mut progress = |line: String| {
            let _ = writeln!(stderr, "{line}");
            let _ = stderr.flush();
        };
        apply::apply(client, &args.from, &args.to, &options, &mut progress).await
    })?;
    write(stdout, args.source.output, &report, text::render_applied)
}

/// Prints `value` as `format` asks: `text` for people, JSON or YAML for tools.
fn write<T: serde::Serialize>(
    stdout: &mut dyn Write,
    format: ExplainFormat,
    value: &T,
    text: fn(&T) -> String,
) -> Result<(), MigrateError> {
    let out = match format {
        ExplainFormat::Text => text(value),
        ExplainFormat::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| MigrateError::Encode(e.to_string()))?,
        ExplainFormat::Yaml => {
            serde_saphyr::to_string(value).map_err(|e| MigrateError::Encode(e.to_string()))?
        }
    };
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(MigrateError::Write)
}
