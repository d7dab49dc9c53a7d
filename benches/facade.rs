//! What a host pays through the public facade (issue 14: "the facade adds no measurable
//! cost to append or open"): the calls a host makes, written with the crate root's items
//! only, so that the same cases built against the engine before the facade compare side
//! by side.
//!
//! 1. `append/manual`: one log-only event of ~200 bytes appended to a stored session in
//!    `Manual` durability (written to the OS, no sync): the per-event cost of the API
//!    down to `pwrite`.
//! 2. `append/sync`: the same in `Sync` durability (each append durable before it
//!    returns): the latency a host waits per event.
//! 3. `open/checkpointed/10000ev`: `Store::open_session` of a closed session of 10,000
//!    events (a turn of 40 events repeated), which starts from its checkpoint.
//!
//! `cargo bench --bench facade`. Scratch stores live under the system's temporary
//! directory and are removed at the end.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use surfacelog::{Durability, NoSurface, Store, StoreOptions, SurfaceIntent, kinds};

/// About 200 bytes of event data.
fn chunk(i: u64) -> String {
    format!(
        r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":{i},"text":"{}"}}}}"#,
        "x".repeat(140)
    )
}

/// One closed turn of 40 events: a user message, 36 chunks, the assistant message.
fn turn(session: &mut surfacelog::StoredSession, turn: u64) {
    session
        .append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)
        .expect("turn/start");
    let user = format!(
        r#"{{"id":"u{turn}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"hi"}}]}}"#
    );
    session
        .append::<kinds::UserMessage>(&user, SurfaceIntent::append())
        .expect("user/message");
    let chunks: Vec<u64> = (0..36)
        .map(|i| {
            session
                .append::<kinds::AssistantChunk>(&chunk(i), NoSurface)
                .expect("chunk")
        })
        .collect();
    let message = format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"text","text":"ok"}}]}}}}"#
    );
    session
        .append::<kinds::AssistantMessage>(&message, SurfaceIntent::append_citing(chunks))
        .expect("assistant/message");
    session
        .append::<kinds::TurnEnd>(
            &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
            NoSurface,
        )
        .expect("turn/end");
}

fn benches(c: &mut Criterion) {
    let scratch = tempfile::Builder::new()
        .prefix("surfacelog-facade-bench-")
        .tempdir()
        .expect("a scratch directory");
    let mut group = c.benchmark_group("append");
    for (name, durability) in [("manual", Durability::Manual), ("sync", Durability::Sync)] {
        let store = Store::open_or_create(
            scratch.path().join(name),
            StoreOptions::new().durability(durability),
        )
        .expect("a store");
        let mut sample = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // A session per sample, so no log grows without bound.
                sample += 1;
                let id = format!("s{sample}");
                let mut session = store.create(&id, None, None).expect("a session");
                let data = chunk(0);
                let start = Instant::now();
                for _ in 0..iters {
                    session
                        .append::<kinds::AssistantChunk>(&data, NoSurface)
                        .expect("an append");
                }
                let elapsed = start.elapsed();
                drop(session);
                store.remove(&id).expect("removes the sample's session");
                elapsed
            });
        });
    }
    group.finish();

    let store = Store::open_or_create(
        scratch.path().join("open"),
        StoreOptions::new().durability(Durability::Manual),
    )
    .expect("a store");
    let mut session = store.create("big", None, None).expect("a session");
    for t in 1..=250 {
        turn(&mut session, t);
    }
    assert_eq!(session.seq_next(), 10_000);
    session.close().expect("closes");
    let mut group = c.benchmark_group("open");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("checkpointed/10000ev", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let opened = store.open_session("big").expect("opens");
                total += start.elapsed();
                drop(opened);
            }
            total
        });
    });
    group.finish();
}

criterion_group!(facade_benches, benches);
criterion_main!(facade_benches);
