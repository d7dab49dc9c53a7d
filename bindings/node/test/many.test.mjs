// Thousands of sessions open at once in one process: each holds its lock and its last
// segment (the writer's handle and its reader's), nothing per sealed segment, so the
// process stays far from its descriptor limit (Node raises the soft limit to the hard one
// at start).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';

const require = createRequire(import.meta.url);
const { Store } = require('../index.js');

// As many sessions as the process's descriptor limit allows at 3 each, up to 2000.
const limit = Number(spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim());
const SESSIONS = Math.max(100, Math.min(2000, Math.floor(((Number.isFinite(limit) ? limit : 1024) - 256) / 3)));

test(`${SESSIONS} sessions open at once`, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'surfacelog-node-many-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const store = await Store.open(dir, { durability: 'manual' });
  const ids = Array.from({ length: SESSIONS }, (_, i) => `s${i}`);
  const make = async (id) => {
    const session = await store.create(id);
    await session.append('user/message', `{"id":"${id}","role":"user","source":{"kind":"user"},"content":[]}`, {
      surfaceOp: 'append',
    });
    await session.close();
  };
  for (let i = 0; i < ids.length; i += 100) await Promise.all(ids.slice(i, i + 100).map(make));
  const before = readdirSync('/proc/self/fd').length;
  const open = await Promise.all(ids.map((id) => store.open(id)));
  const held = readdirSync('/proc/self/fd').length - before;
  t.diagnostic(`${held} descriptors for ${SESSIONS} open sessions`);
  assert.ok(held <= 3 * SESSIONS, `${held} descriptors for ${SESSIONS} open sessions`);
  const messages = await Promise.all(open.map((s) => s.messages()));
  assert.deepEqual(
    messages.map((m) => JSON.parse(m.at(0).json).id),
    ids,
  );
  await Promise.all(open.map((s) => s.close()));
  const after = readdirSync('/proc/self/fd').length - before;
  assert.ok(after <= 8, `${after} descriptors left after closing every session`);
});
