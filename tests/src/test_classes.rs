//! `scripts/test fast` and `scripts/test e2e` split the suites by name: `e2e_*`,
//! `differential` and `chart` start a real control plane (or the node cluster),
//! every other suite runs in-process. This keeps the names honest, so `fast`
//! never waits on a Go build or an API server. Test-only.

use crate::docs_check::{relative, workspace};

/// The class `scripts/test` gives a suite of this name.
fn is_e2e(name: &str) -> bool {
    name.starts_with("e2e_") || name == "differential" || name == "chart"
}

#[test]
fn a_suite_starts_a_real_control_plane_exactly_when_its_name_says_e2e() {
    let mut wrong = Vec::new();
    for package in ["tests", "controller", "webhook", "allocator"] {
        let dir = workspace().join(package).join("tests");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let (name, source) = if path.is_dir() {
                (
                    entry.file_name().to_string_lossy().into_owned(),
                    path.join("main.rs"),
                )
            } else if path.extension().is_some_and(|e| e == "rs") {
                let stem = path.file_stem().unwrap_or_default();
                (stem.to_string_lossy().into_owned(), path.clone())
            } else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(&source) else {
                continue;
            };
            let starts_one = text.contains("envtest::") || text.contains("NodeCluster");
            if starts_one != is_e2e(&name) {
                wrong.push(format!(
                    "{}: {} a real control plane but `scripts/test` classes `{name}` as {}",
                    relative(&source),
                    if starts_one {
                        "starts"
                    } else {
                        "does not start"
                    },
                    if is_e2e(&name) { "e2e" } else { "fast" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_script_classes_suites_by_the_same_names() {
    let script = std::fs::read_to_string(workspace().join("scripts/test")).unwrap_or_default();
    assert!(
        script.contains("e2e_* | differential | chart) [[ $1 == e2e ]]"),
        "scripts/test's suites() no longer classes by the names this test checks"
    );
}
