// surfacelog as a DSH persistence backend (`format-spec/upstream/dsh-persistence.md`):
// DSH's own coordinator (§0.2, §3.2) over storage hooks (§3.3) kept in surfacelog's
// verbatim store (`format-spec/verbatim-store.md`). The DSH packages are peer dependencies,
// so the host's own copies are used (§3.1): the base class, the error classes and the
// coordinator are the host's module instances.
//
// A host registers it where its JSONL backend goes (§3.6):
//   ctx.plugin(SessionStore); await ctx.plugin(SurfacelogSessionPersistence, { root })

import { createRequire } from 'node:module';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { Service } from '@deepseek-ai/cordis';
import z from '@deepseek-ai/schemastery';
import SessionPersistence, {
  DEFAULT_PREPARED_SESSION_CACHE_SIZE,
  DEFAULT_WRITE_BATCH_MAX_DELAY_MS,
  MAX_WRITE_BATCH_DELAY_MS,
  PersistenceCoordinator,
  SessionPersistenceRevision,
} from '@deepseek-ai/dsh-session-persistence';

const require = createRequire(import.meta.url);
const { SurfacelogError, VerbatimStore } = require('./index.js');

const NAME = 'session-persistence-surfacelog';

/** How long a writer the store keeps open between appends (VBT-6) may stay idle before
 * it is closed and its lock released, so that another process (or another instance on the
 * same root) can continue the session once this one is done with it (PERS-14). */
const WRITER_IDLE_MS = 1000;

/** How long an append or repair waits for another process's writer of the session to let
 * go: longer than that writer stays idle (at most twice WRITER_IDLE_MS). */
const LOCK_WAIT_MS = 3000;

/** The configuration keys this backend honours (§3.5); any other is refused. */
const KEYS = new Set(['root', 'preparedSessionCacheSize', 'writeBatchMaxDelayMs', 'importFrom']);

/** A session id as the store can hold it: well-formed UTF-16. An id with a lone surrogate
 * would cross to the engine with U+FFFD in its place and share another id's directory,
 * so no such session is ever stored: reads do not find it (`null`), writes refuse it. */
function storedId(id) {
  const text = String(id);
  return text.isWellFormed() ? text : null;
}

/** `storedId(id)`, or an INVALID_ID refusal for a write. */
function writableId(id) {
  const text = storedId(id);
  if (text === null) {
    throw new SurfacelogError({
      code: 'INVALID_ID',
      message: `session id ${JSON.stringify(String(id))} holds a lone surrogate: not stored`,
      outcome: 'nothingWritten',
    });
  }
  return text;
}

/** The header fields DSH knows, in its order (DSH interchange formats HDR-8), and the
 * retired ones, which its readers refuse (HDR-7). */
const HEADER_KEYS = [
  'version',
  'id',
  'createdAt',
  'cwd',
  'parentSession',
  'seedLength',
  'origin',
  'delegationDepth',
  'agentPreset',
  'sandboxMode',
  'approvalPolicy',
];

/** A stored header as DSH's backends return it (Appendix C.4): the known fields only, in
 * their order; other keys stay on disk but are not part of the logical header. A header
 * that is not an object is returned as it is, for the coordinator to refuse. */
function logicalHeader(text) {
  const stored = JSON.parse(text);
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored)) return stored;
  const header = {};
  for (const key of HEADER_KEYS) {
    if (Object.hasOwn(stored, key) && stored[key] !== undefined) header[key] = stored[key];
  }
  return header;
}

/** Rejects with the signal's reason, unchanged, once it has aborted (§1.15). */
function check(signal) {
  if (signal?.aborted) throw signal.reason;
}

/** `promise`, or the signal's reason as soon as it aborts: a caller waiting for the
 * shared import is released promptly; the import itself goes on (§1.15). */
function released(promise, signal) {
  if (!signal) return promise;
  return new Promise((resolve, reject) => {
    const abort = () => reject(signal.reason);
    if (signal.aborted) return abort();
    signal.addEventListener('abort', abort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', abort);
        resolve(value);
      },
      (error) => {
        signal.removeEventListener('abort', abort);
        reject(error);
      },
    );
  });
}

