// The DSH persistence backend (`dsh.mjs`) through DSH's real coordinator and SessionStore
// (the published packages, dev dependencies): the acceptance rules of
// `format-spec/upstream/dsh-persistence.md` §2 (PERS-n, named in each test), the storage
// hook obligations of §3.3 checked on the hooks directly, and the configuration of §3.5.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { Context } from '@deepseek-ai/cordis';
import SessionStore, { SESSION_FORMAT_VERSION, SessionId } from '@deepseek-ai/dsh-session';
import {
  SessionFormatUnsupportedError,
  SessionPersistenceCorruptionError,
} from '@deepseek-ai/dsh-session-persistence';
import { CallId, createMessage } from '@deepseek-ai/dsh-llm';
import SurfacelogSessionPersistence from '../dsh.mjs';
import '../scripts/with-resolvers.mjs';

const require = createRequire(import.meta.url);
const { VerbatimStore } = require('../index.js');

const WORK = '/work';

/** A scratch root, removed when the test ends. */
async function scratch(t) {
  const root = await mkdtemp(join(tmpdir(), 'surfacelog-dsh-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  return root;
}

/** A context with SessionStore and the backend over `root`; disposed when the test ends. */
async function mount(t, root, config = {}) {
  const ctx = new Context();
  await ctx.plugin(SessionStore);
  const fiber = await ctx.plugin(SurfacelogSessionPersistence, { root, ...config });
  let disposed = false;
  const dispose = async () => {
    if (!disposed) {
      disposed = true;
      await fiber.dispose();
    }
  };
  t.after(dispose);
  return { ctx, persistence: ctx.sessionPersistence, dispose };
}

function header(id, extra = {}) {
  return { version: SESSION_FORMAT_VERSION, id: SessionId(id), createdAt: 1000, cwd: WORK, ...extra };
}

function userMessage(text) {
  return createMessage({ role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } });
}

function assistantMessage(content) {
  return createMessage({
    role: 'assistant',
    content,
    source: { kind: 'model', provider: 'mock', model: 'mock' },
  });
}

/** A balanced turn of six events from seq `at`. */
function turn(at = 0, n = 1) {
  return [
    { type: 'turn/start', seq: at, time: at + 1, data: { turn: n } },
    { type: 'user/message', seq: at + 1, time: at + 2, data: userMessage(`q${n}`), surfaceOp: 'append' },
    { type: 'step/start', seq: at + 2, time: at + 3, data: { turn: n, step: 1 } },
    {
      type: 'assistant/message',
      seq: at + 3,
      time: at + 4,
      data: { turn: n, step: 1, message: assistantMessage([{ type: 'text', text: `a${n}` }]) },
      surfaceOp: 'append',
    },
    { type: 'step/end', seq: at + 4, time: at + 5, data: { turn: n, step: 1 } },
    { type: 'turn/end', seq: at + 5, time: at + 6, data: { turn: n, reason: { kind: 'completed' } } },
  ];
}

/** Appends `events` to a live session as a host would. */
function emit(session, events) {
  for (const event of events) {
    if (event.surfaceOp === undefined) session.append(event.type, event.data);
    else session.append(event.type, event.data, { surfaceOp: event.surfaceOp });
  }
}

/** Every file under `dir` and its bytes, to show a call wrote nothing. */
async function files(dir) {
  const out = {};
  const walk = async (at) => {
    for (const entry of await readdir(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) await walk(path);
      else out[path] = (await readFile(path)).toString('base64');
    }
  };
  await walk(dir).catch((error) => {
    if (error.code !== 'ENOENT') throw error;
  });
  return out;
}

/** A partial, never-committed record after the last one of session `id`'s last segment. */
async function corruptTail(root, id) {
  const log = join(new VerbatimStore(root).locate(id), 'log');
  const segments = (await readdir(log)).filter((n) => n.endsWith('.seg')).sort();
  const path = join(log, segments.at(-1));
  const bytes = await readFile(path);
  let end = bytes.length;
  while (end > 64 && bytes[end - 1] === 0) end -= 1;
  const handle = await open(path, 'r+');
  await handle.write(Buffer.from([200, 0, 0, 0, 0xab, 0xcd, 0xef, 1, 9, 9]), 0, 10, Math.ceil(end / 8) * 8);
  await handle.sync();
  await handle.close();
}

async function revisionOf(persistence, id) {
  return (await persistence.listSnapshots()).find((s) => s.header.id === id)?.revision;
}

// --- configuration and shape (§3.1, §3.2, §3.5) ---

test('§3.5: root is required and resolved once; unsupported keys are refused, not ignored', async (t) => {
  const root = await scratch(t);
  const fresh = async () => {
    const ctx = new Context();
    await ctx.plugin(SessionStore);
    return ctx;
  };
  const noRoot = await fresh();
  assert.throws(() => new SurfacelogSessionPersistence(noRoot, {}), /root must be a directory path/);
  const unknownKey = await fresh();
  assert.throws(
    () => new SurfacelogSessionPersistence(unknownKey, { root, compression: 'zstd' }),
    /unsupported configuration key "compression"/,
  );
  const { persistence } = await mount(t, join(root, 'a', '..', 'b'));
  assert.equal(persistence.name, 'session-persistence-surfacelog');
  assert.equal(persistence.supportsRawArtifacts, false);
  const location = persistence.locate(header('x'));
  assert.deepEqual(location, { kind: 'surfacelog', path: join(root, 'b', 'sessions', 'x') });
  // Pure: nothing was created by construction or locate.
  assert.deepEqual(await readdir(root), []);
  await assert.rejects(persistence.readRaw(SessionId('x')), /does not expose raw artifacts/);
  const bad = await fresh();
  assert.throws(
    () => new SurfacelogSessionPersistence(bad, { root, preparedSessionCacheSize: 0 }),
    /preparedSessionCacheSize must be a positive safe integer/,
  );
});

// --- create (PERS-1 to PERS-6) ---

test('§3.2: a root that exists but cannot be listed fails the plugin load', async (t) => {
  const scratchRoot = await scratch(t);
  const file = join(scratchRoot, 'a-file');
  await writeFile(file, 'not a directory');
  const ctx = new Context();
  await ctx.plugin(SessionStore);
  assert.throws(() => new SurfacelogSessionPersistence(ctx, { root: file }), /ENOTDIR/);
  // An absent root is fine: created at the first write.
  const other = new Context();
  await other.plugin(SessionStore);
  new SurfacelogSessionPersistence(other, { root: join(scratchRoot, 'absent') });
  assert.deepEqual(await readdir(scratchRoot), ['a-file']);
});

test('PERS-4: ids with lone surrogates are never stored, so they never share a directory', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const plain = '\ufffdx';
  await persistence.create(header(plain));
  await persistence.append(SessionId(plain), turn());
  for (const id of ['\ud800x', '\udc00x']) {
    await persistence.create(header(id));
    await assert.rejects(persistence.append(SessionId(id), turn()), (error) => error.code === 'INVALID_ID');
    await assert.rejects(persistence.load(SessionId(id)), /not found/);
  }
  assert.equal((await persistence.load(SessionId(plain))).events.length, 6);
  assert.deepEqual((await persistence.list()).map((h) => h.id), [plain]);
});

