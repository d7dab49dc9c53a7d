// What the test files share (not a test file itself: it holds no test).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { SurfacelogError } = require('../index.js');
/** The package's `index.js` as a JS string literal, for code run in a child process. */
export const INDEX = JSON.stringify(join(import.meta.dirname, '..', 'index.js'));

/** A scratch directory named after `what`, removed when the test `t` ends. */
export function scratch(t, what) {
  const dir = mkdtempSync(join(tmpdir(), `surfacelog-${what}-`));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs `code` (CommonJS, `Store` and `VerbatimStore` in scope) in a child Node, killed
 * after `ms`: a call that aborts the process fails its test instead of the whole run.
 * Resolves with its exit code, signal and output (stdout and stderr). */
export function child(code, ms = 8000) {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['-e', `const { Store, VerbatimStore } = require(${INDEX});\n${code}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (c) => (out += c));
    p.stderr.on('data', (c) => (out += c));
    const timer = setTimeout(() => p.kill('SIGKILL'), ms);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

/** An assertion for `assert.rejects`/`assert.throws`: a SurfacelogError with `code`. */
export const isCode = (code) => (error) => {
  assert.ok(error instanceof SurfacelogError, `a SurfacelogError, got ${error?.constructor?.name}: ${error?.message}`);
  assert.equal(error.code, code, error.message);
  return true;
};
