// The Node API over a real store: exact JSON both ways, errors with the contract's codes,
// atomic batches, reopening, forks, read-only views, and crash repair seen from Node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Store, SurfacelogError } = require('../index.js');

/** A scratch directory removed when the test ends. */
function scratch(t) {
  const dir = mkdtempSync(join(tmpdir(), 'surfacelog-node-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const user = (id, text) =>
  `{"id":"${id}","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"${text}"}]}`;

/** A completed turn: its messages' JSON texts, in order. */
async function turn(session, n) {
  await session.append('turn/start', `{"turn":${n}}`);
  const message = user(`u${n}`, `hi ${n}`);
  await session.append('user/message', message, { surfaceOp: 'append' });
  await session.append('turn/end', `{"turn":${n},"reason":{"kind":"completed"}}`);
  return [message];
}

async function rejects(promise, code) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof SurfacelogError, `a SurfacelogError: ${error}`);
    assert.equal(error.code, code, error.message);
    assert.equal(typeof error.message, 'string');
    return true;
  });
}

test('appends and reads back exact texts; messages are the surface', async (t) => {
  const store = await Store.open(scratch(t));
  const session = await store.create('s1');
  assert.equal(session.id, 's1');
  const expected = [...(await turn(session, 1)), ...(await turn(session, 2))];
  assert.equal(await session.seqNext(), 6);
  const messages = await session.messages();
  assert.deepEqual(messages.toArray().map((m) => m.json), expected);
  assert.deepEqual(messages.toArray().map((m) => m.seq), [1, 4]);
  assert.equal(messages.at(0).message.role, 'user');
  assert.deepEqual(await session.transcript(), [1, 4]);
  const events = await session.events({ from: 1, limit: 2 });
  assert.deepEqual(events.map((e) => [e.seq, e.type]), [[1, 'user/message'], [2, 'turn/end']]);
  assert.equal(events[0].event.data.id, 'u1');
  assert.ok(events[0].text.includes(expected[0]), 'the data is stored byte for byte');
  assert.deepEqual((await session.asOf(2)).toArray().map((m) => m.seq), [1]);
  await session.close();
  await session.close(); // idempotent
});

test('JSON stays lossless as text: big integers, lone surrogates, key order; -0 refused', async (t) => {
  const store = await Store.open(scratch(t));
  const session = await store.create('lossless');
  // Contract §2.1: -0 is refused, since a JavaScript writer cannot reproduce it.
  await rejects(session.append('host/note', '{"a":-0}'), 'DATA_NOT_LOSSLESS');
  const data = '{"z":12345678901234567890123,"s":"\\ud800","n":1.50e+3,"k":{"b":1,"a":2}}';
  const seq = await session.append('host/note', data);
  assert.equal(seq, 0, 'the refused event left no trace');
  const [event] = await session.events({ from: seq, limit: 1 });
  assert.ok(event.text.includes(`"data":${data}`), event.text);
  // The object form is a convenience: JSON.stringify's output, stored as given.
  const seq2 = await session.append('host/note', { b: 1, a: [true, null] });
  const [event2] = await session.events({ from: seq2, limit: 1 });
  assert.ok(event2.text.includes('"data":{"b":1,"a":[true,null]}'), event2.text);
  await session.close();
});

test('refusals reject with the contract code and context, and leave no trace', async (t) => {
  const store = await Store.open(scratch(t));
  const session = await store.create('s');
  await rejects(session.append('user/message', user('u1', 'x')), 'SURFACE_OP_REQUIRED');
  await rejects(session.append('turn/start', '{"turn":1}', { surfaceOp: 'append' }), 'SURFACE_OP_FORBIDDEN');
  await rejects(session.append('host/note', '{"a":'), 'DATA_INVALID_JSON');
  await rejects(session.append('user/message', user('u1', 'x'), { surfaceOp: null }), 'SURFACE_OP_INVALID');
  assert.equal(await session.seqNext(), 0, 'nothing appended');
  await rejects(store.create('s'), 'SESSION_EXISTS');
  await rejects(store.open('nobody'), 'SESSION_NOT_FOUND');
  await rejects(store.open('s'), 'LOCKED');
  await rejects(store.create(''), 'INVALID_ID');
  await rejects(Store.open(join(scratch(t), 'missing'), { mustExist: true }), 'STORE_NOT_FOUND');
  await rejects(Store.open(scratch(t), { durability: 'often' }), 'INVALID_ARGUMENT');
  await session.close();
  await rejects(session.append('host/note', '{}'), 'SESSION_CLOSED');
  await rejects(session.messages(), 'SESSION_CLOSED');
});

test('appendAll commits all events or none', async (t) => {
  const store = await Store.open(scratch(t));
  const session = await store.create('batch');
  const seqs = await session.appendAll([
    { type: 'turn/start', data: '{"turn":1}' },
    { type: 'user/message', data: user('u1', 'a'), surfaceOp: 'append' },
  ]);
  assert.deepEqual(seqs, [0, 1]);
  await assert.rejects(
    session.appendAll([
      { type: 'host/note', data: {} },
      { type: 'user/message', data: user('u2', 'b') },
    ]),
    (error) => error.code === 'SURFACE_OP_REQUIRED' && error.seq === 3,
  );
  assert.equal(await session.seqNext(), 2);
  await session.close();
});