test('PERS-1, PERS-2: create refuses non-JSON headers and bad createdAt, leaving no state', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  for (const createdAt of [1.5, -1, 2 ** 53]) {
    await assert.rejects(
      persistence.create(header('c', { createdAt })),
      (e) => e instanceof TypeError && /createdAt must be a non-negative safe integer/.test(e.message),
    );
  }
  await assert.rejects(
    persistence.create(header('c', { extra: 1n })),
    (e) => e instanceof TypeError && /losslessly JSON-serializable/.test(e.message),
  );
  await persistence.create(header('c', { createdAt: 7 }));
  await persistence.append(SessionId('c'), turn());
  assert.equal((await persistence.load(SessionId('c'))).meta.createdAt, 7);
});

test('PERS-3, PERS-13: create and empty appends write nothing and list nothing', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  await persistence.create(header('lazy'));
  await persistence.append(SessionId('lazy'), []);
  assert.deepEqual(await persistence.list(), []);
  assert.deepEqual(await persistence.listSnapshots(), []);
  assert.deepEqual(await readdir(root), []);
});

test('PERS-4: a duplicate create is refused in memory and against the disk', async (t) => {
  const root = await scratch(t);
  const first = await mount(t, root);
  await first.persistence.create(header('dup'));
  await assert.rejects(first.persistence.create(header('dup')), /session "dup" already exists in this backend/);
  await first.persistence.append(SessionId('dup'), turn());
  await first.dispose();
  const second = await mount(t, root);
  await assert.rejects(
    second.persistence.create(header('dup')),
    /session "dup" already has a persisted log on disk; load\/resume it instead of creating/,
  );
});

test('PERS-5, PERS-6: header fields come back from load; a live claimant does not change them', async (t) => {
  const root = await scratch(t);
  const { ctx, persistence } = await mount(t, root);
  const meta = header('fields', { parentSession: 'p', seedLength: 0, delegationDepth: 2 });
  await persistence.create(meta);
  await persistence.append(meta.id, turn());
  const loaded = await persistence.load(meta.id);
  assert.deepEqual(loaded.meta, meta);
  // A live session with the same stored prefix and another header claims the ownerless state;
  // the stored header stays.
  const live = ctx.sessions.create(meta.id, { seed: loaded.events, meta: { ...meta, delegationDepth: 9 } });
  emit(live, turn(6, 2));
  await ctx.sessions.flush(live);
  const reloaded = await persistence.load(meta.id);
  assert.equal(reloaded.meta.delegationDepth, 2);
  assert.equal(reloaded.events.length, 13); // stored turn, end-seed, live turn
});

// --- append (PERS-7 to PERS-17) ---

test('Appendix C.4: keys outside the known header fields are kept on disk, not read back', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const meta = { extraKey: 1, ...header('extra'), zzz: { nested: true } };
  await persistence.create(meta);
  await persistence.append(SessionId('extra'), turn());
  const known = header('extra');
  assert.deepEqual((await persistence.list())[0], known);
  assert.deepEqual((await persistence.listSnapshots())[0].header, known);
  assert.deepEqual(Object.keys((await persistence.list())[0]), Object.keys(known));
  assert.deepEqual((await persistence.readFrom(SessionId('extra'), 0)).meta, known);
  const stored = await new VerbatimStore(root).load('extra', 0);
  assert.deepEqual(JSON.parse(stored.header), meta, 'the stored header keeps them');
});

test('§1.11: listings read metadata; one session\'s damaged log fails neither, and its reads refuse it', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  for (const id of ['a', 'b']) {
    await persistence.create(header(id));
    await persistence.append(SessionId(id), turn());
  }
  // b's last segment gets a length no writer gives it (SEG-8): its reads refuse it.
  const log = join(new VerbatimStore(root).locate('b'), 'log');
  const segment = join(log, (await readdir(log)).filter((n) => n.endsWith('.seg')).sort().at(-1));
  const handle = await open(segment, 'a');
  await handle.write(Buffer.from('{"type":"torn'));
  await handle.close();
  assert.deepEqual((await persistence.list()).map((h) => h.id).sort(), ['a', 'b']);
  // VBT-10: b is listed with a revision that says its log cannot be read, the same at
  // each listing; a's is as before.
  const snapshots = await persistence.listSnapshots();
  assert.deepEqual(snapshots.map((s) => s.header.id).sort(), ['a', 'b']);
  const damaged = snapshots.find((s) => s.header.id === 'b').revision;
  assert.match(damaged, /^surfacelog:unreadable:/);
  assert.equal(await revisionOf(persistence, SessionId('b')), damaged);
  await assert.rejects(persistence.load(SessionId('b')), (error) => error.code === 'CORRUPT');
  assert.equal((await persistence.load(SessionId('a'))).events.length, 6);
});

test('PERS-7, PERS-8: appends must continue the stored seqs; refusals store nothing', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const id = SessionId('seqs');
  await persistence.create(header('seqs'));
  await persistence.append(id, turn());
  const before = await files(root);
  const revision = await revisionOf(persistence, id);
  const cases = [
    [turn(7, 2), /append seq mismatch for "seqs": expected 6 at index 0, got 7/],
    [turn(6, 2).filter((e) => e.seq !== 8), /expected 8 at index 2, got 9/],
    [turn(0), /expected 6 at index 0, got 0/],
    [turn().slice(5), /expected 6 at index 0, got 5/],
  ];
  for (const [batch, text] of cases) {
    await assert.rejects(persistence.append(id, batch), text);
  }
  assert.deepEqual(await files(root), before);
  assert.equal(await revisionOf(persistence, id), revision);
});

test('PERS-9, PERS-10: non-JSON batches are refused; batches are snapshotted at call time', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  const id = SessionId('json');
  await persistence.create(header('json'));
  const cycle = {};
  cycle.self = cycle;
  for (const bad of [1n, undefined, NaN, Infinity, () => 1, Symbol('s'), new Map(), cycle]) {
    const batch = [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1, bad } }];
    await assert.rejects(persistence.append(id, batch), /losslessly JSON-serializable/);
  }
  const batch = turn();
  const expected = structuredClone(batch);
  const appending = persistence.append(id, batch);
  batch[0].data.turn = 99;
  batch.push({ type: 'turn/start', seq: 6, time: 1, data: { turn: 2 } });
  await appending;
  const loaded = await persistence.load(id);
  assert.deepEqual(loaded.events, expected);
});

