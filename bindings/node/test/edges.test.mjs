// Edges of the binding: arguments at the limits of their types, ids and
// texts that cross into Rust, reached through every class the package exports. Each would
// abort the process, coerce an argument or alter a text before its fix.
import { test } from 'node:test';
import { child, isCode, scratch as scratchDir } from './support.mjs';
import assert from 'node:assert/strict';
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const scratch = (t) => scratchDir(t, 'edges');
const { Store, VerbatimStore, SurfacelogError } = require('../index.js');

test('a lock wait or idle time too long for a Duration is the longest one, never an abort', async (t) => {
  const dir = scratch(t);
  const r = await child(`(async () => {
    const v = new VerbatimStore(${JSON.stringify(join(dir, 'v'))}, { lockWaitMs: 1e300 });
    console.log('open writers', await v.closeIdleWriters(1e300));
    await v.close();
  })().catch((e) => console.log('rejected', e.code, e.message));`);
  assert.equal(r.signal, null, r.out);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /^open writers 0$/m, r.out);
});

test('a follow of an id holding a NUL byte follows it, never aborts the process', async (t) => {
  const dir = scratch(t);
  const r = await child(`(async () => {
    const store = await Store.open(${JSON.stringify(dir)});
    const s = await store.create('a\\0b'); await s.append('host/note', '{"n":0}'); await s.close();
    for await (const e of store.follow('a\\0b')) { console.log('event', e.seq, e.text); break; }
    try { for await (const e of store.follow('x\\0')) console.log('event?', e.seq); }
    catch (e) { console.log('threw', e.code); }
  })();`);
  assert.equal(r.signal, null, r.out);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /^event 0 \{"type":"host\/note","seq":0,/m, r.out);
  assert.match(r.out, /^threw SESSION_NOT_FOUND$/m, r.out);
});

/** A verbatim store at a scratch root with session `a` of two events. */
async function verbatim(t) {
  const v = new VerbatimStore(join(scratch(t), 'v'));
  t.after(() => v.close());
  const event = (seq) => JSON.stringify({ type: 'host/note', seq, time: 1, data: {} });
  await v.create('a', JSON.stringify({ version: 0, id: 'a', createdAt: 1 }), [event(0), event(1)]);
  return { v, event };
}

test('VerbatimStore seqs are refused when not safe integers ≥ 0, never truncated', async (t) => {
  const { v, event } = await verbatim(t);
  for (const from of [NaN, Infinity, 0.5, 1.5, -0.5, -1, 2 ** 64, '1', null]) {
    await assert.rejects(v.load('a', from), isCode('INVALID_ARGUMENT'), `load from ${String(from)}`);
  }
  for (const firstSeq of [1.5, 2.5, NaN, -1, Infinity, '2']) {
    await assert.rejects(v.append('a', firstSeq, [event(2)]), isCode('INVALID_ARGUMENT'), `append at ${String(firstSeq)}`);
  }
  const read = await v.load('a');
  assert.equal(read.seqNext, 2, 'nothing appended');
  assert.equal(JSON.parse((await v.load('a', 1)).events).length, 1, 'a whole from still reads');
});

test('VerbatimStore ids and texts with a lone surrogate are refused, never altered or shared', async (t) => {
  const { v, event } = await verbatim(t);
  const header = (id) => JSON.stringify({ version: 0, id, createdAt: 1 });
  await assert.rejects(v.create('\ud800x', header('\ud800x'), []), isCode('INVALID_ID'));
  await assert.rejects(v.create('\udc00x', header('\udc00x'), []), isCode('INVALID_ID'));
  for (const read of [() => v.load('\udc00x'), () => v.revision('\udc00x'), () => v.append('\udc00x', 0, [event(0)]), () => v.repair('\udc00x', [])]) {
    await assert.rejects(read(), isCode('INVALID_ID'));
  }
  assert.throws(() => v.locate('\ud800x'), isCode('INVALID_ID'));
  assert.throws(() => v.locate(5), isCode('INVALID_ID'));
  // Raw texts (not JSON.stringify's, which escapes them) would be stored with U+FFFD.
  await assert.rejects(v.create('b', '{"version":0,"id":"b","createdAt":1,"z":"\ud800"}', []), isCode('INVALID_ARGUMENT'));
  await assert.rejects(v.create('b', header('b'), ['{"type":"x\udc00","seq":0,"time":1,"data":{}}']), isCode('INVALID_ARGUMENT'));
  await assert.rejects(v.append('a', 2, ['{"type":"host/note","seq":2,"time":1,"data":"\ud800"}']), isCode('INVALID_ARGUMENT'));
  await assert.rejects(v.repair('a', ['{"type":"host/note","seq":2,"time":1,"data":"\ud800"}']), isCode('INVALID_ARGUMENT'));
  assert.deepEqual(await v.listHeaders(), [header('a')], 'nothing else stored');
  assert.equal((await v.load('a')).seqNext, 2);
});

