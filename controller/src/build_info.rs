//! What this binary is: its version and the commit it was built from (see `build.rs`).

/// The crate version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit (12 hex digits), or `unknown` when built outside a git checkout
/// without `SVCPLANE_GIT_COMMIT`.
pub const COMMIT: &str = env!("SVCPLANE_GIT_COMMIT");

/// `svcplane --version`'s text after the name.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SVCPLANE_GIT_COMMIT"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_version_and_commit() {
        assert_eq!(VERSION_LINE, format!("{VERSION} (commit {COMMIT})"));
        assert!(!COMMIT.is_empty());
        // Tests run from a git checkout (CI clones), so the commit is known here.
        if std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../.git")
            .exists()
        {
            assert!(
                COMMIT.len() >= 7 && COMMIT.chars().all(|c| c.is_ascii_hexdigit()),
                "{COMMIT}"
            );
        }
    }
}
