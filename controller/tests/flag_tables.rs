//! The flag tables in `docs/reference/` are made from the binary's own clap
//! definitions, so the documented flags, environment variables, defaults and
//! meanings are the ones `--help` prints. Each table sits between a begin marker
//! naming its command and an end marker; this test fails when a table differs
//! from what clap says, and rewrites them all with
//!
//!     UPDATE_GOLDEN=1 cargo test -p svcplane-controller --test flag_tables
//!
//! A command the binary has but no document covers fails too, so a new command
//! or subcommand cannot ship without its reference page.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use svcplane_controller::cli::Cli;

/// Commands without flags of their own, which need no table.
const NO_FLAGS: &[&str] = &["svcplane crd"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where each command's table lives.
fn document_of(command: &str) -> &'static str {
    match command.split_whitespace().nth(1) {
        Some("run") => "docs/reference/run.md",
        Some("webhook") => "docs/reference/webhook.md",
        Some("plan") => "docs/reference/plan.md",
        Some("check") => "docs/reference/check.md",
        Some("rbac") => "docs/reference/rbac.md",
        Some("explain") => "docs/reference/explain.md",
        Some("migrate") => "docs/reference/migrate.md",
        _ => "",
    }
}

fn begin_marker(command: &str) -> String {
    format!(
        "<!-- flags of `{command}`: generated from its --help by controller/tests/flag_tables.rs; \
         UPDATE_GOLDEN=1 rewrites -->"
    )
}

const END_MARKER: &str = "<!-- end of generated flags -->";

/// Every leaf command (one that takes flags, not a subcommand) by its full name.
fn leaf_commands() -> Vec<(String, clap::Command)> {
    let mut root = Cli::command();
    root.build();
    let mut out = Vec::new();
    let mut stack = vec![(String::from("svcplane"), root)];
    while let Some((name, command)) = stack.pop() {
        let subs: Vec<clap::Command> = command
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .cloned()
            .collect();
        if subs.is_empty() {
            out.push((name, command));
        } else {
            for sub in subs {
                stack.push((format!("{name} {}", sub.get_name()), sub));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn flag_name(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| n.as_str().to_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    if names.is_empty() {
        // A positional argument: its value name is all there is.
        let many = if arg.get_num_args().is_some_and(|n| n.max_values() > 1) {
            "..."
        } else {
            ""
        };
        return format!("`{value}{many}` (positional)");
    }
    let takes_value = arg.get_action().takes_values();
    let names = names.join("`, `");
    if takes_value && !value.is_empty() {
        format!("`{names} {value}`")
    } else {
        format!("`{names}`")
    }
}

fn meaning(arg: &clap::Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let is_bool = values.len() == 2 && values.iter().all(|v| v == "`true`" || v == "`false`");
    if !values.is_empty() && !is_bool {
        text.push_str(&format!(" (one of {})", values.join(", ")));
    }
    cell(&text)
}

/// The markdown tables of one command: one per help heading, in clap's order.
fn render(command: &clap::Command) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || id == "help" || id == "version" {
            continue;
        }
        let heading = arg.get_help_heading().unwrap_or("Options").to_owned();
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let default = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(",");
        // A switch (`--summary`) has no value to default; a required one says so.
        let default = if arg.is_required_set() {
            "(required)".to_owned()
        } else if default.is_empty() || !arg.get_action().takes_values() {
            String::new()
        } else {
            format!("`{}`", cell(&default))
        };
        let row = format!(
            "| {} | {env} | {default} | {} |",
            flag_name(arg),
            meaning(arg)
        );
        match groups.iter_mut().find(|(h, _)| *h == heading) {
            Some((_, rows)) => rows.push(row),
            None => groups.push((heading, vec![row])),
        }
    }
    let mut out = String::new();
    for (heading, rows) in groups {
        out.push_str(&format!(
            "\n{heading}:\n\n| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n"
        ));
        for row in rows {
            out.push_str(&row);
            out.push('\n');
        }
    }
    out
}

/// `text` with the block after `begin` replaced by `table`; `None` without the
/// markers.
fn with_table(text: &str, begin: &str, table: &str) -> Option<String> {
    let start = text.find(begin)? + begin.len();
    let end = start + text[start..].find(END_MARKER)?;
    Some(format!("{}\n{table}\n{}", &text[..start], &text[end..]))
}

#[test]
fn every_flag_table_in_the_reference_is_what_help_prints() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut documents: BTreeMap<&str, String> = BTreeMap::new();
    let mut problems = Vec::new();
    for (name, command) in leaf_commands() {
        if NO_FLAGS.contains(&name.as_str()) {
            continue;
        }
        let doc = document_of(&name);
        if doc.is_empty() {
            problems.push(format!("`{name}` has no reference page in docs/reference/"));
            continue;
        }
        let text = documents
            .entry(doc)
            .or_insert_with(|| std::fs::read_to_string(repo().join(doc)).unwrap());
        let begin = begin_marker(&name);
        let table = render(&command);
        let Some(updated) = with_table(text, &begin, &table) else {
            problems.push(format!(
                "{doc}: no table for `{name}`: add the lines\n{begin}\n{END_MARKER}\nwhere it belongs and run with UPDATE_GOLDEN=1"
            ));
            continue;
        };
        if updated != *text {
            if update {
                *text = updated;
            } else {
                problems.push(format!(
                    "{doc}: the flags of `{name}` differ from its --help (UPDATE_GOLDEN=1 cargo test -p svcplane-controller --test flag_tables rewrites them; review with git diff docs/)"
                ));
            }
        }
    }
    if update {
        for (doc, text) in &documents {
            std::fs::write(repo().join(doc), text).unwrap();
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_changed_help_text_is_caught() {
    // The comparison itself: a table that lost a row is not what clap renders.
    let (name, command) = leaf_commands()
        .into_iter()
        .find(|(n, _)| n == "svcplane run")
        .unwrap();
    let table = render(&command);
    assert!(
        table.contains("`--write-coalescing-window DURATION`"),
        "{table}"
    );
    assert!(table.contains("`SVCPLANE_KUBE_API_QPS`"), "{table}");
    let begin = begin_marker(&name);
    let doc = format!("intro\n{begin}\n{table}\n{END_MARKER}\nafter\n");
    assert_eq!(with_table(&doc, &begin, &table).unwrap(), doc);
    let stale = doc.replacen("| `--kube-api-burst N`", "| `--kube-api-burst-old N`", 1);
    assert_ne!(with_table(&stale, &begin, &table).unwrap(), stale);
}