test('PERS-11, PERS-25, PERS-26, PERS-27: appends store anything; reads refuse with DSH texts', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  const cases = [
    ['newer', { version: 99 }, turn(), SessionFormatUnsupportedError, /uses log format v99, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it/],
    ['older', { version: -1 }, turn(), SessionFormatUnsupportedError, /uses log format v-1, older than the supported v0, and this build ships no upgrade path for it/],
    ['unknown', {}, [{ type: 'future/thing', seq: 0, time: 1, data: { x: 1 } }], SessionFormatUnsupportedError, /contains event type "future\/thing" \(seq 0\) unknown to this harness and not marked ignorable/],
    ['shape', {}, [turn()[0], { ...turn()[1], data: { ...turn()[1].data, role: 'assistant' } }], SessionPersistenceCorruptionError, /stored session "shape" failed validation: .*role "user"/],
  ];
  for (const [id, extra, events, ErrorClass, text] of cases) {
    await persistence.create(header(id, extra));
    await persistence.append(SessionId(id), events); // stored as given
    await assert.rejects(persistence.load(SessionId(id)), (e) => e instanceof ErrorClass && text.test(e.message));
  }
  // An unknown type marked ignorable loads, and readFrom returns it.
  await persistence.create(header('ignorable'));
  const ignorable = { type: 'future/thing', seq: 0, time: 1, data: {}, ignorable: true };
  await persistence.append(SessionId('ignorable'), [ignorable]);
  assert.deepEqual((await persistence.load(SessionId('ignorable'))).events, [ignorable]);
  assert.deepEqual((await persistence.readFrom(SessionId('ignorable'), 0)).events, [ignorable]);
});

test('PERS-11, §1.7: a live session stores events of any type and time; its durability never stalls', async (t) => {
  const root = await scratch(t);
  const { ctx, persistence } = await mount(t, root);
  const session = ctx.sessions.create(SessionId('odd'), { meta: { cwd: WORK } });
  session.append('turn/start', { turn: 1 });
  await ctx.sessions.flush(session);
  // Types no record field can hold: longer than 256 bytes, a lone surrogate, empty.
  for (const type of [`ext/${'y'.repeat(300)}`, 'ext/\ud800', '']) session.append(type, { any: 'payload' });
  session.append('turn/end', { turn: 1, reason: { kind: 'completed' } });
  await ctx.sessions.flush(session);
  // Stored as appended (DSH's reads then refuse the unknown types, PERS-27).
  const stored = JSON.parse((await new VerbatimStore(root).load('odd', 0)).events);
  assert.deepEqual(stored.map((e) => e.type), ['turn/start', `ext/${'y'.repeat(300)}`, 'ext/\ud800', '', 'turn/end']);
  await assert.rejects(persistence.readFrom(session.id, 0), /unknown to this harness/);
  // The public append too: a time that is not an integer is stored, and judged when read.
  const id = SessionId('frac');
  await persistence.create(header('frac'));
  const event = { type: 'future/x', seq: 0, time: 1.5, ignorable: true, data: {} };
  await persistence.append(id, [event]);
  assert.deepEqual((await persistence.readFrom(id, 0)).events, [event]);
});

test('PERS-12: retired vocabulary is refused on append and on read', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  await persistence.create(header('legacy'));
  const retired = { type: 'mode/set', seq: 0, time: 1, data: {} };
  await assert.rejects(
    persistence.append(SessionId('legacy'), [retired]),
    /session "legacy" contains unsupported legacy mode\/set event at seq 0/,
  );
  // Stored behind the coordinator's back (the store takes anything): the read refuses it.
  await new VerbatimStore(root).create('legacy2', JSON.stringify(header('legacy2')), [JSON.stringify(retired)]);
  await assert.rejects(persistence.load(SessionId('legacy2')), /unsupported legacy mode\/set event at seq 0/);
});

test('PERS-14, PERS-15: append adopts a stored session in a fresh instance; unknown ids are not found', async (t) => {
  const root = await scratch(t);
  const first = await mount(t, root);
  await first.persistence.create(header('adopt'));
  await first.persistence.append(SessionId('adopt'), [...turn(), turn(6, 2)[0]]); // turn 2 open
  await first.dispose();
  const second = await mount(t, root);
  // Adoption commits the repair (turn 2's closer at 7), then appends at 8.
  await assert.rejects(second.persistence.append(SessionId('adopt'), turn(7, 3)), /expected 8 at index 0, got 7/);
  await second.persistence.append(SessionId('adopt'), turn(8, 3));
  const loaded = await second.persistence.load(SessionId('adopt'));
  assert.deepEqual(loaded.events.map((e) => e.seq), [...Array(14).keys()]);
  assert.deepEqual(loaded.events[7].data, { turn: 2, reason: { kind: 'interrupted' } });
  await assert.rejects(second.persistence.append(SessionId('nobody'), turn()), /session "nobody" not found/);
});

test('PERS-14, §1.14.3: another instance continues a session the first one is done with, while the first stays mounted', async (t) => {
  const root = await scratch(t);
  const first = await mount(t, root);
  await first.persistence.create(header('handover'));
  await first.persistence.append(SessionId('handover'), turn());
  // The first instance keeps its writer open between appends; once idle, it lets go of the
  // lock, and the second instance's append waits for that rather than failing LOCKED.
  const second = await mount(t, root);
  await second.persistence.append(SessionId('handover'), turn(6, 2));
  const loaded = await second.persistence.load(SessionId('handover'));
  assert.deepEqual(loaded.events.map((e) => e.seq), [...Array(12).keys()]);
  // And back: the first instance appends after the second one (its state re-read).
  await first.dispose();
  const third = await mount(t, root);
  await third.persistence.append(SessionId('handover'), turn(12, 3));
  assert.equal((await third.persistence.load(SessionId('handover'))).events.length, 18);
});

