// surfacelog for Node: hand-written declarations of index.js (checked by test/types.test.mjs
// against what the module exports).

/** How `Store.open` opens a store. */
export interface StoreOpenOptions {
  /** `"sync"` (default): an append resolves once durable. `"manual"`: durable at `flush()`
   * and `close()`. `"batch"`: durable within `batchDelayMs`. */
  durability?: 'sync' | 'manual' | 'batch';
  /** For `"batch"`: the longest an appended event stays not durable, in ms (default 10;
   * a whole number, at most 2^32 − 1). */
  batchDelayMs?: number;
  /** The capacity of a new log segment, in bytes (default 8 MiB). */
  segmentBytes?: number;
  /** Refuse to create a missing store (`STORE_NOT_FOUND`). Default `false`. */
  mustExist?: boolean;
  /** Store streamed chunks as chunk records in version 1 records (default `true`; it
   * matters with `compactRecords: false`); `false` turns compact records off too and keeps
   * the log readable by builds from before chunk records (`compactLog` rewrites it later). */
  chunkRecords?: boolean;
  /** Store events as compact records (default `true`): about a third of the bytes of
   * version 1 records, streamed chunks in runs; builds from before them refuse the log.
   * `false` (or `chunkRecords: false`) writes version 1 records. An existing log keeps
   * its segments' format; `compactLog` rewrites its older segments into compact records. */
  compactRecords?: boolean;
}

/** The contract's stable error codes (contract §11), and the binding's own. */
export type ErrorCode =
  | 'ENVELOPE_INVALID'
  | 'SEQ_NOT_CONTIGUOUS'
  | 'DATA_INVALID_JSON'
  | 'DATA_DUPLICATE_KEY'
  | 'DATA_NOT_LOSSLESS'
  | 'EVENT_TOO_LARGE'
  | 'LEGACY_EVENT'
  | 'MESSAGE_SHAPE'
  | 'REQUEST_HEADER_SHAPE'
  | 'SURFACE_OP_FORBIDDEN'
  | 'SOURCES_FORBIDDEN'
  | 'SURFACE_OP_REQUIRED'
  | 'SURFACE_OP_INVALID'
  | 'SOURCES_INVALID'
  | 'SOURCES_EMPTY'
  | 'SOURCES_DUPLICATE'
  | 'SOURCES_NOT_EARLIER'
  | 'REPLACE_START_NOT_ON_SURFACE'
  | 'REPLACE_END_NOT_ON_SURFACE'
  | 'REPLACE_REVERSED'
  | 'REPLACE_SOURCES_INCOMPLETE'
  | 'TOOL_REWRITE_NOT_SINGLE'
  | 'TOOL_REWRITE_TARGET'
  | 'TOOL_REWRITE_CHANGED'
  | 'HEADER_INVALID'
  | 'FORMAT_VERSION'
  | 'SESSION_EXISTS'
  | 'SESSION_NOT_FOUND'
  | 'INVALID_BOUNDARY'
  | 'OPEN_TURN'
  | 'INVALID_ID'
  | 'LOCKED'
  | 'CORRUPT'
  | 'IO'
  | 'POISONED'
  | 'UNSAFE_PATH'
  | 'STORE_NOT_FOUND'
  | 'COMPACTION_UNBALANCED'
  | 'UNKNOWN_EVENT_TYPE'
  | 'NOT_REPRESENTABLE'
  /** Invariant violations, in the optional checking mode (contract §9). */
  | `INV_${string}`
  /** The binding's: a call on a closed session. */
  | 'SESSION_CLOSED'
  /** The binding's: an append to a session opened by `inspect`. */
  | 'READ_ONLY'
  /** The binding's: an argument no call can take (a seq that is not a safe integer ≥ 0,
   * an unknown option, a value of the wrong type, a text with a lone surrogate). Every
   * method that returns a promise rejects with it; none throws synchronously. */
  | 'INVALID_ARGUMENT'
  | (string & {});

/** A refusal: nothing was changed unless `outcome` says otherwise. */
export class SurfacelogError extends Error {
  /** The stable code. */
  readonly code: ErrorCode;
  /** The session it concerns, when known. */
  readonly session?: string;
  /** The seq it concerns, when known (for `appendAll`, the refused event's). */
  readonly seq?: number;
  /** What is on disk after it: nothing written, the fate of the records unknown (the
   * session is poisoned; reopen recovers them whole or not at all), or poisoned. */
  readonly outcome: 'nothingWritten' | 'fateUnknown' | 'poisoned' | 'other';
}

/** A torn tail recovery set aside into a quarantine file. */
export interface TornTail {
  segment: string;
  offset: number;
  bytes: number;
  quarantine: string;
}

