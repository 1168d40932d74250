import fs from 'node:fs';
import path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status, type ServiceError } from '@grpc/grpc-js';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { decodeFailure, type JobFailure } from '../../cmp/queue/job-contract.js';
import { TEST_SIGNING_KEY } from '../helpers/distributed.js';
import { chunksOf, fileMessage, metadataMessage, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { assertServerAnswer, GRPC_JS_DEADLINE_TEXT, wireGenerate, type WireOutcome } from '../helpers/raw-grpc.js';
import { tarballOf } from '../helpers/repo.js';
import { scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/redis-server.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { hostPgid, pluginWritableTempDir } from '../helpers/runner-process.js';
import { signalProxy, statFields } from '../helpers/process-tree.js';

/**
 * Exec timeouts (our deliberate difference, docs/argo-contract.md#deliberate-differences) and the caller's deadline
 * (docs/argo-contract.md#deadlines-and-killing). Each plugin run writes `<marker>.pid` with its process group and a
 * grandchild that would write `<marker>.late` after the kill: the file never appearing proves
 * the whole process tree died.
 */
const markerDir = pluginWritableTempDir('cmp-timeouts-');

// sh traps TERM (ignores it) and starts a grandchild that also ignores TERM and writes the
// marker 3 s later; the main shell then sleeps far longer than any timeout.
const STUBBORN =
  'trap \\"\\" TERM; (trap \\"\\" TERM; sleep 3; echo late > $MARKER.late) & echo $$ > $MARKER.pid; sleep 30 & wait; sleep 30 & wait';
// The grandchild's delay is $LATE seconds (default 3): it must outlast the kill under test.
const POLITE = 'echo $$ > $MARKER.pid; (sleep ${LATE:-3}; echo late > $MARKER.late) & sleep 30';
// POLITE whose grandchild writes the time (ms since epoch) it got SIGTERM to $MARKER.term and exits.
// The pid marker (the group leader's pid: $$ in a subshell is the parent's) is written only once
// the grandchild's trap is set, so a test that signals as soon as it sees the marker cannot catch
// the grandchild before its trap (seen under load); written whole (mv) so it is never read empty.
// The grandchild does not hold the command's output: the answer follows the main process's death,
// not the trap's two spawns (which, at load 13, took longer than the 100 ms buffer).
const TERMED =
  '(trap \\"date +%s%3N > $MARKER.t; mv $MARKER.t $MARKER.term; exit 0\\" TERM; echo \\"$$ $(readlink /proc/self/ns/pid)\\" > $MARKER.p; mv $MARKER.p $MARKER.pid; sleep ${LATE:-3} & wait; echo late > $MARKER.late) >/dev/null 2>&1 & sleep 30';
// A child that ignores SIGTERM holds the command's output open until SIGKILL.
const HOLD = '(trap \\"\\" TERM; echo \\"$$ $(readlink /proc/self/ns/pid)\\" > $MARKER.p; mv $MARKER.p $MARKER.pid; sleep 30) & sleep 30';

function request(tgz: Buffer, marker: string, timeoutMs?: number, late = 3) {
  const env = [{ name: 'MARKER', value: marker }, { name: 'LATE', value: String(late) }];
  return { metadata: repoMetadata(tgz, { env }), chunks: chunksOf(tgz, 1024), timeoutMs };
}

/**
 * The host id of the run's process group recorded in `<marker>.pid` (its id and PID namespace:
 * an isolated runner's `$$` is its namespace's), from a live member; 0 once none is left.
 */
function pgidOf(marker: string): number {
  const [pgid, ns] = fs.readFileSync(`${marker}.pid`, 'utf8').trim().split(' ');
  return hostPgid(Number(pgid), ns!) ?? 0;
}

function groupAlive(pgid: number): boolean {
  if (!(pgid > 0)) return false;
  try {
    process.kill(-pgid, 0);
    // A zombie group leader still answers kill(0); check for live members via /proc.
    return fs.readdirSync('/proc').some(p => {
      if (!/^\d+$/.test(p)) return false;
      try {
        const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
        const fields = statFields(stat);
        return Number(fields[2]) === pgid && fields[0] !== 'Z';
      } catch {
        return false;
      }
    });
  } catch {
    return false;
  }
}

async function assertTreeDied(marker: string, lateSeconds = 3): Promise<void> {
  const pgid = pgidOf(marker);
  await eventually(() => !groupAlive(pgid), 10_000, `process group ${pgid} to die`);
  // The grandchild would have written the marker `lateSeconds` after it started, which is when
  // `<marker>.pid` was written (STUBBORN's a moment before): wait past that, with 1.5 s to spare for
  // a loaded machine, counted from the run's start rather than from the kill.
  const lateBy = fs.statSync(`${marker}.pid`).mtimeMs + lateSeconds * 1000 + 1_500;
  await new Promise(r => setTimeout(r, Math.max(0, lateBy - Date.now())));
  assert.equal(fs.existsSync(`${marker}.late`), false, 'a child survived the kill');
}

/** The failure the worker reported for the newest failed job of the `deadline` queue (distributed mode). */
async function failureOfLastJob(server: CmpServer): Promise<JobFailure> {
  const connection = new Redis(server.redisUrl!, { maxRetriesPerRequest: null });
  const queue = new Queue('deadline', { connection, prefix: '{cmp-offload}' });
  try {
    const end = Date.now() + 15_000;
    for (;;) {
      const newest = (await queue.getFailed()).sort((a, b) => b.timestamp - a.timestamp)[0];
      // Uncached requests bind a job's signed failure to its id (the result id the proxy chose).
      const failure = newest && decodeFailure(Buffer.from(TEST_SIGNING_KEY), newest.id!, newest.id!, newest.failedReason);
      if (failure) return failure;
      if (Date.now() > end) throw new Error(`no failed job with a signed failure: ${newest?.failedReason}`);
      await new Promise(r => setTimeout(r, 50));
    }
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

/** The generate outcomes the proxy counted (its own computation, whoever answered the wire first). */
async function assertComputed(httpPort: number, expected: Record<string, number>): Promise<void> {
  const counted = async () => {
    const m = await scrape(httpPort);
    const out: Record<string, number> = {};
    for (const [k, v] of m) {
      const hit = /^cmp_offload_requests_total\{rpc="generate",outcome="(\w+)"\}$/.exec(k);
      if (hit && v > 0) out[hit[1]!] = v;
    }
    return out;
  };
  // Our answer may come a moment after grpc-js's.
  const end = Date.now() + 5_000;
  let seen = await counted();
  while (JSON.stringify(seen) !== JSON.stringify(expected) && Date.now() < end) {
    await new Promise(r => setTimeout(r, 50));
    seen = await counted();
  }
  assert.deepEqual(seen, expected, 'the generate outcomes the proxy computed');
}

after(() => fs.rmSync(markerDir, { recursive: true, force: true }));

for (const mode of MODES) {
  describe(`exec timeouts (${mode})`, () => {
    let server: CmpServer;
    let client: CmpTestClient;
    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('slow', `generate:\n  command: [sh, -c]\n  args: ["if [ -n \\"$STUBBORN\\" ]; then ${STUBBORN}; else ${POLITE}; fi"]`),
        socketName: 'slow.sock',
        env: { ARGOCD_EXEC_TIMEOUT: '1s', ARGOCD_EXEC_FATAL_TIMEOUT: '500ms', CMP_OFFLOAD_CACHE: 'off' },
      });
      client = openCmpClient(server.socketPath);
    });
    after(async () => {
      client.close();
      await server.stop();
    });
    afterEach(() => eventually(() => leftovers(server).length === 0, 5_000, 'work dirs to be removed'));

    test('a command that exits on SIGTERM fails with Argo\'s timeout text and its children die', async () => {
      const marker = path.join(markerDir, `polite-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const started = Date.now();
      const res = await client.generate(request(tgz, marker));
      assert.ok(Date.now() - started < 8_000);
      assert.ok('code' in res);
      assert.equal(res.code, Status.UNKNOWN);
      assert.match(res.details, /^error generating manifests: `sh -c ".*"` failed timeout after 1s$/);
      await assertTreeDied(marker);
    });

    test('a command that ignores SIGTERM is SIGKILLed after the fatal timeout, with none of its children surviving', async () => {
      const marker = path.join(markerDir, `stubborn-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const res = await client.generate({
        ...request(tgz, marker),
        metadata: repoMetadata(tgz, { env: [{ name: 'MARKER', value: marker }, { name: 'STUBBORN', value: '1' }] }),
      });
      assert.ok('code' in res);
      assert.match(res.details, /^error generating manifests: `sh -c ".*"` failed fatal timeout after 1\.5s$/);
      await assertTreeDied(marker);
    });
  });

  describe(`caller deadline (${mode})`, () => {
    let server: CmpServer;
    let httpPort: number;
    before(async () => {
      httpPort = await freePort();
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('deadline', `generate:\n  command: [sh, -c]\n  args: ["if [ -n \\"$HOLD\\" ]; then ${HOLD}; else ${TERMED}; fi"]`),
        socketName: 'deadline.sock',
        env: { CMP_OFFLOAD_CACHE: 'off' },
        proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${httpPort}` },
      });
    });
    after(async () => {
      await server.stop();
    });

    // These calls go over plain HTTP/2 (wireGenerate): the client sends grpc-timeout but keeps no
    // deadline of its own, so every status seen here is one the server sent. grpc-js on the server
    // still answers `Deadline exceeded` itself at the deadline if our code has not answered by then.

    test('the deadline kills the process group 100 ms early (main process killed, SIGTERM to the group), and a caller still waiting gets Argo\'s signal text', async () => {
      const marker = path.join(markerDir, `deadline-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const timeoutMs = 5_000; // long enough for the command to start even on a loaded machine; it sleeps 30 s
      const started = Date.now();
      const res = await wireGenerate(server.socketPath, request(tgz, marker, timeoutMs, 8));
      // The grandchild's trap may still be running when the answer comes.
      await eventually(() => fs.existsSync(`${marker}.term`), 10_000, 'the grandchild to record its SIGTERM');
      const termAt = Number(fs.readFileSync(`${marker}.term`, 'utf8'));
      // The server measures the deadline from when it got the call (after `started`); the group got
      // SIGTERM no earlier than deadline - 100 ms and, allowing for a loaded machine, about then.
      assert.ok(termAt >= started + timeoutMs - 100, `SIGTERM ${started + timeoutMs - termAt} ms before the caller's deadline`);
      assert.ok(termAt < started + timeoutMs + 1_000, `SIGTERM ${termAt - started - timeoutMs} ms after the caller's deadline`);
      const text = /^error generating manifests: `sh -c ".*"` failed signal: (killed|terminated)$/;
      if (mode === 'standalone') {
        // In-process the answer follows the kill within milliseconds, but the kill timer and
        // grpc-js's deadline timer share the proxy's event loop: a proxy starved for 100 ms (seen at
        // load 5 in CI) runs both in one turn and grpc-js answers at the deadline. What the server
        // computed is on its metrics either way; the text, from the same executor, is checked
        // exactly here when our answer wins and always in distributed mode (on the job).
        await assertComputed(httpPort, { UNKNOWN: 1 });
        assert.ok('status' in res, JSON.stringify(res));
        if (res.status === Status.DEADLINE_EXCEEDED && res.message === GRPC_JS_DEADLINE_TEXT) {
          assert.ok(res.ms >= timeoutMs, `grpc-js answered ${timeoutMs - res.ms} ms before the deadline`);
        } else {
          assert.equal(res.status, Status.UNKNOWN, res.message);
          assert.match(res.message, text);
        }
      } else {
        // Through a worker the answer takes several Redis round trips after the kill; on a loaded
        // machine these can exceed the 100 ms buffer, and grpc-js then answers at the deadline.
        // What the worker reported (and the proxy relays when in time) is checked on the job.
        const failure = await failureOfLastJob(server);
        assert.equal(failure.code, Status.UNKNOWN, failure.message);
        assert.match(failure.message, text);
        assertServerAnswer(res, { code: Status.UNKNOWN, text: failure.message }, timeoutMs);
      }
      await assertTreeDied(marker, 8);
      await eventually(() => leftovers(server).length === 0, 5_000, 'work dirs to be removed');
    });

    test('a proxy starved across the deadline (SIGSTOP) lets grpc-js answer at the deadline, yet still kills the group and computes Argo\'s failure', async () => {
      const marker = path.join(markerDir, `starved-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const timeoutMs = 5_000;
      const started = Date.now();
      const answer = wireGenerate(server.socketPath, request(tgz, marker, timeoutMs, 8));
      await eventually(() => fs.existsSync(`${marker}.pid`), timeoutMs, 'the command to start');
      // Stopped from before the kill timer (deadline - 100 ms) to after the deadline: both timers
      // are overdue when it resumes and run in one turn, kill first, as under a long starvation.
      await new Promise(r => setTimeout(r, Math.max(0, started + timeoutMs - 400 - Date.now())));
      // The proxy's every process (its ingest processes too, with CMP_OFFLOAD_PROXY_PROCESSES > 1).
      signalProxy(server.proxyPid, 'SIGSTOP');
      try {
        await new Promise(r => setTimeout(r, Math.max(0, started + timeoutMs + 400 - Date.now())));
      } finally {
        signalProxy(server.proxyPid, 'SIGCONT');
      }
      const res = await answer;
      assert.ok('status' in res, JSON.stringify(res));
      assert.deepEqual({ status: res.status, message: res.message }, { status: Status.DEADLINE_EXCEEDED, message: GRPC_JS_DEADLINE_TEXT });
      assert.ok(res.ms >= timeoutMs, `grpc-js answered ${timeoutMs - res.ms} ms before the deadline`);
      await eventually(() => fs.existsSync(`${marker}.term`), 10_000, 'the grandchild to record its SIGTERM');
      if (mode === 'standalone') {
        await assertComputed(httpPort, { UNKNOWN: 2 });
      } else {
        const failure = await failureOfLastJob(server);
        assert.equal(failure.code, Status.UNKNOWN, failure.message);
        assert.match(failure.message, /^error generating manifests: `sh -c ".*"` failed signal: (killed|terminated)$/);
      }
      await assertTreeDied(marker, 8);
      await eventually(() => leftovers(server).length === 0, 5_000, 'work dirs to be removed');
    });

    test('a caller that cancels after its upload stops the run: the process group is killed long before it would end', async () => {
      const marker = path.join(markerDir, `cancel-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const raw = openCmpClient(server.socketPath);
      try {
        let ended: ServiceError | null | undefined;
        const stream = raw.raw.generateManifest(err => (ended = err));
        stream.on('error', () => {});
        const req = request(tgz, marker, undefined, 25);
        stream.write(metadataMessage(req.metadata));
        for (const chunk of req.chunks) stream.write(fileMessage(chunk));
        stream.end();
        // The run has started (the upload is complete); only now does the caller give up.
        await eventually(() => fs.existsSync(`${marker}.pid`), 15_000, 'the plugin run to start');
        const pgid = pgidOf(marker);
        const cancelledAt = Date.now();
        stream.cancel();
        await eventually(() => ended !== undefined, 5_000, 'the call to end');
        assert.equal(ended?.code, Status.CANCELLED);
        // Without the cancel the group lives 30 s (and its grandchild 25 s): dying within 10 s is the server's doing.
        await eventually(() => !groupAlive(pgid), 10_000, `process group ${pgid} to be killed after the cancel`);
        assert.ok(fs.existsSync(`${marker}.term`), 'the grandchild got no SIGTERM');
        assert.ok(Number(fs.readFileSync(`${marker}.term`, 'utf8')) >= cancelledAt - 50, 'SIGTERM came before the cancel');
        await eventually(() => leftovers(server).length === 0, 5_000, 'work dirs to be removed');
      } finally {
        raw.close();
      }
    });

    test('a caller whose deadline passes while the command\'s children still hold its output gets DEADLINE_EXCEEDED at the deadline; the group is SIGKILLed 5 s later', async () => {
      // The main process is killed at deadline - 100 ms, but a child that ignores SIGTERM keeps the
      // output pipe open until the group's SIGKILL 5 s later: no answer can come before the deadline.
      const marker = path.join(markerDir, `hold-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const timeoutMs = 3_000;
      const env = [{ name: 'MARKER', value: marker }, { name: 'HOLD', value: '1' }];
      const res = await wireGenerate(server.socketPath, { metadata: repoMetadata(tgz, { env }), chunks: chunksOf(tgz, 1024), timeoutMs });
      const answeredAt = Date.now();
      assert.ok('status' in res, JSON.stringify(res));
      assert.deepEqual([res.status, res.message], [Status.DEADLINE_EXCEEDED, GRPC_JS_DEADLINE_TEXT], 'grpc-js answered at the deadline: our code had no answer yet');
      assert.ok(res.ms >= timeoutMs, `answered after ${res.ms} ms, before the ${timeoutMs} ms deadline`);
      const pgid = pgidOf(marker);
      assert.ok(groupAlive(pgid), 'the holding child got SIGTERM only, not yet SIGKILL');
      await eventually(() => !groupAlive(pgid), 12_000, `process group ${pgid} to be SIGKILLed`);
      assert.ok(Date.now() - answeredAt > 3_000, `the group died ${Date.now() - answeredAt} ms after the deadline, before its 5 s of SIGTERM grace`);
      await eventually(() => leftovers(server).length === 0, 5_000, 'work dirs to be removed');
    });

    test('a request whose deadline has passed (inside the 100 ms buffer) on arrival is answered by the server with Argo\'s context error and runs nothing', async () => {
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const marker = path.join(markerDir, `never-${mode}`);
      // grpc-timeout 100 ms: deadline - 100 ms is already past when the call arrives, so Go's
      // receive loop fails before its first Recv after the header. grpc-js's own timer would
      // answer `Deadline exceeded` 100 ms after arrival: on a loaded machine that can beat our
      // answer, so such a round is tried again (a server ignoring the deadline never answers).
      let res: WireOutcome | undefined;
      for (let round = 0; round < 3 && (!res || ('status' in res && res.message === GRPC_JS_DEADLINE_TEXT)); round++) {
        res = await wireGenerate(server.socketPath, request(tgz, marker, 100));
      }
      assert.ok(res && 'status' in res, JSON.stringify(res));
      assert.deepEqual(
        [res.status, res.message],
        [Status.DEADLINE_EXCEEDED, 'generate manifest error receiving stream: error receiving tgz file: stream context error: context deadline exceeded'],
      );
      // A command that had started (here or on a worker) writes its pid at once.
      await new Promise(r => setTimeout(r, 3_000));
      assert.equal(fs.existsSync(`${marker}.pid`), false, 'the command ran');
      assert.deepEqual(leftovers(server), []);
    });
  });
}