test('PERS-14: a write that ends while idle writers are being closed still has its writer closed', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  for (const id of ['a', 'k']) {
    await persistence.create(header(id));
    await persistence.append(SessionId(id), turn());
  }
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  await sleep(2200); // both writers closed as idle
  // Closing idle writers now takes a while (an index written and synced per writer).
  const store = persistence.hooks.store;
  const close = store.closeIdleWriters.bind(store);
  store.closeIdleWriters = async (ms) => {
    const open = await close(ms);
    await sleep(300);
    return open;
  };
  await persistence.append(SessionId('a'), turn(6, 2));
  await sleep(1100); // a's writer is being closed: k's append ends meanwhile
  await persistence.append(SessionId('k'), turn(6, 2));
  const other = new VerbatimStore(root, { lockWaitMs: 3000 });
  await other.append('k', 12, [JSON.stringify({ type: 'turn/start', seq: 12, time: 13, data: { turn: 3 } })]);
  await other.close();
});

test('PERS-16: an append is visible to another reader once it resolves; a failed first batch changes nothing', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  await persistence.create(header('durable'));
  await persistence.append(SessionId('durable'), turn());
  const read = await new VerbatimStore(root).load('durable');
  assert.equal(JSON.parse(read.events).length, 6);
  // Materialization never replaces a stored log: a session another writer published
  // meanwhile makes the first batch fail, and the stored log is untouched.
  await persistence.create(header('raced'));
  await new VerbatimStore(root).create('raced', JSON.stringify(header('raced', { n: 1 })), [
    JSON.stringify(turn()[0]),
  ]);
  const before = await files(root);
  await assert.rejects(persistence.append(SessionId('raced'), turn()), (e) => e.code === 'SESSION_EXISTS');
  assert.deepEqual(await files(root), before);
});

test('PERS-16, §3.3 appendBatch: a write that fails is restored before the append rejects', async (t) => {
  // A batch appended by a process whose file-size limit (RLIMIT_FSIZE, `ulimit -f`) lies
  // inside the segment: the write of its records stops at the limit, part of them on
  // disk, and the next write fails (EFBIG). The append rejects saying nothing was written;
  // every byte of the log is as before (the indexes, caches, aside); the same batch then
  // appends.
  const root = await scratch(t);
  const segmentBytes = 8192;
  const store = new VerbatimStore(root, { segmentBytes });
  const event = (seq) =>
    JSON.stringify({ type: 'tool/result', seq, time: seq, data: { pad: 'x'.repeat(150), seq } });
  const first = [...Array(10).keys()].map(event);
  await store.create('s', JSON.stringify({ id: 's' }), first);
  await store.close();
  const before = await store.load('s');
  const log = join(store.locate('s'), 'log');
  const data = async () => {
    const out = {};
    for (const name of (await readdir(log)).sort()) {
      if (name.endsWith('.idx') || name === 'LOCK') continue;
      const bytes = await readFile(join(log, name));
      let end = bytes.length;
      while (end > 0 && bytes[end - 1] === 0) end -= 1;
      out[name] = bytes.subarray(0, end).toString('base64');
    }
    return out;
  };
  const files = await data();
  const batch = [...Array(60).keys()].map((i) => event(10 + i));
  const child = join(root, 'child.cjs');
  await writeFile(
    child,
    `const { VerbatimStore } = require(${JSON.stringify(require.resolve('../index.js'))});
     const store = new VerbatimStore(process.argv[2], { segmentBytes: ${segmentBytes} });
     const batch = JSON.parse(process.argv[3]);
     store.append('s', 10, batch).then(
       () => console.log(JSON.stringify({ ok: true })),
       (e) => console.log(JSON.stringify({ code: e.code, outcome: e.outcome, message: e.message })),
     );`,
  );
  // 7 blocks: 3.5 KiB (dash counts 512 bytes) or 7 KiB (bash, 1 KiB), past the first
  // segment's records (about 3 KiB) and below its 8 KiB: the batch's write stops short at
  // the limit (part of its records written), the next write fails with EFBIG.
  const { execFileSync } = await import('node:child_process');
  const out = execFileSync(
    'sh',
    ['-c', 'ulimit -f 7 && exec "$0" "$@"', process.execPath, child, root, JSON.stringify(batch)],
    { encoding: 'utf8' },
  );
  const result = JSON.parse(out.trim().split('\n').pop());
  assert.equal(result.code, 'IO', out);
  assert.equal(result.outcome, 'nothingWritten', out);
  assert.match(result.message, /file too large|EFBIG|os error 27/i);
  assert.deepEqual(await store.load('s'), before);
  assert.deepEqual(await data(), files);
  await store.append('s', 10, batch);
  const after = await store.load('s');
  assert.deepEqual(JSON.parse(after.events), [...first, ...batch].map((e) => JSON.parse(e)));
  await store.close();
});

test('PERS-17: a reserved preparation blocks append and create', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  await persistence.create(header('reserved'));
  await persistence.append(SessionId('reserved'), turn());
  const preparation = await persistence.prepare(SessionId('reserved'));
  await assert.rejects(
    persistence.append(SessionId('reserved'), turn(6, 2)),
    /cannot append session "reserved" while its persisted preparation is reserved/,
  );
  await assert.rejects(persistence.create(header('reserved')), /already exists in this backend/);
  preparation[Symbol.dispose]();
});

// --- load and repair (PERS-18 to PERS-24) ---

test('PERS-18: a balanced log loads exactly as appended, no closers', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  await persistence.create(header('round'));
  const events = [...turn(), ...turn(6, 2)];
  await persistence.append(SessionId('round'), events.slice(0, 4));
  await persistence.append(SessionId('round'), events.slice(4));
  assert.deepEqual((await persistence.load(SessionId('round'))).events, events);
});

