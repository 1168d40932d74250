/**
 * provideGitCreds (issue 15): the plugin gets the Application's git credentials the way Argo's
 * repo-server provides them (askpass nonce, credential files), in both modes. A fake askpass
 * server stands in for the repo-server's, `git http-backend` behind basic auth for a private
 * remote, and the plugin runs real `git ls-remote` through our `argocd` helper. Distributed mode:
 * the worker's run gets an askpass of its own that answers its job's nonce only, copies of the
 * files, and nothing of it outlives the call; Redis never holds a credential in the clear.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { load as loadYaml } from 'js-yaml';
import { decodeFailure } from '../../cmp/queue/job-contract.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { ANY, assertOurError } from '../helpers/our-errors.js';
import { startDistributed, TEST_SIGNING_KEY } from '../helpers/distributed.js';
import { startFakeAskpass, type FakeAskpass } from '../helpers/fake-askpass.js';
import { startGitHttpServer, type GitHttpServer } from '../helpers/git-http-server.js';
import { openCmpClient, repoMetadata, type RpcOutcome } from '../helpers/grpc-client.js';
import { fixturePath, REPO_ROOT } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { MODES, startCmp, type CmpServer } from '../e2e/harness.js';

const USER = 'deploy-bot';
const PASSWORD = 's3cret-token-of-the-repo';
const PREFIX = '{cmp-offload}';

/**
 * Reports what the run saw: the remote's HEAD (through git and our askpass helper), the askpass
 * socket and credential file paths of its env, their modes and digests, and what the helper
 * answered for another nonce (ARGOCD_ENV_OTHER) when asked to.
 */
const SCRIPT = `export HOME=/tmp
sha=$(git ls-remote "$ARGOCD_ENV_REMOTE" HEAD 2>/tmp/git-err-$$ | cut -f1) || true
err=$(tr -d '"\\\\' </tmp/git-err-$$ | tr '\\n' ' '); rm -f /tmp/git-err-$$
other=""
if [ -n "$ARGOCD_ENV_OTHER" ]; then other=$(ARGOCD_GIT_ASKPASS_NONCE=$ARGOCD_ENV_OTHER argocd 'Password for x: ' 2>&1 | tr -d '"\\\\' | tr '\\n' ' '); fi
key=""; [ -n "$GIT_SSH_COMMAND" ] && set -- $GIT_SSH_COMMAND && key=$3
info() { if [ -n "$1" ] && [ -e "$1" ]; then printf '%s %s' "$(stat -c %a "$1")" "$(sha256sum <"$1" | cut -c1-16)"; fi; }
sock=$([ -S "$ARGOCD_ASK_PASS_SOCK" ] && echo socket)
printf '{"kind":"Result","sha":"%s","err":"%s","other":"%s","sockPath":"%s","sock":"%s","cert":"%s","certInfo":"%s","key":"%s","keyInfo":"%s"}\\n' \\
  "$sha" "$err" "$other" "$ARGOCD_ASK_PASS_SOCK" "$sock" "$GIT_SSL_CERT" "$(info "$GIT_SSL_CERT")" "$key" "$(info "$key")"
`;

const PLUGIN = pluginYaml('gitcreds', `provideGitCreds: true
generate:
  command: [sh, -c]
  args:
    - |
${SCRIPT.split('\n').map(l => `      ${l}`).join('\n')}`);

/** The same plugin without provideGitCreds: its runs get the request env as it is. */
const PLAIN = PLUGIN.replace('  provideGitCreds: true\n', '');

interface Seen {
  sha: string;
  err: string;
  other: string;
  sockPath: string;
  sock: string;
  cert: string;
  certInfo: string;
  key: string;
  keyInfo: string;
}

/** `argocd` (our askpass helper) first on every process's PATH, as the images have it. */
const PATH_ENV = { PATH: `${path.join(REPO_ROOT, 'bin', 'git-askpass')}:${process.env.PATH}` };

const work = pluginWritableTempDir('cmp-git-creds-');
let git: GitHttpServer;
let askpass: FakeAskpass;
const askpassSocket = path.join(work, 'reposerver-ask-pass.sock');