/** What opening a session did. */
export interface OpenReport {
  /** A torn tail set aside (only after a crash). */
  tornTail?: TornTail;
  /** Repair closers appended for an interrupted turn (contract §8). */
  closers: number;
  /** Whether the surface checkpoint was used (opening then folds only the tail). */
  checkpointUsed: boolean;
}

/** A message of the surface. */
export class Message {
  /** The surface node (event seq) it comes from. */
  readonly seq: number;
  /** The message object's JSON text, exactly as stored (made a string on first read). */
  readonly json: string;
  /** `JSON.parse(json)` (big integers lose precision: read `json` for those). */
  readonly message: any;
  /** `{seq, json}`. */
  toJSON(): { seq: number; json: string };
}

/** The messages of one `messages()` or `asOf()` call, in surface order: a read-only list
 * whose `Message` objects are made on first access and then kept (`list.at(i) ===
 * list.at(i)`). Iterate it, index it with `at`, or take `toArray()` (or `Array.from`) for
 * the array methods. */
export class MessageList implements Iterable<Message> {
  private constructor();
  /** The number of messages. */
  readonly length: number;
  /** Message `index` (negative counts from the end, as `Array.prototype.at`), `undefined`
   * past either end. An index that is not an integer is refused (`INVALID_ARGUMENT`). */
  at(index: number): Message | undefined;
  [Symbol.iterator](): IterableIterator<Message>;
  /** Every message, in an array. */
  toArray(): Message[];
  /** `[{seq, json}, ...]`. */
  toJSON(): { seq: number; json: string }[];
}

/** An event as stored. */
export class StoredEvent {
  readonly seq: number;
  readonly type: string;
  /** Milliseconds since the Unix epoch. */
  readonly time: number;
  /** The event's JSON text, byte for byte as stored. */
  readonly text: string;
  /** `JSON.parse(text)`. */
  readonly event: any;
}

/** `"append"`, or a replacement of surface nodes `start..=end`. */
export type SurfaceOp = 'append' | { op: 'replace'; start: number; end: number };

/** JSON passed as its exact text (kept byte for byte) or as a value (`JSON.stringify`). */
export type JsonInput = string | object | number | boolean | null;

/** The surface fields of an appended event. */
export interface AppendOptions {
  surfaceOp?: SurfaceOp | null;
  /** The seqs this event was derived from (provenance), or their JSON text. */
  sourceEventSeqs?: number[] | string | null;
}

/** One event of `appendAll`. */
export interface EventInput extends AppendOptions {
  type: string;
  data: JsonInput;
}

/** A session: a writer (`create`, `open`, `resume`, `fork`) or read-only (`inspect`).
 * Its calls run one at a time in the order they were made: the appends of a `Promise.all`
 * get their seqs in call order, and `close()` runs after the calls made before it. */
export class Session {
  private constructor();
  readonly id: string;
  readonly openReport: OpenReport;
  /** Appends an event; resolves with its seq once the store's durability is met. */
  append(type: string, data: JsonInput, options?: AppendOptions): Promise<number>;
  /** Appends events all or none; resolves with their seqs. */
  appendAll(events: EventInput[]): Promise<number[]>;
  /** Makes every appended event durable. */
  flush(): Promise<void>;
  /** Alias of `flush()`. */
  durable(): Promise<void>;
  /** The number of events, which is also the next seq. */
  seqNext(): Promise<number>;
  /** The surface's messages, in order. Their texts are read from the session's message
   * pack where it has them, without a copy: until the list and every message taken from
   * it that has not read its `json` are collected, they keep the pack's map (and a
   * compressed pack's temporary copy) alive, even after `close()`. */
  messages(): Promise<MessageList>;
  /** The messages as the model saw them after event `seq`. */
  asOf(seq: number): Promise<MessageList>;
  /** The seqs of the events appended to the surface, in log order. */
  transcript(): Promise<number[]>;
  /** Every replacement of the surface, in log order, with the seqs it shadowed. */
  replacements(): Promise<{ seq: number; start: number; end: number; shadowed: number[] }[]>;
  /** Up to `limit` events from seq `from` (default: all; `limit: Infinity` is no bound). */
  events(range?: { from?: number; limit?: number }): Promise<StoredEvent[]>;
  /** Closes the session (flushes a writer, releases its lock). Idempotent. */
  close(): Promise<void>;
}

/** A listed session. */
export interface ListedSession {
  id: string;
  /** The header's JSON text, exactly as created. */
  header: string;
}

/** The store's sessions, and those that could not be listed. */
export interface Listing {
  sessions: ListedSession[];
  damaged: { code: ErrorCode; message: string }[];
}