test('PERS-19 to PERS-22, PERS-30: an open turn is closed by load, durably; inspect closes in memory only', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const id = SessionId('open');
  await persistence.create(header('open'));
  await persistence.append(id, [
    ...turn(),
    { type: 'turn/start', seq: 6, time: 7, data: { turn: 2 } },
    { type: 'step/start', seq: 7, time: 8, data: { turn: 2, step: 1 } },
    {
      type: 'assistant/message',
      seq: 8,
      time: 9,
      data: {
        turn: 2,
        step: 1,
        message: assistantMessage([
          { type: 'tool-call', id: CallId('not-started'), name: 'bash', arguments: '{}' },
          { type: 'tool-call', id: CallId('started'), name: 'write', arguments: '{}' },
        ]),
      },
      surfaceOp: 'append',
    },
    { type: 'tool/call', seq: 9, time: 10, data: { turn: 2, step: 1, callId: CallId('started'), name: 'write', arguments: '{}' } },
  ]);
  const before = await files(root);
  const stored = await revisionOf(persistence, id);
  const inspected = await persistence.inspect(id);
  assert.deepEqual(await files(root), before, 'inspect wrote');
  assert.equal(await revisionOf(persistence, id), stored);
  const loaded = await persistence.load(id);
  assert.deepEqual(loaded.events, inspected.events);
  assert.notEqual(await revisionOf(persistence, id), stored);
  const closers = loaded.events.slice(10);
  assert.deepEqual(closers.map((e) => e.type), ['tool/result', 'tool/result', 'step/end', 'turn/end']);
  assert.deepEqual(closers.map((e) => e.seq), [10, 11, 12, 13]);
  const results = Object.fromEntries(
    closers.slice(0, 2).map((e) => [e.data.message.source.callId, e.data]),
  );
  assert.equal(results['not-started'].error.code, 'TOOL_NOT_STARTED');
  assert.deepEqual(results['not-started'].message.source, { kind: 'tool', callId: 'not-started' });
  assert.deepEqual(results.started.error, { name: 'ToolOutcomeUnknownError', code: 'TOOL_OUTCOME_UNKNOWN' });
  assert.deepEqual(closers[3].data.reason, { kind: 'interrupted' });
  // PERS-22: the repair is stored: a reload returns it whole, append continues at 14.
  await persistence.append(id, turn(14, 3));
  const reloaded = await persistence.load(id);
  assert.deepEqual(reloaded.events.map((e) => e.seq), [...Array(20).keys()]);
  assert.deepEqual(reloaded.events.slice(0, 14), loaded.events);
  const direct = await new VerbatimStore(root).load('open');
  assert.equal(direct.seqNext, 20);
});

test('PERS-23: a torn tail is never read, and the next mutating read truncates it', async (t) => {
  const root = await scratch(t);
  const first = await mount(t, root);
  const id = SessionId('torn');
  await first.persistence.create(header('torn'));
  await first.persistence.append(id, [...turn(), turn(6, 2)[0]]);
  await first.dispose();
  await corruptTail(root, 'torn');
  const { persistence } = await mount(t, root);
  const torn = await revisionOf(persistence, id);
  assert.match(torn, /:torn$/);
  const view = await persistence.readFrom(id, 0);
  assert.equal(view.events.length, 7);
  assert.equal(await revisionOf(persistence, id), torn, 'readFrom repaired');
  const loaded = await persistence.load(id);
  assert.deepEqual(loaded.events.map((e) => e.type).slice(6), ['turn/start', 'turn/end']);
  const repaired = await revisionOf(persistence, id);
  assert.doesNotMatch(repaired, /torn/);
  assert.equal((await new VerbatimStore(root).load('torn')).torn, false);
});

test('PERS-24: load and inspect of an unknown id are not found', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  await assert.rejects(persistence.load(SessionId('none')), /session "none" not found/);
  await assert.rejects(persistence.inspect(SessionId('none')), /session "none" not found/);
  await assert.rejects(persistence.readFrom(SessionId('none'), 0), /session "none" not found/);
});

// --- views (PERS-28 to PERS-36) ---

test('PERS-28: legacy logs are projected in memory on every read path', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const id = SessionId('old');
  await persistence.create(header('old'));
  const legacy = [
    { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
    { type: 'user/message', seq: 1, time: 2, data: { content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }, surfaceOp: 'append' },
    { type: 'turn/end', seq: 2, time: 3, data: { turn: 1, reason: { kind: 'completed' } } },
  ];
  await persistence.append(id, legacy);
  const loaded = await persistence.load(id);
  assert.equal(loaded.events[1].data.id, `legacy-message:${id}:1`);
  const suffix = await persistence.readFrom(id, 1);
  assert.equal(suffix.events[0].data.id, `legacy-message:${id}:1`);
  // Stored as appended: the projection is in memory only.
  const stored = JSON.parse((await new VerbatimStore(root).load('old')).events);
  assert.deepEqual(stored, legacy);
});

test('PERS-29: message payloads of load and inspect are deeply frozen', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  await persistence.create(header('frozen'));
  await persistence.append(SessionId('frozen'), turn());
  for (const view of [await persistence.inspect(SessionId('frozen')), await persistence.load(SessionId('frozen'))]) {
    assert.throws(() => {
      view.events[1].data.content[0].text = 'changed';
    }, TypeError);
  }
});

test('PERS-31, PERS-44: a live id is read live: inspect as is, load refuses an open turn', async (t) => {
  const { ctx, persistence } = await mount(t, await scratch(t));
  const empty = ctx.sessions.create(SessionId('empty-live'), { meta: { cwd: WORK } });
  await assert.rejects(persistence.load(empty.id), /not found/);
  const session = ctx.sessions.create(SessionId('live'), { meta: { cwd: WORK } });
  emit(session, turn().slice(0, 3));
  const inspected = await persistence.inspect(session.id);
  assert.deepEqual(inspected.events.map((e) => e.type), ['turn/start', 'user/message', 'step/start']);
  await assert.rejects(
    persistence.load(session.id),
    /cannot load session "live" while its live turn is open; use the live Session or wait for the turn to close/,
  );
  emit(session, turn().slice(3));
  const loaded = await persistence.load(session.id);
  assert.equal(loaded.events.length, 6);
});

test('PERS-32: a cached inspect view is re-read once the stored revision changes', async (t) => {
  const root = await scratch(t);
  const a = await mount(t, root);
  await a.persistence.create(header('cache'));
  await a.persistence.append(SessionId('cache'), turn());
  assert.equal((await a.persistence.inspect(SessionId('cache'))).events.length, 6);
  const b = await mount(t, root);
  await b.persistence.append(SessionId('cache'), turn(6, 2)); // adopts, appends
  assert.equal((await a.persistence.inspect(SessionId('cache'))).events.length, 12);
});

test('PERS-33 to PERS-36: readFrom returns the stored suffix without repair', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const id = SessionId('suffix');
  await persistence.create(header('suffix'));
  const events = [...turn(), turn(6, 2)[0]];
  await persistence.append(id, events);
  const revision = await revisionOf(persistence, id);
  assert.deepEqual((await persistence.readFrom(id, 0)).events, events);
  assert.deepEqual((await persistence.readFrom(id, 4)).events, events.slice(4));
  assert.deepEqual((await persistence.readFrom(id, 7)).events, []);
  assert.deepEqual((await persistence.readFrom(id, 70)).events, []);
  assert.deepEqual((await persistence.readFrom(id, 0)).meta, header('suffix'));
  assert.equal(await revisionOf(persistence, id), revision);
  for (const bad of [-1, 1.5, Number.NaN]) {
    await assert.rejects(
      persistence.readFrom(id, bad),
      (e) => e instanceof TypeError && /readFrom fromSeq must be a non-negative safe integer/.test(e.message),
    );
  }
});

// --- listing, revisions, signals (PERS-37 to PERS-42) ---