/**
 * The storage hooks (§3.3) over one verbatim store. They store and return; they never
 * judge content (PERS-11): the coordinator validates what `loadStored` returns. Headers and
 * events cross as JSON text (§3.7), so every object returned is fresh and unaliased.
 */
class SurfacelogHooks {
  name = NAME;

  /** `importFrom`: `{jsonl: root}` or `{sqlite: file}`, already checked, or undefined;
   * `root` the store's directory (absolute). */
  constructor(store, importFrom, root) {
    this.store = store;
    this.root = root;
    this.importFrom = importFrom;
    this.importing = undefined;
    /** What the import did: `{imported, present, refused}`, once it ran. */
    this.imported = undefined;
    /** The sessions the import refused, by id: what their reads give instead of "not
     * found" (VBT-11). */
    this.refusedIds = new Map();
    /** The pending release of idle writers, if any. */
    this.idleTimer = undefined;
    this.closed = false;
  }

  /** After a write: closes, WRITER_IDLE_MS later, the writers idle that long, releasing
   * their locks, and looks again while some stay open. The timer never keeps the process
   * alive. */
  releaseIdleWriters() {
    if (this.idleTimer !== undefined || this.closed) return;
    this.idleTimer = setTimeout(async () => {
      // Cleared first: a write that ends while the writers are being closed arms the next
      // look itself, so that its writer is never left open for good.
      this.idleTimer = undefined;
      let open = 0;
      try {
        open = await this.store.closeIdleWriters(WRITER_IDLE_MS);
      } catch (error) {
        // The writer's records are durable; the next open of its log recovers it.
        process.emitWarning(`${NAME}: closing idle writers failed: ${error?.message ?? error}`, {
          code: 'SURFACELOG_IDLE_CLOSE_FAILED',
        });
      }
      if (open > 0) this.releaseIdleWriters();
    }, WRITER_IDLE_MS);
    this.idleTimer.unref();
  }

  /** The one-time import of the host's DSH sessions (VBT-11), before any storage work:
   * started by the first hook call (or the plugin's init), never by construction. A failed
   * import fails every call until one succeeds. */
  ready() {
    if (this.importFrom === undefined) return Promise.resolve();
    this.importing ??= (async () => {
      const [kind, path] = Object.entries(this.importFrom)[0];
      const report = await this.store.importDsh(kind, path);
      const refusedIds = new Map();
      for (const refused of report.refused) {
        process.emitWarning(
          `${NAME}: not imported, DSH refuses to read it: ${refused.place}: ${refused.message}`,
          { code: 'SURFACELOG_DSH_IMPORT_REFUSED' },
        );
        if (typeof refused.id === 'string' && !refusedIds.has(refused.id)) {
          refusedIds.set(refused.id, refused);
        }
      }
      this.refusedIds = refusedIds;
      this.imported = report;
    })().catch((error) => {
      this.importing = undefined;
      throw error;
    });
    return this.importing;
  }

  /** A read hook's start (§1.15): the signal checked before and after waiting for the
   * import, and the id as the store holds it, `null` for one it never stores. */
  async readable(id, signal) {
    check(signal);
    await released(this.ready(), signal);
    check(signal);
    return storedId(id);
  }

  /** The stored prefix, its revision, and a torn marker iff a torn tail must go. The
   * marker is the revision read: a repair of another state is refused as stale. */
  async loadStored(id, signal) {
    const key = await this.readable(id, signal);
    if (key === null) return undefined;
    const read = await this.store.load(key, 0);
    check(signal);
    if (read === null) return this.refusedRead(key);
    const prefix = {
      meta: logicalHeader(read.header),
      events: JSON.parse(read.events),
      revision: SessionPersistenceRevision(read.revision),
    };
    if (read.torn) prefix.tornMarker = read.revision;
    return prefix;
  }

  async readStoredRevision(id, signal) {
    const key = await this.readable(id, signal);
    if (key === null) return undefined;
    const revision = await this.store.revision(key);
    check(signal);
    if (revision === null) return this.refusedRead(key)?.revision;
    return SessionPersistenceRevision(revision);
  }

