/**
 * Runs are isolated from each other on a runner (docs/security.md#runner-isolation). A hostile plugin run
 * walks /proc up to its cmp-reap, starts daemons in a new session that ignore SIGTERM/SIGHUP
 * (one double forked), plants files in $HOME and $TMPDIR, and SIGKILLs its reaper. The daemons
 * read every /proc/<pid>/environ for the next tenant's secret and rewrite every value.txt under
 * the work root. After the run, nothing it started may be alive in the runner's PID namespace;
 * a later run of another tenant on the same runner must be neither read nor tampered with: its
 * answer is the fresh one, its secret is not stolen, the planted files are gone. Real proxy,
 * worker, runner (in a PID namespace of its own, test/helpers/runner-process.ts) and redis-server.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startDistributed, type Distributed } from '../helpers/distributed.js';
import { openCmpClient, repoMetadata, chunksOf, type CmpTestClient } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { BIN } from '../helpers/paths.js';
import { askRunnerAtOnce, namespaceProcesses, pluginWritableTempDir, runnerDirs, RUNNER_UID, RUNNERS_ISOLATED, startRunner, type RunnerProcess } from '../helpers/runner-process.js';
import { until } from '../integration/distributed-helpers.js';
import { parsePluginConfig, pluginSpecDigest } from '../../cmp/config/plugin-config.js';
import { encodeFrame, FrameType, RUNNER_PROTOCOL_VERSION } from '../../runner/protocol.js';

const SPEC = `generate:
  command: [sh, -c]
  args:
    - |
      case "$ARGOCD_ENV_MODE" in
        attack)
          reaper=; p=$$
          while [ "$p" -gt 1 ]; do
            if [ "$(cat /proc/$p/comm)" = cmp-reap ]; then reaper=$p; break; fi
            p=$(awk '/^PPid:/ {print $2}' /proc/$p/status)
          done
          root="\${PWD%%/_cmp_server/*}/_cmp_server"
          echo planted > "$HOME/.planted"; echo planted > "$TMPDIR/planted"
          daemon='trap "" TERM HUP INT
            while :; do
              for e in /proc/[0-9]*/environ; do tr "\\0" "\\n" < "$e" 2>/dev/null | grep "^ARGOCD_ENV_SECRET=" >> "$MARKERS/stolen"; done
              find "$ROOT" -name value.txt 2>/dev/null | while read -r f; do echo poisoned > "$f"; done
              date +%s%N > "$MARKERS/heartbeat-$WHO"
              sleep 0.05
            done'
          ROOT=$root WHO=a setsid sh -c "$daemon" </dev/null >/dev/null 2>&1 &
          ROOT=$root WHO=b setsid sh -c "(ROOT=$root WHO=b sh -c '$daemon' &) ; exit 0" </dev/null >/dev/null 2>&1 &
          until [ -f "$MARKERS/heartbeat-a" ] && [ -f "$MARKERS/heartbeat-b" ]; do sleep 0.02; done
          echo "$reaper" > "$MARKERS/reaper"
          [ -n "$reaper" ] && kill -9 "$reaper"
          printf 'kind: ConfigMap\\nmetadata:\\n  name: attacker\\n';;
        peek)
          n=0
          for p in 1 2; do cat /proc/$p/environ >/dev/null 2>&1 && n=$((n + 1)); done
          printf 'kind: ConfigMap\\nmetadata:\\n  name: peek\\ndata:\\n  readable: "%s"\\n  runner: "%s"\\n' "$n" "$(tr '\\0' ' ' < /proc/2/cmdline)";;
        victim)
          sleep 1
          # Processes of the attacker's daemons (this script's own text names them too: skipped).
          daemons=0
          for f in /proc/[0-9]*/cmdline; do
            case "$(tr '\\0' ' ' < "$f" 2>/dev/null)" in *ARGOCD_ENV_MODE*) ;; *heartbeat*) daemons=$((daemons + 1));; esac
          done
          printf 'kind: ConfigMap\\nmetadata:\\n  name: victim\\ndata:\\n  value: "%s"\\n  home: "%s"\\n  tmp: "%s"\\n  daemons: "%s"\\n' "$(cat value.txt)" "$(ls -A "$HOME")" "$(ls -A "$TMPDIR")" "$daemons";;
      esac`;

function call(tgz: Buffer, env: Record<string, string>, timeoutMs = 30_000) {
  const entries = Object.entries(env).map(([k, v]) => ({ name: `ARGOCD_ENV_${k}`, value: v }));
  return { metadata: repoMetadata(tgz, { env: entries }), chunks: chunksOf(tgz, 1024), timeoutMs };
}

/** Processes alive in the runner's PID namespace other than PID 1 and the runner itself. */
function strays(r: RunnerProcess): { nsPid: number; cmd: string }[] {
  const runnerHostPid = namespaceProcesses(r.init!).find(p => p.nsPid === 2)?.hostPid;
  return namespaceProcesses(r.init!)
    .filter(p => p.alive && p.nsPid !== 1 && p.hostPid !== runnerHostPid)
    .map(p => ({ nsPid: p.nsPid, cmd: safeRead(`/proc/${p.hostPid}/cmdline`).replace(/\0/g, ' ').trim() }));
}

function safeRead(file: string): string {
  try {
    return fs.readFileSync(file, 'latin1');
  } catch {
    return '';
  }
}

for (const concurrency of [1, 2]) {
  describe(`isolated runners (CMP_OFFLOAD_CONCURRENCY=${concurrency}): a run's processes and files do not outlive it`, { skip: !RUNNERS_ISOLATED && 'runners run isolated only when the tests run as root (unshare)' }, () => {
    const markers = pluginWritableTempDir('cmp-iso-markers-');
    const home = pluginWritableTempDir('cmp-iso-home-');
    const tmp = pluginWritableTempDir('cmp-iso-tmp-');
    let d: Distributed;
    let client: CmpTestClient;

    before(async () => {
      d = await startDistributed({
        pluginYaml: pluginYaml('iso', SPEC),
        socketName: 'iso.sock',
        workers: 1,
        env: { MARKERS: markers, CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_CONCURRENCY: String(concurrency), ARGOCD_EXEC_TIMEOUT: '20s', ARGOCD_EXEC_FATAL_TIMEOUT: '2s' },
        workerEnv: { HOME: home, TMPDIR: tmp, CMP_OFFLOAD_RUNNER_RESET_DIRS: `${home},${tmp}` },
      });
      client = openCmpClient(d.proxy.socketPath);
    });

    after(async () => {
      client?.close();
      await d?.stop();
      for (const dir of [markers, home, tmp]) fs.rmSync(dir, { recursive: true, force: true });
    });

    test('the attacker killed its reaper and left setsid daemons ignoring SIGTERM/SIGHUP: none is alive once its run has ended (the sweep after its answer); the next tenant is neither read nor tampered with', async () => {
      const runners = d.workers[0]!.runners;
      assert.equal(runners.length, concurrency);
      const attackTgz = await tarballOf({ 'x.txt': 'x' });
      const attack = await client.generate(call(attackTgz, { MODE: 'attack' }));
      // Whatever the attacker's own answer (its reaper is gone), the daemons ran and are gone now.
      assert.ok(fs.existsSync(path.join(markers, 'heartbeat-a')) && fs.existsSync(path.join(markers, 'heartbeat-b')), JSON.stringify(attack));
      assert.match(fs.readFileSync(path.join(markers, 'reaper'), 'utf8'), /^\d+\n$/, 'the attacker found its cmp-reap');
      // The answer comes first; the runner then waits for the run's kill sequences and sweeps.
      for (const r of runners) await until(() => strays(r).length === 0, 10_000, 'no process of the run left in the runner').catch(() => assert.deepEqual(strays(r), []));
      const beat = () => `${safeRead(path.join(markers, 'heartbeat-a'))}|${safeRead(path.join(markers, 'heartbeat-b'))}`;
      const last = beat();
      await new Promise(resolve => setTimeout(resolve, 500));
      assert.equal(beat(), last, 'a daemon still beats');

      // Tenants after it, on every runner of the worker (one after the other and at once).
      const secret = `s3cret-${randomBytes(6).toString('hex')}`;
      const victims = Array.from({ length: 2 * concurrency }, (_, i) => `fresh-${i}-${randomBytes(4).toString('hex')}`);
      const answers = await Promise.all(victims.map(async v => client.generate(call(await tarballOf({ 'value.txt': v }), { MODE: 'victim', SECRET: secret }))));
      answers.forEach((a, i) => {
        assert.ok('value' in a, JSON.stringify(a));
        assert.deepEqual(JSON.parse(a.value.manifests[0]!).data, { value: victims[i], home: '', tmp: '', daemons: '0' });
      });
      assert.doesNotMatch(safeRead(path.join(markers, 'stolen')), new RegExp(secret), "the next tenant's env was read");
      // The last victims' own runs are swept after their answers, as the attacker's was.
      for (const r of runners) await until(() => strays(r).length === 0, 10_000, 'no process of the runs left in the runner').catch(() => assert.deepEqual(strays(r), []));
    });

    test('PID 1 (cmp-reap --init) and the runner are not dumpable: a run cannot read their environ (nor ptrace them)', async () => {
      const out = await client.generate(call(await tarballOf({ 'x.txt': 'x' }), { MODE: 'peek' }));
      assert.ok('value' in out, JSON.stringify(out));
      const data = JSON.parse(out.value.manifests[0]!).data;
      assert.match(data.runner, /cmp-offload runner/, 'pid 2 is the runner');
      assert.equal(data.readable, '0');
    });

    test('the sweep time of each run is in the worker\'s job log (stage sweep)', async () => {
      await until(() => d.workers[0]!.stderr().includes('"sweep":'), 5_000, 'a job line with a sweep stage');
    });
  });
}

