//! The repository explains itself: every rule reference (`ES-2.7`, `AL-7.2`, …) in
//! code, tests, scripts and Markdown names a rule `docs/` defines, every test named
//! after a rule (`rule_2_7_…`) pins a defined rule, and nothing cites documents
//! outside the repository. Test-only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Rule prefixes and their documents.
const PREFIXES: [&str; 6] = ["ES", "TH", "EP", "MR", "AL", "WH"];

pub(crate) fn workspace() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// Every source and documentation file of the repository (no `target/`, no `.git`).
pub(crate) fn files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                    walk(&path, out);
                }
            } else if ["rs", "md", "py", "sh", "go", "toml", "yaml", "tpl", "json"]
                .iter()
                .any(|ext| name.ends_with(&format!(".{ext}")))
                || matches!(name.as_str(), "test" | "run" | "Dockerfile")
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&workspace(), &mut out);
    out.sort();
    out
}

/// The rule labels in `text`: a prefix preceded by a non-alphanumeric character,
/// a dash, and dot-separated numbers.
fn references(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for prefix in PREFIXES {
        let needle = format!("{prefix}-");
        let mut from = 0;
        while let Some(at) = text[from..].find(&needle) {
            let start = from + at;
            from = start + needle.len();
            if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
                continue;
            }
            let rest = &text[from..];
            let mut end = 0;
            let mut last_digit = 0;
            for (i, c) in rest.char_indices() {
                if c.is_ascii_digit() {
                    end = i + 1;
                    last_digit = end;
                } else if c == '.' && end == i && i > 0 {
                    end = i + 1;
                } else {
                    break;
                }
            }
            if last_digit > 0 {
                out.push(format!("{needle}{}", &rest[..last_digit]));
            }
        }
    }
    out
}

/// The labels `docs/*.md` define: headings whose text starts with a label.
fn defined() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let dir = workspace().join("docs");
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Some(heading) = line.strip_prefix('#') else {
                continue;
            };
            let heading = heading.trim_start_matches('#').trim();
            let label = heading.split_whitespace().next().unwrap_or_default();
            let label = label.trim_end_matches('.');
            if references(label).first().map(String::as_str) == Some(label) {
                out.insert(label.to_owned());
            }
        }
    }
    out
}

pub(crate) fn relative(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_rule_reference_names_a_rule_docs_define() {
    let defined = defined();
    assert!(
        defined.contains("ES-2.7") && defined.contains("WH-8.3") && defined.contains("AL-12"),
        "docs/ defines too little: {defined:?}"
    );
    let mut missing = Vec::new();
    for path in files() {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for label in references(&text) {
            if !defined.contains(&label) {
                missing.push(format!("{}: {label}", relative(&path)));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "undefined rule references:\n{}",
        missing.join("\n")
    );
}

/// The label a `rule_…` test in `path` pins: the numbers of its name, in the
/// numbering of the path's area (controller: endpoint documents; allocator, webhook
/// and the allocator repair controller: allocation documents).
fn test_label(path: &str, name: &str) -> Option<String> {
    let numbers: Vec<&str> = name
        .strip_prefix("rule_")?
        .split('_')
        .take_while(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        .collect();
    let first: u32 = numbers.first()?.parse().ok()?;
    let allocation = path.starts_with("allocator/")
        || path.starts_with("webhook/")
        || path.ends_with("allocator_repair.rs");
    let prefix = match (allocation, first) {
        (false, 1 | 2 | 6 | 7) => "ES",
        (false, 3) => "TH",
        (false, 4) => "EP",
        (false, 5) => "MR",
        (true, 2..=7 | 11 | 12) => "AL",
        (true, 8..=10 | 13..=15) => "WH",
        _ => return Some(format!("?-{}", numbers.join("."))),
    };
    Some(format!("{prefix}-{}", numbers.join(".")))
}

#[test]
fn every_rule_test_pins_a_defined_rule() {
    let defined = defined();
    let mut missing = Vec::new();
    let mut seen = 0;
    for path in files()
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let rel = relative(path);
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let Some(at) = line.find("fn rule_") else {
                continue;
            };
            let name: String = line[at + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if let Some(label) = test_label(&rel, &name) {
                seen += 1;
                if !defined.contains(&label) {
                    missing.push(format!("{rel}: {name} -> {label}"));
                }
            }
        }
    }
    assert!(seen > 200, "only {seen} rule tests found");
    assert!(
        missing.is_empty(),
        "rule tests of undefined rules:\n{}",
        missing.join("\n")
    );
}

#[test]
fn nothing_cites_documents_outside_the_repository() {
    // Built from pieces, so this file does not match itself.
    let outside = [
        format!("{}{}", "../", "shared"),
        format!("{}/{}", "shared", "reference"),
        format!("{}-{}", "endpoints", "spec"),
        format!("{}-{}", "allocation", "spec"),
        format!("{}.{}", "architecture", "md"),
        format!("{}.{}", "conventions", "md"),
        '\u{a7}'.to_string(),
    ];
    let mut found = Vec::new();
    for path in files() {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            for needle in &outside {
                if line.contains(needle.as_str()) {
                    found.push(format!("{}:{}: {needle}", relative(&path), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "references outside the repository:\n{}",
        found.join("\n")
    );
}

#[test]
fn references_are_parsed_with_their_numbers() {
    assert_eq!(
        references("see ES-2.7, TH-3.3.1; AL-12. KEP-3070 and `WH-8.3`"),
        ["ES-2.7", "TH-3.3.1", "AL-12", "WH-8.3"]
    );
    assert_eq!(
        test_label("controller/src/core/x.rs", "rule_3_3_1_zones"),
        Some("TH-3.3.1".into())
    );
    assert_eq!(
        test_label("webhook/src/review/tests/x.rs", "rule_4_dual_stack"),
        Some("AL-4".into())
    );
}