test('a follower meeting damage yields the events before it, then throws CORRUPT', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir);
  const s = await store.create('a');
  for (let i = 0; i < 10; i += 1) await s.append('host/note', `{"n":${i}}`);
  await s.close();
  // Seq 5's data changed in place: its record no longer checks out.
  const segment = join(dir, 'sessions', 'a', 'log', '00000000000000000000.seg');
  const at = readFileSync(segment).indexOf('{"n":5}');
  assert.ok(at > 0);
  const fd = openSync(segment, 'r+');
  writeSync(fd, Buffer.from('{"n":6}'), 0, 7, at);
  closeSync(fd);
  const seqs = [];
  await assert.rejects(async () => {
    for await (const e of store.follow('a')) seqs.push(e.seq);
  }, isCode('CORRUPT'));
  assert.deepEqual(seqs, [0, 1, 2, 3, 4], 'the events before the damage, each once');
});

test('every SurfacelogError has an outcome, and VerbatimStore construction refuses with a code', async (t) => {
  const root = scratch(t);
  for (const [root_, options] of [[5, undefined], [root, null], [root, 5], [root, { lockWaitMs: -1 }], [root, { segmentBytes: 'x' }]]) {
    assert.throws(() => new VerbatimStore(root_, options), isCode('INVALID_ARGUMENT'), `${String(root_)} ${String(options)}`);
  }
  // The DSH backend's own refusals (an id it never stores, a session its import refused).
  await import('../scripts/with-resolvers.mjs');
  const { default: Persistence } = await import('../dsh.mjs');
  const { Context } = await import('@deepseek-ai/cordis');
  const { default: SessionStore } = await import('@deepseek-ai/dsh-session');
  const ctx = new Context();
  await ctx.plugin(SessionStore);
  const fiber = await ctx.plugin(Persistence, { root });
  t.after(() => fiber.dispose());
  const backend = ctx.sessionPersistence;
  const error = await backend.hooks.appendBatch({ id: '\ud800' }, [{ seq: 0 }], false).catch((e) => e);
  assert.ok(error instanceof SurfacelogError, String(error));
  assert.equal(error.code, 'INVALID_ID');
  assert.equal(error.outcome, 'nothingWritten');
});

test('messages() of a held session never returns message-pack bytes changed since they were checked', async (t) => {
  const dir = scratch(t);
  // Version 1 records: a plain pack (MSP-1), whose text is changed in place below (a store
  // of compact records compresses it, MSP-8).
  const store = await Store.open(dir, { compactRecords: false });
  const s = await store.create('a');
  const message = (i) => ({ id: `u${i}`, role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: `hello u${i}` }] });
  await s.appendAll(Array.from({ length: 1100 }, (_, i) => ({ type: 'user/message', data: message(i), surfaceOp: 'append' })));
  await s.close();
  const held = await store.inspect('a');
  t.after(() => held.close());
  assert.equal((await held.messages()).at(4).json, JSON.stringify(message(4)), 'read from the pack, checked');
  // The pack changed in place under the held session (another process, a failing disk):
  // checked again as the next read begins (MSP-4), and read from the log instead.
  const pack = join(dir, 'sessions', 'a', 'messages');
  const at = readFileSync(pack).indexOf('hello u4"');
  assert.ok(at > 0);
  const fd = openSync(pack, 'r+');
  writeSync(fd, Buffer.from('hello X4"'), 0, 9, at);
  closeSync(fd);
  const again = await held.messages();
  assert.equal(again.at(4).json, JSON.stringify(message(4)));
  assert.equal(again.length, 1100);
});

test('a lent text made invalid in place after messages() checked it reads as CORRUPT, with a code', async (t) => {
  const dir = scratch(t);
  // A plain pack, as above.
  const store = await Store.open(dir, { compactRecords: false });
  const s = await store.create('a');
  const message = (i) => ({ id: `u${i}`, role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: `hello é${i}` }] });
  await s.appendAll(Array.from({ length: 1100 }, (_, i) => ({ type: 'user/message', data: message(i), surfaceOp: 'append' })));
  await s.close();
  const held = await store.inspect('a');
  t.after(() => held.close());
  const list = await held.messages();
  // The pack changed in place after the check, before the text is made: half of 'é'.
  const pack = join(dir, 'sessions', 'a', 'messages');
  const at = readFileSync(pack).indexOf(Buffer.from('hello é4"'));
  assert.ok(at > 0);
  const fd = openSync(pack, 'r+');
  writeSync(fd, Buffer.from([0xff]), 0, 1, at + 6);
  closeSync(fd);
  assert.throws(
    () => list.at(4).json,
    (e) => e instanceof SurfacelogError && e.code === 'CORRUPT',
  );
});
