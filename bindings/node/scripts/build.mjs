// Builds the native module from source with the host's Rust toolchain and copies it to
// ./surfacelog.node, where index.js loads it. `SURFACELOG_NODE_PROFILE=release` builds an
// optimized module (the benchmarks); the default is a debug build (the tests).
import { execFileSync } from 'node:child_process';
import { copyFileSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const release = process.env.SURFACELOG_NODE_PROFILE === 'release';
const cargo = process.env.CARGO ?? 'cargo';
const args = ['build', '-p', 'surfacelog-node', '--lib'];
if (release) args.push('--release');
execFileSync(cargo, args, { cwd: here, stdio: 'inherit' });
const metadata = JSON.parse(
  execFileSync(cargo, ['metadata', '--format-version', '1', '--no-deps'], {
    cwd: here,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  }),
);
const library = {
  linux: 'libsurfacelog_node.so',
  darwin: 'libsurfacelog_node.dylib',
  win32: 'surfacelog_node.dll',
}[process.platform];
if (!library) throw new Error(`surfacelog: no native build for platform ${process.platform}`);
const built = join(metadata.target_directory, release ? 'release' : 'debug', library);
// Copied, then renamed into place: a process that has the old module loaded keeps it.
const target = join(here, 'surfacelog.node');
copyFileSync(built, `${target}.tmp`);
renameSync(`${target}.tmp`, target);
