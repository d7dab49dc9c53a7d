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

/** A refusal of an argument no call can take: `INVALID_ARGUMENT` (or `code`), nothing
 * written. */
function invalid(message, code = 'INVALID_ARGUMENT', cause = undefined) {
  return new SurfacelogError({ code, message, outcome: 'nothingWritten' }, cause);
}

/** Any error of a call as a SurfacelogError: the engine's refusal with its payload; an
 * argument the native module could not convert (a `TypeError`, napi's `StringExpected`,
 * `NumberExpected`...) as `INVALID_ARGUMENT`. */
function translate(error) {
  if (error instanceof SurfacelogError) return error;
  if (error && typeof error.message === 'string' && error.message.startsWith(ERROR_PREFIX)) {
    try {
      return new SurfacelogError(JSON.parse(error.message.slice(ERROR_PREFIX.length)), error);
    } catch {
      // Not a payload after all: an argument error below.
    }
  }
  return invalid(error instanceof Error ? error.message : String(error), 'INVALID_ARGUMENT', error);
}

/** Runs a call (its argument checks too), rejecting with a SurfacelogError: nothing a
 * promise-returning method does throws synchronously. */
async function call(run) {
  try {
    return await run();
  } catch (error) {
    throw translate(error);
  }
}

/** `string`, checked whole: a lone surrogate has no UTF-8 form, and the native module
 * would replace it (U+FFFD), changing the text or the id. */
function wellFormed(value, what, code = 'INVALID_ARGUMENT') {
  if (typeof value !== 'string') throw invalid(`${what}: a string`, code);
  if (!value.isWellFormed()) {
    throw invalid(`${what} holds a lone surrogate, which no stored text can: escape it as \\uXXXX in JSON`, code);
  }
  return value;
}

/** JSON text as given, or a value's JSON.stringify (the convenience form). */
function text(value, what) {
  if (typeof value === 'string') return wellFormed(value, what);
  let json;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw invalid(`${what}: ${error.message}`, 'INVALID_ARGUMENT', error);
  }
  if (json === undefined) throw invalid(`${what}: a JSON text or a value JSON can hold`);
  return json;
}

/** An optional JSON text or value: undefined stays absent, null is present. */
function member(value, what) {
  return value === undefined ? undefined : text(value, what);
}

/** `surfaceOp`, always a value (`"append"`, `{op: "replace", start, end}`), as JSON text:
 * undefined stays absent, null is present (and refused, SURFACE_OP_INVALID). */
function surfaceOpText(value) {
  if (value === undefined) return undefined;
  const json = JSON.stringify(value);
  if (json === undefined) throw invalid('surfaceOp: "append" or {op: "replace", start, end}');
  return json;
}

/** A seq argument: a safe integer ≥ 0, never coerced (`NaN`, `Infinity`, `1.5` refused). */
function seqArg(value, what) {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw invalid(`${what}: a seq, a safe integer ≥ 0 (got ${String(value)})`);
  }
  return value;
}

/** A count argument: like a seq, with `Infinity` meaning no bound. */
function countArg(value, what) {
  return value === Infinity ? Number.MAX_SAFE_INTEGER : seqArg(value, what);
}

/** `options` holds only the keys of `known` (an unknown option is a typo, never ignored). */
function knownOptions(options, known, what) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object') throw invalid(`${what}: options are an object`);
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw invalid(`${what}: unknown option ${JSON.stringify(key)} (known: ${known.join(', ')})`);
  }
  return options;
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
        try {
          blocks[b] ??= native.lentTexts(pack.lent, starts, ends, b * TEXT_BLOCK, (b + 1) * TEXT_BLOCK);
        } catch (error) {
          // The spans are the ones messages() gave for bytes whose checksums it checked, and
          // UTF-8 is checked here, as each text is made a string (message-pack.md MSP-3): a
          // text that is not means the mapped pack changed since (MSP-4), or was written so.
          throw invalid(
            `message ${this.seq}: the message pack's text is not UTF-8 (changed since messages() checked its checksums, MSP-4, or written so, MSP-3)`,
            'CORRUPT',
            error,
          );
        }
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

/**
 * The messages of one `messages()` or `asOf()` call, in surface order: a read-only list
 * (`length`, `at(i)`, iteration, `toArray()`) over what the native module handed over in
 * one crossing (their seqs, where their texts lie, and the texts). Each `Message` is made
 * on first access and kept, so `list.at(i) === list.at(i)`. Making every message an object
 * up front cost about as much again as the engine's own read of them (measured on the
 * 1M-event session of `npm run bench`: 0.65-0.9 ms for 55,556 objects, against 1.4 ms for
 * opening the session and deriving its messages in Rust), so only those asked for are made.
 */
