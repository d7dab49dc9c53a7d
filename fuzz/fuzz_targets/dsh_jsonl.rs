//! DSH JSONL import: any bytes, read as a raw or a Zstandard log, never panic; whatever is
//! accepted goes through the import path of a session, and what a scan reports is
//! consistent (the torn tail starts within the input, events only from accepted records).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};
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
            &mut |event| session.import_parsed(event).map(|_| ()),
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