test('a store writes compact records by default; compactRecords: false and chunkRecords: false write the older records', async (t) => {
  // SEG-9: `incompat_features` (u16 at byte 58 of a segment's header): COMPACT_RECORDS 4,
  // CHUNK_RECORDS 1, neither 0.
  for (const [options, features] of [[{}, 4], [{ compactRecords: false }, 1], [{ chunkRecords: false }, 0]]) {
    const dir = scratch(t);
    const store = await Store.open(dir, options);
    const session = await store.create('f');
    await session.append('turn/start', '{"turn":1}');
    await session.close();
    const log = join(dir, 'sessions', 'f', 'log');
    const headers = readdirSync(log)
      .filter((name) => name.endsWith('.seg'))
      .map((name) => readFileSync(join(log, name)).readUInt16LE(58));
    assert.deepEqual(headers, [features], JSON.stringify(options));
    const reopened = await store.open('f');
    const texts = (await reopened.events()).map((e) => e.text);
    assert.ok(texts.some((text) => text.startsWith('{"type":"turn/start"')), JSON.stringify(texts));
    await reopened.close();
  }
});

test('compactLog rewrites a log written without chunk records, events unchanged', async (t) => {
  const dir = scratch(t);
  const old = await Store.open(dir, { chunkRecords: false, segmentBytes: 4096 });
  const session = await old.create('c');
  await session.append('turn/start', '{"turn":1}');
  await session.append('step/start', '{"turn":1,"step":1}');
  for (let i = 0; i < 200; i += 1) {
    await session.append('assistant/chunk', `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"w${i} "}}`);
  }
  await session.append('step/end', '{"turn":1,"step":1}');
  await session.append('turn/end', '{"turn":1,"reason":{"kind":"completed"}}');
  const before = (await session.events()).map((e) => e.text);
  await session.close();
  const store = await Store.open(dir);
  assert.ok((await store.compactLog('c')) > 0, 'bytes saved');
  const reopened = await store.open('c');
  assert.deepEqual((await reopened.events()).map((e) => e.text), before);
  await reopened.close();
  assert.equal(await store.compactLog('c'), 0, 'nothing left to rewrite');
});

test('compactRecords stores a log in compact records and compactLog rewrites an older one into them', async (t) => {
  const dir = scratch(t);
  // Version 1 records: the older log.
  const old = await Store.open(dir, { compactRecords: false, segmentBytes: 4096 });
  const session = await old.create('c');
  const fill = async (s, turn) => {
    await s.append('turn/start', `{"turn":${turn}}`);
    await s.append('step/start', `{"turn":${turn},"step":1}`);
    for (let i = 0; i < 100; i += 1) {
      await s.append('assistant/chunk', `{"turn":${turn},"step":1,"chunk":{"type":"text-delta","index":0,"text":"w${i} "}}`);
    }
    await s.append('step/end', `{"turn":${turn},"step":1}`);
    await s.append('turn/end', `{"turn":${turn},"reason":{"kind":"completed"}}`);
  };
  await fill(session, 1);
  await session.close();
  const store = await Store.open(dir, { compactRecords: true, segmentBytes: 4096 });
  const reopened = await store.open('c');
  await fill(reopened, 2);
  const before = (await reopened.events()).map((e) => e.text);
  await reopened.close();
  assert.ok((await store.compactLog('c')) > 0, 'bytes saved');
  const again = await store.open('c');
  assert.deepEqual((await again.events()).map((e) => e.text), before);
  await again.close();
  assert.equal(await store.compactLog('c'), 0, 'nothing left to rewrite');
});

test('compactLog compresses the older segments and the message pack, events and messages unchanged', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir, { segmentBytes: 4096 });
  const session = await store.create('z');
  for (let turn = 1; turn <= 40; turn += 1) {
    await session.append('turn/start', `{"turn":${turn}}`);
    await session.append(
      'user/message',
      `{"id":"u${turn}","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"turn ${turn} of the same question"}]}`,
      { surfaceOp: 'append' },
    );
    await session.append('turn/end', `{"turn":${turn},"reason":{"kind":"completed"}}`);
  }
  const events = (await session.events()).map((e) => e.text);
  const messages = (await session.messages()).toArray().map((m) => m.json);
  await session.close();
  await assert.rejects(
    store.compactLog('z', { compress: true, level: 23 }),
    (error) => error.code === 'INVALID_ARGUMENT',
  );
  // Argument errors reject (never throw synchronously), with INVALID_ARGUMENT.
  for (const options of [{ level: 3 }, { compress: 'yes' }, { compres: true }]) {
    await assert.rejects(store.compactLog('z', options), (error) => error.code === 'INVALID_ARGUMENT');
  }
  assert.ok((await store.compactLog('z', { compress: true, level: 19 })) > 0, 'bytes saved');
  const log = join(dir, 'sessions', 'z', 'log');
  const compressed = readdirSync(log)
    .filter((name) => name.endsWith('.seg'))
    .filter((name) => (readFileSync(join(log, name))[58] & 2) !== 0);
  assert.ok(compressed.length > 0, 'compressed segments on disk');
  const reopened = await store.open('z');
  assert.deepEqual((await reopened.events()).map((e) => e.text), events);
  assert.deepEqual((await reopened.messages()).toArray().map((m) => m.json), messages);
  await reopened.append('turn/start', '{"turn":41}');
  await reopened.close();
  assert.equal(await store.compactLog('z', { compress: true }), 0, 'nothing left to rewrite');
});

