//! `kubectl-svcplane`: the `svcplane` binary under the name kubectl looks for
//! plugins by, so `kubectl svcplane explain service shop/web` runs
//! `kubectl-svcplane explain service shop/web`. Same code, same flags: the
//! `svcplane` entry point is compiled in as it is; usage messages name the
//! command `kubectl svcplane`.

#[path = "../main.rs"]
mod svcplane;

fn main() -> std::process::ExitCode {
    svcplane::main()
}
