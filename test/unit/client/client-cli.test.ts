import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { status as Status } from '@grpc/grpc-js';
import { runClientCommand } from '../../../cli/client-cli.js';
import type { ClientKind } from '../../../cli/client-args.js';
import { REPO_ROOT } from '../../helpers/paths.js';
import { startRecordingServer, type Behaviour, type RecordedCall } from './recording-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function run(kind: ClientKind, argv: string[], env: Record<string, string> = {}): Promise<Run> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await runClientCommand(kind, argv, { stdout, stderr, env });
  return { code, stdout: out, stderr: err };
}

/** A small repository: two apps and a README at the root. */
function makeRepo(): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cli-repo-'));
  fs.mkdirSync(path.join(root, 'apps', 'guestbook'), { recursive: true });
  fs.mkdirSync(path.join(root, 'apps', 'redis'), { recursive: true });
  fs.writeFileSync(path.join(root, 'README.md'), 'hello\n');
  fs.writeFileSync(path.join(root, 'apps', 'guestbook', 'app.env'), `NAME=guestbook\nPAD=${'x'.repeat(5000)}\n`);
  fs.writeFileSync(path.join(root, 'apps', 'redis', 'app.env'), 'NAME=redis\n');
  return root;
}

/** Run the CLI against a recording server; returns the run and the one recorded call. */
async function runAgainstServer(
  kind: ClientKind,
  argv: string[],
  behaviour: Behaviour = {},
  env: Record<string, string> = {},
): Promise<Run & { call: RecordedCall | undefined; root: string }> {
  const server = await startRecordingServer(behaviour);
  const root = makeRepo();
  try {
    const result = await run(kind, [root, '--socket', server.socketPath, ...argv], env);
    const call = server.calls.length > 0 ? await server.callEnded(1) : undefined;
    return { ...result, call, root };
  } finally {
    await server.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

function streamedBytes(call: RecordedCall): Buffer {
  return Buffer.concat(call.messages.slice(1).map((m) => m.file!.chunk));
}

test('generate packs the repository root, names the app after its directory and prints a YAML stream', async () => {
  const r = await runAgainstServer('generate', ['--app-path', 'apps/guestbook', '--revision', 'abcdef0123456789'], {
    manifests: ['{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}', '{"kind":"Service"}'],
  });
  assert.equal(r.stderr, '');
  assert.equal(r.code, 0);
  assert.equal(r.stdout, 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\nkind: Service\n');
  const meta = r.call!.messages[0]!.metadata!;
  assert.equal(meta.appName, 'guestbook');
  assert.equal(meta.appRelPath, 'apps/guestbook');
  const bytes = streamedBytes(r.call!);
  assert.equal(meta.checksum, createHash('sha256').update(bytes).digest('hex'));
  assert.equal(meta.size, bytes.length);
  assert.deepEqual(
    meta.env.slice(0, 6).map((e) => `${e.name}=${e.value}`),
    [
      'ARGOCD_APP_NAME=guestbook',
      'ARGOCD_APP_NAMESPACE=',
      'ARGOCD_APP_PROJECT_NAME=',
      'ARGOCD_APP_REVISION=abcdef0123456789',
      'ARGOCD_APP_REVISION_SHORT=abcdef0',
      'ARGOCD_APP_REVISION_SHORT_8=abcdef01',
    ],
  );
  assert.deepEqual(meta.env.at(-1), { name: 'ARGOCD_APP_PARAMETERS', value: 'null' });
  // Default chunking: 1024-byte chunks, only the last one shorter.
  const sizes = r.call!.messages.slice(1).map((m) => m.file!.chunk.length);
  assert.ok(sizes.slice(0, -1).every((n) => n === 1024) && sizes.at(-1)! <= 1024, String(sizes));
  assert.ok(r.call!.halfClosed);
});

test('the streamed tarball is a gzip of the whole repository root, not just the app directory', async () => {
  const r = await runAgainstServer('match', ['--app-path', 'apps/redis']);
  assert.equal(r.code, 0);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cli-tgz-'));
  try {
    fs.writeFileSync(path.join(dir, 'repo.tgz'), streamedBytes(r.call!));
    const names = execFileSync('tar', ['-tzf', path.join(dir, 'repo.tgz')]).toString().split('\n');
    for (const name of ['README.md', 'apps/guestbook/app.env', 'apps/redis/app.env']) {
      assert.ok(names.some((n) => n.replace(/^\.\//, '') === name), `${name} in ${names.join(',')}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('ARGOCD_CMP_CHUNK_SIZE sets the chunk size, --env and plugin flags reach the metadata env', async () => {
  const r = await runAgainstServer(
    'generate',
    ['--env', 'RAW=1', '--plugin-env', 'WHO=$ARGOCD_APP_NAME', '--param', 'replicas=3', '--app-name', 'gb'],
    {},
    { ARGOCD_CMP_CHUNK_SIZE: '100' },
  );
  assert.equal(r.code, 0, r.stderr);
  const sizes = r.call!.messages.slice(1).map((m) => m.file!.chunk.length);
  assert.ok(sizes.length > 2 && sizes.slice(0, -1).every((n) => n === 100), String(sizes));
  const env = r.call!.messages[0]!.metadata!.env.map((e) => `${e.name}=${e.value}`);
  assert.deepEqual(env.slice(-5), [
    'KUBE_API_VERSIONS=',
    'ARGOCD_ENV_WHO=gb',
    'ARGOCD_APP_PARAMETERS=[{"name":"replicas","string":"3"}]',
    'PARAM_REPLICAS=3',
    'RAW=1',
  ]);
  assert.equal(r.call!.messages[0]!.metadata!.appRelPath, '.');
});

test('--output json prints the manifests as one JSON array', async () => {
  const r = await runAgainstServer('generate', ['--output', 'json'], { manifests: ['{"kind":"A"}', '{"kind":"B"}'] });
  assert.equal(r.code, 0);
  assert.deepEqual(JSON.parse(r.stdout), [{ kind: 'A' }, { kind: 'B' }]);
});

test('match prints isSupported and isDiscoveryEnabled', async () => {
  const r = await runAgainstServer('match', []);
  assert.equal(r.code, 0);
  assert.equal(r.stdout, 'isSupported=true isDiscoveryEnabled=true\n');
  assert.equal(r.call!.rpc, 'matchRepository');
});

test('params calls GetParametersAnnouncement with the reduced env and prints JSON', async () => {
  const r = await runAgainstServer('params', ['--namespace', 'prod']);
  assert.equal(r.code, 0);
  assert.equal(r.stdout, '[]\n');
  assert.equal(r.call!.rpc, 'getParametersAnnouncement');
  assert.deepEqual(
    r.call!.messages[0]!.metadata!.env.map((e) => e.name),
    [
      'ARGOCD_APP_NAME',
      'ARGOCD_APP_SOURCE_REPO_URL',
      'ARGOCD_APP_SOURCE_PATH',
      'ARGOCD_APP_SOURCE_TARGET_REVISION',
      'ARGOCD_APP_PARAMETERS',
    ],
  );
});

test('an error status prints like the repo-server prints it and exits 1', async () => {
  const r = await runAgainstServer('generate', [], {
    error: { code: Status.UNKNOWN, details: 'error generating manifests: boom' },
  });
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
  assert.equal(r.stderr, 'rpc error: code = Unknown desc = error generating manifests: boom\n');
});

test('--timeout bounds the call and reports DeadlineExceeded as grpc-go words it', async () => {
  const r = await runAgainstServer('generate', ['--timeout', '300ms'], { when: 'hang' });
  assert.equal(r.code, 1);
  assert.equal(r.stderr, 'rpc error: code = DeadlineExceeded desc = context deadline exceeded\n');
});

test('a directory without regular files fails locally with no files to send and calls nothing', async () => {
  const server = await startRecordingServer();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cli-empty-'));
  fs.mkdirSync(path.join(root, 'sub'));
  try {
    const r = await run('generate', [root, '--socket', server.socketPath]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no files to send\(/);
    assert.equal(server.calls.length, 0);
  } finally {
    await server.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('temporary files are removed after success and after failure, --local\'s work root too', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cli-tmp-'));
  const saved = process.env.TMPDIR;
  process.env.TMPDIR = tmp;
  try {
    await runAgainstServer('generate', [], { manifests: [] });
    await runAgainstServer('generate', [], { error: { code: Status.INTERNAL, details: 'x' } });
    const local = ['--local', '--config-dir-path', path.join(REPO_ROOT, 'examples', 'plugin'), '--app-path'];
    assert.equal((await run('generate', [path.join(REPO_ROOT, 'examples', 'repo'), ...local, 'apps/redis'])).code, 0);
    assert.equal((await run('generate', [path.join(REPO_ROOT, 'examples', 'repo'), ...local, '.'])).code, 1);
    // Nothing at all: no client dir, and no `_cmp_server` work root in the temp dir.
    assert.deepEqual(fs.readdirSync(tmp), []);
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('bad usage prints the usage on stderr and exits 2 without calling the server', async () => {
  const server = await startRecordingServer();
  const root = makeRepo();
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['--socket', server.socketPath], {}, /expected exactly one DIR/],
    [[root], {}, /exactly one of --socket PATH and --local/],
    [[root, '--socket', server.socketPath, '--app-path', '/etc'], {}, /\/etc: app path is absolute/],
    [[root, '--socket', server.socketPath, '--app-path', '../x'], {}, /\.\.\/x: app path outside root/],
    [[root, '--socket', server.socketPath, '--app-path', 'nope'], {}, /nope: app path does not exist/],
    [[root, '--socket', server.socketPath, '--app-path', 'README.md'], {}, /README\.md: app path is not a directory/],
    [[path.join(root, 'missing'), '--socket', server.socketPath], {}, /missing: not a directory/],
    [[root, '--socket', server.socketPath, '--kube-version', 'latest'], {}, /could not parse "latest" as version/],
    [[root, '--socket', server.socketPath], { ARGOCD_CMP_CHUNK_SIZE: '0' }, /invalid ARGOCD_CMP_CHUNK_SIZE "0"/],
    [[root, '--socket', server.socketPath], { ARGOCD_CMP_CHUNK_SIZE: '-5' }, /must be a positive integer/],
  ];
  try {
    for (const [argv, env, message] of cases) {
      const r = await run('generate', argv, env);
      assert.equal(r.code, 2, argv.join(' '));
      assert.match(r.stderr, message);
      assert.match(r.stderr, /usage: cmp-offload generate\|match\|params DIR/);
      assert.equal(r.stdout, '');
    }
    assert.equal(server.calls.length, 0);
  } finally {
    await server.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('--local runs the plugin in-process from its config dir', async () => {
  const r = await run('generate', [
    path.join(REPO_ROOT, 'examples', 'repo'),
    '--local',
    '--config-dir-path',
    path.join(REPO_ROOT, 'examples', 'plugin'),
    '--app-path',
    'apps/redis',
    '--output',
    'json',
  ]);
  assert.equal(r.stderr, '');
  assert.equal(r.code, 0);
  const manifests = JSON.parse(r.stdout) as Array<{ kind: string }>;
  assert.deepEqual(manifests.map((m) => m.kind), ['Deployment', 'Service', 'ConfigMap']);
});

test('--local reports a plugin failure as an rpc error line', async () => {
  const r = await run('generate', [
    path.join(REPO_ROOT, 'examples', 'repo'),
    '--local',
    '--config-dir-path',
    path.join(REPO_ROOT, 'examples', 'plugin'),
  ]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^rpc error: code = Unknown desc = error generating manifests: `sh -c .*` failed exit status 1: app\.env not found in /);
});

test('a socket that cannot be dialled: one line naming the socket, the cause and --socket, exit 1', async () => {
  const root = makeRepo();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cli-sock-'));
  try {
    const missing = path.join(dir, 'missing.sock');
    assert.deepEqual(await run('generate', [root, '--socket', missing]), {
      code: 1,
      stdout: '',
      stderr: `cmp-offload generate: cannot connect to ${missing}: no such file (check --socket)\n`,
    });
    const file = path.join(dir, 'plain-file');
    fs.writeFileSync(file, '');
    assert.deepEqual(await run('match', [root, '--socket', file]), {
      code: 1,
      stdout: '',
      stderr: `cmp-offload match: cannot connect to ${file}: not a socket (check --socket)\n`,
    });
    // A socket file nobody listens on (a proxy killed while it served): the connect is refused.
    const dead = path.join(dir, 'dead.sock');
    spawnSync(process.execPath, ['-e', 'require("net").createServer().listen(process.argv[1], () => process.kill(process.pid, "SIGKILL"))', dead]);
    assert.ok(fs.statSync(dead).isSocket());
    const refused = await run('generate', [root, '--socket', dead]);
    assert.deepEqual(refused, {
      code: 1,
      stdout: '',
      stderr: `cmp-offload generate: cannot connect to ${dead}: ECONNREFUSED (check --socket; is the proxy running?)\n`,
    });
    assert.doesNotMatch(refused.stderr, /Resolution note/);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
