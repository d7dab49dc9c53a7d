// What both benchmarks share: medians, and a durable append measured interleaved with the
// two things a Node host would otherwise do, so that the three see the same disk state.
import { openSync, writeSync, fdatasyncSync, closeSync, ftruncateSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
export const ms = (x) => `${x.toFixed(3)} ms`;
export const us = (x) => `${(x * 1000).toFixed(1)} µs`;

/**
 * `samples` rounds of: `append(i)` (i from 1), then `line` written and fdatasynced to a file
 * that grows with each write (the JSONL design), then to preallocated length (the floor: no
 * size change to commit, as surfacelog's segments, SEG-6). Both files go in `dir`.
 * Resolves with the three lists of times in ms: `{ append, jsonl, floor }`.
 */
export async function interleaved(dir, line, samples, append) {
  const growing = openSync(join(dir, 'bare.jsonl'), 'a');
  const preallocated = openSync(join(dir, 'bare.prealloc'), 'w');
  ftruncateSync(preallocated, 64 << 20);
  const times = { append: [], jsonl: [], floor: [] };
  let at = 0;
  try {
    for (let i = 1; i <= samples; i += 1) {
      let t = performance.now();
      await append(i);
      times.append.push(performance.now() - t);
      t = performance.now();
      writeSync(growing, line);
      fdatasyncSync(growing);
      times.jsonl.push(performance.now() - t);
      t = performance.now();
      writeSync(preallocated, line, 0, line.length, at);
      fdatasyncSync(preallocated);
      times.floor.push(performance.now() - t);
      at += line.length;
    }
  } finally {
    closeSync(growing);
    closeSync(preallocated);
  }
  return times;
}
