import fs from 'node:fs';
import path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';

/**
 * Exec timeouts (our deliberate difference, architecture §2.1) and the caller's deadline
 * (cmp-contract §9.5). Each plugin run writes `<marker>.pid` with its process group and a
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

function request(tgz: Buffer, marker: string, timeoutMs?: number, late = 3) {
  const env = [{ name: 'MARKER', value: marker }, { name: 'LATE', value: String(late) }];
  return { metadata: repoMetadata(tgz, { env }), chunks: chunksOf(tgz, 1024), timeoutMs };
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    // A zombie group leader still answers kill(0); check for live members via /proc.
    return fs.readdirSync('/proc').some(p => {
      if (!/^\d+$/.test(p)) return false;
      try {
        const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
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
  const pgid = Number(fs.readFileSync(`${marker}.pid`, 'utf8'));
  await eventually(() => !groupAlive(pgid), 10_000, `process group ${pgid} to die`);
  // The grandchild would have written the marker `lateSeconds` after start; wait past that.
  await new Promise(r => setTimeout(r, lateSeconds * 1000 + 500));
  assert.equal(fs.existsSync(`${marker}.late`), false, 'a child survived the kill');
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
    let client: CmpTestClient;
    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('deadline', `generate:\n  command: [sh, -c]\n  args: ["${POLITE}"]`),
        socketName: 'deadline.sock',
        env: { CMP_OFFLOAD_CACHE: 'off' },
      });
      client = openCmpClient(server.socketPath);
    });
    after(async () => {
      client.close();
      await server.stop();
    });

    test('the deadline kills the process group (SIGTERM to the group, main process killed) before the caller gives up', async () => {
      const marker = path.join(markerDir, `deadline-${mode}`);
      const tgz = await tarballOf({ 'f.txt': 'x' });
      // Long enough for the command to start even on a loaded machine; the plugin sleeps 30 s.
      const res = await client.generate(request(tgz, marker, 5_000, 8));
      assert.ok('code' in res);
      // Either our error arrives in the last 100 ms, or the client's own deadline wins the race.
      if (res.code === Status.UNKNOWN) assert.match(res.details, /^error generating manifests: `sh -c ".*"` failed signal: (killed|terminated)$/);
      else assert.equal(res.code, Status.DEADLINE_EXCEEDED);
      await assertTreeDied(marker, 8);
      await eventually(() => leftovers(server).length === 0, 5_000, 'work dirs to be removed');
    });

    test('a request whose deadline has already passed when the command would start fails with DEADLINE_EXCEEDED', async () => {
      // 50 ms is inside the 100 ms buffer: the context is done before anything runs.
      const tgz = await tarballOf({ 'f.txt': 'x' });
      const res = await client.generate({ ...request(tgz, path.join(markerDir, 'never'), 50) });
      assert.ok('code' in res);
      assert.equal(res.code, Status.DEADLINE_EXCEEDED);
      assert.equal(fs.existsSync(path.join(markerDir, 'never.pid')), false);
    });
  });
}