  /** A seek read of the events from `fromSeq` on: no marker, no mutation (§1.10). */
  async loadStoredFrom(id, fromSeq, signal) {
    const key = await this.readable(id, signal);
    if (key === null) return undefined;
    const read = await this.store.load(key, fromSeq);
    check(signal);
    if (read === null) {
      const refused = this.refusedRead(key);
      return refused && { meta: refused.meta, events: [] };
    }
    return { meta: logicalHeader(read.header), events: JSON.parse(read.events) };
  }

  /** The store's directory as `<device>.<inode>` (its path while it does not exist):
   * what tells two stores apart. */
  storeIdentity() {
    const found = statSync(this.root, { bigint: true, throwIfNoEntry: false });
    return found === undefined ? this.root : `${found.dev}.${found.ino}`;
  }

  /** A session the import refused and the store does not hold, read as DSH's own backend
   * reads its log (§1.17: never "not found", and its id is not free for a new session): a
   * log of another format version is its header alone, for the coordinator to refuse
   * with DSH's own text and class; damage is an error naming the file. `undefined` for an
   * id the import did not refuse. */
  refusedRead(id) {
    const refused = this.refusedIds.get(id);
    if (refused === undefined) return undefined;
    const version = refused.version == null ? NaN : Number(refused.version);
    if (Number.isFinite(version)) {
      return {
        meta: { version, id },
        events: [],
        // §1.12 rule 4: source-qualified, as a stored session's token is (VBT-8): two
        // stores importing the same DSH file give two tokens.
        revision: SessionPersistenceRevision(`surfacelog:refused:${this.storeIdentity()}:${refused.place}`),
      };
    }
    throw new SurfacelogError({
      code: refused.code,
      message: `${refused.message} (not imported from ${refused.place})`,
      session: id,
      outcome: 'nothingWritten',
    });
  }

  /** Durable before it resolves; the first batch publishes header and events atomically,
   * never over a stored session (VBT-5); a later one must start at the stored next seq. */
  async appendBatch(meta, events, isMaterialized) {
    await this.ready();
    const texts = events.map((event) => JSON.stringify(event));
    if (isMaterialized) {
      try {
        await this.store.append(writableId(meta.id), events[0].seq, texts);
      } finally {
        this.releaseIdleWriters();
      }
    } else {
      await this.store.create(writableId(meta.id), JSON.stringify(meta), texts);
    }
  }

  /** Drops the torn tail (when a marker is given) and appends the closers, each durable. */
  async commitRepair(meta, tornMarker, closers) {
    await this.ready();
    const id = writableId(meta.id);
    if (tornMarker !== undefined) {
      const now = await this.store.revision(id);
      if (now !== tornMarker) {
        throw new Error(
          `session "${id}" repair is stale: the torn tail was read at revision ${tornMarker}, ` +
            `the log is now at ${now}`,
        );
      }
    } else if (closers.length === 0) {
      return;
    }
    try {
      await this.store.repair(id, closers.map((event) => JSON.stringify(event)));
    } finally {
      this.releaseIdleWriters();
    }
  }

  /** The stored headers (§1.11: header reads only): a log's damage is reported by the
   * reads of that session, not by the listing of all. */
  async list(signal) {
    check(signal);
    await released(this.ready(), signal);
    check(signal);
    const headers = await this.store.listHeaders();
    check(signal);
    return headers.map(logicalHeader);
  }

  /** Every stored header with its revision (§1.11). */
  async snapshots(signal) {
    check(signal);
    await released(this.ready(), signal);
    check(signal);
    const listed = await this.store.list();
    check(signal);
    return listed.map((entry) => ({
      header: logicalHeader(entry.header),
      revision: SessionPersistenceRevision(entry.revision),
    }));
  }

  /** Where the session's directory is or will be: pure, no I/O (§1.4); none for an id
   * that is never stored (a lone surrogate, `storedId`). */
  locate(meta) {
    const id = storedId(meta.id);
    return id === null ? undefined : { kind: 'surfacelog', path: this.store.locate(id) };
  }

  /** After the coordinator's disposal drain: the kept writers are closed, their locks
   * released (VBT-6). */
  async close() {
    this.closed = true;
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    await this.store.close();
  }
}

/** `importFrom` checked: absent (or empty), or exactly one of `{jsonl: root}` and `{sqlite: file}`,
 * its path resolved to absolute. */