const SLOW = `generate:
  command: [sh, -c, "sleep 1; printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\n' \\"$ARGOCD_ENV_I\\""]`;

/** One raw request to a runner: its frames back, once it hangs up. */
async function ask(socketPath: string, yaml: string, tgz: Buffer, i: string): Promise<{ type: number; payload: string }[]> {
  const header = {
    v: RUNNER_PROTOCOL_VERSION,
    kind: 'generate',
    appRelPath: '.',
    env: [{ name: 'ARGOCD_ENV_I', value: i }],
    recordReads: false,
    specDigest: pluginSpecDigest(parsePluginConfig(yaml)),
    size: tgz.length,
  };
  return askRunnerAtOnce(socketPath, Buffer.concat([encodeFrame(FrameType.HEADER, JSON.stringify(header)), encodeFrame(FrameType.DATA, tgz)]));
}

describe('an isolated runner runs one request at a time', { skip: !RUNNERS_ISOLATED && 'runners run isolated only when the tests run as root (unshare)' }, () => {
  test('a request that comes during a run is refused with BUSY (nothing runs); one that comes after is served', async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-iso-busy-'));
    const yaml = pluginYaml('busy', SLOW);
    const runner = await startRunner(runnerDirs(base, yaml), { ...process.env });
    try {
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const first = ask(runner.dirs.socketPath, yaml, tgz, 'first');
      await until(() => strays(runner).length > 0, 5_000, 'the first run to start');
      const second = await ask(runner.dirs.socketPath, yaml, tgz, 'second');
      assert.deepEqual(second.map(f => f.type), [FrameType.BUSY]);
      assert.match(JSON.parse(second[0]!.payload).reason, /another request is running/);
      const firstFrames = await first;
      assert.deepEqual(firstFrames.map(f => f.type), [FrameType.ANSWER]);
      assert.deepEqual(JSON.parse(firstFrames[0]!.payload).result.manifests, ['{"kind":"ConfigMap","metadata":{"name":"first"}}']);
      const third = await ask(runner.dirs.socketPath, yaml, tgz, 'third');
      assert.deepEqual(JSON.parse(third[0]!.payload).result.manifests, ['{"kind":"ConfigMap","metadata":{"name":"third"}}']);
    } finally {
      await runner.stop();
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  test('a worker with more jobs at once than runners: a refused job waits for a free runner and is answered, never failed with BUSY', async () => {
    const d = await startDistributed({
      pluginYaml: pluginYaml('busy2', SLOW),
      socketName: 'busy2.sock',
      workers: 1,
      runners: 1,
      env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_CONCURRENCY: '2', ARGOCD_CMP_SERVER_LOGLEVEL: 'info' },
    });
    const client = openCmpClient(d.proxy.socketPath);
    try {
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const answers = await Promise.all(['a', 'b', 'c'].map(i => client.generate(call(tgz, { I: i }))));
      assert.deepEqual(answers.map(a => ('value' in a ? a.value.manifests : a)), ['a', 'b', 'c'].map(i => [`{"kind":"ConfigMap","metadata":{"name":"${i}"}}`]));
      const log = d.workers[0]!.stderr();
      assert.match(log, /CMP_OFFLOAD_CONCURRENCY exceeds the number of runner sockets/);
      assert.doesNotMatch(log, /"runner request failed"/);
    } finally {
      client.close();
      await d.stop();
    }
  });

  test('the runner refuses to start isolated where other processes are in its PID namespace, and as PID 1', async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-iso-start-'));
    const dirs = runnerDirs(base, pluginYaml('start', SLOW));
    const run = (wrap: string[]) =>
      new Promise<{ code: number | null; stderr: string }>(resolve => {
        const child = spawn(wrap[0]!, [...wrap.slice(1), process.execPath, BIN, 'runner', '--config-dir-path', dirs.configDir], {
          env: { ...process.env, ARGOCD_CMP_WORKDIR: dirs.workDir, CMP_OFFLOAD_RUNNER_SOCKET: dirs.socketPath },
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('exit', code => resolve({ code, stderr }));
      });
    const user = RUNNER_UID !== undefined ? ['setpriv', `--reuid=${RUNNER_UID}`, `--regid=${RUNNER_UID}`, '--clear-groups'] : [];
    try {
      // On the host, as a systemd service or a shell would start it: many other processes.
      const host = await run(user.length ? user : ['env']);
      assert.equal(host.code, 1);
      assert.match(host.stderr, /refuses to start with CMP_OFFLOAD_RUNNER_ISOLATION=isolated: it is not alone in its PID namespace/);
      // PID 1 of its namespace itself: nobody reaps what runs leave behind.
      const pid1 = await run(['unshare', '--pid', '--fork', '--mount-proc', ...user]);
      assert.equal(pid1.code, 1);
      assert.match(pid1.stderr, /it is PID 1 of its namespace/);
      assert.ok(fs.existsSync(path.join(base, 'runner-config', 'plugin.yaml')), 'nothing was swept');
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });
});
