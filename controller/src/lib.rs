//! svcplane's controller crate: the pure reconcilers (`core`), the offline
//! `svcplane plan` command built on them (`plan`), the `svcplane explain`
//! command that reports what they decide and why (`explain`), the controller runtime
//! (`shell`, `leader`, `run_cmd`: `svcplane run`), and the CLI definition.
//!
//! The split follows the house rule (docs/design/overview.md: pure core, thin shell): everything under
//! `core` is a deterministic function of its inputs (time is passed in), so it
//! can be tested without a runtime; the shells (`plan` and `run`) only gather
//! snapshots and carry plans out.

pub mod build_info;
pub mod check_cmd;
pub mod cli;
pub mod core;
pub mod dump;
pub use svcplane_allocator::duration;
pub mod explain;
pub mod kube_client;
pub mod leader;
pub mod logging;
pub mod migrate;
pub mod plan;
pub mod process;
pub mod rbac_cmd;
pub mod run_cmd;
pub mod shell;
mod token_bucket;
pub mod webhook_cmd;