class MessageList {
  #pack;
  #made;
  constructor(pack) {
    this.#pack = pack;
  }
  /** The number of messages. */
  get length() {
    return this.#pack.seqs.length;
  }
  /** Message `index` (negative counts from the end, as `Array.prototype.at`), or
   * `undefined` past either end. An index that is not an integer is refused
   * (`INVALID_ARGUMENT`). */
  at(index) {
    if (!Number.isInteger(index)) throw invalid(`at: index ${String(index)} is not an integer`);
    const n = this.length;
    const i = index < 0 ? index + n : index;
    if (i < 0 || i >= n) return undefined;
    return this.#message(i);
  }
  /** Message `i`, made on first access. */
  #message(i) {
    const made = (this.#made ??= new Array(this.length));
    return (made[i] ??= new Message(this.#pack.seqs[i], undefined, this.#pack, i));
  }
  /** The messages in order. */
  [Symbol.iterator]() {
    let i = 0;
    const next = () =>
      i < this.length ? { value: this.#message(i++), done: false } : { value: undefined, done: true };
    return { next, [Symbol.iterator]() { return this; } };
  }
  /** The messages as an array of their own (every one made now). */
  toArray() {
    const n = this.length;
    for (let i = 0; i < n; i += 1) this.#message(i);
    return n === 0 ? [] : this.#made.slice();
  }
  /** `[{seq, json}, ...]`, as `JSON.stringify` of the array would give. */
  toJSON() {
    return this.toArray();
  }
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

/** A session: a writer (`create`, `open`, `resume`, `fork`) or read-only (`inspect`).
 * Its calls run one at a time, in the order they were made (a `Promise.all` of appends
 * gets its seqs in call order; `close()` runs after the calls made before it). */
class Session {
  #native;
  #tail = Promise.resolve();
  constructor(handle) {
    this.#native = handle;
  }
  /** Runs `run` (a native call, its arguments checked first) after every call made before. */
  #queue(run) {
    const result = this.#tail.then(() => call(run));
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
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
  append(type, data, options) {
    return this.#queue(() => {
      const { surfaceOp, sourceEventSeqs } = knownOptions(options, ['surfaceOp', 'sourceEventSeqs'], 'append');
      return this.#native.append(
        wellFormed(type, 'type'),
        text(data, 'data'),
        surfaceOpText(surfaceOp),
        member(sourceEventSeqs, 'sourceEventSeqs'),
      );
    });
  }
  /** Appends events `[{type, data, surfaceOp?, sourceEventSeqs?}]` all or none: their seqs. */
  appendAll(events) {
    return this.#queue(() => {
      if (!Array.isArray(events)) throw invalid('appendAll: an array of events');
      const n = events.length;
      const types = new Array(n);
      const data = new Array(n);
      const ops = new Array(n);
      const sources = new Array(n);
      for (let i = 0; i < n; i += 1) {
        const e = events[i];
        if (e === null || typeof e !== 'object') throw invalid(`appendAll: event ${i} is not an object`);
        types[i] = wellFormed(e.type, `event ${i}: type`);
        data[i] = text(e.data, `event ${i}: data`);
        ops[i] = surfaceOpText(e.surfaceOp);
        sources[i] = member(e.sourceEventSeqs, `event ${i}: sourceEventSeqs`);
      }
      return this.#native.appendAll(types, data, ops, sources);
    });
  }
  /** Makes every appended event durable. */
  flush() {
    return this.#queue(() => this.#native.flush());
  }
  /** Alias of `flush()`: resolves once every appended event is durable. */
  durable() {
    return this.flush();
  }
  /** The number of events, which is also the next seq. */
  seqNext() {
    return this.#queue(() => this.#native.seqNext());
  }
  /** The surface's messages, in order: a `MessageList` of `{seq, json, message}`. */
  async messages() {
    return new MessageList(await this.#queue(() => this.#native.messages()));
  }
  /** The messages as the model saw them after event `seq`. */
  async asOf(seq) {
    return new MessageList(await this.#queue(() => this.#native.messagesAsOf(seqArg(seq, 'asOf'))));
  }
  /** The seqs of the events appended to the surface, in log order. */
  transcript() {
    return this.#queue(() => this.#native.transcript());
  }
  /** Every replacement of the surface, in log order: `{seq, start, end, shadowed}`, where
   * `shadowed` lists the seqs the replacing event took off the surface (provenance). */
  replacements() {
    return this.#queue(() => this.#native.replacements());
  }
  /** Up to `limit` events from seq `from`: `{seq, type, time, text, event}`. */
  async events(options) {
    const raw = await this.#queue(() => {
      const { from = 0, limit = Infinity } = knownOptions(options, ['from', 'limit'], 'events');
      return this.#native.events(seqArg(from, 'events: from'), countArg(limit, 'events: limit'));
    });
    return raw.map((e) => new StoredEvent(e));
  }
  /** Closes the session (flushes a writer, releases its lock) once the calls made before
   * it are done; idempotent. */
  close() {
    return this.#queue(() => this.#native.close());
  }
}

