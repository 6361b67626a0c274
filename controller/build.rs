//! Embeds the git commit the binary is built from, for `svcplane --version` and the
//! `svcplane_build_info` metric.
//!
//! `SVCPLANE_GIT_COMMIT` wins when set (the Dockerfile passes it as a build argument:
//! its build context has no `.git`); otherwise `git rev-parse` in this checkout;
//! otherwise `unknown` (a source tarball, or no git installed). Never fails the build.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=SVCPLANE_GIT_COMMIT");
    let commit = std::env::var("SVCPLANE_GIT_COMMIT")
        .ok()
        .map(|c| c.trim().to_owned())
        .filter(|c| {
            !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '.')
        })
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo::rustc-env=SVCPLANE_GIT_COMMIT={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// The short commit of HEAD, and rebuild triggers for when HEAD moves.
fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watch = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for name in watch {
        // Worktrees keep HEAD apart from the shared refs: ask git where each lives.
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo::rerun-if-changed={path}");
        }
    }
    Some(commit)
}
