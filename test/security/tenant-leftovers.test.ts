import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { scrape } from '../helpers/metrics.js';
import { fixturePath } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { startProxy } from '../helpers/proxy-process.js';
import { freePort } from '../helpers/redis-server.js';
import { buildTgz } from '../helpers/tar-builder.js';
import { MODES, startCmp, type CmpServer } from '../e2e/harness.js';

/**
 * What a plugin of one tenant can get of another tenant's request once that request is over
 * (issue 32, findings 4 and 5): nothing of its tarball, and no answer it tampered with.
 */

const SEEK = [process.execPath, fixturePath('e2e', 'seek-marker.mjs')];

/** A standalone proxy whose plugin runs `sh -c script`, with its /metrics on a port of its own. */
async function startShellPlugin(name: string, script: string, env: Record<string, string>) {
  const port = await freePort();
  const server = await startCmp('standalone', {
    pluginYaml: pluginYaml(name, `generate:\n  command: [sh, -c, ${JSON.stringify(script)}]`),
    socketName: `${name}.sock`,
    env: { ...env, CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` },
  });
  return { server, port, client: openCmpClient(server.socketPath) };
}

for (const mode of MODES) {
  describe(`a finished request leaves nothing a later plugin can read (${mode})`, () => {
    let server: CmpServer;
    let client: CmpTestClient;

    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('seek', `generate:\n  command: ${JSON.stringify(SEEK)}`),
        socketName: 'seek.sock',
        // '': the default CMP_OFFLOAD_SPOOL_KEEP_BYTES (the test helper's is 0), the default cache.
        env: { CMP_OFFLOAD_SPOOL_KEEP_BYTES: '', CMP_OFFLOAD_HTTP_ADDR: 'off' },
      });
      client = openCmpClient(server.socketPath);
    });
    after(async () => {
      client?.close();
      await server?.stop();
    });

    const generate = async (files: Record<string, string>, env: Record<string, string>) => {
      const tgz = buildTgz([{ name: 'apps', type: 'dir' }, { name: 'apps/x', type: 'dir' }, ...Object.entries(files).map(([name, content]) => ({ name, content }))]);
      const out = await client.generate({
        metadata: repoMetadata(tgz, { appRelPath: 'apps/x', env: Object.entries(env).map(([name, value]) => ({ name, value })) }),
        chunks: chunksOf(tgz, 1024),
      });
      assert.ok('value' in out, JSON.stringify(out));
      return JSON.parse(out.value.manifests[0]!) as { found: string[]; files: number };
    };

    test("tenant 1's plugin finds none of tenant 2's files after tenant 2's request ended (../../../*.tgz and the rest of the work root)", async () => {
      const marker = `tenant-two-secret-${randomBytes(16).toString('hex')}`;
      const roots = server.workRoots.join(':');
      // Tenant 2: its repository holds the marker (and random bytes, so that its gzip is its own).
      await generate({ 'apps/x/secret.yaml': `password: ${marker}\n`, 'apps/x/noise': randomBytes(4096).toString('hex') }, { ARGOCD_APP_NAME: 'tenant-2' });
      // Tenant 1, afterwards: reads every file in reach.
      const seen = await generate({ 'apps/x/app.yaml': 'a: 1\n' }, { ARGOCD_APP_NAME: 'tenant-1', SEEK_MARKER: marker, SEEK_ROOTS: roots });
      assert.deepEqual(seen.found, [], `tenant 2's bytes found by tenant 1's plugin in ${seen.found.join(', ')}`);
      // The walk did read: its own tree at least.
      assert.ok(mode === 'distributed' || seen.files >= 1, `the plugin read ${seen.files} files`);
    });
  });
}

for (const processes of ['1', '2']) {
  describe(`standalone: an answer another app's plugin rewrote is not served again (proxy processes ${processes})`, () => {
    // ROLE=victim (app b) waits until the attacker has been at its work dir, then prints its
    // values.yaml; ROLE=attacker (app a, same uid) overwrites b's values.yaml beside its own dir.
    const SCRIPT = [
      'case "$ROLE" in',
      '  victim)',
      '    i=0; while [ ! -e "$FLAG" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done',
      '    cat values.yaml ;;',
      '  attacker)',
      '    i=0',
      '    while [ $i -lt 400 ]; do',
      '      for f in ../../*/b/values.yaml; do',
      '        if [ -f "$f" ]; then printf "kind: Poisoned\\n" > "$f"; touch "$FLAG"; echo "kind: Attacker"; exit 0; fi',
      '      done',
      '      sleep 0.05; i=$((i+1))',
      '    done',
      '    echo "kind: Attacker" ;;',
      'esac',
    ].join('\n');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-tamper-'));
    const flag = path.join(dir, 'attacked');
    let server: CmpServer;
    let client: CmpTestClient;
    let port: number;

    before(async () => {
      // Two runs at once, so that the attacker runs beside its victim; the default (traced) cache.
      ({ server, port, client } = await startShellPlugin('tamper', SCRIPT, { CMP_OFFLOAD_CONCURRENCY: '2', CMP_OFFLOAD_PROXY_PROCESSES: processes }));
    });
    after(async () => {
      client?.close();
      await server?.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    const fresh = `kind: Fresh\nn: ${randomBytes(8).toString('hex')}`;
    /** App b's repository: `unrelated` changes a file its plugin never reads. */
    const victimTgz = (unrelated: string) =>
      buildTgz([
        { name: 'b', type: 'dir' },
        { name: 'b/values.yaml', content: `${fresh}\n` },
        { name: 'other', type: 'dir' },
        { name: 'other/unrelated.yaml', content: unrelated },
      ]);
    const generate = async (tgz: Buffer, app: string, env: Record<string, string>) => {
      const out = await client.generate({
        metadata: repoMetadata(tgz, { appRelPath: app, env: [{ name: 'ARGOCD_APP_NAME', value: app }, ...Object.entries(env).map(([name, value]) => ({ name, value }))] }),
        chunks: chunksOf(tgz, 1024),
      });
      assert.ok('value' in out, JSON.stringify(out));
      return out.value.manifests.map(m => JSON.parse(m) as { kind: string });
    };
    const victim = (unrelated: string) => generate(victimTgz(unrelated), 'b', { ROLE: 'victim', FLAG: flag });

    test("b's poisoned answer is not served after a's run: neither for the same tree nor after a commit b does not read", async () => {
      const attacker = buildTgz([{ name: 'a', type: 'dir' }, { name: 'a/x.yaml', content: 'x: 1\n' }]);
      const [poisoned, a] = await Promise.all([victim('v: 1\n'), generate(attacker, 'a', { ROLE: 'attacker', FLAG: flag })]);
      assert.deepEqual(a.map(m => m.kind), ['Attacker']);
      // As under Argo (same uid): the answer of that one request is the attacker's.
      assert.deepEqual(poisoned.map(m => m.kind), ['Poisoned'], 'the attack did not happen: the test shows nothing');
      // After a's run: the same request, then a commit that changes only a file b does not read.
      assert.deepEqual((await victim('v: 1\n')).map(m => m.kind), ['Fresh']);
      assert.deepEqual((await victim('v: 2\n')).map(m => m.kind), ['Fresh']);
      // A run alone is stored: the same request again is a hit.
      const hits = (await scrape(port)).get('cmp_offload_cache_lookups_total{result="hit"}') ?? 0;
      assert.deepEqual((await victim('v: 2\n')).map(m => m.kind), ['Fresh']);
      const m = await scrape(port);
      assert.equal(m.get('cmp_offload_cache_lookups_total{result="hit"}'), hits + 1, 'a run alone was not stored');
      assert.equal(m.get('cmp_offload_cache_unstored_total{reason="overlap"}'), 2, 'the two runs at once were counted');
    });
  });
}

/** A plugin script: with ROLE=killer, run `first`, then SIGKILL the cmp-reap above it; then print a manifest. */
function killerScript(first = ':'): string {
  return [
    'if [ "$ROLE" = killer ]; then',
    `  ${first}`,
    '  p=$$',
    '  while [ "$p" -gt 1 ]; do',
    '    if [ "$(cat /proc/$p/comm)" = cmp-reap ]; then kill -9 "$p"; break; fi',
    "    p=$(awk '{print $4}' /proc/$p/stat)",
    '  done',
    'fi',
    'echo "kind: Done"',
  ].join('\n');
}

describe('standalone: once a plugin killed its cmp-reap, nothing is stored until no stray process can remain', () => {
  // ROLE=killer SIGKILLs the cmp-reap above it (a process it starts could now outlive the run).
  const SCRIPT = killerScript();
  let server: CmpServer;
  let client: CmpTestClient;
  let port: number;

  before(async () => {
    ({ server, port, client } = await startShellPlugin('killer', SCRIPT, { CMP_OFFLOAD_PROXY_PROCESSES: '1' }));
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  const generate = async (role: string) => {
    const tgz = buildTgz([{ name: 'app', type: 'dir' }, { name: 'app/a.yaml', content: 'a: 1\n' }]);
    const out = await client.generate({ metadata: repoMetadata(tgz, { appRelPath: 'app', env: [{ name: 'ROLE', value: role }] }), chunks: chunksOf(tgz, 1024) });
    // The killer's own request fails: its cmp-reap's death stands for the command's.
    if (role === 'killer') assert.match('details' in out ? out.details : '', /failed signal: killed$/);
    else assert.ok('value' in out, JSON.stringify(out));
  };

  test('later runs alone are answered and not stored; said once at error level, and in the metrics', async () => {
    await generate('plain');
    await generate('plain');
    const before = await scrape(port);
    const hits = before.get('cmp_offload_cache_lookups_total{result="hit"}') ?? 0;
    assert.ok(hits >= 1, 'a run alone was not stored');
    await generate('killer');
    for (let i = 0; i < 3; i++) await generate('other');
    const m = await scrape(port);
    assert.equal(m.get('cmp_offload_cache_lookups_total{result="hit"}') ?? 0, hits, 'an answer was stored after the escape');
    assert.deepEqual([before.get('cmp_offload_stray_process_possible'), m.get('cmp_offload_stray_process_possible')], [0, 1]);
    assert.equal(m.get('cmp_offload_cache_unstored_total{reason="stray"}'), 3);
    assert.equal(server.stderr().split('may have escaped its cmp-reap').length - 1, 1, server.stderr());
  });
});

/** Whether this test may make PID namespaces (root, util-linux's unshare). */
const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0;

// Root only (CI runs as root; defined only where it can run: npm test reports no skips).
if (canUnshare) describe('standalone alone in its PID namespace: storing resumes once no stray process is left', () => {
  // ROLE=killer leaves a daemon in a session of its own that ignores SIGTERM and lives 4 s, and
  // SIGKILLs the cmp-reap above it; the daemon is then out of the proxy's reach until it exits.
  const SCRIPT = killerScript(`setsid sh -c 'trap "" TERM HUP; sleep 4' </dev/null >/dev/null 2>&1 &`);
  let server: CmpServer;
  let client: CmpTestClient;
  let port: number;

  before(async () => {
    port = await freePort();
    const proxy = await startProxy({
      pluginYaml: pluginYaml('alone', `generate:\n  command: [sh, -c, ${JSON.stringify(SCRIPT)}]`),
      socketName: 'alone.sock',
      bin: fixturePath('e2e', 'in-pid-namespace.mjs'),
      env: { CMP_OFFLOAD_PROXY_PROCESSES: '1', CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, ARGOCD_CMP_SERVER_LOGLEVEL: 'info' },
    });
    server = { mode: 'standalone', socketPath: proxy.socketPath, workRoots: [proxy.workRoot], proxyPid: proxy.proc.pid!, backendPids: [], stderr: proxy.stderr, stop: () => proxy.stop() };
    client = openCmpClient(server.socketPath);
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  const generate = async (role: string) => {
    const tgz = buildTgz([{ name: 'app', type: 'dir' }, { name: 'app/a.yaml', content: `role: ${role}\n` }]);
    const out = await client.generate({ metadata: repoMetadata(tgz, { appRelPath: 'app', env: [{ name: 'ROLE', value: role }] }), chunks: chunksOf(tgz, 1024) });
    if (role !== 'killer') assert.ok('value' in out, JSON.stringify(out));
  };
  const metric = async (name: string) => (await scrape(port)).get(name) ?? 0;

  test('while the daemon lives nothing is stored; once it is gone the next run alone is stored again', async () => {
    await generate('killer');
    const hits = await metric('cmp_offload_cache_lookups_total{result="hit"}');
    await generate('during');
    await generate('during');
    assert.equal(await metric('cmp_offload_cache_lookups_total{result="hit"}'), hits, 'stored while a stray process lived');
    assert.equal(await metric('cmp_offload_stray_process_possible'), 1);
    // The daemon lives 4 s from the killer's run.
    await new Promise(r => setTimeout(r, 5_000));
    await generate('after');
    await generate('after');
    assert.equal(await metric('cmp_offload_cache_lookups_total{result="hit"}'), hits + 1, 'not stored once the stray process was gone');
    assert.equal(await metric('cmp_offload_stray_process_possible'), 0);
    assert.match(server.stderr(), /no stray plugin process is left in this PID namespace/);
  });
});