/** A session id argument: a well-formed string (`INVALID_ID` otherwise: a lone surrogate
 * would become U+FFFD, and two ids one session). */
const idArg = (id) => wellFormed(id, 'session id', 'INVALID_ID');

/** A store of sessions in a directory. */
class Store {
  #native;
  constructor(handle) {
    this.#native = handle;
  }
  /**
   * Opens the store in `dir`, creating it unless `mustExist`. Options: `durability`
   * (`"sync"` default, `"manual"`, `"batch"`), `batchDelayMs`, `segmentBytes`,
   * `mustExist`, `chunkRecords`, `compactRecords`; any other key is refused (`INVALID_ARGUMENT`).
   */
  static async open(dir, options) {
    return new Store(
      await call(() => {
        const known = ['durability', 'batchDelayMs', 'segmentBytes', 'mustExist', 'chunkRecords', 'compactRecords'];
        const checked = knownOptions(options, known, 'Store.open');
        const { batchDelayMs } = checked;
        if (batchDelayMs !== undefined && !(Number.isSafeInteger(batchDelayMs) && batchDelayMs >= 0 && batchDelayMs <= 0xffffffff)) {
          throw invalid(`Store.open: batchDelayMs is a whole number of ms ≥ 0 (got ${String(batchDelayMs)})`);
        }
        return native.openStore(wellFormed(dir, 'Store.open: dir'), checked);
      }),
    );
  }
  /** Creates session `id` (optionally with a header and seed events) and opens it. */
  async create(id, options) {
    return new Session(
      await call(() => {
        const { header, seed } = knownOptions(options, ['header', 'seed'], 'create');
        if (seed !== undefined && !Array.isArray(seed)) throw invalid('create: seed is an array of events');
        const seedTexts = seed === undefined ? undefined : seed.map((e, i) => text(e, `seed ${i}`));
        return this.#native.create(idArg(id), member(header, 'header'), seedTexts);
      }),
    );
  }
  /** Opens session `id` for writing: recovery and crash repair (`openReport` says what). */
  async open(id) {
    return new Session(await call(() => this.#native.openSession(idArg(id))));
  }
  /** `open`, then the end-seed marker of a seeded session (contract §5). */
  async resume(id) {
    return new Session(await call(() => this.#native.resume(idArg(id))));
  }
  /** Forks `id` at seq `at` (inclusive; default its last event) into session `as`. */
  async fork(id, options) {
    return new Session(
      await call(() => {
        const { at, as } = knownOptions(options, ['at', 'as'], 'fork');
        if (typeof as !== 'string') throw invalid('fork: `as` names the new session');
        const boundary = at === undefined || at === null ? null : seqArg(at, 'fork: at');
        return this.#native.fork(idArg(id), boundary, idArg(as));
      }),
    );
  }
  /** The sessions: `{sessions: [{id, header}], damaged: [{code, message}]}`. */
  list() {
    return call(() => this.#native.list());
  }
  /** Moves session `id` to the trash. */
  delete(id) {
    return call(() => this.#native.delete(idArg(id)));
  }
  /** Opens session `id` read-only: no lock, no repair, nothing written. */
  async inspect(id) {
    return new Session(await call(() => this.#native.inspect(idArg(id))));
  }
  /**
   * Follows session `id` from seq `from` (default 0): an async iterable of its events as
   * they are committed, by this process or another, woken by the log's writes. It ends
   * when the loop breaks (or `return()`, also while a `next()` waits), and throws the
   * refusal that ends it (the session deleted: `SESSION_NOT_FOUND`; damage: `CORRUPT`).
   */
  follow(id, options) {
    const store = this.#native;
    // Its arguments are checked now, as the options are: a refusal throws here, not at
    // the first `next()`.
    const { from = 0 } = knownOptions(options, ['from'], 'follow');
    const start = seqArg(from, 'follow: from');
    const followed = idArg(id);
    return {
      [Symbol.asyncIterator]() {
        // The native follower (a thread, and a weak wake callback) exists only while the
        // iteration runs: from its first `next()` to its end.
        let follower = null;
        let queued = [];
        let ended = false;
        let wake = null;
        let notified = false;
        // The refusal that ended the native follower, thrown once its events are taken.
        let failure = null;
        const stop = () => {
          ended = true;
          queued = [];
          if (follower) follower.then((f) => f.stop(), () => undefined);
          if (wake) wake();
        };
        // One step at a time: `next()` calls made while one waits run after it, in order
        // (each gets the next event; none is lost), as an async generator queues them.
        const step = async () => {
          if (follower === null) {
            follower = call(() =>
              store.follow(followed, start, () => {
                notified = true;
                if (wake) wake();
              }),
            );
          }
          for (;;) {
            if (ended) return { done: true, value: undefined };
            if (queued.length > 0) return { done: false, value: new StoredEvent(queued.shift()) };
            if (failure !== null) {
              stop();
              throw translate(new Error(failure));
            }
            notified = false;
            let batch;
            try {
              batch = (await follower).take();
            } catch (error) {
              stop();
              throw translate(error);
            }
            if (ended) return { done: true, value: undefined };
            queued = batch.events;
            // The events before the refusal first, then the refusal.
            if (batch.error) failure = batch.error;
            if (queued.length === 0 && failure === null && !notified) {
              // The native wake callback is weak: while a `next()` waits, a timer keeps
              // the event loop alive; a follower nobody waits on does not.
              const alive = setInterval(() => undefined, 2 ** 30);
              try {
                await new Promise((resolve) => {
                  wake = resolve;
                });
              } finally {
                clearInterval(alive);
              }
              wake = null;
            }
          }
        };
        let steps = Promise.resolve();
        const next = () => {
          const result = steps.then(step);
          steps = result.then(
            () => undefined,
            () => undefined,
          );
          return result;
        };
        return {
          next,
          async return(value) {
            stop();
            return { done: true, value };
          },
          async throw(error) {
            stop();
            throw error;
          },
          [Symbol.asyncIterator]() {
            return this;
          },
        };
      },
    };
  }
  /** Rewrites session `id`'s older segments into compact records (chunk records in a store
   * opened with `compactRecords: false`), and with
   * `{ compress: true, level? }` compressed (Zstandard, level 9 by default), its message
   * pack too: the bytes saved. */
  compactLog(id, options) {
    return call(() => {
      const { compress = false, level } = knownOptions(options, ['compress', 'level'], 'compactLog');
      if (typeof compress !== 'boolean') throw invalid('compactLog: `compress` is a boolean');
      if (level !== undefined && (!Number.isSafeInteger(level) || !compress)) {
        throw invalid('compactLog: `level` is a whole number, with `compress: true`');
      }
      return this.#native.compactLog(idArg(id), compress ? (level ?? 9) : undefined);
    });
  }
}

/** JSON texts of a verbatim store's call, each checked whole (`wellFormed`): a lone
 * surrogate would cross as U+FFFD, storing another text than the one given. */
function texts(values, what) {
  if (!Array.isArray(values)) throw invalid(`${what}: an array of JSON texts`);
  return values.map((value, i) => wellFormed(value, `${what} ${i}`));
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
    if (typeof root !== 'string') throw invalid('VerbatimStore: root is a path');
    if (options === null || typeof options !== 'object') throw invalid('VerbatimStore: options are an object');
    try {
      this._native = native.openVerbatimStore(root, options.segmentBytes, options.lockWaitMs);
    } catch (error) {
      throw translate(error);
    }
  }

  /** The directory session `id` is (or would be) stored in; no I/O (VBT-1). Throws
   * `INVALID_ID` for an id that is not a well-formed string (it has no directory). */
  locate(id) {
    return this._native.locate(idArg(id));
  }

  /** `{header, events, seqNext, revision, torn}` (texts) from seq `from`, or null (VBT-7). */
  load(id, from = 0) {
    return call(() => this._native.load(idArg(id), seqArg(from, 'load: from')));
  }

  /** The revision (VBT-8), or null when the session is not stored. */
  revision(id) {
    return call(() => this._native.revision(idArg(id)));
  }

  /** Creates session `id` with its header and first events, atomically (VBT-5). */
  create(id, header, events) {
    return call(() => this._native.create(idArg(id), wellFormed(header, 'create: header'), texts(events, 'create: events')));
  }

  /** Appends events durably; the first carries seq `firstSeq`, the stored next seq (VBT-6). */
  append(id, firstSeq, events) {
    return call(() => this._native.append(idArg(id), seqArg(firstSeq, 'append: firstSeq'), texts(events, 'append: events')));
  }

  /** Drops a torn tail and appends `closers`, each step durable (VBT-9). */
  repair(id, closers) {
    return call(() => this._native.repair(idArg(id), texts(closers, 'repair: closers')));
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

module.exports = { Store, Session, Message, MessageList, StoredEvent, SurfacelogError, VerbatimStore };
