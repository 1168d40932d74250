import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startDistributed } from '../helpers/distributed.js';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir, runnerDirs, startRunner } from '../helpers/runner-process.js';
import { startWorker } from '../helpers/worker-process.js';
import { lines, until } from './distributed-helpers.js';

/**
 * The worker and its runner are two containers of one pod and start at the same time. A job
 * the worker fetched before the runner listens would fail and wait for its retry: the worker
 * fetches jobs only once the runner accepts connections.
 */
const markers = pluginWritableTempDir('cmp-runner-start-');
const SPEC = `generate:
  command: [sh, -c, 'echo run >> "$MARKERS/runs"; printf "kind: ConfigMap\\nmetadata:\\n  name: late\\n"']`;

test('a worker whose runner is not up yet fetches no job; once the runner listens the job runs once, at its first attempt', async () => {
  const d = await startDistributed({ pluginYaml: pluginYaml('late', SPEC), socketName: 'late.sock', workers: 0, env: { MARKERS: markers } });
  const client = openCmpClient(d.proxy.socketPath);
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-runner-start-'));
  const dirs = runnerDirs(base, pluginYaml('late', SPEC));
  const tgz = await tarballOf({ 'f.txt': 'x' });
  const redis = new Redis(d.redis.url);
  const waiting = () => redis.llen('{cmp-offload}:late:wait');
  let worker;
  try {
    const pending = client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), timeoutMs: 60_000 });
    await until(async () => (await waiting()) === 1, 10_000, 'the job to be queued');
    // The worker alone: its runner socket does not exist yet.
    const starting = startWorker({ pluginYaml: pluginYaml('late', SPEC), runner: 'unset', env: { ...d.env, MARKERS: markers, CMP_OFFLOAD_RUNNER_SOCKET: dirs.socketPath } });
    await new Promise(resolve => setTimeout(resolve, 2_000));
    assert.equal(await waiting(), 1, 'the job was fetched without a runner');
    const runner = await startRunner(dirs, { ...process.env, MARKERS: markers });
    try {
      worker = await starting;
      assert.deepEqual(await pending, { value: { manifests: ['{"kind":"ConfigMap","metadata":{"name":"late"}}'], sourceType: '' } });
      assert.deepEqual(lines(path.join(markers, 'runs')), ['run']);
      assert.ok(!worker.stderr().includes('"runner request failed"'), worker.stderr());
    } finally {
      await worker?.stop();
      await runner.stop();
    }
  } finally {
    redis.disconnect();
    client.close();
    await d.stop();
    fs.rmSync(base, { recursive: true, force: true });
    fs.rmSync(markers, { recursive: true, force: true });
  }
});
