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
