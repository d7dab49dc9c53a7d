//! `tracing` events for recovery actions and refusals at open (issue 14, item 6): a torn
//! tail set aside, repair closers appended, a session refused at open, each with the
//! session id and the seq.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use surfacelog::internals::log::Durability;
use surfacelog::internals::session::{NoSurface, kinds};
use surfacelog::internals::storage::faulty::FaultyStorage;
use surfacelog::internals::store::Store;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

mod common;

use common::{scratch, store_options, user_message};

/// One event as collected: its level and its fields, formatted.
#[derive(Debug, Clone)]
struct Collected {
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Collected {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// A subscriber that keeps every event of the `surfacelog` crate.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Collected>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Collector {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("surfacelog")
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Collected {
            level: *event.metadata().level(),
            fields,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

impl Collector {
    /// Runs `f` with this collector as the thread's subscriber; returns what it collected.
    fn run<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<Collected>) {
        let value = tracing::subscriber::with_default(self.clone(), f);
        let events = std::mem::take(&mut *self.0.lock().unwrap());
        (value, events)
    }
}

/// The one event whose message contains `text`.
fn the_event<'a>(events: &'a [Collected], text: &str) -> &'a Collected {
    let found: Vec<&Collected> = events
        .iter()
        .filter(|e| e.field("message").is_some_and(|m| m.contains(text)))
        .collect();
    assert_eq!(found.len(), 1, "{text:?} in {events:#?}");
    found[0]
}

#[test]
fn a_torn_tail_and_repair_closers_are_traced_with_the_session_and_seq() {
    let dir = scratch("tracing_events", "torn-closers");
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = store_options(Durability::Sync, 64 << 10).storage(Arc::new(storage));
    let store = Store::open_or_create(&dir, options).unwrap();
    let mut session = store.create("s1", None, None).unwrap();
    session
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    user_message(&mut session, "hello");
    // The next append tears: 10 of its bytes reach the segment, less than any record of
    // either format (a version 1 record's frame header and body, a compact record's 16
    // bytes at least). The turn stays open.
    faults.fail_write(1, 10);
    let error = session
        .append::<kinds::TurnStart>(r#"{"turn":2}"#, NoSurface)
        .unwrap_err();
    assert!(error.is_fate_unknown(), "{error}");
    drop(session);
    let stored = 2;

    let collector = Collector::default();
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 64 << 10)).unwrap();
    let ((session, opened), events) = collector.run(|| store.open_session("s1").unwrap());
    let torn = opened.log.torn_tail.expect("a torn tail");
    assert!(opened.closers > 0);

    let event = the_event(&events, "torn tail set aside");
    assert_eq!(event.level, Level::WARN);
    assert_eq!(event.field("session"), Some("s1"));
    assert_eq!(event.field("seq"), Some(stored.to_string().as_str()));
    assert_eq!(event.field("code"), Some("TORN_TAIL"));
    assert_eq!(
        event.field("offset"),
        Some(torn.offset.to_string().as_str())
    );
    assert_eq!(event.field("bytes"), Some(torn.bytes.to_string().as_str()));
    let quarantine = torn.quarantine.display().to_string();
    assert_eq!(event.field("quarantine"), Some(quarantine.as_str()));
    let segment = torn.segment.display().to_string();
    assert_eq!(event.field("path"), Some(segment.as_str()));

    let event = the_event(&events, "repair closers appended");
    assert_eq!(event.level, Level::WARN);
    assert_eq!(event.field("session"), Some("s1"));
    assert_eq!(event.field("seq"), Some(stored.to_string().as_str()));
    assert_eq!(
        event.field("count"),
        Some(opened.closers.to_string().as_str())
    );
    session.close().unwrap();

    // A clean reopen repairs nothing: no recovery event.
    let (_, events) = collector.run(|| store.open_session("s1").unwrap());
    assert!(events.iter().all(|e| e.level > Level::INFO), "{events:#?}");
}

#[test]
fn a_refusal_at_open_is_traced_with_the_session_and_code() {
    let dir = scratch("tracing_events", "refusals");
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 64 << 10)).unwrap();
    let mut session = store.create("s1", None, None).unwrap();
    user_message(&mut session, "hello");
    let collector = Collector::default();
    let (error, events) = collector.run(|| store.open_session("s1").unwrap_err());
    assert_eq!(error.code(), "LOCKED");
    let event = the_event(&events, "session refused at open");
    assert_eq!(event.level, Level::WARN);
    assert_eq!(event.field("session"), Some("s1"));
    assert_eq!(event.field("code"), Some("LOCKED"));
    session.close().unwrap();

    // A damaged header: `CORRUPT`, an error event.
    let header = dir.join("sessions").join("s1").join("header.json");
    std::fs::write(&header, b"{").unwrap();
    let (error, events) = collector.run(|| store.open_session("s1").unwrap_err());
    assert_eq!(error.code(), "CORRUPT");
    let event = the_event(&events, "session refused at open");
    assert_eq!(event.level, Level::ERROR);
    assert_eq!(event.field("session"), Some("s1"));
    assert_eq!(event.field("code"), Some("CORRUPT"));
    assert_eq!(event.field("op"), Some("open"));
    // Read-only opens too.
    let (error, events) = collector.run(|| store.inspect("s1").map(drop).unwrap_err());
    assert_eq!(error.code(), "CORRUPT");
    let event = the_event(&events, "session refused at open");
    assert_eq!(event.field("op"), Some("inspect"));
    assert_eq!(event.field("session"), Some("s1"));
}
