// messages() lends the texts of the session's message pack to JS without copying them
// (message-pack.md; src/lib.rs) and copies the others: the messages are exactly those the
// surface derives, whichever bytes they come from, and stay readable after the session is
// closed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { setImmediate as tick } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Store, MessageList, SurfacelogError } = require('../index.js');
const native = require('../surfacelog.node');

/** A scratch directory removed when the test ends. */
function scratch(t) {
  const dir = mkdtempSync(join(tmpdir(), 'surfacelog-node-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A user message of `i` whose text has characters of 1 to 4 bytes in UTF-8, so that a
 * wrong byte offset shows. */
const user = (i) =>
  `{"id":"u${i}","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"q${i} é € 𝄞 ${'x'.repeat(i % 7)}"}]}`;

/** The seqs and exact texts of `messages`. */
const texts = (messages) => Array.from(messages, (m) => [m.seq, m.json]);

// More messages than the store's default `pack_min` (1,024 nodes, MSP-5), so that closing
// writes a pack.
const PACKED = 1_100;

/** A store whose session `s` holds `PACKED` user messages, closed: its pack written
 * (compressed, MSP-8, in a store of compact records, the default; plain with
 * `{ compactRecords: false }`). */
async function packedStore(t, options = {}) {
  const dir = scratch(t);
  const store = await Store.open(dir, { durability: 'manual', ...options });
  const session = await store.create('s');
  const events = [];
  for (let i = 0; i < PACKED; i += 1) events.push({ type: 'user/message', data: user(i), surfaceOp: 'append' });
  await session.appendAll(events);
  await session.close();
  return { dir, store };
}

/** What the native module hands `index.js` for the messages of session `s` of `dir`. */
async function nativeMessages(dir) {
  const view = await (await native.openStore(dir, {})).inspect('s');
  const packed = await view.messages();
  await view.close();
  return packed;
}

test('messages() are the surface messages, lent from the pack or copied from the log', async (t) => {
  const { dir, store } = await packedStore(t);

  const session = await store.open('s');
  // After the pack: messages it does not hold, and a replacement shadowing packed ones.
  await session.append('user/message', user(5000), { surfaceOp: 'append' });
  const summary = await session.append('user/message', user(5001), {
    surfaceOp: { op: 'replace', start: 10, end: 19 },
    sourceEventSeqs: Array.from({ length: 10 }, (_, i) => 10 + i),
  });
  await session.append('user/message', user(5002), { surfaceOp: 'append' });
  await session.flush();
  const last = (await session.seqNext()) - 1;

  const messages = await session.messages();
  const again = await session.messages(); // two lendings of the same bytes alive at once
  // The model: the surface as of its last event, derived from the log records alone.
  const expected = texts(await session.asOf(last));
  assert.equal(expected.length, PACKED - 10 + 3);
  assert.deepEqual(texts(messages), expected);
  assert.deepEqual(texts(again), expected);
  assert.equal(messages.at(10).seq, summary);
  assert.equal(messages.at(10).json, user(5001));
  assert.deepEqual(messages.at(9).message.content[0].text, `q9 é € 𝄞 ${'x'.repeat(2)}`);

  // The native crossing did lend the pack: most texts in `lent`, the later ones copied.
  const packed = await nativeMessages(dir);
  assert.ok(packed.lent !== undefined && !(packed.lent instanceof Buffer), 'lent behind a handle');
  assert.ok(packed.lentLen > 0);
  const block = native.lentTexts(packed.lent, packed.starts, packed.ends, 0, packed.seqs.length + 5);
  assert.equal(block.length, packed.seqs.length);
  assert.deepEqual(
    Array.from(block, (json) => json ?? null),
    expected.map(([seq, json]) => (seq < PACKED ? json : null)),
    'every lent text, nothing for the copied ones',
  );
  const wide = native.lentTexts(packed.lent, Float64Array.from(packed.starts), Float64Array.from(packed.ends), 0, 1e9);
  assert.deepEqual(Array.from(wide), Array.from(block), 'spans as 64-bit floats (a session past 2^32) read the same');
  const some = native.lentTexts(packed.lent, packed.starts, packed.ends, 10, 12);
  assert.deepEqual(Array.from(some), [undefined, expected[11][1]], 'the replacement (copied), then a lent text');
  // A span it never gave is refused, never read: past the end, inside a character, not whole.
  for (const [start, end] of [
    [packed.lentLen - 1, packed.lentLen + 1],
    [packed.starts[9] + Buffer.byteLength(user(9).slice(0, user(9).indexOf('é'))) + 1, packed.ends[9]],
    [0.5, 3],
    [-1, 3],
  ]) {
    const starts = new Float64Array([start]);
    const ends = new Float64Array([end]);
    assert.throws(() => native.lentTexts(packed.lent, starts, ends, 0, 1), /INVALID_ARGUMENT/, `${start}..${end}`);
  }
  const inLent = [...packed.ends].filter((end) => end <= packed.lentLen).length;
  assert.equal(inLent, PACKED - 10);
  const copied = expected.filter(([seq]) => seq >= PACKED).map(([, json]) => json);
  assert.deepEqual(copied, [user(5001), user(5000), user(5002)]); // in surface order
  assert.equal(packed.text.toString('utf8'), copied.join(''));

  // The texts outlive the session that lent them.
  const unread = await session.messages();
  await session.close();
  assert.deepEqual(texts(unread), expected);
});

test('a copied text ahead of the lent ones reads right', async (t) => {
  // A replacement of the first messages puts a text from the log before every lent one:
  // its span is taken before the lent bytes' length is known, and moved past them after.
  const { dir, store } = await packedStore(t);
  const session = await store.open('s');
  const summary = await session.append('user/message', user(7000), {
    surfaceOp: { op: 'replace', start: 0, end: 4 },
    sourceEventSeqs: [0, 1, 2, 3, 4],
  });
  await session.flush();
  const expected = texts(await session.asOf(summary));
  assert.deepEqual(expected[0], [summary, user(7000)]);
  assert.deepEqual(texts(await session.messages()), expected);
  await session.close();

  const packed = await nativeMessages(dir);
  assert.ok(packed.lent !== undefined && packed.lentLen > 0);
  assert.equal(packed.starts[0], packed.lentLen, 'the copied text starts past the lent bytes');
  assert.equal(packed.ends[0], packed.lentLen + Buffer.byteLength(user(7000)));
  assert.ok(packed.starts[1] < packed.lentLen, 'the next is lent');
  const view = await store.inspect('s');
  assert.deepEqual(texts(await view.messages()), expected);
  await view.close();
});

test('a session without a pack lends nothing and copies every message', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir, { durability: 'manual' });
  const session = await store.create('s');
  for (let i = 0; i < 3; i += 1) await session.append('user/message', user(i), { surfaceOp: 'append' });
  await session.close();

  const packed = await nativeMessages(dir);
  assert.equal(packed.lent, undefined);
  assert.equal(packed.lentLen, 0);
  const lengths = [0, 1, 2].map((i) => Buffer.byteLength(user(i)));
  assert.deepEqual([...packed.starts], [0, lengths[0], lengths[0] + lengths[1]]);
  const reopened = await store.inspect('s');
  assert.deepEqual(texts(await reopened.messages()), [0, 1, 2].map((i) => [i, user(i)]));
  await reopened.close();
});

test('a pack none of whose texts is on the surface lends nothing', async (t) => {
  const { dir, store } = await packedStore(t);
  const session = await store.open('s');
  await session.append('user/message', user(9000), {
    surfaceOp: { op: 'replace', start: 0, end: PACKED - 1 },
    sourceEventSeqs: Array.from({ length: PACKED }, (_, i) => i),
  });
  await session.flush();
  assert.deepEqual(texts(await session.messages()), [[PACKED, user(9000)]]);
  await session.close();

  const packed = await nativeMessages(dir);
  assert.equal(packed.lent, undefined);
  // Nothing lent, so nothing to tell lent spans from: the copied texts' offsets start at 0.
  assert.equal(packed.lentLen, 0);
  assert.deepEqual([...packed.starts, ...packed.ends], [0, Buffer.byteLength(user(9000))]);
  assert.equal(packed.text.toString('utf8'), user(9000));
});

test('the lent texts stay mapped while a message holds them, and no longer', async (t) => {
  // A plain pack, mapped under its own name (a compressed one is lent from an unlinked
  // decompressed copy).
  const { dir, store } = await packedStore(t, { compactRecords: false });
  // The process's maps of a session's message pack (`<session>/messages`).
  const packMaps = () =>
    readFileSync('/proc/self/maps', 'utf8')
      .split('\n')
      .filter((line) => line.includes(dir) && line.endsWith('/messages')).length;
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  /** Collects until `done()` (finalizers run after a collection), at most 50 rounds. */
  const collect = async (done) => {
    for (let round = 0; round < 50 && !done(); round += 1) {
      gc();
      await tick();
    }
  };

  const session = await store.open('s');
  let messages = await session.messages();
  await session.close();
  for (let round = 0; round < 5; round += 1) {
    gc();
    await tick();
  }
  assert.ok(packMaps() > 0, 'the messages hold the map after the session closed');
  assert.equal(messages.at(PACKED - 1).json, user(PACKED - 1));
  messages = undefined;
  await collect(() => packMaps() === 0);
  assert.equal(packMaps(), 0, 'released once no message holds it');
});

test('a compressed pack lends its decompressed copy', async (t) => {
  // Compressed by compaction in a store of version 1 records, whose pack is plain...
  await lendsItsDecompressedCopy(t, { compactRecords: false });
  // ...and as it is written in a store of compact records (the default).
  await lendsItsDecompressedCopy(t, {});
});

async function lendsItsDecompressedCopy(t, options) {
  const { dir, store } = await packedStore(t, options);
  const before = await store.inspect('s');
  const expected = texts(await before.messages());
  await before.close();
  if (options.compactRecords === false) {
    const saved = await store.compactLog('s', { compress: true, level: 1 });
    assert.ok(saved > 0);
  }
  const [sessionDir] = readdirSync(join(dir, 'sessions'));
  const pack = readFileSync(join(dir, 'sessions', sessionDir, 'messages'));
  assert.equal(pack.readUInt32LE(8), 2, 'the pack on disk is compressed (MSP-8)');
  const packed = await nativeMessages(dir);
  assert.ok(packed.lent !== undefined && packed.lentLen > 0, 'lent from the decompressed pack');
  assert.equal(packed.text.length, 0, 'nothing copied');
  const session = await store.open('s');
  const messages = await session.messages();
  await session.close();
  assert.equal(messages.length, PACKED);
  assert.deepEqual(texts(messages), expected);
}

test('a MessageList reads as an array of the surface messages does, making each message once', async (t) => {
  const { store } = await packedStore(t);
  const session = await store.open('s');
  // After the pack: a copied message, and a replacement shadowing packed ones.
  await session.append('user/message', user(5000), { surfaceOp: 'append' });
  await session.append('user/message', user(5001), {
    surfaceOp: { op: 'replace', start: 3, end: 7 },
    sourceEventSeqs: [3, 4, 5, 6, 7],
  });
  const list = await session.messages();
  const asOf = await session.asOf((await session.seqNext()) - 1);
  await session.close();
  assert.ok(list instanceof MessageList && asOf instanceof MessageList);

  // The model: a plain array of the same messages, built from `asOf` (every text copied).
  const model = Array.from(asOf, (m) => ({ seq: m.seq, json: m.json }));
  assert.equal(model.length, PACKED - 5 + 2);
  assert.equal(list.length, model.length);
  const n = model.length;
  const indices = [0, 1, -1, -n, n - 1, n, -n - 1, n + 5, -n - 5, 2 ** 53 - 1, -(2 ** 53) + 1];
  for (let k = 0; k < 200; k += 1) indices.push(Math.floor(Math.random() * (2 * n + 10)) - n - 5);
  for (const i of indices) {
    const got = list.at(i);
    const want = model.at(i);
    assert.deepEqual(got && { seq: got.seq, json: got.json }, want, `at(${i})`);
    if (got !== undefined) assert.equal(list.at(i), got, `at(${i}) is the same object twice`);
  }
  for (const bad of [1.5, NaN, Infinity, '1', undefined, null, 1n, {}]) {
    assert.throws(
      () => list.at(bad),
      (e) => e instanceof SurfacelogError && e.code === 'INVALID_ARGUMENT',
      `at(${String(bad)})`,
    );
  }
  // Iteration, toArray and JSON give the same messages, the same objects, in order.
  const iterated = [...list];
  const array = list.toArray();
  assert.equal(iterated.length, n);
  assert.ok(array.every((m, i) => m === iterated[i] && m === list.at(i)));
  assert.deepEqual(JSON.parse(JSON.stringify(list)), model);
  assert.deepEqual(JSON.parse(JSON.stringify(asOf)), model);
  // Read-only.
  assert.throws(() => {
    list.length = 0;
  }, TypeError);
  assert.equal(list.length, n);
});
