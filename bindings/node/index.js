'use strict';
// surfacelog for Node: the native module (src/lib.rs) wrapped with errors that carry the
// contract's codes and with object forms of JSON on top of the exact texts.

const native = require('./surfacelog.node');

const ERROR_PREFIX = 'surfacelog:';

/** A refusal of the engine: `code` is the contract's stable code (contract §11). */
class SurfacelogError extends Error {
  constructor(payload, cause) {
    super(payload.message, cause ? { cause } : undefined);
    this.name = 'SurfacelogError';
    this.code = payload.code;
    this.session = payload.session ?? undefined;
    this.seq = payload.seq ?? undefined;
    this.outcome = payload.outcome;
  }
}

/** The native error as a SurfacelogError when it is a refusal of the engine. */
function translate(error) {
  if (error && typeof error.message === 'string' && error.message.startsWith(ERROR_PREFIX)) {
    let payload;
    try {
      payload = JSON.parse(error.message.slice(ERROR_PREFIX.length));
    } catch {
      return error;
    }
    return new SurfacelogError(payload, error);
  }
  return error;
}

/** Runs a native call, rejecting with a SurfacelogError. */
async function call(run) {
  try {
    return await run();
  } catch (error) {
    throw translate(error);
  }
}

/** JSON text as given, or an object's JSON.stringify (the convenience form). */
function text(value, what) {
  if (typeof value === 'string') return value;
  if (value === undefined) throw new TypeError(`${what}: a JSON text or a value`);
  return JSON.stringify(value);
}

/** An optional JSON text or value: undefined stays absent, null is present. */
function member(value) {
  return value === undefined ? undefined : text(value);
}

/** `surfaceOp`, always a value (`"append"`, `{op: "replace", start, end}`), as JSON text:
 * undefined stays absent, null is present (and refused, SURFACE_OP_INVALID). */
function surfaceOpText(value) {
  return value === undefined ? undefined : JSON.stringify(value);
}

/** How many lent message texts one native call makes (`Message.json`). */
const TEXT_BLOCK = 64;

/** A message as stored: its seq and exact JSON text (made a string on first use, from the
 * texts it shares with the session's other messages: most lent by the native module from
 * the session's message pack without a copy, behind an opaque handle; the others copied),
 * with its parsed form on demand. Kept small: a session's messages are tens of thousands
 * of these. */
class Message {
  #json;
  #pack;
  #index;
  constructor(seq, json, pack, index) {
    this.seq = seq;
    this.#json = json;
    this.#pack = pack;
    this.#index = index;
  }
  /** The message object's JSON text, exactly as stored. */
  get json() {
    if (this.#json === undefined) {
      const pack = this.#pack;
      const i = this.#index;
      const { starts, ends, lentLen, text } = pack;
      // A text lies wholly in the lent bytes or wholly in the copied ones after them.
      if (starts[i] < lentLen) {
        // Lent texts are made a block at a time (one native call for the block), and kept
        // for the block's other messages.
        const blocks = (pack.blocks ??= []);
        const b = Math.floor(i / TEXT_BLOCK);
        blocks[b] ??= native.lentTexts(pack.lent, starts, ends, b * TEXT_BLOCK, (b + 1) * TEXT_BLOCK);
        this.#json = blocks[b][i - b * TEXT_BLOCK];
      } else {
        this.#json = text.toString('utf8', starts[i] - lentLen, ends[i] - lentLen);
      }
      this.#pack = undefined;
    }
    return this.#json;
  }
  /** JSON.parse of the exact text (big integers lose precision: read `json` for those). */
  get message() {
    return JSON.parse(this.json);
  }
  toJSON() {
    return { seq: this.seq, json: this.json };
  }
}

/** Messages from the native module's packed form: seqs, spans, the lent and copied texts. */
function unpack(pack) {
  const { seqs } = pack;
  const out = new Array(seqs.length);
  for (let i = 0; i < seqs.length; i += 1) out[i] = new Message(seqs[i], undefined, pack, i);
  return out;
}

/** An event as stored: envelope fields and the exact text. */
class StoredEvent {
  constructor(raw) {
    this.seq = raw.seq;
    this.type = raw.type;
    this.time = raw.time;
    this.text = raw.text;
  }
  /** JSON.parse of the exact text. */
  get event() {
    return JSON.parse(this.text);
  }
}

const messages = (raw) => raw.map((m) => new Message(m.seq, m.json));

