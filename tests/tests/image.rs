//! The container image's recipe: what can be checked without a Docker engine.
//!
//! - every base image is pinned by digest (a tag alone can change under a rebuild);
//! - the build passes the git commit in (the build context has no `.git`), so
//!   `svcplane --version` and `svcplane_build_info` name it;
//! - the release profile the Dockerfile builds with ships no debug sections.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

fn read(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
        let image = from.split_whitespace().nth(1).unwrap();
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
    assert!(dockerfile.contains("cargo build --release --locked -p svcplane-controller"));
}
