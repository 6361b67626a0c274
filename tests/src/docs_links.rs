//! The manual holds together: the README is short and points into `docs/` and
//! CONTRIBUTING.md, so a moved or renamed page or heading must not leave a link
//! pointing nowhere. Every relative link in the repository's Markdown names a
//! file that exists and, with `#anchor`, a heading of that file (GitHub's anchor
//! rules). Test-only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::docs_check::{files, relative, workspace};

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text's headings (outside code fences), repeats
/// numbered `-1`, `-2` as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&level) || !line[level..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[level..]);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of inline links `[text](target)` outside code fences and code spans.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans, where `](` is text, not a link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            out.push((n + 1, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// What is wrong with `target` as written in `from`, if anything.
fn broken(from: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file: PathBuf = if path.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !file.exists() {
        return Some(format!("{target}: no such file"));
    }
    if anchor.is_empty() || file.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    (!anchors(&text).contains(anchor)).then(|| format!("{target}: no heading #{anchor}"))
}

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let mut bad = Vec::new();
    for path in files() {
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (line, target) in links(&text) {
            if let Some(why) = broken(&path, &target) {
                bad.push(format!("{}:{line}: {why}", relative(&path)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "links pointing nowhere:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_readme_is_short_and_reaches_every_document() {
    let root = workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    let lines = readme.lines().count();
    assert!(
        lines <= 220,
        "README.md has {lines} lines: move detail into docs/"
    );
    // Every page of docs/operate, docs/reference and docs/design, and
    // CONTRIBUTING.md, is one link away from the README.
    let linked: BTreeSet<String> = links(&readme)
        .into_iter()
        .map(|(_, t)| t.split('#').next().unwrap_or_default().to_owned())
        .collect();
    let mut unreached = Vec::new();
    for dir in ["docs/operate", "docs/reference", "docs/design"] {
        for entry in std::fs::read_dir(root.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let page = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if !linked.contains(&page) {
                unreached.push(page);
            }
        }
    }
    if !linked.contains("CONTRIBUTING.md") {
        unreached.push("CONTRIBUTING.md".to_owned());
    }
    assert!(
        unreached.is_empty(),
        "README.md links none of: {unreached:?}"
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# `svcplane run`\n## Flags\n```\n# not a heading\n```\n### Flags\n## Install safety: never blocks\n";
    let got = anchors(text);
    let want: BTreeSet<String> = [
        "svcplane-run",
        "flags",
        "flags-1",
        "install-safety-never-blocks",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        links("see [a](b.md#c) and `[x](y)` and [d](#e)"),
        vec![(1, "b.md#c".to_owned()), (1, "#e".to_owned())]
    );
}
