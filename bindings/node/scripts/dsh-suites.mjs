// Runs DSH's own reusable persistence suites (`runPersistenceContract`, `runCoordinatorContract`;
// `format-spec/upstream/dsh-persistence.md` §2.2) against `dsh.mjs`. They are not published on
// npm, so they are read from a checkout of the DSH repository at the pinned revision
// (611615650f), given as the first argument or `DSH_REPO`, and run with vitest 3 (not a
// dependency: `npm install --no-save vitest@3` first). Nothing of DSH's is copied into this
// repository: the suites are read from the checkout into a scratch directory that is
// removed afterwards. The node:test suite (`test/dsh.test.mjs`) is this package's own.
//
//   npm install --no-save vitest@3 && node scripts/dsh-suites.mjs /path/to/deepseek-harness
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const repo = process.argv[2] ?? process.env.DSH_REPO;
if (!repo) {
  console.error('usage: node scripts/dsh-suites.mjs <deepseek-harness checkout> (or DSH_REPO)');
  process.exit(2);
}
const require = createRequire(import.meta.url);
let vitest;
try {
  vitest = join(dirname(require.resolve('vitest/package.json')), 'vitest.mjs');
} catch {
  console.error('vitest is not installed: npm install --no-save vitest@3');
  process.exit(2);
}

// Inside the package, so that the suites resolve the same DSH module instances as dsh.mjs.
const scratch = mkdtempSync(join(here, '.dsh-suites-'));
try {
  const suites = join(repo, 'packages/session/session-persistence/tests');
  for (const name of ['contract.ts', 'coordinator-contract.ts']) {
    copyFileSync(join(suites, name), join(scratch, name));
  }
  writeFileSync(join(scratch, 'package.json'), '{"type":"module","private":true}\n');
  writeFileSync(
    join(scratch, 'surfacelog.spec.ts'),
    `// The fixtures of §2.2 for surfacelog: a fresh root per backend, a shared root per
// coordinator fixture, and corruptTail writing a never-committed record after the last one.
import { mkdtemp, open, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createRequire } from 'node:module'
import { Context } from '@deepseek-ai/cordis'
import SessionStore from '@deepseek-ai/dsh-session'
import Backend from '../dsh.mjs'
import { runPersistenceContract } from './contract.ts'
import { runCoordinatorContract } from './coordinator-contract.ts'
import '../scripts/with-resolvers.mjs'

const { VerbatimStore } = createRequire(import.meta.url)('../index.js')

async function corruptTail(root: string, id: string) {
  const log = join(new VerbatimStore(root).locate(id), 'log')
  const segments = (await readdir(log)).filter(n => n.endsWith('.seg')).sort()
  const path = join(log, segments[segments.length - 1])
  const bytes = await readFile(path)
  let end = bytes.length
  while (end > 64 && bytes[end - 1] === 0) end -= 1
  const handle = await open(path, 'r+')
  await handle.write(Buffer.from([200, 0, 0, 0, 0xab, 0xcd, 0xef, 1, 9, 9]), 0, 10, Math.ceil(end / 8) * 8)
  await handle.sync()
  await handle.close()
}

runPersistenceContract('surfacelog', async () => {
  const root = await mkdtemp(join(tmpdir(), 'surfacelog-dsh-suite-'))
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(Backend as any, { root })
  return {
    persistence: (ctx as any).sessionPersistence,
    dispose: async () => { await fiber.dispose(); await rm(root, { recursive: true, force: true }) },
  }
})

runCoordinatorContract('surfacelog', async () => {
  const root = await mkdtemp(join(tmpdir(), 'surfacelog-dsh-suite-'))
  return {
    mount: async (ctx) => await ctx.plugin(Backend as any, { root }),
    corruptTail: async (id) => { await corruptTail(root, String(id)) },
    cleanup: async () => { await rm(root, { recursive: true, force: true }) },
  }
})
`,
  );
  execFileSync(process.execPath, [vitest, 'run', '--root', scratch], { stdio: 'inherit' });
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