/** A store of sessions in a directory. */
export class Store {
  private constructor();
  /** Opens the store in `dir`, creating it unless `mustExist`. An option not in
   * `StoreOpenOptions` is refused (`INVALID_ARGUMENT`), never ignored. */
  static open(dir: string, options?: StoreOpenOptions): Promise<Store>;
  /** Creates session `id`, optionally with a header and seed events, and opens it. */
  create(id: string, options?: { header?: JsonInput; seed?: JsonInput[] }): Promise<Session>;
  /** Opens session `id` for writing: recovery and crash repair (see `openReport`). */
  open(id: string): Promise<Session>;
  /** `open`, then the end-seed marker of a seeded session. */
  resume(id: string): Promise<Session>;
  /** Forks `id` at seq `at` (inclusive; default its last event) into session `as`. */
  fork(id: string, options: { at?: number; as: string }): Promise<Session>;
  /** The sessions. */
  list(): Promise<Listing>;
  /** Moves session `id` to the trash. */
  delete(id: string): Promise<void>;
  /** Opens session `id` read-only. */
  inspect(id: string): Promise<Session>;
  /** Follows session `id` from seq `from` (default 0): its events as they are committed,
   * by this process or another. Break out of the loop (or call `return()`, also while a
   * `next()` waits, which then resolves done) to stop; a refusal that ends it (the session
   * deleted or deleted and created again: `SESSION_NOT_FOUND`; damage: `CORRUPT`) is
   * thrown. An id, `from` or option that is not valid throws at once (`INVALID_ID`,
   * `INVALID_ARGUMENT`). */
  follow(id: string, options?: { from?: number }): AsyncIterable<StoredEvent>;
  /** Rewrites session `id`'s older segments of version 1 records into compact records (with
   * chunk records instead in a store opened with `compactRecords: false`); with
   * `compress: true` also compressed (Zstandard at `level`, 1 to 22, default 9), its
   * message pack too; the segment the writer appends to stays plain. Resolves with the
   * bytes saved. */
  compactLog(id: string, options?: { compress?: boolean; level?: number }): Promise<number>;
}

/** A verbatim session as read (`format-spec/verbatim-store.md` VBT-7). */
export interface VerbatimLoad {
  /** The header's JSON text, as stored. */
  header: string;
  /** The events read, as one JSON array text. */
  events: string;
  /** The number of events the log holds. */
  seqNext: number;
  /** The revision of exactly this state (VBT-8). */
  revision: string;
  /** Whether a torn tail waits for a repair. */
  torn: boolean;
}

/**
 * The verbatim store behind the DSH persistence backend (`surfacelog/dsh`): logs kept
 * exactly as a host hands them over and read back unjudged. Rejects with SurfacelogError.
 */
export class VerbatimStore {
  /** `lockWaitMs`: how long an append or repair waits for another writer of the session
   * to let go before it rejects LOCKED (default 0). */
  constructor(root: string, options?: { segmentBytes?: number; lockWaitMs?: number });
  /** The directory session `id` is (or would be) stored in; no I/O. Throws `INVALID_ID`
   * for an id with a lone surrogate (it would share another id's directory). The methods
   * below reject with `INVALID_ID` for such an id, and with `INVALID_ARGUMENT` for a JSON
   * text with one (it would be stored with U+FFFD in its place). */
  locate(id: string): string;
  /** The header and events from seq `from` (default 0), or null when not stored. */
  load(id: string, from?: number): Promise<VerbatimLoad | null>;
  /** The revision, or null when the session is not stored. */
  revision(id: string): Promise<string | null>;
  /** Creates session `id` with its header and first events (JSON texts), atomically. */
  create(id: string, header: string, events: string[]): Promise<void>;
  /** Appends events (JSON texts) durably; the first carries seq `firstSeq`. */
  append(id: string, firstSeq: number, events: string[]): Promise<void>;
  /** Drops a torn tail and appends `closers` (JSON texts). */
  repair(id: string, closers: string[]): Promise<void>;
  /** Closes the writers kept open between appends, releasing their locks. */
  close(): Promise<void>;
  /** Closes the writers unused for `idleMs` or longer, releasing their locks; resolves
   * with how many stay open. */
  closeIdleWriters(idleMs: number): Promise<number>;
  /** Every stored session's header text, its log not opened. */
  listHeaders(): Promise<string[]>;
  /** Every stored session's header text and revision. */
  list(): Promise<{ header: string; revision: string }[]>;
  /** Imports the sessions of a DSH JSONL root or SQLite database the store lacks. */
  importDsh(
    kind: 'jsonl' | 'sqlite',
    path: string,
  ): Promise<{
    imported: string[];
    present: string[];
    refused: { place: string; id: string | null; version: string | null; code: string; message: string }[];
  }>;
}
