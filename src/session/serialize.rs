//! A host's own types as payloads (feature `serde`): a value is serialized to JSON text
//! with `serde_json` and then appended exactly as text is, so every rule of the text
//! append holds for it (contract §2.1, §5). Reading back is [`Message::parse`].
//!
//! [`Message::parse`]: crate::surface::Message::parse

use serde::Serialize;

use super::{EventKind, Session, SessionLog};
use crate::error::{ErrorKind, Result};

impl<L: SessionLog> Session<L> {
    /// Appends `value`, serialized with `serde_json`, as the data of an event of type `K`:
    /// [`Session::append`] of the text `serde_json::to_string(value)`. The text is checked
    /// like any other (lossless JSON, envelope, message shape, surface rules): a value
    /// whose text the engine refuses is refused with the same code, and leaves no trace.
    ///
    /// What is stored is the text `serde_json` writes. It writes a non-finite float (`NaN`,
    /// infinity) as `null`, so such a value does not read back; `-0.0` is written `-0.0`
    /// and refused (`DATA_NOT_LOSSLESS`), as in text.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use surfacelog::{kinds, NoSurface, Session, StoreOptions};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct TurnStart { turn: u64 }
    ///
    /// let mut session = Session::in_memory("s", &StoreOptions::new())?;
    /// let seq = session.append_serialize::<kinds::TurnStart, _>(&TurnStart { turn: 1 }, NoSurface)?;
    /// assert_eq!(session.event(seq)?.unwrap().data(), r#"{"turn":1}"#);
    /// # Ok::<(), surfacelog::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DATA_INVALID_JSON` when `value` does not serialize (its `Serialize` fails, or a map
    /// has keys that are not strings); otherwise exactly the refusals of
    /// [`Session::append`]. Nothing is appended then.
    pub fn append_serialize<K: EventKind, T: Serialize + ?Sized>(
        &mut self,
        value: &T,
        intent: K::Intent,
    ) -> Result<u64> {
        let text = serde_json::to_string(value).map_err(|_| {
            crate::Error::from(ErrorKind::DataInvalidJson {
                offset: 0,
                reason: "the value does not serialize to JSON (serde_json)",
            })
            .in_session(self.id())
            .at_seq(self.seq_next())
        })?;
        self.append::<K>(&text, intent)
    }
}
