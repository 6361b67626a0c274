//! The container image's recipe: what can be checked without a Docker engine.
//!
//! - every base image is pinned by digest (a tag alone can change under a rebuild);
//! - the build passes the git commit in (the build context has no `.git`), so
//!   `svcplane --version` and `svcplane_build_info` name it;
//! - the release profile the Dockerfile builds with ships no debug sections;
//! - the image exposes the admin (8080), webhook (9443) and secure metrics (10257)
//!   ports;
//! - the builder runs on the build platform and cross-compiles arm64 (no QEMU),
//!   with cargo caches per target platform;
//! - `scripts/image`, the Docker-free build CI runs, builds the binary with the
//!   Dockerfile's cargo command and declares the same user, entrypoint, command
//!   and ports (its `verify` compares the built image with the Dockerfile too).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

/// The command both recipes build the binary with.
const CARGO_BUILD: &str = "cargo build --release --locked -p svcplane-controller";

fn repo_path(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file)
}

fn read(file: &str) -> String {
    let path = repo_path(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Dockerfile's instructions: continuation lines joined, comments dropped.
fn instructions(dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && !pending.is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let full = std::mem::take(&mut pending).trim().to_owned();
        if !full.is_empty() {
            out.push(full);
        }
    }
    out
}

fn keyword(instruction: &str) -> String {
    instruction
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase()
}

/// The instructions of each stage, in order (each starts with its FROM).
fn stages(dockerfile: &str) -> Vec<Vec<String>> {
    let mut stages: Vec<Vec<String>> = Vec::new();
    for instruction in instructions(dockerfile) {
        if keyword(&instruction) == "FROM" {
            stages.push(Vec::new());
        }
        if let Some(stage) = stages.last_mut() {
            stage.push(instruction);
        }
    }
    stages
}

/// The ports (`8080/tcp`) a stage's EXPOSE instructions name.
fn exposed_ports(stage: &[String]) -> Vec<String> {
    let mut ports: Vec<String> = stage
        .iter()
        .filter(|i| keyword(i) == "EXPOSE")
        .flat_map(|i| i.split_whitespace().skip(1).map(str::to_owned))
        .map(|p| {
            if p.contains('/') {
                p
            } else {
                format!("{p}/tcp")
            }
        })
        .collect();
    ports.sort();
    ports
}

#[test]
fn every_base_image_is_pinned_by_digest() {
    let dockerfile = read("Dockerfile");
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .collect();
    assert!(froms.len() >= 2, "a build and a runtime stage: {froms:?}");
    for from in froms {
        // FROM [--platform=...] image [AS name]
        let image = from
            .split_whitespace()
            .skip(1)
            .find(|w| !w.starts_with("--"))
            .unwrap();
        let (_, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("not pinned by digest: {from}"));
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "bad digest in {from}"
        );
    }
}

#[test]
fn the_image_build_embeds_the_git_commit() {
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains("ARG SVCPLANE_GIT_COMMIT"),
        "{dockerfile}"
    );
    assert!(dockerfile.contains("ENV SVCPLANE_GIT_COMMIT=${SVCPLANE_GIT_COMMIT}"));
    assert!(read(".dockerignore").lines().any(|l| l.trim() == ".git/"));
    assert!(read("controller/build.rs").contains("SVCPLANE_GIT_COMMIT"));
}

#[test]
fn the_release_profile_ships_no_debug_sections() {
    let manifest = read("Cargo.toml");
    let release = manifest
        .split("[profile.release]")
        .nth(1)
        .expect("a [profile.release] section");
    let release = release.split("\n[").next().unwrap();
    assert!(release.contains("debug = false"), "{release}");
    assert!(release.contains("strip = \"debuginfo\""), "{release}");
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains(CARGO_BUILD));
}

#[test]
fn the_image_exposes_admin_webhook_and_secure_metrics_ports() {
    let dockerfile = read("Dockerfile");
    let stages = stages(&dockerfile);
    let runtime = stages.last().expect("a runtime stage");
    let ports = exposed_ports(runtime);
    for port in ["8080/tcp", "9443/tcp", "10257/tcp"] {
        assert!(ports.iter().any(|p| p == port), "{port} not in {ports:?}");
    }
}

