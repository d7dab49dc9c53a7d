// How calls behave at their edges: a session's calls run in the order they were made,
// arguments are checked (never coerced, never thrown synchronously) and refused with the
// contract's codes, a follow loop ends when asked and when its session is deleted, texts
// cross losslessly or are refused, and a collected writer does no I/O on the event loop.
import { test } from 'node:test';
import { INDEX, child, isCode, scratch as scratchDir } from './support.mjs';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const scratch = (t) => scratchDir(t, 'calls');
const { Store, VerbatimStore } = require('../index.js');

test('a session runs its calls in call order: Promise.all appends, and close() after them', async (t) => {
  const store = await Store.open(scratch(t), { durability: 'manual' });
  for (let round = 0; round < 3; round += 1) {
    const s = await store.create(`s${round}`);
    const n = 100;
    const seqs = await Promise.all(Array.from({ length: n }, (_, i) => s.append('host/note', `{"i":${i}}`)));
    assert.deepEqual(seqs, Array.from({ length: n }, (_, i) => i), 'seqs in call order');
    const order = (await s.events()).map((e) => JSON.parse(e.text).data.i);
    assert.deepEqual(order, Array.from({ length: n }, (_, i) => i), 'the log in call order');
    // Appends made before close() are appended; calls after it are refused.
    const appends = Array.from({ length: 4 }, (_, i) => s.append('host/note', `{"j":${i}}`));
    const closed = s.close();
    const after = s.append('host/note', '{}');
    assert.deepEqual(await Promise.all(appends), [n, n + 1, n + 2, n + 3]);
    await closed;
    await assert.rejects(after, isCode('SESSION_CLOSED'));
  }
});

test('seq and count arguments are refused when not safe integers ≥ 0, never coerced', async (t) => {
  const store = await Store.open(scratch(t));
  const s = await store.create('a');
  for (let i = 0; i < 5; i += 1) await s.append('host/note', `{"n":${i}}`);
  assert.equal((await s.events({ limit: Infinity })).length, 5, 'Infinity: no bound');
  assert.equal((await s.events({ from: 3 })).length, 2);
  for (const options of [{ limit: NaN }, { from: 1.7 }, { from: -1 }, { from: null }, { from: '1' }, { limt: 1 }]) {
    await assert.rejects(s.events(options), isCode('INVALID_ARGUMENT'), JSON.stringify(options));
  }
  for (const seq of [NaN, 2.5, -1, Infinity, undefined]) {
    await assert.rejects(s.asOf(seq), isCode('INVALID_ARGUMENT'), String(seq));
  }
  for (const at of [Infinity, NaN, 2.9, -1]) {
    await assert.rejects(store.fork('a', { at, as: `f${at}` }), isCode('INVALID_ARGUMENT'), String(at));
  }
  // A follow's arguments are checked as it is called, as its options are.
  for (const [id, options, code] of [
    ['a', { from: Infinity }, 'INVALID_ARGUMENT'],
    ['a', { from: -1 }, 'INVALID_ARGUMENT'],
    ['a', { form: 1 }, 'INVALID_ARGUMENT'],
    [5, {}, 'INVALID_ID'],
    ['\ud800', {}, 'INVALID_ID'],
  ]) {
    assert.throws(() => store.follow(id, options), isCode(code), JSON.stringify([id, options]));
  }
  await s.close();
  assert.deepEqual((await store.list()).sessions.map((x) => x.id), ['a'], 'no fork was made');
});

