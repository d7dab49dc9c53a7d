// npm run bench:dsh: the DSH persistence backend (`dsh.mjs`) through DSH's real coordinator,
// in one run on one machine; medians and ratios.
//
// 1. a durable single-event `append` through the service, interleaved with a bare
//    write+fdatasync into preallocated length (the floor) and with the JSONL design (a line
//    appended and fdatasynced);
// 2. a session of SURFACELOG_BENCH_DSH_EVENTS events (default 200,000; one-turn shapes of six
//    events, appended in batches of 600): `readFrom` of its last 50 events, the `loadStored`
//    hook alone (the native read and JSON.parse), and a cold `load` through the coordinator
//    (a new backend instance each time: DSH validates every event and builds its Session).
//
// Measured 2026-12-04 (2 cores, ext4, Node 20; six runs, the last three of the final code;
// medians): append
// 218–277 µs, 1.61–1.66x the bare floor and 1.09–1.13x the JSONL design; 67k–85k events/s
// in batches of 600 (the coordinator snapshots and stringifies each batch); the last 50 of
// 200,004 events 0.40–0.52 ms; loadStored 310–362 ms; a cold load through the coordinator
// 642–721 ms.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Context } from '@deepseek-ai/cordis';
import SessionStore, { SESSION_FORMAT_VERSION, SessionId } from '@deepseek-ai/dsh-session';
import { createMessage } from '@deepseek-ai/dsh-llm';
import SurfacelogSessionPersistence from '../dsh.mjs';
import '../scripts/with-resolvers.mjs';
import { interleaved, median, ms, us } from './interleaved.mjs';

const EVENTS = Number(process.env.SURFACELOG_BENCH_DSH_EVENTS ?? 200_000);
const SAMPLES = Number(process.env.SURFACELOG_BENCH_SYNC ?? 1000);
async function mount(root) {
  const ctx = new Context();
  await ctx.plugin(SessionStore);
  const fiber = await ctx.plugin(SurfacelogSessionPersistence, { root });
  return { persistence: ctx.sessionPersistence, dispose: () => fiber.dispose() };
}

function turn(at, n) {
  const user = createMessage({ role: 'user', content: [{ type: 'text', text: `question ${n} `.repeat(8) }], source: { kind: 'user' } });
  const assistant = createMessage({
    role: 'assistant',
    content: [{ type: 'text', text: `answer ${n} `.repeat(20) }],
    source: { kind: 'model', provider: 'mock', model: 'mock' },
  });
  return [
    { type: 'turn/start', seq: at, time: 1_700_000_000_000 + at, data: { turn: n } },
    { type: 'user/message', seq: at + 1, time: 1_700_000_000_001 + at, data: user, surfaceOp: 'append' },
    { type: 'step/start', seq: at + 2, time: 1_700_000_000_002 + at, data: { turn: n, step: 1 } },
    { type: 'assistant/message', seq: at + 3, time: 1_700_000_000_003 + at, data: { turn: n, step: 1, message: assistant }, surfaceOp: 'append' },
    { type: 'step/end', seq: at + 4, time: 1_700_000_000_004 + at, data: { turn: n, step: 1 } },
    { type: 'turn/end', seq: at + 5, time: 1_700_000_000_005 + at, data: { turn: n, reason: { kind: 'completed' } } },
  ];
}

const scratch = mkdtempSync(join(tmpdir(), 'surfacelog-dsh-bench-'));
try {
  {
    const { persistence, dispose } = await mount(join(scratch, 'sync'));
    const id = SessionId('sync');
    await persistence.create({ version: SESSION_FORMAT_VERSION, id, createdAt: 1 });
    const note = { note: 'x'.repeat(150) };
    await persistence.append(id, [{ type: 'x/note', seq: 0, time: 1, data: note, ignorable: true }]);
    const line = Buffer.from(`${JSON.stringify({ type: 'x/note', seq: 0, time: 1, data: note, ignorable: true })}\n`);
    const { append: backend, jsonl, floor } = await interleaved(scratch, line, SAMPLES, (i) =>
      persistence.append(id, [{ type: 'x/note', seq: i, time: 1, data: note, ignorable: true }]),
    );
    await dispose();
    console.log(
      `durable append through the DSH service, p50 of ${SAMPLES} interleaved: ${us(median(backend))}; ` +
        `bare write+fdatasync into preallocated length ${us(median(floor))} (${(median(backend) / median(floor)).toFixed(2)}x); ` +
        `JSONL line appended+fdatasynced ${us(median(jsonl))} (${(median(backend) / median(jsonl)).toFixed(2)}x)`,
    );
  }
  {
    const root = join(scratch, 'big');
    const id = SessionId('big');
    let { persistence, dispose } = await mount(root);
    await persistence.create({ version: SESSION_FORMAT_VERSION, id, createdAt: 1 });
    const started = performance.now();
    let seq = 0;
    let n = 1;
    while (seq < EVENTS) {
      const batch = [];
      while (batch.length < 600 && seq < EVENTS) {
        batch.push(...turn(seq, n));
        seq += 6;
        n += 1;
      }
      await persistence.append(id, batch);
    }
    const appendMs = performance.now() - started;
    console.log(`${seq} events appended in batches of 600: ${((seq / appendMs) * 1000).toFixed(0)} events/s`);
    const tails = [];
    for (let i = 0; i < 21; i += 1) {
      const t = performance.now();
      const suffix = await persistence.readFrom(id, seq - 50);
      tails.push(performance.now() - t);
      if (suffix.events.length !== 50) throw new Error('readFrom returned the wrong suffix');
    }
    console.log(`readFrom of the last 50 events, median of 21: ${ms(median(tails))}`);
    const hooks = [];
    for (let i = 0; i < 5; i += 1) {
      const t = performance.now();
      const prefix = await persistence.hooks.loadStored(id);
      hooks.push(performance.now() - t);
      if (prefix.events.length !== seq) throw new Error('loadStored returned the wrong prefix');
    }
    console.log(`loadStored hook (native read + JSON.parse of ${seq} events), median of 5: ${ms(median(hooks))}`);
    await dispose();
    const loads = [];
    for (let i = 0; i < 5; i += 1) {
      ({ persistence, dispose } = await mount(root));
      const t = performance.now();
      const view = await persistence.load(id);
      loads.push(performance.now() - t);
      if (view.events.length !== seq) throw new Error('load returned the wrong log');
      await dispose();
    }
    console.log(`cold load through the coordinator (DSH validation included), median of 5: ${ms(median(loads))}`);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
