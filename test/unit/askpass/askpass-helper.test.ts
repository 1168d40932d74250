import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { REPO_ROOT } from '../../helpers/paths.js';
import { startFakeAskpass, type FakeAskpass } from '../../helpers/fake-askpass.js';
import { startGitHttpServer, type GitHttpServer } from '../../helpers/git-http-server.js';

const HELPER_DIR = path.join(REPO_ROOT, 'bin', 'git-askpass');
const HELPER = path.join(HELPER_DIR, 'argocd');
/** `env node` (the launcher's shebang) finds this node; nothing else of ours is on the PATH. */
const BASE_PATH = `${path.dirname(process.execPath)}:/usr/bin:/bin`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'askpass-helper-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(file: string, args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: { PATH: BASE_PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', d => (stdout += d));
    child.stderr.on('data', d => (stderr += d));
    child.on('error', reject);
    child.on('close', code => resolve({ code, stdout, stderr }));
  });
}

/** logrus's fatal line without a terminal: `time="<RFC3339>" level=fatal msg="<text>"`, alone on stderr. */
function assertFatal(r: Run, msg: string | RegExp): void {
  assert.equal(r.code, 1, JSON.stringify(r));
  assert.equal(r.stdout, '');
  const m = /^time="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d))" (level=fatal msg=.*)\n$/.exec(r.stderr);
  assert.ok(m, `not one logrus fatal line: ${JSON.stringify(r.stderr)}`);
  assert.ok(Math.abs(Date.parse(m[1]!) - Date.now()) < 60_000, `time ${m[1]} is not now`);
  if (typeof msg === 'string') assert.equal(m[2], `level=fatal msg=${msg}`);
  else assert.match(m[2]!, msg);
}

const MODE = { ARGOCD_BINARY_NAME: 'argocd-git-ask-pass' };

describe('bin/git-askpass/argocd, on its own', () => {
  let fake: FakeAskpass;
  let socket: string;
  let nonce: string;
  before(async () => {
    socket = path.join(tmp, 'repo-server.sock');
    fake = await startFakeAskpass(socket);
    nonce = fake.add({ username: 'alice', password: 'pa ss "word"' });
  });
  after(() => fake.stop());
  const env = () => ({ ...MODE, ARGOCD_GIT_ASKPASS_NONCE: nonce, ARGOCD_ASK_PASS_SOCK: socket });

  test("git's Username and Password prompts: the credentials, one line each, exit 0", async () => {
    assert.deepEqual(await run(HELPER, ["Username for 'https://git.example.com': "], env()), { code: 0, stdout: 'alice\n', stderr: '' });
    assert.deepEqual(await run(HELPER, ["Password for 'https://alice@git.example.com': "], env()), { code: 0, stdout: 'pa ss "word"\n', stderr: '' });
    assert.deepEqual(fake.calls().slice(-2), [nonce, nonce]);
  });

  test('not in askpass mode: it says it is no Argo CD CLI', async () => {
    const text = `"this argocd is cmp-offload's git askpass helper only (ARGOCD_BINARY_NAME=argocd-git-ask-pass), not the Argo CD CLI"`;
    assertFatal(await run(HELPER, ['version'], { ARGOCD_GIT_ASKPASS_NONCE: nonce, ARGOCD_ASK_PASS_SOCK: socket }), text);
    assertFatal(await run(HELPER, ['Username'], { ...env(), ARGOCD_BINARY_NAME: 'argocd-cmp-server' }), text);
  });

  test('argument count: "expected 1 argument, got N"', async () => {
    assertFatal(await run(HELPER, [], env()), '"expected 1 argument, got 0"');
    assertFatal(await run(HELPER, ['Username', 'extra'], env()), '"expected 1 argument, got 2"');
  });

  test('no nonce: "ARGOCD_GIT_ASKPASS_NONCE is not set", before any call', async () => {
    const before = fake.calls().length;
    const { ARGOCD_GIT_ASKPASS_NONCE: _n, ...without } = env();
    assertFatal(await run(HELPER, ['Username'], without), '"ARGOCD_GIT_ASKPASS_NONCE is not set"');
    assertFatal(await run(HELPER, ['Username'], { ...env(), ARGOCD_GIT_ASKPASS_NONCE: '' }), '"ARGOCD_GIT_ASKPASS_NONCE is not set"');
    assert.equal(fake.calls().length, before);
  });

  test("an unknown nonce: the server's status as grpc-go prints it", async () => {
    assertFatal(await run(HELPER, ['Username'], { ...env(), ARGOCD_GIT_ASKPASS_NONCE: 'not-handed-out' }), '"rpc error: code = NotFound desc = unknown nonce"');
  });

  test("nothing at the socket: Unavailable; without ARGOCD_ASK_PASS_SOCK it dials Argo's default", async () => {
    const missing = path.join(tmp, 'nobody.sock');
    const r = await run(HELPER, ['Username'], { ...env(), ARGOCD_ASK_PASS_SOCK: missing });
    assertFatal(r, new RegExp(`^level=fatal msg="rpc error: code = Unavailable desc = .*connect ENOENT ${missing}\\b.*"$`));
    if (!fs.existsSync('/tmp/reposerver-ask-pass.sock')) {
      const d = await run(HELPER, ['Username'], { ...MODE, ARGOCD_GIT_ASKPASS_NONCE: nonce });
      assertFatal(d, /^level=fatal msg="rpc error: code = Unavailable desc = .*connect ENOENT \/tmp\/reposerver-ask-pass\.sock\b.*"$/);
    }
  });

  test("a prompt that is neither Username nor Password: \"unknown credential type '<prompt>'\", after the call (Argo's order)", async () => {
    const before = fake.calls().length;
    assertFatal(await run(HELPER, ["Enter passphrase for key '/k': "], env()), `"unknown credential type 'Enter passphrase for key '/k': '"`);
    assertFatal(await run(HELPER, ['username'], env()), `"unknown credential type 'username'"`);
    assert.equal(fake.calls().length, before + 2);
  });

  test('linked elsewhere (as /usr/local/bin/argocd in the images) it still finds dist/; named argocd-git-ask-pass it needs no ARGOCD_BINARY_NAME', async () => {
    const bin = path.join(tmp, 'bin');
    fs.mkdirSync(bin, { recursive: true });
    fs.symlinkSync(HELPER, path.join(bin, 'argocd'));
    fs.symlinkSync(HELPER, path.join(bin, 'argocd-git-ask-pass'));
    assert.deepEqual(await run(path.join(bin, 'argocd'), ['Username'], env()), { code: 0, stdout: 'alice\n', stderr: '' });
    const { ARGOCD_BINARY_NAME: _b, ...byName } = env();
    assert.deepEqual(await run(path.join(bin, 'argocd-git-ask-pass'), ['Password'], byName), { code: 0, stdout: 'pa ss "word"\n', stderr: '' });
  });
});