test('options are checked: batchDelayMs and segmentBytes whole numbers, unknown keys refused', async (t) => {
  const dir = scratch(t);
  for (const options of [
    { durability: 'batch', batchDelayMs: -1 },
    { durability: 'batch', batchDelayMs: NaN },
    { durability: 'batch', batchDelayMs: 2 ** 32 + 5 },
    { segmentBytes: 4096.5 },
    { segmentBytes: -1 },
    { durabilty: 'manual' },
  ]) {
    await assert.rejects(Store.open(dir, options), isCode('INVALID_ARGUMENT'), JSON.stringify(options));
  }
  for (const segmentBytes of [4096.5, -1, Infinity]) {
    assert.throws(
      () => new VerbatimStore(join(dir, 'verbatim'), { segmentBytes }),
      isCode('INVALID_ARGUMENT'),
      `VerbatimStore segmentBytes ${segmentBytes}`,
    );
  }
  const store = await Store.open(dir);
  await assert.rejects(store.create('x', { sead: [] }), isCode('INVALID_ARGUMENT'));
  const s = await store.create('x');
  await assert.rejects(s.append('host/note', '{}', { surfaceop: 'append' }), isCode('INVALID_ARGUMENT'));
  assert.equal(await s.seqNext(), 0, 'nothing appended');
  await s.close();
});

test('argument errors reject with INVALID_ARGUMENT, never throw synchronously', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir);
  const s = await store.create('a');
  const calls = {
    'append(5, …)': () => s.append(5, '{}'),
    'append without data': () => s.append('host/note'),
    'append of a function': () => s.append('host/note', () => 1),
    'append of a BigInt': () => s.append('host/note', { n: 1n }),
    'appendAll(null)': () => s.appendAll(null),
    'appendAll without data': () => s.appendAll([{ type: 'host/note' }]),
    'appendAll of a BigInt': () => s.appendAll([{ type: 'host/note', data: { n: 1n } }]),
    'compactLog compress: "yes"': () => store.compactLog('a', { compress: 'yes' }),
    'Store.open durability: 5': () => Store.open(dir, { durability: 5 }),
  };
  for (const [name, run] of Object.entries(calls)) {
    let promise;
    assert.doesNotThrow(() => {
      promise = run();
    }, name);
    await assert.rejects(promise, isCode('INVALID_ARGUMENT'), name);
  }
  await assert.rejects(store.open(5), isCode('INVALID_ID'));
  assert.equal(await s.seqNext(), 0, 'nothing appended');
  await s.close();
});

test('a text or id with a lone surrogate is refused, never altered', async (t) => {
  const store = await Store.open(scratch(t));
  const s = await store.create('a');
  await assert.rejects(s.append('host/note', '{"s":"\ud800x"}'), isCode('INVALID_ARGUMENT'));
  await assert.rejects(s.append('host/n\ud800', '{}'), isCode('INVALID_ARGUMENT'));
  // As a value it is escaped (JSON.stringify writes \ud800), so it round-trips.
  const seq = await s.append('host/note', { s: '\ud800x' });
  assert.equal(JSON.parse((await s.events({ from: seq }))[0].text).data.s, '\ud800x');
  await assert.rejects(store.create('x\ud800'), isCode('INVALID_ID'));
  await s.close();
  assert.deepEqual((await store.list()).sessions.map((x) => x.id), ['a']);
});

test('a follow loop ends at return(), also while a next() waits, releasing its follower', async (t) => {
  const dir = scratch(t);
  const r = await child(`(async () => {
    const store = await Store.open(${JSON.stringify(dir)});
    const s = await store.create('b'); await s.append('host/note', '{"n":0}'); await s.close();
    const it = store.follow('b', { from: 1 })[Symbol.asyncIterator]();
    const pending = it.next();
    await new Promise((r) => setTimeout(r, 200));
    const done = await Promise.race([it.return().then(() => 'returned'),
      new Promise((r) => setTimeout(() => r('return() still pending after 3 s'), 3000).unref())]);
    console.log(done, JSON.stringify(await pending));
  })();`);
  assert.match(r.out, /returned \{"done":true\}/, r.out);
  assert.equal(r.signal, null, 'the child exits by itself: no follower keeps its loop alive');
  assert.equal(r.code, 0, r.out);
});

