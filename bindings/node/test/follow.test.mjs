// Followers: events as they are committed, in this process and in another Node process,
// and the refusal that ends a follower.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Store, SurfacelogError } = require('../index.js');

function scratch(t) {
  const dir = mkdtempSync(join(tmpdir(), 'surfacelog-node-follow-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a follower yields each event once, in order, as it is committed', async (t) => {
  const store = await Store.open(scratch(t));
  const writer = await store.create('f');
  await writer.append('host/note', '{"n":0}');
  const seen = [];
  const following = (async () => {
    for await (const event of store.follow('f', { from: 0 })) {
      seen.push([event.seq, event.event.data.n]);
      if (seen.length === 20) break;
    }
  })();
  for (let n = 1; n < 20; n += 1) {
    await writer.append('host/note', `{"n":${n}}`);
    if (n % 5 === 0) await sleep(20);
  }
  await following;
  assert.deepEqual(seen, Array.from({ length: 20 }, (_, n) => [n, n]));
  await writer.close();
});

test('a follower in another Node process sees this process commit', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir);
  const writer = await store.create('cross');
  const index = JSON.stringify(join(import.meta.dirname, '..', 'index.js'));
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const { Store } = require(${index});
       (async () => {
         const store = await Store.open(${JSON.stringify(dir)});
         console.log('ready');
         for await (const e of store.follow('cross', { from: 1 })) {
           console.log(JSON.stringify([e.seq, e.type]));
           if (e.seq === 10) break;
         }
       })().catch((e) => { console.error(e); process.exit(1); });`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let output = '';
  const ready = new Promise((resolve) => {
    child.stdout.on('data', (chunk) => {
      output += chunk;
      if (output.includes('ready')) resolve();
    });
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  await ready;
  for (let n = 0; n <= 10; n += 1) await writer.append('host/note', `{"n":${n}}`);
  assert.equal(await exited, 0);
  const lines = output.trim().split('\n').slice(1).map((l) => JSON.parse(l));
  assert.deepEqual(lines, Array.from({ length: 10 }, (_, i) => [i + 1, 'host/note']));
  await writer.close();
});

test('a follower of a missing session throws SESSION_NOT_FOUND', async (t) => {
  const store = await Store.open(scratch(t));
  await assert.rejects(
    (async () => {
      for await (const _ of store.follow('nobody')) assert.fail('no event');
    })(),
    (error) => error instanceof SurfacelogError && error.code === 'SESSION_NOT_FOUND',
  );
});

test('a process that drops a follower without return() still exits; one waiting on next() does not', async (t) => {
  const dir = scratch(t);
  const store = await Store.open(dir);
  const writer = await store.create('drop');
  await writer.append('host/note', '{"n":0}');
  const index = JSON.stringify(join(import.meta.dirname, '..', 'index.js'));
  const run = (code) => {
    const child = spawn(
      process.execPath,
      ['-e', `const { Store } = require(${index});\n(async () => {\n${code}\n})().catch((e) => { console.error(e); process.exit(1); });`],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let output = '';
    child.stdout.on('data', (chunk) => {
      output += chunk;
    });
    const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    return { child, exited, output: () => output };
  };
  // Takes one event, then drops the iterator: nothing keeps the process alive.
  const dropping = run(`
    const it = (await Store.open(${JSON.stringify(dir)})).follow('drop')[Symbol.asyncIterator]();
    console.log((await it.next()).value.seq);`);
  const code = await Promise.race([dropping.exited, sleep(10_000).then(() => 'still running')]);
  if (code === 'still running') dropping.child.kill();
  assert.equal(code, 0, 'the process exits once nobody waits on the follower');
  assert.equal(dropping.output().trim(), '0');
  // Waits on next() for an event appended a second later: it stays alive to get it.
  const waiting = run(`
    const it = (await Store.open(${JSON.stringify(dir)})).follow('drop', { from: 1 })[Symbol.asyncIterator]();
    console.log('ready');
    console.log((await it.next()).value.seq);
    await it.return();`);
  while (!waiting.output().includes('ready')) await sleep(20);
  await sleep(1000);
  await writer.append('host/note', '{"n":1}');
  assert.equal(await waiting.exited, 0);
  assert.deepEqual(waiting.output().trim().split('\n'), ['ready', '1']);
  await writer.close();
});
