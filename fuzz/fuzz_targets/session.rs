//! Stateful target: lines of arbitrary text are a stored log (reopen), a seed (create) and
//! a pure fold. None may panic; an accepted log folds incrementally to the same surface
//! as at once, and reopening its own events again adds no repair closers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::event::{EventSource, Vocabulary};
use surfacelog::internals::session::{Options, Session};
use surfacelog::internals::surface::Surface;

const HEADER: &str = r#"{"version":0,"id":"f","createdAt":0}"#;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    let _ = Session::create("f", None, Some(&lines), Options::default());
    let vocabulary = Vocabulary::dsh_v0();
    if let Ok((whole, log)) = Surface::fold_json(&lines, &vocabulary) {
        let mut partial = Surface::new();
        partial
            .catch_up(&log, &vocabulary)
            .expect("an accepted log refolds");
        assert_eq!(partial, whole);
    }
    let Ok((session, _)) = Session::reopen("f", HEADER, &lines, Options::default()) else {
        return;
    };
    let stored: Vec<String> = (0..session.seq_next())
        .map(|s| session.log().event_at(s).unwrap().text().into_owned())
        .collect();
    let stored: Vec<&str> = stored.iter().map(String::as_str).collect();
    let (_, again) =
        Session::reopen("f", HEADER, &stored, Options::default()).expect("a repaired log reopens");
    assert_eq!(again.closers, 0, "repair must be idempotent");
});