test('PERS-37 to PERS-39: listings see every materialized session; revisions are stable, change, and are source-qualified', async (t) => {
  const rootA = await scratch(t);
  const rootB = await scratch(t);
  const a = await mount(t, rootA);
  const b = await mount(t, rootB);
  for (const { persistence } of [a, b]) {
    await persistence.create(header('same'));
    await persistence.append(SessionId('same'), turn());
  }
  const live = a.ctx.sessions.create(SessionId('drained'), { meta: { cwd: WORK } });
  emit(live, turn());
  await a.ctx.sessions.flush(live);
  const ids = (await a.persistence.list()).map((h) => h.id).sort();
  assert.deepEqual(ids, ['drained', 'same']);
  const first = await revisionOf(a.persistence, SessionId('same'));
  assert.equal(await revisionOf(a.persistence, SessionId('same')), first);
  await a.persistence.inspect(SessionId('same'));
  await a.persistence.readFrom(SessionId('same'), 0);
  assert.equal(await revisionOf(a.persistence, SessionId('same')), first);
  assert.notEqual(await revisionOf(b.persistence, SessionId('same')), first);
  await a.persistence.append(SessionId('same'), turn(6, 2));
  assert.notEqual(await revisionOf(a.persistence, SessionId('same')), first);
});

test('PERS-40: an aborted signal rejects with its exact reason, even for unknown ids', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  const reason = { mine: true };
  const controller = new AbortController();
  controller.abort(reason);
  const signal = controller.signal;
  const calls = [
    () => persistence.list(signal),
    () => persistence.listSnapshots(signal),
    () => persistence.inspect(SessionId('unknown'), signal),
    () => persistence.readFrom(SessionId('unknown'), 0, signal),
    () => persistence.prepare(SessionId('unknown'), signal),
  ];
  for (const call of calls) {
    await assert.rejects(call(), (e) => e === reason);
  }
  const fine = new AbortController().signal;
  assert.deepEqual(await persistence.list(fine), []);
});

test('PERS-41, PERS-42: a caller queued behind a reservation is released with its reason; the chain goes on', async (t) => {
  const { persistence } = await mount(t, await scratch(t));
  await persistence.create(header('queue'));
  await persistence.append(SessionId('queue'), turn());
  const held = await persistence.prepare(SessionId('queue'));
  const controller = new AbortController();
  const waiting = persistence.prepare(SessionId('queue'), controller.signal);
  controller.abort('stop');
  await assert.rejects(waiting, (e) => e === 'stop');
  held[Symbol.dispose]();
  await persistence.append(SessionId('queue'), turn(6, 2));
  assert.equal((await persistence.load(SessionId('queue'))).events.length, 12);
});

// --- live write path (PERS-43 to PERS-55) ---

test('PERS-43, PERS-45, PERS-54: live events are stored exactly as emitted, from seq 0', async (t) => {
  const root = await scratch(t);
  const { ctx, persistence } = await mount(t, root);
  const session = ctx.sessions.create(SessionId('emitted'), { meta: { cwd: WORK } });
  const flushing = ctx.sessions.flush(session); // before binding completes
  emit(session, turn());
  await flushing;
  await ctx.sessions.flush(session);
  const loaded = await persistence.load(session.id);
  assert.deepEqual(loaded.events, JSON.parse(JSON.stringify(session.events)));
  assert.equal(loaded.meta.cwd, WORK);
});

test('PERS-46, PERS-47: a seeded session stores its seed once; a resumed one only its suffix', async (t) => {
  const root = await scratch(t);
  const { ctx, persistence } = await mount(t, root);
  let child;
  const childFiber = await ctx.plugin(
    Object.assign(
      (inner) => {
        child = inner.sessions.create(SessionId('child'), { seed: turn(), meta: { cwd: WORK } });
      },
      { inject: ['sessions'] },
    ),
  );
  await ctx.sessions.flush(child);
  const stored = await revisionOf(persistence, child.id);
  await ctx.sessions.flush(child);
  assert.equal(await revisionOf(persistence, child.id), stored, 'a flush with nothing new wrote');
  await childFiber.dispose();
  const loaded = await persistence.load(child.id);
  assert.deepEqual(loaded.events.map((e) => e.type).at(-1), 'session/end-seed');
  assert.equal(loaded.events.length, 7);
  // Resumed with the stored log as its seed: nothing is rewritten, only new events stored.
  const balanced = await revisionOf(persistence, child.id);
  const resumed = ctx.sessions.create(child.id, { seed: loaded.events, meta: loaded.meta });
  await ctx.sessions.flush(resumed);
  assert.equal(await revisionOf(persistence, child.id), balanced, 'the seed was written again');
  emit(resumed, turn(7, 2));
  await ctx.sessions.flush(resumed);
  const direct = JSON.parse((await new VerbatimStore(root).load('child')).events);
  assert.deepEqual(direct.slice(0, 7), JSON.parse(JSON.stringify(loaded.events)));
  assert.deepEqual(direct.map((e) => e.seq), [...Array(13).keys()]);
});

test('PERS-48, PERS-49: claims need the same cwd and a covering seed; otherwise the flush is a collision', async (t) => {
  const root = await scratch(t);
  const { ctx, persistence } = await mount(t, root);
  await persistence.create(header('owned', { cwd: WORK }));
  await persistence.append(SessionId('owned'), turn());
  const loaded = await persistence.load(SessionId('owned'));
  const elsewhere = ctx.sessions.create(SessionId('owned'), { seed: loaded.events, meta: { cwd: '/other' } });
  await assert.rejects(ctx.sessions.flush(elsewhere), /id collision/);
  const stranger = ctx.sessions.create(SessionId('stored-elsewhere-1'), { meta: { cwd: WORK } });
  emit(stranger, turn());
  await ctx.sessions.flush(stranger);
  const second = await mount(t, root);
  const fresh = second.ctx.sessions.create(SessionId('stored-elsewhere-1'), { meta: { cwd: WORK } });
  emit(fresh, turn());
  await assert.rejects(second.ctx.sessions.flush(fresh), /already has a persisted log|id collision/);
});