#[test]
fn the_builder_runs_on_the_build_platform_and_cross_compiles_arm64() {
    let dockerfile = read("Dockerfile");
    let stages = stages(&dockerfile);
    assert!(stages.len() >= 2, "a build and a runtime stage");
    let builder = &stages[0];
    let from = &builder[0];
    assert!(
        from.contains("--platform=$BUILDPLATFORM")
            && from.to_ascii_lowercase().ends_with(" as builder"),
        "the builder must run on the build machine's platform: {from}"
    );
    let builder = builder.join("\n");
    for needle in [
        "ARG TARGETARCH",
        "ARG BUILDARCH",
        "gcc-aarch64-linux-gnu",
        "libc6-dev-arm64-cross",
        "rustup target add aarch64-unknown-linux-gnu",
        "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc",
        "CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc",
        "--target",
        "target/$(cat /rust-target)/release/svcplane",
    ] {
        assert!(builder.contains(needle), "builder stage lacks {needle:?}");
    }
    // The runtime stage is the target platform's (no --platform override).
    let runtime = &stages.last().unwrap()[0];
    assert!(!runtime.contains("--platform"), "{runtime}");
}

#[test]
fn every_cargo_cache_mount_is_per_target_platform() {
    let dockerfile = read("Dockerfile");
    let stages = stages(&dockerfile);
    let builder = &stages[0];
    assert!(
        builder.iter().any(|i| i == "ARG TARGETPLATFORM"),
        "{builder:?}"
    );
    let mounts: Vec<&str> = builder
        .iter()
        .flat_map(|i| i.split_whitespace())
        .filter(|w| w.starts_with("--mount=type=cache"))
        .collect();
    assert!(mounts.len() >= 2, "registry and target caches: {mounts:?}");
    for mount in &mounts {
        let id = mount
            .split(',')
            .find_map(|kv| kv.strip_prefix("id="))
            .unwrap_or_else(|| panic!("cache mount without an id: {mount}"));
        assert!(
            id.contains("$TARGETPLATFORM") || id.contains("${TARGETPLATFORM}"),
            "cache mount shared across platforms: {mount}"
        );
    }
    assert!(
        mounts.iter().any(|m| m.contains("target=/src/target")),
        "{mounts:?}"
    );
}

#[test]
fn scripts_image_is_executable_and_builds_with_the_dockerfiles_cargo_command() {
    let script = read("scripts/image");
    assert!(script.starts_with("#!/usr/bin/env bash\n"), "a bash script");
    assert!(script.contains("set -euo pipefail"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(repo_path("scripts/image"))
            .unwrap()
            .permissions()
            .mode();
        assert!(
            mode & 0o111 == 0o111,
            "scripts/image is not executable: {mode:o}"
        );
    }
    let build_line = script
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cargo build"))
        .expect("scripts/image runs cargo build");
    assert_eq!(build_line, CARGO_BUILD);
    assert!(read("Dockerfile").contains(CARGO_BUILD));
    // build.rs reads the commit from git: the script must not override it.
    assert!(
        !script.contains("SVCPLANE_GIT_COMMIT="),
        "scripts/image sets SVCPLANE_GIT_COMMIT"
    );
}

#[test]
fn scripts_image_declares_the_dockerfiles_user_entrypoint_command_and_ports() {
    let recipe = read("scripts/oci_image.py");
    let constant = |name: &str| -> String {
        recipe
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("scripts/oci_image.py: no {name}"))
            .trim()
            .to_owned()
    };
    let dockerfile = read("Dockerfile");
    let stages = stages(&dockerfile);
    let runtime = stages.last().unwrap();
    let value = |kw: &str| -> String {
        runtime
            .iter()
            .find(|i| keyword(i) == kw)
            .unwrap_or_else(|| panic!("runtime stage has no {kw}"))
            .split_once(' ')
            .unwrap()
            .1
            .trim()
            .to_owned()
    };
    assert_eq!(constant("USER"), format!("\"{}\"", value("USER")));
    assert_eq!(constant("ENTRYPOINT"), value("ENTRYPOINT"));
    assert_eq!(constant("CMD"), value("CMD"));
    let ports: Vec<String> = exposed_ports(runtime)
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect();
    let mut declared: Vec<String> = constant("EXPOSED_PORTS")
        .trim_matches(['[', ']'])
        .split(", ")
        .map(str::to_owned)
        .collect();
    declared.sort();
    assert_eq!(declared, ports);
}
