//! The type-level append API (contract §5): surface types need a surface intent at
//! compile time, log-only types cannot take one.

use crate::event::SurfaceOp;

/// How a surface event joins the surface, with its provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceIntent {
    /// Append at the tail, or replace a range.
    pub op: SurfaceOp,
    /// `sourceEventSeqs`, when given.
    pub sources: Option<Vec<u64>>,
}

impl SurfaceIntent {
    /// Append at the tail, without sources.
    pub fn append() -> Self {
        Self {
            op: SurfaceOp::Append,
            sources: None,
        }
    }

    /// Append at the tail, citing `sources`.
    pub fn append_citing(sources: Vec<u64>) -> Self {
        Self {
            op: SurfaceOp::Append,
            sources: Some(sources),
        }
    }

    /// Replace the surface range `start..=end` (by position), citing `sources`, which
    /// must include every shadowed node.
    pub fn replace(start: u64, end: u64, sources: Vec<u64>) -> Self {
        Self {
            op: SurfaceOp::Replace { start, end },
            sources: Some(sources),
        }
    }
}

/// The intent of a log-only event: none. (`SurfaceIntent` converts into
/// `Some(intent)` through the standard `From<T> for Option<T>`.)
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
/// use surfacelog::session::{kinds, Options, Session, SurfaceIntent};
/// let mut session = Session::create("s", None, None, Options::default())?;
/// let data = r#"{"id":"u","role":"user","source":{"kind":"user"},"content":[]}"#;
/// session.append::<kinds::UserMessage>(data, SurfaceIntent::append())?;
/// # Ok::<(), surfacelog::Error>(())
/// ```
///
/// and cannot be appended without one:
///
/// ```compile_fail
/// use surfacelog::session::{kinds, NoSurface, Options, Session};
/// let mut session = Session::create("s", None, None, Options::default()).unwrap();
/// let data = r#"{"id":"u","role":"user","source":{"kind":"user"},"content":[]}"#;
/// session.append::<kinds::UserMessage>(data, NoSurface);
/// ```
///
/// while a log-only type cannot take one:
///
/// ```compile_fail
/// use surfacelog::session::{kinds, Options, Session, SurfaceIntent};
/// let mut session = Session::create("s", None, None, Options::default()).unwrap();
/// session.append::<kinds::TurnStart>(r#"{"turn":1}"#, SurfaceIntent::append());
/// ```
pub trait EventKind {
    /// The type string.
    const TYPE: &'static str;
    /// [`SurfaceIntent`] for surface types, [`NoSurface`] for log-only types.
    type Intent: Into<Option<SurfaceIntent>>;
}

/// The event types of the default vocabulary (`dsh-v0`) and the common log-only types.
pub mod kinds {
    use super::{EventKind, NoSurface, SurfaceIntent};

    macro_rules! kinds {
        ($($(#[$doc:meta])* $name:ident = $ty:literal => $intent:ty;)*) => {$(
            $(#[$doc])*
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
