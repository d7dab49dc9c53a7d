//! DSH JSONL import: any bytes, read as a raw or a Zstandard log, never panic; whatever is
//! accepted goes through the import-compatibility projections (`dsh-formats.md` §9.2) and
//! the import path of a session, and what a scan reports is consistent (the torn tail
//! starts within the input, events only from accepted records; a projected event is a JSON
//! object with the same seq).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};
use surfacelog::internals::adapters::legacy;
use surfacelog::internals::json::Json;
use surfacelog::internals::session::{Options, Session};

fuzz_target!(|bytes: &[u8]| {
    for compression in [Compression::None, Compression::Zstd] {
        let source = Box::new(std::io::Cursor::new(bytes.to_vec()));
        let Ok(reader) = JsonlReader::from_reader(source, Path::new("fuzz"), compression) else {
            continue;
        };
        let id = reader.id().to_owned();
        let Ok(mut session) = Session::create(&id, Some(reader.header()), None, Options::default())
        else {
            continue;
        };
        let scan = reader.read_events(
            &mut |event| {
                let message_id = |session: &Session, seq: u64| {
                    let message = session.event(seq)?.and_then(|e| e.message().map(str::to_owned));
                    Ok(message.and_then(|m| {
                        let json = Json::parse(&m).ok()?;
                        json.root().get("id")?.as_str().map(|id| id.into_owned())
                    }))
                };
                let projected =
                    legacy::project(&id, event.root(), &mut |seq| message_id(&session, seq))?;
                match projected {
                    Some(text) => {
                        let json = Json::parse(&text).expect("a projection is JSON");
                        let seq = |j: &Json<'_>| j.root().get("seq").map(|s| s.raw().to_owned());
                        assert_eq!(seq(&json), seq(event), "a projection keeps the seq");
                        session.import_parsed(&json).map(|_| ())
                    }
                    None => session.import_parsed(event).map(|_| ()),
                }
            },
            &mut |_| {},
        );
        if let Ok(scan) = scan {
            assert_eq!(scan.events, session.seq_next());
            if let (Compression::None, Some(torn)) = (compression, scan.torn) {
                assert!(torn.offset <= bytes.len() as u64);
            }
        }
    }
});
