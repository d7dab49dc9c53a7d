//! The type-level append API (contract §5): surface types need a surface intent at
//! compile time, log-only types cannot take one.

use crate::event::SurfaceOp;

/// How a surface event joins the surface, with its provenance.
///
/// ```
/// use surfacelog::SurfaceIntent;
///
/// let plain = SurfaceIntent::append();
/// let citing = SurfaceIntent::append_citing(vec![3, 4]); // provenance: chunks 3 and 4
/// let replacing = SurfaceIntent::replace(1, 4, vec![1, 2, 4]);
/// # let _ = (plain, citing, replacing);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceIntent {
    /// Append at the tail, or replace a range.
    pub op: SurfaceOp,
    /// `sourceEventSeqs`, when given.
    pub sources: Option<Vec<u64>>,
}

impl SurfaceIntent {
    /// Append at the tail, without sources.
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let data = r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#;
    /// let seq = s.append::<kinds::UserMessage>(data, SurfaceIntent::append())?;
    /// assert_eq!(s.surface().nodes(), [seq]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append() -> Self {
        Self {
            op: SurfaceOp::Append,
            sources: None,
        }
    }

    /// Append at the tail, citing `sources`.
    ///
    /// ```
    /// use surfacelog::{NoSurface, Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let chunk = s.append::<kinds::AssistantChunk>(r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#, NoSurface)?;
    /// let message = r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"hi"}]}}"#;
    /// s.append::<kinds::AssistantMessage>(message, SurfaceIntent::append_citing(vec![chunk]))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append_citing(sources: Vec<u64>) -> Self {
        Self {
            op: SurfaceOp::Append,
            sources: Some(sources),
        }
    }

    /// Replace the surface range `start..=end` (by position), citing `sources`, which
    /// must include every shadowed node.
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
    /// let a = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
    /// let b = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
    /// // One message replaces both, citing every node it shadows (contract §4).
    /// let c = s.append::<kinds::UserMessage>(&user("c"), SurfaceIntent::replace(a, b, vec![a, b]))?;
    /// assert_eq!(s.surface().nodes(), [c]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replace(start: u64, end: u64, sources: Vec<u64>) -> Self {
        Self {
            op: SurfaceOp::Replace { start, end },
            sources: Some(sources),
        }
    }
}

/// The intent of a log-only event: none. (`SurfaceIntent` converts into
/// `Some(intent)` through the standard `From<T> for Option<T>`.)
///
/// ```
/// use surfacelog::{NoSurface, Session, StoreOptions, kinds};
///
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?; // log-only: no surface fields
/// assert!(s.surface().nodes().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoSurface;

impl From<NoSurface> for Option<SurfaceIntent> {
    fn from(_: NoSurface) -> Self {
        None
    }
}

/// An event type known at compile time, with the intent it requires.
///
/// A surface type takes a [`SurfaceIntent`]:
///
/// ```
/// use surfacelog::{kinds, Session, SurfaceIntent, StoreOptions};
/// let mut session = Session::in_memory("s", &StoreOptions::new())?;
/// let data = r#"{"id":"u","role":"user","source":{"kind":"user"},"content":[]}"#;
/// session.append::<kinds::UserMessage>(data, SurfaceIntent::append())?;
/// # Ok::<(), surfacelog::Error>(())
/// ```
///
/// and cannot be appended without one:
///
/// ```compile_fail,E0308
/// use surfacelog::{kinds, NoSurface, Session, StoreOptions};
/// let mut session = Session::in_memory("s", &StoreOptions::new()).unwrap();
/// let data = r#"{"id":"u","role":"user","source":{"kind":"user"},"content":[]}"#;
/// session.append::<kinds::UserMessage>(data, NoSurface);
/// ```
///
/// while a log-only type cannot take one:
///
/// ```compile_fail,E0308
/// use surfacelog::{kinds, Session, SurfaceIntent, StoreOptions};
/// let mut session = Session::in_memory("s", &StoreOptions::new()).unwrap();
/// session.append::<kinds::TurnStart>(r#"{"turn":1}"#, SurfaceIntent::append());
/// ```
pub trait EventKind {
    /// The type string.
    const TYPE: &'static str;
    /// [`SurfaceIntent`] for surface types, [`NoSurface`] for log-only types.
    type Intent: Into<Option<SurfaceIntent>>;
}

/// The event types of the default vocabulary (`dsh-v0`) and the common log-only types.
///
/// ```
/// use surfacelog::{EventKind, NoSurface, Session, StoreOptions, kinds};
///
/// assert_eq!(kinds::StepStart::TYPE, "step/start");
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// s.append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod kinds {
    use super::{EventKind, NoSurface, SurfaceIntent};

    macro_rules! kinds {
        ($($(#[$doc:meta])* $name:ident = $ty:literal => $intent:ty;)*) => {$(
            $(#[$doc])*
            ///
            /// ```
            /// use surfacelog::{EventKind, kinds};
            ///
            #[doc = concat!("assert_eq!(kinds::", stringify!($name), "::TYPE, ", stringify!($ty), ");")]
            /// ```
            #[derive(Debug, Clone, Copy)]
            pub struct $name;
            impl EventKind for $name {
                const TYPE: &'static str = $ty;
                type Intent = $intent;
            }
        )*};
    }

    kinds! {
        /// `user/message` (surface).
        UserMessage = "user/message" => SurfaceIntent;
        /// `assistant/message` (surface).
        AssistantMessage = "assistant/message" => SurfaceIntent;
        /// `tool/result` (surface).
        ToolResult = "tool/result" => SurfaceIntent;
        /// `context/message` (surface).
        ContextMessage = "context/message" => SurfaceIntent;
        /// `steering/message` (surface).
        SteeringMessage = "steering/message" => SurfaceIntent;
        /// `turn/start`.
        TurnStart = "turn/start" => NoSurface;
        /// `turn/end`.
        TurnEnd = "turn/end" => NoSurface;
        /// `step/start`.
        StepStart = "step/start" => NoSurface;
        /// `step/end`.
        StepEnd = "step/end" => NoSurface;
        /// `assistant/chunk`.
        AssistantChunk = "assistant/chunk" => NoSurface;
        /// `tool/call`.
        ToolCall = "tool/call" => NoSurface;
        /// `compaction/start`.
        CompactionStart = "compaction/start" => NoSurface;
        /// `compaction/summary`.
        CompactionSummary = "compaction/summary" => NoSurface;
        /// `compaction/end`.
        CompactionEnd = "compaction/end" => NoSurface;
        /// `compaction/prune`.
        CompactionPrune = "compaction/prune" => NoSurface;
        /// `request/header`.
        RequestHeader = "request/header" => NoSurface;
        /// `request/context`.
        RequestContext = "request/context" => NoSurface;
        /// `todo/write`.
        TodoWrite = "todo/write" => NoSurface;
    }
}
