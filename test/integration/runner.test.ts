import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { groupAlive } from '../../cmp/exec/process-groups.js';
import { startDistributed, TEST_SIGNING_KEY, type Distributed } from '../helpers/distributed.js';
import { openCmpClient, repoMetadata, chunksOf, type CmpTestClient, type RpcOutcome } from '../helpers/grpc-client.js';
import { BIN } from '../helpers/paths.js';
import { statFields } from '../helpers/process-tree.js';
import { startProxy, type ProxyProcess } from '../helpers/proxy-process.js';
import { freePort } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { askRunnerAtOnce, hostPid, pluginWritableTempDir, runnerDirs, RUNNER_UID, startRunner } from '../helpers/runner-process.js';
import { startWorker } from '../helpers/worker-process.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { lines, until } from './distributed-helpers.js';
import { parsePluginConfig, pluginSpecDigest } from '../../cmp/config/plugin-config.js';
import { encodeFrame, FrameType, RUNNER_PROTOCOL_VERSION } from '../../runner/protocol.js';
import { ANY, assertOurError } from '../helpers/our-errors.js';

/**
 * The runner (runner/): plugin commands of a worker run in another process, reached over
 * a unix socket, with no credentials. The flows give the same answers as standalone mode, byte
 * for byte; cancels and shutdowns kill the run's process group in the runner; a runner that
 * dies or lies is an infrastructure failure, never a plugin result.
 */
const markers = pluginWritableTempDir('cmp-runner-markers-');
/** The standalone proxy's markers: its plugin runs as the test's uid, the runners' maybe not. */
const localMarkers = pluginWritableTempDir('cmp-runner-local-');
const secrets = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-runner-secrets-'));
const keyFile = path.join(secrets, 'signing-key');
fs.writeFileSync(keyFile, `${TEST_SIGNING_KEY}\n`, { mode: 0o600 });
after(() => {
  fs.rmSync(markers, { recursive: true, force: true });
  fs.rmSync(localMarkers, { recursive: true, force: true });
  fs.rmSync(secrets, { recursive: true, force: true });
});

// MODE picks the behaviour; every run appends its pid (= its process group) to <TAG>.runs.
const SPEC = `generate:
  command: [sh, -c]
  args:
    - |
      echo "$$ $(readlink /proc/self/ns/pid)" >> "$MARKERS/$ARGOCD_ENV_TAG.runs"
      case "$ARGOCD_ENV_MODE" in
        fail) echo "it broke" >&2; exit 1;;
        sleep) sleep 30;;
        slow) sleep 2;;
        steal)
          n=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -e CMP_OFFLOAD_SIGNING_KEY -e CMP_OFFLOAD_REDIS_URL)
          k=$(cat "$ARGOCD_ENV_KEYFILE" 2>/dev/null | wc -c)
          printf 'environ: %s\\nkeyfile: %s\\nuid: "%s"\\n' "$n" "$k" "$(id -u)"; exit 0;;
      esac
      printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\n' "$ARGOCD_ENV_TAG"
discover:
  find:
    command: [sh, -c, 'if [ -f match.txt ]; then echo yes; fi']
parameters:
  dynamic:
    command: [sh, -c, 'echo ''[{"name":"dyn","title":"Dynamic","collectionType":"map","map":{"a":"b"}}]''']`;

const ENV = { MARKERS: markers, ARGOCD_EXEC_TIMEOUT: '4s', CMP_OFFLOAD_SHUTDOWN_GRACE: '1s', CMP_OFFLOAD_CONCURRENCY: '2' };

function call(tgz: Buffer, env: Record<string, string>, timeoutMs = 20_000) {
  const entries = Object.entries(env).map(([k, v]) => ({ name: `ARGOCD_ENV_${k}`, value: v }));
  return { metadata: repoMetadata(tgz, { env: entries }), chunks: chunksOf(tgz, 1024), timeoutMs };
}