test('PERS-50, PERS-51, PERS-55: disposal drains buffered events; abandoned ids are reusable', async (t) => {
  const root = await scratch(t);
  const first = await mount(t, root, { writeBatchMaxDelayMs: 10_000 });
  const abandoned = first.ctx.sessions.create(SessionId('abandoned'), { meta: { cwd: WORK } });
  abandoned[Symbol.dispose]?.();
  const session = first.ctx.sessions.create(SessionId('drain'), { meta: { cwd: WORK } });
  emit(session, turn()); // buffered: the window is 10 s
  assert.equal(await new VerbatimStore(root).load('drain'), null);
  await first.dispose();
  const stored = await new VerbatimStore(root).load('drain');
  assert.equal(JSON.parse(stored.events).length, 6);
  const second = await mount(t, root);
  assert.equal((await second.persistence.load(SessionId('drain'))).events.length, 6);
  const reused = second.ctx.sessions.create(SessionId('abandoned'), { meta: { cwd: WORK } });
  emit(reused, turn());
  await second.ctx.sessions.flush(reused);
  assert.equal((await second.persistence.load(SessionId('abandoned'))).events.length, 6);
});

test('PERS-52: a remounted backend adopts a live session, persists its suffix, truncates a torn tail without closers', async (t) => {
  const root = await scratch(t);
  const ctx = new Context();
  await ctx.plugin(SessionStore);
  let session;
  const sessionFiber = await ctx.plugin(
    Object.assign(
      (inner) => {
        session = inner.sessions.create(SessionId('hmr'), { meta: { cwd: WORK } });
      },
      { inject: ['sessions'] },
    ),
  );
  t.after(() => sessionFiber.dispose());
  const first = await ctx.plugin(SurfacelogSessionPersistence, { root });
  emit(session, turn().slice(0, 3)); // an open turn
  await ctx.sessions.flush(session);
  await first.dispose();
  await corruptTail(root, 'hmr');
  emit(session, turn().slice(3, 4)); // ahead of the stored prefix
  const second = await ctx.plugin(SurfacelogSessionPersistence, { root });
  t.after(() => second.dispose());
  await ctx.sessions.flush(session);
  const stored = await new VerbatimStore(root).load('hmr');
  assert.equal(stored.torn, false);
  assert.deepEqual(
    JSON.parse(stored.events).map((e) => e.type),
    ['turn/start', 'user/message', 'step/start', 'assistant/message'],
  );
});

// --- the hooks themselves (§3.3) ---

test('§3.3: loadStored returns fresh, unaliased graphs and a marker only when a tail must go', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  await persistence.create(header('hooks'));
  await persistence.append(SessionId('hooks'), turn());
  const hooks = persistence.hooks;
  const a = await hooks.loadStored(SessionId('hooks'));
  const b = await hooks.loadStored(SessionId('hooks'));
  assert.notEqual(a.events[1], b.events[1]);
  assert.notEqual(a.meta, b.meta);
  assert.deepEqual(a.events, b.events);
  assert.equal(a.tornMarker, undefined);
  assert.equal(a.revision, await hooks.readStoredRevision(SessionId('hooks')));
  assert.equal(await hooks.loadStored(SessionId('missing')), undefined);
  assert.equal(await hooks.readStoredRevision(SessionId('missing')), undefined);
  await corruptTail(root, 'hooks');
  const torn = await hooks.loadStored(SessionId('hooks'));
  assert.notEqual(torn.tornMarker, undefined);
  assert.equal(torn.events.length, 6);
  // A stale marker is refused: the log changed since it was read.
  await hooks.commitRepair(header('hooks'), torn.tornMarker, []);
  await assert.rejects(hooks.commitRepair(header('hooks'), torn.tornMarker, []), /repair is stale/);
  assert.equal((await hooks.loadStored(SessionId('hooks'))).tornMarker, undefined);
  // A seek read returns the suffix and changes nothing.
  const before = await files(root);
  const suffix = await hooks.loadStoredFrom(SessionId('hooks'), 5);
  assert.deepEqual(suffix.events.map((e) => e.seq), [5]);
  assert.deepEqual(await files(root), before);
});

test('§3.3: signals are checked before and after native work; lossless JSON round-trips', async (t) => {
  const root = await scratch(t);
  const { persistence } = await mount(t, root);
  const hooks = persistence.hooks;
  const controller = new AbortController();
  controller.abort('gone');
  await assert.rejects(hooks.loadStored(SessionId('x'), controller.signal), (e) => e === 'gone');
  await assert.rejects(hooks.readStoredRevision(SessionId('x'), controller.signal), (e) => e === 'gone');
  await assert.rejects(hooks.loadStoredFrom(SessionId('x'), 0, controller.signal), (e) => e === 'gone');
  await assert.rejects(hooks.list(controller.signal), (e) => e === 'gone');
  // Values JSON keeps exactly: big and tiny numbers, lone surrogates, key order, escapes.
  const data = { z: 1, a: [1e21, 5e-324, -1.5, 9007199254740993], s: '\ud800 \u2028 "q" \\', o: { b: null, a: true } };
  await persistence.create(header('lossless'));
  await persistence.append(SessionId('lossless'), [{ type: 'future/x', seq: 0, time: 1, data, ignorable: true }]);
  const loaded = await persistence.load(SessionId('lossless'));
  assert.equal(JSON.stringify(loaded.events[0].data), JSON.stringify(data));
  assert.deepEqual(Object.keys(loaded.events[0].data), ['z', 'a', 's', 'o']);
});

// --- migration (issue 17: importFrom) ---

/** DSH's project directory for a header's `cwd` (dsh-formats.md DIR-2), where its JSONL
 * backend keeps the session (DIR-9 refuses a log anywhere else). */
const projectDir = (cwd) => {
  if (cwd === undefined) return '_no-cwd';
  let slug = '';
  let separator = false;
  for (let i = 0; i < cwd.length; i += 1) {
    const unit = cwd.charCodeAt(i);
    if (unit === 0x2f || unit === 0x5c || unit === 0x3a) {
      if (!separator) slug += '-';
      separator = true;
      continue;
    }
    separator = false;
    slug += /^[A-Za-z0-9._-]$/.test(cwd[i]) ? cwd[i] : `~${unit.toString(16).toUpperCase().padStart(4, '0')}`;
  }
  slug = slug.replace(/^-+/, '') || 'root';
  return `--${slug.slice(0, 251)}--`;
};