test('a closed session reopens with the same messages; list, fork, inspect, delete', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir, { durability: 'manual' });
  const session = await store.create('a');
  const expected = [...(await turn(session, 1)), ...(await turn(session, 2))];
  await session.flush();
  await session.close();

  const reopened = await store.open('a');
  assert.deepEqual(reopened.openReport, { closers: 0, checkpointUsed: true });
  assert.deepEqual((await reopened.messages()).toArray().map((m) => m.json), expected);

  const child = await store.fork('a', { at: 2, as: 'a-child' });
  assert.deepEqual((await child.messages()).toArray().map((m) => m.json), expected.slice(0, 1));
  await child.close();
  await reopened.close();

  const listing = await store.list();
  assert.deepEqual(listing.sessions.map((s) => s.id), ['a', 'a-child']);
  assert.ok(JSON.parse(listing.sessions[1].header).id === 'a-child');
  assert.deepEqual(listing.damaged, []);

  const view = await store.inspect('a');
  assert.equal((await view.messages()).length, 2);
  await rejects(view.append('host/note', '{}'), 'READ_ONLY');
  await view.close();

  await store.delete('a-child');
  assert.deepEqual((await store.list()).sessions.map((s) => s.id), ['a']);
  await rejects(store.open('a-child'), 'SESSION_NOT_FOUND');
});

test('a writer killed mid-turn is repaired when Node reopens it', async (t) => {
  const dir = scratch(t);
  const child = `
    const { Store } = require(${JSON.stringify(join(import.meta.dirname, '..', 'index.js'))});
    (async () => {
      const store = await Store.open(${JSON.stringify(dir)});
      const s = await store.create('killed');
      await s.append('turn/start', '{"turn":1}');
      await s.append('user/message', ${JSON.stringify(user('u1', 'run ls'))}, { surfaceOp: 'append' });
      await s.append('step/start', '{"turn":1,"step":1}');
      await s.append('assistant/message', '{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"tool-call","id":"c1","name":"ls","input":{}}]}}', { surfaceOp: 'append' });
      process.kill(process.pid, 'SIGKILL');
    })();
  `;
  const run = spawnSync(process.execPath, ['-e', child], { encoding: 'utf8' });
  assert.equal(run.signal, 'SIGKILL', run.stderr);
  const store = await Store.open(dir);
  const session = await store.open('killed');
  assert.ok(session.openReport.closers >= 3, JSON.stringify(session.openReport));
  const messages = await session.messages();
  const last = messages.at(-1).message;
  assert.equal(last.role, 'user');
  assert.equal(last.content[0].type, 'tool-result', 'a synthetic tool result closes the call');
  await session.close();
});

test('replacements: every replace with the seqs it shadowed, live, reopened and read-only', async (t) => {
  const store = await Store.open(scratch(t));
  const session = await store.create('r');
  await session.append('turn/start', '{"turn":1}');
  await session.append('user/message', user('u1', 'a'), { surfaceOp: 'append' });
  await session.append('user/message', user('u2', 'b'), { surfaceOp: 'append' });
  assert.deepEqual(await session.replacements(), []);
  await session.append('user/message', user('u3', 'a and b'), {
    surfaceOp: { op: 'replace', start: 1, end: 2 },
    sourceEventSeqs: [1, 2],
  });
  await session.append('user/message', user('u4', 'again'), {
    surfaceOp: { op: 'replace', start: 3, end: 3 },
    sourceEventSeqs: [3],
  });
  await session.append('turn/end', '{"turn":1,"reason":{"kind":"completed"}}');
  const expected = [
    { seq: 3, start: 1, end: 2, shadowed: [1, 2] },
    { seq: 4, start: 3, end: 3, shadowed: [3] },
  ];
  assert.deepEqual(await session.replacements(), expected);
  assert.deepEqual((await session.messages()).toArray().map((m) => m.seq), [4]);
  await session.close();
  const reopened = await store.open('r');
  assert.deepEqual(await reopened.replacements(), expected);
  await reopened.close();
  const view = await store.inspect('r');
  assert.deepEqual(await view.replacements(), expected);
  await view.close();
});
