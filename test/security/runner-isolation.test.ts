/**
 * Runs are isolated from each other on a runner (README: Runner isolation). A hostile plugin run
 * walks /proc up to its cmp-reap, starts daemons in a new session that ignore SIGTERM/SIGHUP
 * (one double forked), plants files in $HOME and $TMPDIR, and SIGKILLs its reaper. The daemons
 * read every /proc/<pid>/environ for the next tenant's secret and rewrite every value.txt under
 * the work root. After the run, nothing it started may be alive in the runner's PID namespace;
 * a later run of another tenant on the same runner must be neither read nor tampered with: its
 * answer is the fresh one, its secret is not stolen, the planted files are gone. Real proxy,
 * worker, runner (in a PID namespace of its own, test/helpers/runner-process.ts) and redis-server.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startDistributed, type Distributed } from '../helpers/distributed.js';
import { openCmpClient, repoMetadata, chunksOf, type CmpTestClient } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { namespaceProcesses, pluginWritableTempDir, RUNNERS_ISOLATED, type RunnerProcess } from '../helpers/runner-process.js';
import { until } from '../integration/distributed-helpers.js';

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
        victim)
          sleep 1
          printf 'kind: ConfigMap\\nmetadata:\\n  name: victim\\ndata:\\n  value: "%s"\\n  home: "%s"\\n  tmp: "%s"\\n' "$(cat value.txt)" "$(ls -A "$HOME")" "$(ls -A "$TMPDIR")";;
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
        env: { MARKERS: markers, CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_CONCURRENCY: String(concurrency), ARGOCD_EXEC_TIMEOUT: '20s' },
        workerEnv: { HOME: home, TMPDIR: tmp, CMP_OFFLOAD_RUNNER_RESET_DIRS: `${home},${tmp}` },
      });
      client = openCmpClient(d.proxy.socketPath);
    });

    after(async () => {
      client?.close();
      await d?.stop();
      for (const dir of [markers, home, tmp]) fs.rmSync(dir, { recursive: true, force: true });
    });

    test('the attacker killed its reaper and left setsid daemons ignoring SIGTERM/SIGHUP: none is alive once its run has answered; the next tenant is neither read nor tampered with', async () => {
      const runners = d.workers[0]!.runners;
      assert.equal(runners.length, concurrency);
      const attackTgz = await tarballOf({ 'x.txt': 'x' });
      const attack = await client.generate(call(attackTgz, { MODE: 'attack' }));
      // Whatever the attacker's own answer (its reaper is gone), the daemons ran and are gone now.
      assert.ok(fs.existsSync(path.join(markers, 'heartbeat-a')) && fs.existsSync(path.join(markers, 'heartbeat-b')), JSON.stringify(attack));
      assert.match(fs.readFileSync(path.join(markers, 'reaper'), 'utf8'), /^\d+\n$/, 'the attacker found its cmp-reap');
      for (const r of runners) assert.deepEqual(strays(r), [], 'processes left in the runner after the run');
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
        assert.deepEqual(JSON.parse(a.value.manifests[0]!).data, { value: victims[i], home: '', tmp: '' });
      });
      assert.doesNotMatch(safeRead(path.join(markers, 'stolen')), new RegExp(secret), "the next tenant's env was read");
      for (const r of runners) assert.deepEqual(strays(r), []);
    });

    test('the sweep time of each run is in the worker\'s job log (stage sweep)', async () => {
      await until(() => d.workers[0]!.stderr().includes('"sweep":'), 5_000, 'a job line with a sweep stage');
    });
  });
}