/** A session: a writer (`create`, `open`, `resume`, `fork`) or read-only (`inspect`). */
class Session {
  #native;
  constructor(handle) {
    this.#native = handle;
  }
  /** The session id. */
  get id() {
    return this.#native.id;
  }
  /** What opening did: `{tornTail?, closers, checkpointUsed}`. */
  get openReport() {
    return this.#native.openReport;
  }
  /**
   * Appends an event. `data` is a JSON text (stored byte for byte) or a value
   * (JSON.stringify). `surfaceOp` is `"append"` or `{op: "replace", start, end}`;
   * `sourceEventSeqs` an array of seqs (or its JSON text). Resolves with the seq.
   */
  append(type, data, { surfaceOp, sourceEventSeqs } = {}) {
    return call(() =>
      this.#native.append(type, text(data, 'data'), surfaceOpText(surfaceOp), member(sourceEventSeqs)),
    );
  }
  /** Appends events `[{type, data, surfaceOp?, sourceEventSeqs?}]` all or none: their seqs. */
  appendAll(events) {
    const n = events.length;
    const types = new Array(n);
    const data = new Array(n);
    const ops = new Array(n);
    const sources = new Array(n);
    for (let i = 0; i < n; i += 1) {
      const e = events[i];
      types[i] = e.type;
      data[i] = text(e.data, 'data');
      ops[i] = surfaceOpText(e.surfaceOp);
      sources[i] = member(e.sourceEventSeqs);
    }
    return call(() => this.#native.appendAll(types, data, ops, sources));
  }
  /** Makes every appended event durable. */
  flush() {
    return call(() => this.#native.flush());
  }
  /** Alias of `flush()`: resolves once every appended event is durable. */
  durable() {
    return this.flush();
  }
  /** The number of events, which is also the next seq. */
  seqNext() {
    return call(() => this.#native.seqNext());
  }
  /** The surface's messages, in order: `{seq, json, message}`. */
  async messages() {
    return unpack(await call(() => this.#native.messages()));
  }
  /** The messages as the model saw them after event `seq`. */
  async asOf(seq) {
    return messages(await call(() => this.#native.messagesAsOf(seq)));
  }
  /** The seqs of the events appended to the surface, in log order. */
  transcript() {
    return call(() => this.#native.transcript());
  }
  /** Every replacement of the surface, in log order: `{seq, start, end, shadowed}`, where
   * `shadowed` lists the seqs the replacing event took off the surface (provenance). */
  replacements() {
    return call(() => this.#native.replacements());
  }
  /** Up to `limit` events from seq `from`: `{seq, type, time, text, event}`. */
  async events({ from = 0, limit = Number.MAX_SAFE_INTEGER } = {}) {
    const raw = await call(() => this.#native.events(from, limit));
    return raw.map((e) => new StoredEvent(e));
  }
  /** Closes the session (flushes a writer, releases its lock); idempotent. */
  close() {
    return call(() => this.#native.close());
  }
}

/** A store of sessions in a directory. */
class Store {
  #native;
  constructor(handle) {
    this.#native = handle;
  }
  /**
   * Opens the store in `dir`, creating it unless `mustExist`. Options: `durability`
   * (`"sync"` default, `"manual"`, `"batch"`), `batchDelayMs`, `segmentBytes`.
   */
  static async open(dir, options = {}) {
    return new Store(await call(() => native.openStore(dir, options)));
  }
  /** Creates session `id` (optionally with a header and seed events) and opens it. */
  async create(id, { header, seed } = {}) {
    const seedTexts = seed === undefined ? undefined : seed.map((e) => text(e, 'seed'));
    return new Session(
      await call(() => this.#native.create(id, member(header), seedTexts)),
    );
  }
  /** Opens session `id` for writing: recovery and crash repair (`openReport` says what). */
  async open(id) {
    return new Session(await call(() => this.#native.openSession(id)));
  }
  /** `open`, then the end-seed marker of a seeded session (contract §5). */
  async resume(id) {
    return new Session(await call(() => this.#native.resume(id)));
  }
  /** Forks `id` at seq `at` (inclusive; default its last event) into session `as`. */
  async fork(id, { at, as }) {
    if (typeof as !== 'string') throw new TypeError('fork: `as` names the new session');
    return new Session(await call(() => this.#native.fork(id, at ?? null, as)));
  }
  /** The sessions: `{sessions: [{id, header}], damaged: [{code, message}]}`. */
  list() {
    return call(() => this.#native.list());
  }
  /** Moves session `id` to the trash. */
  delete(id) {
    return call(() => this.#native.delete(id));
  }
  /** Opens session `id` read-only: no lock, no repair, nothing written. */
  async inspect(id) {
    return new Session(await call(() => this.#native.inspect(id)));
  }
  /**
   * Follows session `id` from seq `from` (default 0): an async iterable of its events as
   * they are committed, by this process or another, woken by the log's writes. It ends
   * when the loop breaks (or `return()`), and throws the refusal that ends it (the
   * session deleted: `SESSION_NOT_FOUND`; damage: `CORRUPT`).
   */
  follow(id, { from = 0 } = {}) {
    const store = this.#native;
    return {
      async *[Symbol.asyncIterator]() {
        // The native follower (a thread, and a wake callback that keeps the event loop
        // alive) exists only while this loop runs: from its first step to its end.
        let wake = null;
        let notified = false;
        const follower = call(() =>
          store.follow(id, from, () => {
            notified = true;
            if (wake) wake();
          }),
        );
        try {
          for (;;) {
            notified = false;
            const batch = (await follower).take();
            for (const event of batch.events) yield new StoredEvent(event);
            if (batch.error) throw translate(new Error(batch.error));
            if (batch.events.length === 0 && !notified) {
              await new Promise((resolve) => {
                wake = resolve;
              });
              wake = null;
            }
          }
        } finally {
          (await follower).stop();
        }
      },
    };
  }
  /** Rewrites session `id`'s older segments with chunk records, and with
   * `{ compress: true, level? }` compressed (Zstandard, level 9 by default), its message
   * pack too: the bytes saved. */
  compactLog(id, options = {}) {
    const { compress = false, level } = options ?? {};
    if (typeof compress !== 'boolean') throw new TypeError('compactLog: `compress` is a boolean');
    if (level !== undefined && (typeof level !== 'number' || !compress)) {
      throw new TypeError('compactLog: `level` is a number, with `compress: true`');
    }
    return call(() => this.#native.compactLog(id, compress ? (level ?? 9) : undefined));
  }
}

/**
 * The verbatim store (`format-spec/verbatim-store.md`) behind the DSH persistence backend
 * (`surfacelog/dsh`): logs kept exactly as a host hands them over, read back unjudged.
 * Headers and events cross as JSON texts; every method that touches the disk returns a
 * promise, run off the event loop, and rejects with a SurfacelogError.
 */
class VerbatimStore {
  /** A store at `root`; nothing is read or created until an operation needs it. With
   * `lockWaitMs`, an append or repair waits that long for another writer of the session
   * (another store or process) to let go before it rejects LOCKED (VBT-6). */
  constructor(root, options = {}) {
    if (typeof root !== 'string') throw new TypeError('VerbatimStore: root is a path');
    try {
      this._native = native.openVerbatimStore(root, options.segmentBytes, options.lockWaitMs);
    } catch (error) {
      throw translate(error);
    }
  }

  /** The directory session `id` is (or would be) stored in; no I/O (VBT-1). */
  locate(id) {
    return this._native.locate(id);
  }

  /** `{header, events, seqNext, revision, torn}` (texts) from seq `from`, or null (VBT-7). */
  load(id, from = 0) {
    return call(() => this._native.load(id, from));
  }

  /** The revision (VBT-8), or null when the session is not stored. */
  revision(id) {
    return call(() => this._native.revision(id));
  }

  /** Creates session `id` with its header and first events, atomically (VBT-5). */
  create(id, header, events) {
    return call(() => this._native.create(id, header, events));
  }

  /** Appends events durably; the first carries seq `firstSeq`, the stored next seq (VBT-6). */
  append(id, firstSeq, events) {
    return call(() => this._native.append(id, firstSeq, events));
  }

  /** Drops a torn tail and appends `closers`, each step durable (VBT-9). */
  repair(id, closers) {
    return call(() => this._native.repair(id, closers));
  }

  /** Closes the writers kept open between appends, releasing their locks (VBT-6). */
  close() {
    return call(() => this._native.close());
  }

  /** Closes the writers no append or repair has used for `idleMs` or longer, releasing
   * their locks for another store or process; resolves with how many stay open (VBT-6). */
  closeIdleWriters(idleMs) {
    return call(() => this._native.closeIdleWriters(idleMs));
  }

  /** Every stored session's header text, its log not opened (VBT-10). */
  listHeaders() {
    return call(() => this._native.listHeaders());
  }

  /** Every stored session's `{header, revision}` (VBT-10). */
  list() {
    return call(() => this._native.list());
  }

  /** Imports the sessions of a DSH backend's storage that the store does not hold yet:
   * `kind` is "jsonl" (a JSONL root) or "sqlite" (a database file) (VBT-11). Resolves with
   * `{imported, present, refused: [{place, code, message}]}`. */
  importDsh(kind, path) {
    return call(() => this._native.importDsh(kind, path));
  }
}

module.exports = { Store, Session, Message, StoredEvent, SurfacelogError, VerbatimStore };