/** The host pids of a tag's runs while they run (-1 once gone): an isolated runner's `$$` is its namespace's. */
function runsOf(tag: string): number[] {
  return lines(path.join(markers, `${tag}.runs`)).map(l => {
    const [pid, ns] = l.split(' ');
    return hostPid(Number(pid), ns!) ?? -1;
  });
}

/** The process group (host pgid) of a running process. */
function groupOf(pid: number): number {
  return Number(statFields(fs.readFileSync(`/proc/${pid}/stat`, 'latin1'))[2]);
}

async function getReady(port: number): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, text: await res.text() };
}

describe('distributed mode through runners', () => {
  let d: Distributed;
  let standalone: ProxyProcess;
  let client: CmpTestClient;
  let local: CmpTestClient;
  let tgz: Buffer;
  let workerPort: number;

  before(async () => {
    workerPort = await freePort();
    [d, standalone] = await Promise.all([
      startDistributed({
        pluginYaml: pluginYaml('rq', SPEC),
        socketName: 'rq.sock',
        workers: 1,
        env: { ...ENV, CMP_OFFLOAD_SIGNING_KEY: '', CMP_OFFLOAD_SIGNING_KEY_FILE: keyFile },
        // Retries until a restarted runner is back (the proxy sets a job's attempts).
        proxyEnv: { CMP_OFFLOAD_JOB_ATTEMPTS: '40' },
        workerEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${workerPort}` },
      }),
      startProxy({ pluginYaml: pluginYaml('rq', SPEC), socketName: 'rq.sock', env: { ...ENV, MARKERS: localMarkers } }),
    ]);
    client = openCmpClient(d.proxy.socketPath);
    local = openCmpClient(standalone.socketPath);
    tgz = await tarballOf({ 'f.txt': 'x', 'match.txt': 'm' });
  });

  after(async () => {
    client.close();
    local.close();
    await Promise.all([d.stop(), standalone.stop()]);
  });

  test('generate, match, parameters, a failing command and a timeout answer exactly as in standalone mode', async () => {
    const plain = await tarballOf({ 'f.txt': 'x' });
    const cases: [string, (c: CmpTestClient) => Promise<RpcOutcome<unknown>>][] = [
      ['generate', c => c.generate(call(tgz, { TAG: 'gen' }))],
      ['match', c => c.match(call(tgz, {}))],
      ['no match', c => c.match(call(plain, {}))],
      ['parameters', c => c.params(call(tgz, {}))],
      ['failing command', c => c.generate(call(tgz, { TAG: 'fails', MODE: 'fail' }))],
      ['timeout', c => c.generate(call(tgz, { TAG: 'times-out', MODE: 'sleep' }))],
    ];
    for (const [what, run] of cases) {
      const [remote, inProcess] = await Promise.all([run(client), run(local)]);
      assert.deepEqual(remote, inProcess, what);
    }
    const failed = await client.generate(call(tgz, { TAG: 'fails-again', MODE: 'fail' }));
    assert.ok('code' in failed, JSON.stringify(failed));
    assert.match(failed.details, /^error generating manifests: `sh -c .*` failed exit status 1: it broke$/s);
    const timedOut = await client.generate(call(tgz, { TAG: 'times-out-again', MODE: 'sleep' }));
    assert.ok('code' in timedOut && /` failed timeout after 4s$/.test(timedOut.details), JSON.stringify(timedOut));
    const matched = await client.match(call(tgz, {}));
    assert.deepEqual(matched, { value: { isSupported: true, isDiscoveryEnabled: true } });
    // The job ran in the runner: its work dir, and its stage timings in the worker's job log.
    const job = d.workers[0]!.stderr().split('\n').filter(l => l.includes('"msg":"job"')).map(l => JSON.parse(l)).at(-1);
    assert.equal(typeof job.ms.exec, 'number');
  });

  test('plugin code in the runner cannot read the worker credentials (env, /proc, key file)', { skip: RUNNER_UID === undefined && 'tests do not run as root: runner and worker share a uid' }, async () => {
    const out = await client.generate(call(tgz, { TAG: 'steal', MODE: 'steal', KEYFILE: keyFile }));
    assert.deepEqual(out, { value: { manifests: ['{"environ":0,"keyfile":0,"uid":"65534"}'], sourceType: '' } });
  });

  test('a caller deadline kills the run\'s process group in the runner', async () => {
    const started = Date.now();
    const pending = client.generate(call(tgz, { TAG: 'cancel', MODE: 'sleep' }, 1_000));
    await until(() => runsOf('cancel').length === 1, 1_000, 'the run to start');
    const pgid = groupOf(runsOf('cancel')[0]!);
    assert.ok(groupAlive(pgid), 'the run is going on');
    const outcome = await pending;
    assert.ok('code' in outcome, JSON.stringify(outcome));
    assert.ok(Date.now() - started < 2_000, 'the answer does not wait for the plugin');
    // Before ARGOCD_EXEC_TIMEOUT (4 s) could have done it.
    await until(() => !groupAlive(pgid!), 3_000 - (Date.now() - started), 'the group to be killed by the cancel');
  });

  test('a runner killed mid-job: readyz says so, the job is retried and answered once a runner is back', async () => {
    const w = d.workers[0]!;
    assert.deepEqual(await getReady(workerPort), { status: 200, text: 'ok\n' });
    const pending = client.generate(call(tgz, { TAG: 'crash', MODE: 'slow' }));
    await until(() => runsOf('crash').length === 1, 5_000, 'the run to start');
    await w.runner!.kill();
    assert.deepEqual(await getReady(workerPort), { status: 503, text: 'not ready: runner\n' });
    await until(() => w.stderr().includes('"runner request failed"'), 5_000, 'the worker to see the runner gone');
    await w.restartRunner();
    const outcome = await pending;
    assert.deepEqual(outcome, { value: { manifests: ['{"kind":"ConfigMap","metadata":{"name":"crash"}}'], sourceType: '' } });
    assert.equal(runsOf('crash').length, 2);
    assert.deepEqual(await getReady(workerPort), { status: 200, text: 'ok\n' });
  });

  test('a runner that stays down: its jobs are handed back unspent and the worker stops fetching; once a runner is back, the waiting call is answered', async () => {
    const w = d.workers[0]!;
    // Two attempts only: a job failed for each unreachable runner would be spent at once.
    const proxy = await d.addProxy({ CMP_OFFLOAD_JOB_ATTEMPTS: '2' });
    const c = openCmpClient(proxy.socketPath);
    try {
      // The worker's log from here on (an earlier test's runner crash paused and resumed it too).
      const seen = w.stderr().length;
      const log = () => w.stderr().slice(seen);
      await w.runner!.kill();
      const pending = c.generate(call(tgz, { TAG: 'down' }, 60_000));
      await until(() => log().includes('fetching no jobs until it does'), 20_000, 'the worker to stop fetching');
      await until(() => log().includes('"msg":"job handed back to the queue, not run here"'), 20_000, 'the job to be handed back');
      assert.match(log(), /"why":"cmp-offload: runner at \S+: connection failed: (ECONNREFUSED|ENOENT)","msg":"job handed back to the queue, not run here"/);
      assert.equal(runsOf('down').length, 0);
      // Paused for its runner, the worker is not ready for the runner's sake only, however long
      // the runner stays down: BullMQ's isRunning() turns false once the paused fetch loop ends
      // (its blocking fetch returns within drainDelay, 5 s), which must not add 'worker'.
      for (const end = Date.now() + 7_000; Date.now() < end; await new Promise(r => setTimeout(r, 250))) {
        assert.deepEqual(await getReady(workerPort), { status: 503, text: 'not ready: runner\n' });
      }
      await w.restartRunner();
      await until(() => log().includes('the runner accepts connections again'), 20_000, 'the worker to fetch again');
      assert.deepEqual(await pending, { value: { manifests: ['{"kind":"ConfigMap","metadata":{"name":"down"}}'], sourceType: '' } });
      assert.equal(runsOf('down').length, 1);
    } finally {
      c.close();
      if (!w.runner || w.runner.proc.exitCode !== null || w.runner.proc.signalCode !== null) await w.restartRunner();
    }
  });

  test('worker shutdown cancels its runner requests (the runner kills the group); the runner stops cleanly', async () => {
    const w = d.workers[0]!;
    const pending = client.generate(call(tgz, { TAG: 'shutdown', MODE: 'sleep' }, 20_000));
    await until(() => runsOf('shutdown').length === 1, 5_000, 'the run to start');
    const pgid = groupOf(runsOf('shutdown')[0]!);
    assert.ok(groupAlive(pgid), 'the run is going on');
    const started = Date.now();
    w.proc.kill('SIGTERM');
    // Its log says why when it did not stop cleanly (seen once under a load average of 14).
    assert.equal(await w.exited, 0, w.stderr().split('\n').slice(-15).join('\n'));
    // Grace 1 s, then the cancel; well before the 4 s exec timeout.
    await until(() => !groupAlive(pgid!), 3_000 - (Date.now() - started), 'the group to be killed');
    const runner = w.runner!;
    // Its log says why when it did not stop cleanly (a failed sweep exits 1; seen once in CI).
    assert.equal(await runner.stop(), 0, runner.stderr().split('\n').slice(-15).join('\n'));
    assert.equal(fs.existsSync(runner.dirs.socketPath), false, 'socket removed');
    assert.equal(fs.existsSync(path.join(runner.dirs.workDir, '_cmp_server')), false, 'work root removed');
    d.workers.splice(d.workers.indexOf(w), 1);
    await w.stop();
    await d.addWorker();
    // Retried on the new worker, where it runs into the exec timeout.
    const outcome = await pending;
    assert.ok('code' in outcome && /` failed timeout after 4s$/.test(outcome.details), JSON.stringify(outcome));
    assert.equal(runsOf('shutdown').length, 2);
  });
});

test('version skew between worker and runner is refused with runnerSkew and nothing runs', async () => {
  const d = await startDistributed({
    pluginYaml: pluginYaml('rskew', SPEC),
    runnerPluginYaml: pluginYaml('rskew', SPEC.replace('sleep 2', 'sleep  2')),
    socketName: 'rskew.sock',
    workers: 1,
    env: ENV,
  });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const outcome = await client.generate(call(await tarballOf({ 'f.txt': 'x' }), { TAG: 'rskew' }));
    assertOurError('runnerSkew', outcome, [ANY, ANY]);
    assert.equal(runsOf('rskew').length, 0);
  } finally {
    client.close();
    await d.stop();
  }
});

/** What the lying runner answers, by the request's LIE env entry; every lie carries LIE-TEXT. */
function lie(kind: string): Buffer {
  const frame = (payload: string | Buffer) => {
    const body = Buffer.from(payload);
    const prefix = Buffer.alloc(5);
    prefix.writeUInt8(4, 0);
    prefix.writeUInt32BE(body.length, 1);
    return Buffer.concat([prefix, body]);
  };
  const ok = (result: unknown, extra = {}) => frame(JSON.stringify({ v: 1, ok: true, result, ...extra }));
  switch (kind) {
    case 'honest':
      return ok({ kind: 'generate', manifests: ['{"honest":1}'] });
    case 'failure':
      return frame(JSON.stringify({ v: 1, ok: false, code: Status.INVALID_ARGUMENT, message: 'the plugin said no' }));
    case 'garbage':
      return frame('LIE-TEXT {');
    case 'kind':
      return ok({ kind: 'match', isSupported: true, isDiscoveryEnabled: true, LIE: 'LIE-TEXT' });
    case 'number':
      return ok({ kind: 'generate', manifests: ['LIE-TEXT', 1] });
    case 'object':
      return ok({ kind: 'generate', manifests: [{ toString: 'LIE-TEXT' }] });
    case 'version':
      return frame(JSON.stringify({ v: 2, ok: true, result: { kind: 'generate', manifests: ['LIE-TEXT'] } }));
    case 'code0':
      return frame(JSON.stringify({ v: 1, ok: false, code: 0, message: 'LIE-TEXT' }));
    case 'twice':
      return Buffer.concat([ok({ kind: 'generate', manifests: ['LIE-TEXT'] }), ok({ kind: 'generate', manifests: ['LIE-TEXT'] })]);
    case 'reads':
      return ok({ kind: 'generate', manifests: ['LIE-TEXT'] }, { reads: { complete: true, touched: [], listed: [], moved: [], traversed: [] } });
    case 'stages':
      return ok({ kind: 'generate', manifests: ['LIE-TEXT'] }, { stages: { exec: -1 } });
    case 'oversized': {
      const prefix = Buffer.alloc(5);
      prefix.writeUInt8(4, 0);
      prefix.writeUInt32BE(0xfffffff0, 1);
      return Buffer.concat([prefix, Buffer.from('LIE-TEXT')]);
    }
    case 'wrong-type':
      return Buffer.concat([Buffer.from([9, 0, 0, 0, 8]), Buffer.from('LIE-TEXT')]);
    default:
      return Buffer.alloc(0); // hang up without an answer
  }
}

/**
 * A runner that speaks the framing and lies: reads the header frame, answers `lie(LIE)`, or
 * `silent`: never answers; `trickle`: starts an answer and sends one byte of it every 200 ms.
 */
async function startLyingRunner(socketPath: string): Promise<net.Server> {
  const server = net.createServer(socket => {
    let buf = Buffer.alloc(0);
    let answered = false;
    socket.on('error', () => {});
    socket.on('data', chunk => {
      if (answered) return;
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 5 || buf.length < 5 + buf.readUInt32BE(1)) return;
      const header = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString()) as { env: { name: string; value: string }[] };
      answered = true;
      const kind = header.env.find(e => e.name === 'ARGOCD_ENV_LIE')?.value ?? '';
      if (kind === 'silent') return;
      if (kind === 'trickle') {
        const answer = lie('honest');
        let sent = 0;
        const timer = setInterval(() => {
          if (sent < answer.length) socket.write(answer.subarray(sent, ++sent));
        }, 200);
        socket.on('close', () => clearInterval(timer));
        return;
      }
      socket.end(crafted.get(kind) ?? lie(kind));
    });
  });
  await new Promise<void>(resolve => server.listen(socketPath, resolve));
  return server;
}

interface LyingSetup {
  client: CmpTestClient;
  worker: Awaited<ReturnType<typeof startWorker>>;
  tgz: Buffer;
}

/** A worker whose runner is the lying runner (one attempt per job), for `fn`. */
async function withLyingRunner(name: string, workerEnv: Record<string, string>, fn: (s: LyingSetup) => Promise<void>): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-fake-runner-'));
  const socketPath = path.join(dir, 'runner.sock');
  const fake = await startLyingRunner(socketPath);
  const d = await startDistributed({ pluginYaml: pluginYaml(name, SPEC), socketName: `${name}.sock`, workers: 0, env: ENV, proxyEnv: { CMP_OFFLOAD_JOB_ATTEMPTS: '1' } });
  const worker = await startWorker({ pluginYaml: pluginYaml(name, SPEC), runner: 'unset', env: { ...d.env, ...ENV, CMP_OFFLOAD_RUNNER_SOCKET: socketPath, ...workerEnv } });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    await fn({ client, worker, tgz: await tarballOf({ 'f.txt': 'x' }) });
  } finally {
    client.close();
    await worker.stop();
    await d.stop();
    await new Promise(resolve => fake.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('a runner answer that is garbage, oversized or of the wrong shape is never relayed as the result', async () => {
  // A worker on the content cache asks its runner for no read record: the \`reads\` lie is reads
  // nobody asked for (with the traced default every generate asks for them).
  await withLyingRunner('fake', { CMP_OFFLOAD_CACHE: 'on' }, async ({ client, worker, tgz }) => {
    // The fake works: an honest answer and a plugin failure come through as they are.
    assert.deepEqual(await client.generate(call(tgz, { LIE: 'honest' })), { value: { manifests: ['{"honest":1}'], sourceType: '' } });
    assert.deepEqual(await client.generate(call(tgz, { LIE: 'failure' })), { code: Status.INVALID_ARGUMENT, details: 'the plugin said no' });
    for (const kind of ['garbage', 'kind', 'number', 'object', 'version', 'code0', 'twice', 'reads', 'stages', 'oversized', 'wrong-type', 'hangup']) {
      const outcome = await client.generate(call(tgz, { LIE: kind }));
      // One attempt per job (see withLyingRunner): that run's infrastructure failure is final.
      assertOurError('jobGaveUp', outcome, [ANY, 'fake', 1, ANY]);
      assert.ok('code' in outcome);
      assert.match(outcome.details, /\(CMP_OFFLOAD_JOB_ATTEMPTS\): the last: cmp-offload: runner at /, kind);
      assert.ok(!outcome.details.includes('LIE-TEXT'), `${kind}: ${outcome.details}`);
    }
    assert.ok(!worker.stderr().includes('LIE-TEXT'), 'the runner text reached the log');
  });
});

/** CMP_OFFLOAD_MAX_OUTPUT_BYTES of the event-loop test's worker: its answer frames hold up to 72 MiB. */
const LOOP_OUTPUT_BYTES = 1024 * 1024;
const LOOP_FRAME_MAX = 8 * LOOP_OUTPUT_BYTES + 64 * 1024 * 1024;
/** The crafted answers of the event-loop test, by LIE kind (built before it watches the loop). */
const crafted = new Map<string, Buffer>();

function answerFrame(payload: Buffer): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt8(4, 0);
  prefix.writeUInt32BE(payload.length, 1);
  return Buffer.concat([prefix, payload]);
}

/** A generate answer of exactly `size` bytes: `head`, then `fill(body)` writes the middle, then the closing `]}}`. */
function generateAnswer(size: number, fill: (body: Buffer) => void): Buffer {
  const head = Buffer.from('{"v":1,"ok":true,"result":{"kind":"generate","manifests":[');
  const tail = Buffer.from(']}}');
  const payload = Buffer.alloc(size);
  head.copy(payload, 0);
  tail.copy(payload, size - tail.length);
  fill(payload.subarray(head.length, size - tail.length));
  return answerFrame(payload);
}

const LARGE_MANIFESTS = Array.from({ length: 4 }, (_, i) => JSON.stringify({ i, data: `"é\\`.repeat(512 * 1024) }));

/** Polls the worker's /healthz every 50 ms until `stop()`, which gives the slowest answer (ms). */
function watchHealthz(port: number): { stop: () => Promise<number> } {
  let stopped = false;
  let worst = 0;
  const loop = (async () => {
    while (!stopped) {
      const started = performance.now();
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      await res.text();
      assert.equal(res.status, 200);
      worst = Math.max(worst, performance.now() - started);
      await new Promise(resolve => setTimeout(resolve, 50));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return worst;
    },
  };
}

test("a runner answer crafted to be slow to decode (deep, many strings, maximal) never stalls the worker's event loop", async t => {
  // Nested arrays as deep as the frame allows (JSON.parse took seconds on them).
  crafted.set('deep', generateAnswer(LOOP_FRAME_MAX, body => {
    body.fill('[', 0, body.length >> 1);
    body.fill(']', body.length >> 1, (body.length >> 1) << 1);
    if (body.length % 2) body[body.length - 1] = 0x20;
  }));
  // A maximal frame of tiny manifests: valid shape, but more than one per byte the command may print.
  crafted.set('many', generateAnswer(LOOP_FRAME_MAX, body => {
    body.fill(',"a"');
    body[0] = 0x20;
    body.fill(0x20, body.length - (body.length % 4));
  }));
  crafted.set('large', answerFrame(Buffer.from(JSON.stringify({ v: 1, ok: true, result: { kind: 'generate', manifests: LARGE_MANIFESTS } }))));
  const port = await freePort();
  await withLyingRunner('loop', { CMP_OFFLOAD_MAX_OUTPUT_BYTES: String(LOOP_OUTPUT_BYTES), CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` }, async ({ client, tgz }) => {
    await until(async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.status === 200, 10_000, 'the worker to serve /healthz');
    for (const [kind, refusal] of [['deep', /nests deeper than/], ['many', /more manifests \(\d+\) than the command's output may hold/], ['large', undefined]] as const) {
      const watch = watchHealthz(port);
      const outcome = await client.generate(call(tgz, { LIE: kind }, 120_000));
      const worst = await watch.stop();
      t.diagnostic(`${kind}: the slowest /healthz answer took ${Math.round(worst)} ms`);
      if (refusal) {
        assert.ok('code' in outcome && outcome.code === Status.ABORTED, `${kind}: ${JSON.stringify(outcome).slice(0, 500)}`);
        assert.match(outcome.details, /^cmp-offload: job \S+ of plugin loop was given up after 1 run [^:]+: the last: cmp-offload: runner at \S+ gave an invalid answer: /, kind);
        assert.match(outcome.details, refusal, kind);
      } else {
        assert.ok('value' in outcome, `${kind}: ${JSON.stringify(outcome).slice(0, 500)}`);
        assert.deepEqual(outcome.value.manifests, LARGE_MANIFESTS, kind);
      }
      assert.ok(worst < 1_000, `${kind}: the worker's /healthz took ${Math.round(worst)} ms to answer`);
    }
  });
  crafted.clear();
});

test('a runner that never answers, or trickles its answer, is hung up on: an infrastructure failure within its commands\' time', async () => {
  // Two commands of 1s + 500ms each, then the 5.5s grace (500ms + 5s) a cancelled runner gets.
  await withLyingRunner('silent', { ARGOCD_EXEC_TIMEOUT: '1s', ARGOCD_EXEC_FATAL_TIMEOUT: '500ms' }, async ({ client, worker, tgz }) => {
    for (const [kind, boundMs, reason] of [
      ['silent', 8_500, /no answer within 8\.5s /],
      ['trickle', 5_500, /the answer did not arrive within 5\.5s of its first byte/],
    ] as const) {
      const started = Date.now();
      const outcome = await client.generate(call(tgz, { LIE: kind }, 60_000));
      const took = Date.now() - started;
      assert.ok('code' in outcome && outcome.code === Status.ABORTED, `${kind}: ${JSON.stringify(outcome)}`);
      assert.match(outcome.details, /^cmp-offload: job \S+ of plugin silent was given up after 1 run [^:]+: the last: cmp-offload: runner at \S+: /, kind);
      assert.match(outcome.details, reason, kind);
      assert.ok(took >= boundMs - 500 && took < boundMs + 4_000, `${kind}: failed after ${took} ms`);
    }
    assert.match(worker.stderr(), /no answer within 8\.5s [^\n]*"msg":"runner request failed"/);
  });
});

/** Run `cmp-offload <role>` until it exits; its exit code and stderr. */
async function runToExit(role: string, dir: string, env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const base = { ...process.env };
  delete base.CMP_OFFLOAD_RUNNER_SOCKET;
  const proc = spawn(process.execPath, [BIN, role, '--config-dir-path', dir], { env: { ...base, ARGOCD_CMP_WORKDIR: dir, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const code = await new Promise<number | null>(resolve => proc.once('exit', resolve));
  return { code, stderr };
}

test('the runner refuses to start with credentials in its env; the worker refuses to start without CMP_OFFLOAD_RUNNER_SOCKET', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-refuse-'));
  fs.writeFileSync(path.join(dir, 'plugin.yaml'), pluginYaml('refuse', SPEC));
  const socketPath = path.join(dir, 'runner.sock');
  try {
    for (const [name, value] of [['CMP_OFFLOAD_REDIS_URL', 'redis://127.0.0.1:1'], ['CMP_OFFLOAD_SIGNING_KEY', TEST_SIGNING_KEY], ['CMP_OFFLOAD_SIGNING_KEY_FILE', keyFile]] as const) {
      const { code, stderr } = await runToExit('runner', dir, { CMP_OFFLOAD_RUNNER_SOCKET: socketPath, [name]: value });
      assert.equal(code, 1, name);
      assert.match(stderr, new RegExp(`^cmp-offload runner refuses to start: ${name} set in its environment\\. `), name);
      assert.equal(fs.existsSync(socketPath), false);
    }
    const worker = await runToExit('worker', dir, { CMP_OFFLOAD_REDIS_URL: 'redis://127.0.0.1:1', CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY });
    assert.equal(worker.code, 1);
    assert.match(worker.stderr, /^cmp-offload worker needs CMP_OFFLOAD_RUNNER_SOCKET: .* or in-process to run them inside the worker/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** Send `bytes` to a runner in one write; the frames it answers with, once it closes. */
// A worker writes the header, then the tarball; a runner slow to read (a busy node) gets both
// in one read. The runner once checked every frame of a read before handling the header, so
// it refused the DATA frame as unexpected and hung up: the job was retried, and failed with
// UNAVAILABLE when every attempt met the same race.
test('a header and its tarball that reach the runner in one read are one request, answered', async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-runner-oneread-'));
  const yaml = pluginYaml('oneread', SPEC);
  const runner = await startRunner(runnerDirs(base, yaml), { ...process.env, ...ENV });
  try {
    const tgz = await tarballOf({ 'f.txt': 'x' });
    const header = {
      v: RUNNER_PROTOCOL_VERSION,
      kind: 'generate',
      appRelPath: '.',
      env: [{ name: 'ARGOCD_ENV_TAG', value: 'oneread' }],
      recordReads: false,
      specDigest: pluginSpecDigest(parsePluginConfig(yaml)),
      size: tgz.length,
    };
    // What is on disk when the answer arrives: a worker may report the job done at once.
    let onDisk: string[] = [];
    const request = Buffer.concat([encodeFrame(FrameType.HEADER, JSON.stringify(header)), encodeFrame(FrameType.DATA, tgz)]);
    const frames = await askRunnerAtOnce(runner.dirs.socketPath, request, () => (onDisk = filesUnder(runner.dirs.workDir)));
    assert.deepEqual(onDisk, [], 'the tarball and the work dir are removed before the answer');
    assert.equal(frames.length, 1, runner.stderr());
    assert.equal(frames[0]!.type, FrameType.ANSWER);
    const answer = JSON.parse(frames[0]!.payload) as { ok: boolean; result: unknown };
    assert.deepEqual({ ok: answer.ok, result: answer.result }, { ok: true, result: { kind: 'generate', manifests: ['{"kind":"ConfigMap","metadata":{"name":"oneread"}}'] } });
    assert.equal(runsOf('oneread').length, 1);
    assert.doesNotMatch(runner.stderr(), /protocol error/);
  } finally {
    await runner.stop();
    fs.rmSync(base, { recursive: true, force: true });
  }
});

/** The entries of a runner's work root (`<ARGOCD_CMP_WORKDIR>/_cmp_server`). */
function filesUnder(workDir: string): string[] {
  const root = path.join(workDir, '_cmp_server');
  return fs.existsSync(root) ? fs.readdirSync(root) : [];
}
