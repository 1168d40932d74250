import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { BIN, REPO_ROOT } from '../../helpers/paths.js';

function cli(...args: string[]) {
  // No Redis URL or key: help must not need any setting.
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/' };
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env, timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Each command and flags its parser accepts, which its help must list. */
const COMMANDS: Record<string, string[]> = {
  proxy: ['--config-dir-path', '--loglevel', '--logformat', '--otlp-address', '--otlp-insecure', '--otlp-headers', '--otlp-attrs'],
  worker: ['--config-dir-path', '--loglevel', '--logformat'],
  runner: ['--config-dir-path', '--loglevel', '--logformat'],
  keeper: ['--dry-run', '--loglevel', '--logformat'],
  cache: ['--app', '--plugin', '--all'],
  paths: ['--app', '--all', '--json', '--proxy'],
  generate: ['--socket', '--local', '--app-path', '--env', '--param', '--output', '--timeout'],
  match: ['--socket', '--local'],
  params: ['--socket', '--local'],
};

for (const [command, flags] of Object.entries(COMMANDS)) {
  for (const ask of ['--help', '-h']) {
    test(`${command} ${ask}: its usage, flags and an example on stdout, exit 0`, () => {
      const r = cli(command, ask);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stderr, '');
      assert.match(r.stdout, new RegExp(`^usage: cmp-offload ${command === 'match' || command === 'params' ? 'generate\\|match\\|params' : command}\\b`));
      for (const flag of flags) assert.ok(r.stdout.includes(flag), `${command} --help lists ${flag}`);
      assert.match(r.stdout, new RegExp(`example:\\n[\\s\\S]*cmp-offload ${command}\\b`));
    });
  }
}

test('help wins over other flags and needs no setting (generate used to print a parser error first)', () => {
  const r = cli('generate', '--socket', '/nowhere.sock', '--help');
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, '');
  assert.match(r.stdout, /^usage: cmp-offload generate/);
});

test('--version prints the package version, at the top and after a command', () => {
  const { version } = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
  for (const args of [['--version'], ['proxy', '--version']]) {
    const r = cli(...args);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `cmp-offload ${version} (Node.js ${process.version})\n`);
  }
});

test('without a command: the list of commands, exit 2; an unknown command or flag still fails', () => {
  const none = cli();
  assert.equal(none.code, 2);
  assert.match(none.stdout, /--help shows a command's flags/);
  const unknown = cli('frobnicate', '--help');
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown command "frobnicate"/);
  const badFlag = cli('keeper', '--bogus');
  assert.equal(badFlag.code, 1);
  assert.match(badFlag.stderr, /--bogus/);
});