test('the helper loads no package before its first call (start-up stays light: no pino, no gRPC)', () => {
  // The static imports of the compiled helper, followed through our own modules.
  const seen = new Set<string>();
  const packages: string[] = [];
  const walk = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = fs.readFileSync(file, 'utf8');
    for (const m of src.matchAll(/^import\s[^'"]*?from\s+['"]([^'"]+)['"]|^import\s+['"]([^'"]+)['"]/gm)) {
      const spec = (m[1] ?? m[2])!;
      if (spec.startsWith('.')) walk(path.resolve(path.dirname(file), spec));
      else if (!spec.startsWith('node:')) packages.push(`${path.relative(REPO_ROOT, file)}: ${spec}`);
    }
  };
  walk(path.join(REPO_ROOT, 'dist', 'cmp', 'askpass', 'askpass-helper.js'));
  assert.ok(seen.size >= 3, [...seen].join(', ')); // the helper, logrus-text, go-quote at least
  assert.deepEqual(packages, []);
});

describe('git with the helper as GIT_ASKPASS, against a password-protected HTTP repository', () => {
  let server: GitHttpServer;
  let fake: FakeAskpass;
  let socket: string;
  before(async () => {
    server = await startGitHttpServer({ username: 'git-user', password: 'git-pass' });
    socket = path.join(tmp, 'e2e.sock');
    fake = await startFakeAskpass(socket);
  });
  after(async () => {
    await fake.stop();
    await server.stop();
  });

  /** `git ls-remote <url>` with the env Argo's repo-server gives a plugin with provideGitCreds. */
  const lsRemote = (nonce: string) =>
    run('git', ['ls-remote', server.url], {
      PATH: `${HELPER_DIR}:${BASE_PATH}`,
      HOME: tmp,
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_ASKPASS: 'argocd',
      ARGOCD_BINARY_NAME: 'argocd-git-ask-pass',
      GIT_TERMINAL_PROMPT: '0',
      ARGOCD_GIT_ASKPASS_NONCE: nonce,
      ARGOCD_ASK_PASS_SOCK: socket,
    });

  test('the right credentials: ls-remote lists the commit', async () => {
    const nonce = fake.add({ username: 'git-user', password: 'git-pass' });
    const before = server.requests();
    const r = await lsRemote(nonce);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^${server.commit}\\tHEAD\\n${server.commit}\\trefs/heads/main\\n$`));
    assert.ok(server.requests() > before, 'git went through the authenticated path');
    assert.deepEqual(fake.calls().filter(n => n === nonce).length, 2, 'asked once for the username, once for the password');
  });

  test("a nonce the repo-server does not know: git fails, its stderr carries the helper's text", async () => {
    const before = server.requests();
    const r = await lsRemote('00000000-0000-4000-8000-000000000000');
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /^time="[^"]+" level=fatal msg="rpc error: code = NotFound desc = unknown nonce"$/m);
    assert.match(r.stderr, /could not read Username/);
    assert.equal(server.requests(), before, 'no authenticated request');
  });

  test('wrong credentials: git fails with authentication failed', async () => {
    const nonce = fake.add({ username: 'git-user', password: 'wrong' });
    const before = server.requests();
    const r = await lsRemote(nonce);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, new RegExp(`fatal: Authentication failed for '${server.url}/'`));
    assert.equal(server.requests(), before);
  });
});