before(async () => {
  git = await startGitHttpServer({ username: USER, password: PASSWORD });
  askpass = await startFakeAskpass(askpassSocket);
});
after(async () => {
  await askpass?.stop();
  await git?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

/** The env the repo-server adds for HTTPS credentials (util/git/creds.go, util/askpass). */
function askpassEnv(nonce: string) {
  return [
    { name: 'GIT_ASKPASS', value: 'argocd' },
    { name: 'ARGOCD_GIT_ASKPASS_NONCE', value: nonce },
    { name: 'GIT_TERMINAL_PROMPT', value: '0' },
    { name: 'ARGOCD_BINARY_NAME', value: 'argocd-git-ask-pass' },
    { name: 'ARGOCD_ASK_PASS_SOCK', value: askpassSocket },
  ];
}

function request(env: { name: string; value: string }[], tag = 'app') {
  return [{ name: 'ARGOCD_APP_NAME', value: tag }, { name: 'ARGOCD_ENV_REMOTE', value: git.url }, ...env];
}

async function generate(server: { socketPath: string }, env: { name: string; value: string }[], timeoutMs = 30_000): Promise<RpcOutcome<{ manifests: string[] }>> {
  const client = openCmpClient(server.socketPath);
  try {
    const tgz = await tarballOf({ 'app/values.yaml': 'x: 1\n' });
    return await client.generate({ metadata: repoMetadata(tgz, { appRelPath: 'app', env }), chunks: [tgz], timeoutMs });
  } finally {
    client.close();
  }
}

function seen(out: RpcOutcome<{ manifests: string[] }>): Seen {
  assert.ok('value' in out, `generate failed: ${JSON.stringify(out)}`);
  return JSON.parse(out.value.manifests[0]!) as Seen;
}

for (const mode of MODES) {
  describe(`provideGitCreds (${mode})`, () => {
    let server: CmpServer;
    before(async () => {
      server = await startCmp(mode, { pluginYaml: PLUGIN, socketName: 'gitcreds.sock', env: PATH_ENV, workers: 1 });
    });
    after(async () => {
      await server?.stop();
    });

    test('git fetches a private remote with the relayed credentials; the cache keys on none of them', async () => {
      const nonce = askpass.add({ username: USER, password: PASSWORD });
      const before = git.requests();
      const s = seen(await generate(server, request(askpassEnv(nonce), 'cached')));
      assert.equal(s.sha, git.commit, `git ls-remote through the askpass helper (stderr: ${s.err})`);
      assert.ok(git.requests() > before, 'the remote was reached with the credentials');
      assert.ok(askpass.calls().includes(nonce), 'the repo-server\'s askpass was asked with the request\'s nonce');
      if (mode === 'standalone') assert.equal(s.sockPath, askpassSocket, 'standalone: the plugin talks to the repo-server\'s askpass itself');
      else {
        assert.notEqual(s.sockPath, askpassSocket, 'distributed: the run has an askpass of its own');
        assert.equal(s.sock, 'socket');
        assert.equal(fs.existsSync(s.sockPath), false, 'the run\'s askpass socket is gone after the call');
      }
      // Another call: a new nonce, nothing else changed. Served from the cache: no run, no lookup.
      const next = askpass.add({ username: USER, password: PASSWORD });
      const asked = askpass.calls().length;
      const again = seen(await generate(server, request(askpassEnv(next), 'cached')));
      assert.equal(again.sha, git.commit);
      assert.equal(askpass.calls().length, asked, 'a cache hit: the credentials were not asked for again');
      askpass.remove(nonce);
      askpass.remove(next);
    });

    test('a nonce the repo-server does not know: git fails with the helper\'s unknown nonce', async () => {
      const s = seen(await generate(server, request(askpassEnv('0b1c7e1c-0000-4000-8000-000000000000'), 'unknown')));
      assert.equal(s.sha, '');
      assert.match(s.err, /rpc error: code = NotFound desc = unknown nonce/);
      assert.match(s.err, /could not read Username/);
    });
  });
}

const distributed = MODES.includes('distributed');

describe('provideGitCreds across the network (distributed)', { skip: !distributed && 'needs redis-server' }, () => {
  let d: Awaited<ReturnType<typeof startDistributed>>;
  let redis: Redis;
  before(async () => {
    d = await startDistributed({ pluginYaml: PLUGIN, socketName: 'gitcreds.sock', workers: 1, env: PATH_ENV });
    redis = new Redis(d.env.CMP_OFFLOAD_REDIS_URL!);
  });
  after(async () => {
    redis?.disconnect();
    await d?.stop();
  });

  test('credential files come as 0600 copies at other paths, gone after the call', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'shm-'));
    const cert = path.join(dir, 'cert');
    const key = path.join(dir, 'key');
    const known = path.join(dir, 'known_hosts');
    fs.writeFileSync(cert, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n', { mode: 0o600 });
    fs.writeFileSync(key, '-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n', { mode: 0o600 });
    fs.writeFileSync(known, 'git.example.com ssh-ed25519 AAAA\n');
    const nonce = askpass.add({ username: USER, password: PASSWORD });
    const env = [
      ...askpassEnv(nonce),
      { name: 'GIT_SSL_CERT', value: cert },
      { name: 'GIT_SSL_KEY', value: key },
      { name: 'GIT_SSH_COMMAND', value: `ssh -i ${key} -o StrictHostKeyChecking=yes -o UserKnownHostsFile=${known}` },
      // Copies are made afresh: a cache hit would not show them.
      { name: 'ARGOCD_ENV_CMP_OFFLOAD_CACHE', value: 'off' },
    ];
    const s = seen(await generate(d.proxy, request(env, 'files')));
    const digest = (f: string) => (fs.statSync(f).mode & 0o777).toString(8) + ' ' + createHash('sha256').update(fs.readFileSync(f)).digest('hex').slice(0, 16);
    assert.notEqual(s.cert, cert);
    assert.equal(s.certInfo, digest(cert).replace(/^\d+/, '600'), 'the certificate: same bytes, mode 600');
    assert.notEqual(s.key, key);
    assert.equal(s.keyInfo, digest(key).replace(/^\d+/, '600'), 'the SSH key named by -i: same bytes, mode 600');
    assert.equal(s.sha, git.commit, 'HTTPS credentials still relayed');
    for (const p of [s.cert, s.key, s.sockPath]) assert.equal(fs.existsSync(p), false, `${p} is gone after the call`);
    askpass.remove(nonce);
  });

  test('another job\'s nonce is refused by the run\'s askpass; a late lookup gets no answer; Redis holds no credential', async () => {
    const mine = askpass.add({ username: USER, password: PASSWORD });
    const theirs = askpass.add({ username: 'other-team', password: 'other-password' });
    const captured: string[] = [];
    const sub = new Redis(d.env.CMP_OFFLOAD_REDIS_URL!);
    const keys = new KeySpace(PREFIX);
    await sub.subscribe(keys.gitCredsChannel());
    sub.on('message', (_c: string, raw: string) => captured.push(raw));
    // Everything written to Redis while the call runs, to look for credentials in the clear.
    const monitor = new Redis(d.env.CMP_OFFLOAD_REDIS_URL!);
    const written: string[] = [];
    const mon = await monitor.monitor();
    mon.on('monitor', (_t: string, args: string[]) => written.push(args.join(' ')));
    try {
      const env = [...askpassEnv(mine), { name: 'ARGOCD_ENV_OTHER', value: theirs }, { name: 'ARGOCD_ENV_CMP_OFFLOAD_CACHE', value: 'off' }];
      const s = seen(await generate(d.proxy, request(env, 'nonces')));
      assert.equal(s.sha, git.commit);
      assert.match(s.other, /rpc error: code = NotFound desc = unknown nonce/, 'the run\'s askpass answers its own nonce only');
      assert.ok(!askpass.calls().includes(theirs), 'the other nonce never reached the repo-server\'s askpass');
      assert.ok(captured.length >= 1, 'the worker asked on the git-creds channel');
      for (const w of written) {
        for (const secret of [PASSWORD, mine, theirs]) assert.ok(!w.includes(secret), `a Redis command carried a credential in the clear: ${w.slice(0, 120)}`);
      }
      // The call is over: the same signed question again is not answered.
      const question = JSON.parse(captured[0]!) as { jobId: string; lookupId: string };
      await redis.publish(keys.gitCredsChannel(), captured[0]!);
      await new Promise(r => setTimeout(r, 1_500));
      assert.equal(await redis.exists(keys.gitCredsAnswer(question.jobId, question.lookupId)), 0, 'no answer after the call ended');
      assert.deepEqual(await redis.keys(`${PREFIX}:git-creds:*`), [], 'answers are read once: none is left');
    } finally {
      sub.disconnect();
      mon.disconnect();
      monitor.disconnect();
      askpass.remove(mine);
      askpass.remove(theirs);
    }
  });

  test('a worker running plugin commands in-process relays the credentials the same way', async () => {
    const inProcess = await startDistributed({ pluginYaml: PLUGIN, socketName: 'gitcreds.sock', workers: 1, env: PATH_ENV, workerRunner: 'in-process' });
    try {
      const nonce = askpass.add({ username: USER, password: PASSWORD });
      const s = seen(await generate(inProcess.proxy, request(askpassEnv(nonce), 'in-process')));
      assert.equal(s.sha, git.commit, `git ls-remote through the worker's own askpass (stderr: ${s.err})`);
      assert.notEqual(s.sockPath, askpassSocket);
      assert.equal(fs.existsSync(s.sockPath), false, 'the run\'s askpass socket is gone after the call');
      askpass.remove(nonce);
    } finally {
      await inProcess.stop();
    }
  });

  test('a plugin without provideGitCreds: its run gets the env as it is and no askpass', async () => {
    const plain = await startDistributed({ pluginYaml: PLAIN, socketName: 'gitcreds.sock', workers: 1, env: PATH_ENV });
    try {
      const nonce = askpass.add({ username: USER, password: PASSWORD });
      const calls = askpass.calls().length;
      const s = seen(await generate(plain.proxy, request(askpassEnv(nonce), 'plain')));
      assert.equal(s.sockPath, askpassSocket, 'ARGOCD_ASK_PASS_SOCK unchanged');
      assert.equal(askpass.calls().length, calls, 'nobody relayed a lookup');
      askpass.remove(nonce);
    } finally {
      await plain.stop();
    }
  });

  test('the konn-jsonnet plugin.yaml (provideGitCreds: true) clones its libraries from a private remote in init', async () => {
    // The fixture's plugin.yaml as it is, but for its binary: a stand-in that clones and renders like it.
    const cm = loadYaml(fs.readFileSync(fixturePath('plugins', 'konn-jsonnet.plugin.configmap.yaml'), 'utf8')) as { data: Record<string, string> };
    const konnYaml = cm.data['plugin.yaml']!.replaceAll('/usr/local/bin/argocd-konn-jsonnet-plugin', fixturePath('e2e', 'konn-standin.sh'));
    const konn = await startDistributed({ pluginYaml: konnYaml, socketName: 'konn-jsonnet.sock', workers: 1, env: PATH_ENV });
    try {
      const nonce = askpass.add({ username: USER, password: PASSWORD });
      const env = [...askpassEnv(nonce), { name: 'ARGOCD_APP_NAME', value: 'konn' }, { name: 'ARGOCD_ENV_KONN_LIBS', value: git.url }];
      const out = await generate(konn.proxy, env);
      assert.ok('value' in out, JSON.stringify(out));
      const cmOut = JSON.parse(out.value.manifests[0]!) as { data: { head: string; readme: string } };
      assert.deepEqual(cmOut.data, { head: git.commit, readme: 'served over http' });
      assert.ok(askpass.calls().includes(nonce));
      askpass.remove(nonce);
    } finally {
      await konn.stop();
    }
  });

  test('gitCredsFiles: a file the proxy cannot read fails the request with our error', async () => {
    const missing = path.join(work, 'no-such-dir', 'cert');
    const nonce = askpass.add({ username: USER, password: PASSWORD });
    const out = await generate(d.proxy, request([...askpassEnv(nonce), { name: 'GIT_SSL_CERT', value: missing }], 'missing-file'));
    assertOurError('gitCredsFiles', out, [`${missing}: ENOENT`]);
    askpass.remove(nonce);
  });

  test('gitCredsUnanswered: a job whose proxy is gone fails once its lookup times out', async () => {
    const lone = await startDistributed({ pluginYaml: PLUGIN, socketName: 'gitcreds.sock', workers: 0, env: PATH_ENV });
    const connection = new Redis(lone.env.CMP_OFFLOAD_REDIS_URL!, { maxRetriesPerRequest: null });
    const queue = new Queue('gitcreds', { connection, prefix: PREFIX });
    try {
      const cert = path.join(work, 'lone-cert');
      fs.writeFileSync(cert, 'cert');
      const nonce = askpass.add({ username: USER, password: PASSWORD });
      const call = generate(lone.proxy, request([...askpassEnv(nonce), { name: 'GIT_SSL_CERT', value: cert }], 'lone'), 6_000);
      for (let i = 0; (await queue.getWaitingCount()) === 0; i++) {
        assert.ok(i < 200, 'the job was never queued');
        await new Promise(r => setTimeout(r, 25));
      }
      // The proxy dies with its job queued: no one will answer the job's lookups.
      lone.proxy.proc.kill('SIGKILL');
      await call;
      await lone.addWorker();
      let failed;
      for (let i = 0; (failed = await queue.getFailed()).length === 0; i++) {
        assert.ok(i < 400, 'the job never failed');
        await new Promise(r => setTimeout(r, 25));
      }
      const job = failed[0]!;
      const binding = (job.data as { cacheKey: string | null; resultId: string }).cacheKey ?? job.id!;
      const failure = decodeFailure(Buffer.from(TEST_SIGNING_KEY), job.id!, binding, job.failedReason);
      assert.ok(failure, `a signed failure: ${job.failedReason}`);
      assertOurError('gitCredsUnanswered', { code: failure.code, details: failure.message }, [job.id!, ANY]);
      askpass.remove(nonce);
    } finally {
      await queue.close();
      connection.disconnect();
      await lone.stop();
    }
  });
});
