// index.d.ts is written by hand: every class and method it declares exists in index.js
// with that name, and every error code it lists is one the engine or the binding uses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const exported = require('../index.js');
const here = join(import.meta.dirname, '..');
const declarations = readFileSync(join(here, 'index.d.ts'), 'utf8');

/** The declared members of `export class Name { ... }`: methods and readonly fields. */
function declaredMembers(name) {
  const start = declarations.indexOf(`export class ${name} `);
  assert.ok(start >= 0, `class ${name} is declared`);
  const body = declarations.slice(start, declarations.indexOf('\n}', start));
  const members = new Set();
  for (const line of body.split('\n').slice(1)) {
    const m = /^  (?:static |readonly )?([a-zA-Z]+)\??[(:]/.exec(line);
    if (m && m[1] !== 'constructor') members.add(m[1]);
  }
  return members;
}

test('every declared class is exported, with every declared member', () => {
  const classes = [...declarations.matchAll(/^export class (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual(classes.sort(), Object.keys(exported).sort());
  for (const name of ['Store', 'Session', 'VerbatimStore', 'MessageList']) {
    for (const member of declaredMembers(name)) {
      const onPrototype = member in exported[name].prototype;
      const isStatic = typeof exported[name][member] === 'function';
      assert.ok(onPrototype || isStatic, `${name}.${member} exists`);
    }
    const declared = declaredMembers(name);
    for (const member of Object.getOwnPropertyNames(exported[name].prototype)) {
      if (member !== 'constructor') assert.ok(declared.has(member), `${name}.${member} is declared`);
    }
  }
});

test('every declared error code is one the engine or the binding uses', () => {
  const engine = readFileSync(join(here, '..', '..', 'src', 'error.rs'), 'utf8');
  const binding = readFileSync(join(here, 'src', 'lib.rs'), 'utf8');
  const used = new Set([
    ...[...engine.matchAll(/=> "([A-Z_]+)"/g)].map((m) => m[1]),
    ...[...binding.matchAll(/"([A-Z_]{5,})"/g)].map((m) => m[1]),
  ]);
  const declared = [...declarations.matchAll(/^  \| '([A-Z_]+)'/gm)].map((m) => m[1]);
  for (const code of declared) assert.ok(used.has(code), `${code} is used`);
  for (const code of used) {
    if (!code.startsWith('INV_') && /^[A-Z]+(_[A-Z]+)*$/.test(code) && code.length > 3 && code !== 'GENERIC') {
      assert.ok(declared.includes(code) || !engine.includes(`=> "${code}"`), `${code} is declared`);
    }
  }
});