function importSource(value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object') {
    throw new TypeError(`${NAME}: importFrom must be {jsonl: <JSONL root>} or {sqlite: <database file>}`);
  }
  // The schema's default for an absent key is an empty object.
  const entries = Object.entries(value).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return undefined;
  if (entries.length !== 1 || !['jsonl', 'sqlite'].includes(entries[0][0]) || typeof entries[0][1] !== 'string') {
    throw new TypeError(`${NAME}: importFrom must be {jsonl: <JSONL root>} or {sqlite: <database file>}`);
  }
  return { [entries[0][0]]: resolve(entries[0][1]) };
}

/**
 * The DSH persistence backend over surfacelog: registers as `ctx.sessionPersistence`.
 * Config: `root` (required; a directory holding many sessions, resolved to absolute once),
 * `preparedSessionCacheSize` (default 5), `writeBatchMaxDelayMs` (default 200), and
 * `importFrom` (`{jsonl: root}` or `{sqlite: file}`: the host's existing DSH sessions,
 * imported once, before the first storage access; the old files are only read). Any other
 * key (the JSONL backend's `compression`, `packChunks`) is refused, not ignored.
 */
export default class SurfacelogSessionPersistence extends SessionPersistence {
  static inject = ['sessions'];

  static Config = z.object({
    root: z.string().required(),
    preparedSessionCacheSize: z
      .number()
      .step(1)
      .min(1)
      .default(DEFAULT_PREPARED_SESSION_CACHE_SIZE),
    writeBatchMaxDelayMs: z
      .number()
      .step(1)
      .min(1)
      .max(MAX_WRITE_BATCH_DELAY_MS)
      .default(DEFAULT_WRITE_BATCH_MAX_DELAY_MS),
    importFrom: z.object({ jsonl: z.string(), sqlite: z.string() }),
  });

  name = NAME;
  supportsRawArtifacts = false;

  constructor(ctx, config = {}) {
    super(ctx);
    for (const key of Object.keys(config)) {
      if (!KEYS.has(key)) {
        throw new TypeError(
          `${NAME}: unsupported configuration key "${key}" (supported: ${[...KEYS].join(', ')})`,
        );
      }
    }
    if (typeof config.root !== 'string' || config.root === '') {
      throw new TypeError(`${NAME}: root must be a directory path`);
    }
    const importFrom = importSource(config.importFrom);
    this.config = config;
    this.root = resolve(config.root);
    // §3.2: an existing root must be a directory that can be listed (the error is Node's:
    // ENOTDIR, EACCES); an absent one is created at the first write.
    if (existsSync(this.root)) readdirSync(this.root);
    this.hooks = new SurfacelogHooks(
      new VerbatimStore(this.root, { lockWaitMs: LOCK_WAIT_MS }),
      importFrom,
      this.root,
    );
    // Last: the coordinator binds existing live sessions at once (§3.2).
    this.coordinator = new PersistenceCoordinator(ctx, this.hooks, {
      preparedSessionCacheSize: config.preparedSessionCacheSize ?? DEFAULT_PREPARED_SESSION_CACHE_SIZE,
      writeBatchMaxDelayMs: config.writeBatchMaxDelayMs ?? DEFAULT_WRITE_BATCH_MAX_DELAY_MS,
    });
  }

  /** Cordis runs this after construction: the import of `importFrom`, whose failure fails
   * the plugin's load (with the error naming the file). */
  async [Service.init]() {
    await this.hooks.ready();
  }

  /** What the import of `importFrom` did (`{imported, present, refused}`), once it ran. */
  get imported() {
    return this.hooks.imported;
  }

  locate(meta) {
    return this.hooks.locate(meta);
  }

  create(meta) {
    return this.coordinator.create(meta);
  }

  append(id, events) {
    return this.coordinator.append(id, events);
  }

  prepare(id, signal) {
    return this.coordinator.prepare(id, signal);
  }

  load(id) {
    return this.coordinator.load(id);
  }

  inspect(id, signal) {
    return this.coordinator.inspect(id, signal);
  }

  readFrom(id, fromSeq, signal) {
    return this.coordinator.readFrom(id, fromSeq, signal);
  }

  list(signal) {
    return this.hooks.list(signal);
  }

  listSnapshots(signal) {
    return this.hooks.snapshots(signal);
  }
}

export { SurfacelogSessionPersistence };