test('a follow loop throws SESSION_NOT_FOUND once its session is deleted', async (t) => {
  const store = await Store.open(scratch(t));
  const s = await store.create('a');
  await s.append('host/note', '{"n":0}');
  await s.close();
  const it = store.follow('a', { from: 1 })[Symbol.asyncIterator]();
  const next = it.next().then(
    (r) => `event ${JSON.stringify(r)}`,
    (e) => `threw ${e.code}`,
  );
  await new Promise((r) => setTimeout(r, 200));
  await store.delete('a');
  const timeout = new Promise((r) => setTimeout(() => r('no end after 5 s'), 5000).unref());
  assert.equal(await Promise.race([next, timeout]), 'threw SESSION_NOT_FOUND');
  assert.deepEqual(await it.next(), { done: true, value: undefined });
});

test('a writer collected without close() does no disk I/O on the event loop thread', {
  skip: spawnSync('strace', ['-V']).status !== 0 && 'needs strace',
}, async (t) => {
  const dir = scratch(t);
  const script = join(dir, 'gc.cjs');
  const log = join(dir, 'strace.txt');
  writeFileSync(script, `const { Store } = require(${INDEX});
  (async () => {
    const store = await Store.open(${JSON.stringify(join(dir, 'store'))}, { durability: 'manual' });
    let s = await store.create('a');
    await s.appendAll(Array.from({ length: 100 }, (_, i) => ({ type: 'host/note', data: '{"n":' + i + '}' })));
    s = null;
    await new Promise((r) => setTimeout(r, 200));
    process.stderr.write('MAIN ' + process.pid + '\\n');
    for (let i = 0; i < 3; i++) { global.gc(); await new Promise((r) => setImmediate(r)); }
    process.stderr.write('GC DONE\\n');
    await new Promise((r) => setTimeout(r, 500));
  })();`);
  const r = spawnSync('strace', ['-f', '-e', 'trace=fsync,fdatasync,pwrite64', '-o', log, process.execPath, '--expose-gc', script], {
    encoding: 'utf8',
  });
  const main = /MAIN (\d+)/.exec(r.stderr)?.[1];
  assert.ok(main, r.stderr);
  const lines = readFileSync(log, 'utf8').split('\n');
  const onLoop = lines.filter((l) => l.startsWith(`${main} `) && /fsync|fdatasync|pwrite64/.test(l));
  assert.deepEqual(onLoop.filter((l) => !l.includes('"MAIN') && !l.includes('GC DONE')), [], 'disk I/O on the event loop thread');
  // The collected writer was closed all the same, on a thread of its own.
  const store = await Store.open(join(dir, 'store'));
  const s = await store.inspect('a');
  assert.equal(await s.seqNext(), 100);
  await s.close();
});

/** `p`, or a rejection after `ms`. */
const within = (p, ms, what) =>
  Promise.race([p, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: not settled in ${ms} ms`)), ms).unref())]);

test('next() calls made while one waits each get the next event, in order; return() ends them all', async (t) => {
  const store = await Store.open(scratch(t));
  const s = await store.create('a');
  await s.append('host/note', '{"n":0}');
  const it = store.follow('a')[Symbol.asyncIterator]();
  assert.equal((await within(it.next(), 3000, 'first next()')).value.seq, 0);
  for (let i = 1; i <= 3; i += 1) await s.append('host/note', `{"n":${i}}`);
  await new Promise((r) => setTimeout(r, 300));
  const calls = [it.next(), it.next(), it.next(), it.next()];
  const seqs = [];
  for (const [i, call] of calls.slice(0, 3).entries()) seqs.push((await within(call, 3000, `next() ${i}`)).value.seq);
  assert.deepEqual(seqs, [1, 2, 3], 'events 1, 2, 3 in order, none lost');
  await s.append('host/note', '{"n":4}');
  assert.equal((await within(calls[3], 3000, 'next() 3')).value.seq, 4);
  // Two calls waiting when return() comes: both end.
  const waiting = [it.next(), it.next()];
  await new Promise((r) => setTimeout(r, 200));
  await it.return();
  const ended = await within(Promise.all(waiting), 3000, 'the waiting next() calls');
  assert.deepEqual(ended, [{ done: true, value: undefined }, { done: true, value: undefined }]);
  await s.close();
});
