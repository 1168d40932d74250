/**
 * extractionCrashed: the extraction thread of a real standalone proxy fails. The trigger is an
 * install whose thread entry point is missing (a copy of bin/ and dist/ without
 * dist/cmp/tar/extract-worker.js, as a broken image would ship): the thread dies on start-up,
 * its 'error' event fails the request with our error instead of leaving the caller hanging, and
 * the proxy goes on answering.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { assertOurError } from '../helpers/our-errors.js';
import { REPO_ROOT } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { startProxy, type ProxyProcess } from '../helpers/proxy-process.js';
import { tarballOf } from '../helpers/repo.js';

let install: string;
let entry: string;
let proxy: ProxyProcess;
let client: CmpTestClient;

before(async () => {
  install = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-broken-install-'));
  for (const part of ['bin', 'dist', 'proto', 'package.json']) fs.cpSync(path.join(REPO_ROOT, part), path.join(install, part), { recursive: true });
  fs.symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(install, 'node_modules'));
  entry = path.join(install, 'dist', 'cmp', 'tar', 'extract-worker.js');
  assert.ok(fs.existsSync(entry), 'the copy has the thread entry point before it is removed');
  fs.rmSync(entry);
  proxy = await startProxy({
    pluginYaml: pluginYaml('xcrash', `generate:\n  command: [sh, -c]\n  args: ['echo "{}"']`),
    socketName: 'xcrash.sock',
    bin: path.join(install, 'bin', 'cmp-offload'),
  });
  client = openCmpClient(proxy.socketPath);
});

after(async () => {
  client?.close();
  await proxy?.stop();
  fs.rmSync(install, { recursive: true, force: true });
});

test('extractionCrashed: an extraction thread that dies fails the call with INTERNAL, and the next call too', async () => {
  for (const name of ['first', 'second']) {
    const tgz = await tarballOf({ [`${name}.txt`]: name });
    const outcome = await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), timeoutMs: 20_000 });
    assertOurError('extractionCrashed', outcome, [`Cannot find module '${entry}'`], {
      prefix: 'generate manifest error receiving stream: error decompressing tgz file: ',
    });
  }
});