test('importFrom: a host switching from DSH JSONL finds its sessions, imported once before first use', async (t) => {
  const corpus = join(import.meta.dirname, '..', '..', '..', 'tests', 'data', 'dsh-sessions');
  const legacy = await scratch(t);
  const names = ['acp-agent--cancel--session', 'acp-agent--fs-delete-recreate--session', 'web--steering--session'];
  const expected = {};
  for (const name of names) {
    const text = await readFile(join(corpus, `${name}.jsonl`), 'utf8');
    const { id, cwd } = JSON.parse(text.slice(0, text.indexOf('\n')));
    const dir = join(legacy, projectDir(cwd), id);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'session.jsonl'), text);
    expected[id] = JSON.parse(await readFile(join(corpus, 'expected', `${name}.json`), 'utf8'));
  }
  const before = await files(legacy);
  const root = await scratch(t);
  const warnings = [];
  const onWarning = (warning) => warnings.push(warning);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const { persistence } = await mount(t, root, { importFrom: { jsonl: legacy } });
  const readable = Object.keys(expected).filter((id) => expected[id].ok);
  assert.deepEqual((await persistence.list()).map((h) => h.id).sort(), readable.sort());
  for (const id of readable) {
    const loaded = await persistence.load(SessionId(id));
    assert.deepEqual(loaded.meta, expected[id].header);
    assert.equal(loaded.events.length, expected[id].storedEvents + expected[id].closers.length);
  }
  // The log DSH refuses is reported, not imported, and not silently dropped.
  assert.equal(persistence.imported.refused.length, 1);
  assert.equal(persistence.imported.refused[0].code, 'CORRUPT');
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(warnings.some((w) => w.code === 'SURFACELOG_DSH_IMPORT_REFUSED'));
  assert.deepEqual(await files(legacy), before, 'the old files changed');
  // A later start imports nothing again.
  const again = await mount(t, root, { importFrom: { jsonl: legacy } });
  await again.persistence.list();
  assert.deepEqual(again.persistence.imported.imported, []);
  assert.deepEqual(again.persistence.imported.present.sort(), readable.sort());
  const bad = new Context();
  await bad.plugin(SessionStore);
  assert.throws(
    () => new SurfacelogSessionPersistence(bad, { root, importFrom: { jsonl: legacy, sqlite: 'x' } }),
    /importFrom must be/,
  );
});

test('importFrom, §1.17: a log DSH refuses is never "not found", and its id is not free', async (t) => {
  const legacy = await scratch(t);
  const log = async (project, id, lines) => {
    const dir = join(legacy, project, id);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'session.jsonl'), lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
  };
  const head = (id, version = 0) => ({ type: 'session', version, id, createdAt: 1000, cwd: WORK, delegationDepth: 0 });
  const work = projectDir(WORK);
  await log(work, 'fine', [head('fine'), ...turn()]);
  await log(work, 'newer', [head('newer', 1), { type: 'future/thing', seq: 0, time: 1 }]);
  await log(work, 'dup', [head('dup'), ...turn()]);
  await log('--v--', 'dup', [head('dup'), ...turn()]);
  await log(work, 'damaged', [head('damaged'), ...turn()]);
  await log('--elsewhere--', 'misplaced', [head('misplaced'), ...turn()]);
  const damaged = join(legacy, work, 'damaged', 'session.jsonl');
  const lines = (await readFile(damaged, 'utf8')).split('\n');
  lines[3] = '{"type":"step/start","seq":2,';
  await writeFile(damaged, lines.join('\n'));
  const root = await scratch(t);
  // One bad id does not stop the backend: the readable session is there.
  const { persistence } = await mount(t, root, { importFrom: { jsonl: legacy } });
  assert.equal((await persistence.load(SessionId('fine'))).events.length, 6);
  assert.deepEqual(
    persistence.imported.refused.map((r) => [r.id, r.code]).sort(),
    [['damaged', 'CORRUPT'], ['dup', 'CORRUPT'], ['dup', 'CORRUPT'], ['misplaced', 'CORRUPT'], ['newer', 'FORMAT_VERSION']],
  );
  // Another version: DSH's own refusal, naming the upgrade, never "corrupt" or "not found".
  await assert.rejects(persistence.load(SessionId('newer')), (error) => {
    assert.equal(error.name, 'SessionFormatUnsupportedError');
    assert.match(error.message, /uses log format v1, but this harness reads only v0/);
    return true;
  });
  // Damage, a duplicate id and a log outside its project: refused with the error naming
  // the DSH file.
  for (const [id, rule] of [['damaged', 'session.jsonl'], ['dup', 'DIR-8'], ['misplaced', 'DIR-9']]) {
    await assert.rejects(persistence.load(SessionId(id)), (error) => {
      assert.equal(error.code, 'CORRUPT');
      assert.ok(error.message.includes(rule) && error.message.includes(legacy), error.message);
      return true;
    });
  }
  // Their ids are not free for a new session.
  await assert.rejects(persistence.create(header('newer')), /already has a persisted log on disk/);
  for (const id of ['damaged', 'dup', 'misplaced']) {
    await assert.rejects(persistence.create(header(id)), (error) => error.code === 'CORRUPT');
  }
  assert.deepEqual((await persistence.list()).map((h) => h.id), ['fine']);
  // §1.12 rule 4: a refused session's revision is source-qualified too: another store
  // importing the same DSH file gives another token.
  const other = await mount(t, await scratch(t), { importFrom: { jsonl: legacy } });
  const token = (p) => p.hooks.readStoredRevision(SessionId('newer'));
  assert.notEqual(await token(persistence), await token(other.persistence));
  assert.equal(await token(persistence), await token(persistence));
});

test('PERS-53: re-emitting session/created for a bound session changes nothing', async (t) => {
  const root = await scratch(t);
  const { ctx, persistence } = await mount(t, root);
  const session = ctx.sessions.create(SessionId('bound'), { meta: { cwd: WORK } });
  emit(session, turn());
  await ctx.sessions.flush(session);
  const stored = await revisionOf(persistence, session.id);
  await ctx.parallel('session/created', session);
  emit(session, turn(6, 2));
  await ctx.sessions.flush(session);
  const loaded = await persistence.load(session.id);
  assert.deepEqual(loaded.events.map((e) => e.seq), [...Array(12).keys()]);
  assert.notEqual(await revisionOf(persistence, session.id), stored);
});

test('§3.3: a torn marker is refused as stale once another writer changed the log', async (t) => {
  const root = await scratch(t);
  const first = await mount(t, root);
  await first.persistence.create(header('stale'));
  await first.persistence.append(SessionId('stale'), turn());
  await first.dispose();
  await corruptTail(root, 'stale');
  const { persistence } = await mount(t, root);
  const torn = await persistence.hooks.loadStored(SessionId('stale'));
  assert.notEqual(torn.tornMarker, undefined);
  // Another writer (another process, here another store) recovers the log and appends.
  const other = new VerbatimStore(root);
  await other.append('stale', 6, [JSON.stringify({ type: 'x/note', seq: 6, time: 1, data: {}, ignorable: true })]);
  await other.close();
  await assert.rejects(persistence.hooks.commitRepair(header('stale'), torn.tornMarker, []), /repair is stale/);
  const now = await persistence.hooks.loadStored(SessionId('stale'));
  assert.equal(now.tornMarker, undefined);
  assert.equal(now.events.length, 7);
});
