/**
 * A repository whose plugin run executes hostile code (test/security/lib/attack-hook.ts): it
 * looks for the service's credentials in its env, in every /proc/<pid>/environ and cmdline of
 * the test's processes it can read and in the signing key file, tries Redis without the
 * password, planting an entry for the victim app, and then uses whatever password and key it
 * found to write correctly signed entries with its own manifest over the victim's cache entries.
 * Nothing may succeed, and the victim app must keep receiving its own manifests — in both
 * modes. In distributed mode the plugin runs in the runner (the pod's second container,
 * test/helpers/runner-process.ts: another uid when the tests run as root).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startDistributed, type Distributed } from '../helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { startProxy, type ProxyProcess } from '../helpers/proxy-process.js';
import { tarballOf } from '../helpers/repo.js';
import { RUNNER_UID } from '../helpers/runner-process.js';
import { generateCall } from '../integration/distributed-helpers.js';
import { ATTACK_HOOK } from './lib/attack-hook.js';

const PLUGIN = pluginYaml('hostile', `generate:
  command: [sh, -c]
  args: ['if [ -f hook.mjs ]; then exec node hook.mjs; fi; cat manifest.yaml']`);
const VICTIM_MANIFEST = '{"apiVersion":"v1","data":{"owner":"victim"},"kind":"ConfigMap","metadata":{"name":"victim"}}';
const MODES = (process.env.CMP_OFFLOAD_E2E_MODES ?? 'standalone,distributed').split(',');

type Outcome = Awaited<ReturnType<CmpTestClient['generate']>>;

function manifests(o: Outcome): string[] {
  assert.ok('value' in o, JSON.stringify(o));
  return o.value.manifests;
}

for (const mode of MODES) {
  describe(`a hostile plugin run (${mode})`, () => {
    const password = randomBytes(12).toString('hex');
    const secrets = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-secrets-'));
    const keyFile = path.join(secrets, 'key');
    let d: Distributed | undefined;
    let standalone: ProxyProcess | undefined;
    let client: CmpTestClient;
    let redis: Redis | undefined;
    let redisPort = 1;

    before(async () => {
      // Standalone mode holds no key and no Redis credentials: there the canaries are the targets.
      fs.writeFileSync(keyFile, randomBytes(32), { mode: 0o600 });
      // Canaries: if any of these reached the plugin's env, the attack reports it (and uses the
      // password). In distributed mode only the proxy gets them: the worker's targets are its own
      // credentials (Redis URL with the password, key file), and the runner container holds no
      // secret (infra/kustomize/base/worker-deployment.yaml) — a canary in the runner's env would
      // be the plugin's to read from /proc (same uid), whatever the code does.
      const canaries = { CMP_OFFLOAD_CACHE_SALT: 'canary', REDIS_PASSWORD: password };
      if (mode === 'distributed') {
        d = await startDistributed({
          pluginYaml: PLUGIN,
          socketName: 'hostile.sock',
          workers: 1,
          redisPassword: password,
          env: { CMP_OFFLOAD_SIGNING_KEY: '', CMP_OFFLOAD_SIGNING_KEY_FILE: keyFile },
          proxyEnv: canaries,
        });
        redisPort = d.redis.port;
        redis = new Redis(d.env.CMP_OFFLOAD_REDIS_URL!);
        client = openCmpClient(d.proxy.socketPath);
      } else {
        standalone = await startProxy({ pluginYaml: PLUGIN, socketName: 'hostile.sock', env: canaries });
        client = openCmpClient(standalone.socketPath);
      }
    });

    after(async () => {
      client.close();
      redis?.disconnect();
      await d?.stop();
      await standalone?.stop();
      fs.rmSync(secrets, { recursive: true, force: true });
    });

    test('reaches no credential and no Redis, and the victim app keeps its own manifests', async t => {
      const victimTgz = await tarballOf({ 'manifest.yaml': `kind: ConfigMap\napiVersion: v1\nmetadata:\n  name: victim\ndata:\n  owner: victim\n` });
      const attackerTgz = await tarballOf({ 'hook.mjs': ATTACK_HOOK });
      const victim = () => client.generate(generateCall(victimTgz, {}, { appName: 'victim', timeoutMs: 60_000 }));
      assert.deepEqual(manifests(await victim()), [VICTIM_MANIFEST]);

      const sameUid = mode === 'distributed' && RUNNER_UID === undefined;
      const attack = await client.generate(generateCall(attackerTgz, {
        KEYFILE: mode === 'distributed' ? keyFile : '/nonexistent',
        REDIS_PORT: String(redisPort),
        SCOPE_PID: String(process.pid),
        SAME_UID: sameUid ? '1' : '0',
      }, { appName: 'attacker', timeoutMs: 60_000 }));
      const [report] = manifests(attack).map(m => JSON.parse(m) as { data: { got: string; redis: string; used: string } });
      t.diagnostic(`attack report: ${JSON.stringify(report!.data)}`);
      // What the attack achieved first, whatever it found: the report says what it got and did.
      assert.deepEqual(manifests(await victim()), [VICTIM_MANIFEST], `the victim's answer after the attack (${JSON.stringify(report!.data)})`);
      if (mode === 'distributed') {
        // The hook did reach Redis over the network: it is the password that keeps it out.
        assert.match(report!.data.redis, /^-NOAUTH/);
        assert.equal(report!.data.used, 'no password found');
      }
      if (!sameUid) {
        assert.equal(report!.data.got, 'nothing');
      } else {
        // Same uid as the worker (tests not run as root): only the env and Redis are separated here;
        // the worker's environ and the 0600 key file are that uid's (the hook uses neither, SAME_UID).
        assert.doesNotMatch(report!.data.got, /env:|redis/);
      }

      // A Redis writer without the signing key replaces every cache entry of the victim.
      if (redis) {
        const entries = await redis.keys('{cmp-offload}:out:hostile:victim:*');
        assert.ok(entries.length >= 1, 'the victim has a cache entry');
        for (const k of entries) await redis.set(k, Buffer.concat([Buffer.from('CMPR1'), randomBytes(64)]));
        assert.equal(await redis.exists(`{cmp-offload}:out:hostile:victim:${'f'.repeat(64)}`), 0, 'the hook planted nothing');
      }
      assert.deepEqual(manifests(await victim()), [VICTIM_MANIFEST]);
    });
  });
}
