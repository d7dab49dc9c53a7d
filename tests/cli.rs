//! Runs the built `surfacelog` binary the way the README's quick start does and checks
//! what it prints.

// Runs the binary, built with the `cli` feature.
#![cfg(feature = "cli")]

mod common;

use common::surfacelog;

#[test]
fn demo_shows_every_stage_and_exits_zero() {
    let scratch = tempfile::tempdir().unwrap();
    let store = scratch.path().join("store");
    let output = surfacelog(&["demo", "--store", store.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    for stage in [
        "== 1.", "== 2.", "== 3.", "== 4.", "== 5.", "== 6.", "== 7.", "== 8.",
    ] {
        assert!(stdout.contains(stage), "missing {stage} in:\n{stdout}");
    }
    // The prune, the compaction and the nested compaction (start seq after end seq).
    assert!(
        stdout.contains("tool/result          replace 6..=6"),
        "{stdout}"
    );
    assert!(
        stdout.contains("user/message         replace 1..=9"),
        "{stdout}"
    );
    assert!(
        stdout.contains("user/message         replace 22..=15"),
        "{stdout}"
    );
    assert!(stdout.contains("surface [26, 29, 31]"), "{stdout}");
    assert!(stdout.contains(
        "Nothing was deleted: 34 events in the log, 3 on the surface, replace generation 3."
    ));
}

#[test]
fn unknown_command_is_refused_with_usage() {
    let output = surfacelog(&["no-such-command"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage"));
}

/// The README's command table names exactly the subcommands `surfacelog --help` lists, so
/// the two cannot drift.
#[test]
fn the_readme_command_table_matches_help() {
    let readme = include_str!("../README.md");
    let table = readme
        .split("| command | what it does |")
        .nth(1)
        .expect("the README has the command table");
    let mut documented: Vec<&str> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| line.split('`').nth(1).expect("a command in backticks"))
        .collect();
    let output = surfacelog(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    let mut listed: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("--help lists the commands")
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    documented.sort_unstable();
    listed.sort_unstable();
    assert_eq!(documented, listed, "README command table vs --help");
    assert!(listed.len() >= 17, "{listed:?}");
}

/// Every subcommand's help ends with examples.
#[test]
fn every_subcommand_help_has_examples() {
    let help = String::from_utf8(surfacelog(&["--help"]).stdout).unwrap();
    let commands: Vec<String> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect();
    assert!(!commands.is_empty());
    for command in commands {
        let output = surfacelog(&[&command, "--help"]);
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("Examples:"), "{command} --help:\n{text}");
    }
}
