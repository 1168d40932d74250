/**
 * The plugin socket through the client Argo CD actually uses: grpc-go, built at test time from
 * Debian's golang-go and golang-google-grpc-dev (GOPATH mode, nothing downloaded) from
 * test/go-client/main.go. Messages are encoded here and passed through its raw codec. The core
 * cases of the contract: manifests, discovery, parameters, a failure with a long stderr, the
 * deadline and a cancel reaching the plugin's processes, and keepalive pings at Argo's interval.
 * Skipped without Go, except under CI=true, where it fails.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import {
  AppStreamRequest,
  CheckPluginConfigurationResponse,
  ManifestResponse,
  ParametersAnnouncementResponse,
  RepositoryResponse,
  type EnvEntry,
} from '../../proto/generated/cmpserver/plugin/plugin.js';
import { chunksOf, fileMessage, metadataMessage, repoMetadata } from '../helpers/grpc-client.js';
import { REPO_ROOT } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { inCI } from '../unit/infra/kubectl.js';
import { MODES, startCmp, type CmpServer } from './harness.js';

const SERVICE = '/plugin.ConfigManagementPluginService';
const goMissing = spawnSync('go', ['version'], { encoding: 'utf8' }).status !== 0;
const skip = !inCI && goMissing && 'go is not installed (Debian: golang-go golang-google-grpc-dev)';

const work = pluginWritableTempDir('cmp-go-client-');
const markers = path.join(work, 'markers');
fs.mkdirSync(markers);
fs.chmodSync(markers, 0o1777);
const binary = path.join(work, 'cmp-go-client');
after(() => fs.rmSync(work, { recursive: true, force: true }));

before(() => {
  if (skip) return;
  if (goMissing) assert.fail('go does not run; CI=true requires the grpc-go client tests (.ci/run installs golang-go and golang-google-grpc-dev)');
  const built = spawnSync('go', ['build', '-o', binary, '.'], {
    cwd: path.join(REPO_ROOT, 'test', 'go-client'),
    env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOFLAGS: '' },
    encoding: 'utf8',
  });
  assert.equal(built.status, 0, `go build failed (is golang-google-grpc-dev installed?): ${built.stderr}`);
});

interface GoCall {
  method: string;
  stream?: boolean;
  messages?: Uint8Array[];
  timeoutMs?: number;
  cancelAfterMs?: number;
  /** Cancel `cancelAfterMs` after this file appears (the plugin runs), whatever the load. */
  cancelWhenFile?: string;
  keepaliveMs?: number;
}

/** One call through the grpc-go client: its status code, message and raw responses. */
async function goCall(socket: string, c: GoCall): Promise<{ code: number; message: string; responses: Buffer[] }> {
  const child = spawn(binary, [], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const input = { socket, ...c, method: `${SERVICE}/${c.method}`, messages: (c.messages ?? []).map(m => Buffer.from(m).toString('base64')) };
  child.stdin.end(JSON.stringify(input));
  const code = await new Promise<number | null>(resolve => child.on('close', resolve));
  assert.equal(code, 0, `go client exited ${code}: ${err}`);
  const res = JSON.parse(out) as { code: number; message: string; responses: string[] };
  return { code: res.code, message: res.message, responses: res.responses.map(r => Buffer.from(r, 'base64')) };
}

/** The repo-server's message sequence for a tarball: metadata, then 1 KiB chunks. */
async function streamOf(files: Record<string, string>, env: Record<string, string> = {}): Promise<Uint8Array[]> {
  const tgz = await tarballOf(files);
  const entries: EnvEntry[] = Object.entries(env).map(([name, value]) => ({ name, value }));
  const messages = [metadataMessage(repoMetadata(tgz, { appRelPath: 'app', env: entries })), ...chunksOf(tgz, 1024).map(fileMessage)];
  return messages.map(m => AppStreamRequest.encode(m).finish());
}

const REPO = { 'app/config.yaml': 'replicas: 3\nname: web\n', 'app/marker.yaml': 'x: 1\n' };

/** Plugin behaviours by ARGOCD_ENV_MODE; `beat` writes a heartbeat until it is killed. */
const PLUGIN = pluginYaml(
  'go-client',
  `discover:
  fileName: "./marker.yaml"
parameters:
  static:
    - name: replicas
      title: Replicas
      string: "3"
generate:
  command: [sh, -c]
  args:
    - |
      case "$ARGOCD_ENV_MODE" in
        stderr) yes 'une ligne d’erreur très longue' | head -c 68000 >&2; exit 3 ;;
        beat) while :; do date +%s%N > "$MARKERS/beat-$ARGOCD_ENV_ID"; sleep 0.1; done ;;
        slow) sleep 21; cat config.yaml ;;
        *) cat config.yaml ;;
      esac`,
);

/**
 * Whether the heartbeat stopped within `ms`: `stopped` after a second without a beat, `running`
 * if it beat on, `never started` if the plugin wrote no beat at all (it ran too late to matter).
 * A beat is a new content of the file; a kill between the shell's truncation and `date`'s write
 * leaves it empty for good, which is a stopped heartbeat too.
 */
async function beatStops(id: string, ms: number): Promise<'stopped' | 'running' | 'never started'> {
  const file = path.join(markers, `beat-${id}`);
  const read = () => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined);
  const end = Date.now() + ms;
  let last = read();
  let still = 0;
  while (Date.now() < end) {
    await new Promise(r => setTimeout(r, 250));
    const now = read();
    still = now === last && now !== undefined ? still + 1 : 0;
    last = now;
    if (still >= 4) return 'stopped'; // a second without a beat: the loop is gone
  }
  return last === undefined ? 'never started' : 'running';
}

for (const mode of MODES) {
  describe(`the grpc-go client (${mode})`, { skip }, () => {
    let server: CmpServer;
    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: PLUGIN,
        socketName: 'go-client.sock',
        env: { MARKERS: markers, CMP_OFFLOAD_CACHE: 'off', ARGOCD_EXEC_FATAL_TIMEOUT: '2s' },
        workers: 1,
      });
    });
    after(async () => {
      await server?.stop();
    });

    test('GenerateManifest: the manifests, as Argo decodes them', async () => {
      const res = await goCall(server.socketPath, { method: 'GenerateManifest', stream: true, messages: await streamOf(REPO), timeoutMs: 60_000 });
      assert.deepEqual([res.code, res.message], [Status.OK, '']);
      assert.deepEqual(ManifestResponse.decode(res.responses[0]!), { manifests: ['{"name":"web","replicas":3}'], sourceType: '' });
    });

    test('CheckPluginConfiguration and MatchRepository: discovery as the repo-server runs it', async () => {
      const check = await goCall(server.socketPath, { method: 'CheckPluginConfiguration', timeoutMs: 10_000 });
      assert.equal(check.code, Status.OK, check.message);
      assert.deepEqual(CheckPluginConfigurationResponse.decode(check.responses[0]!), { isDiscoveryConfigured: true, provideGitCreds: false });
      const match = await goCall(server.socketPath, { method: 'MatchRepository', stream: true, messages: await streamOf(REPO), timeoutMs: 60_000 });
      assert.equal(match.code, Status.OK, match.message);
      assert.deepEqual(RepositoryResponse.decode(match.responses[0]!), { isSupported: true, isDiscoveryEnabled: true });
      const other = await goCall(server.socketPath, { method: 'MatchRepository', stream: true, messages: await streamOf({ 'app/config.yaml': 'a: 1\n' }), timeoutMs: 60_000 });
      assert.deepEqual(RepositoryResponse.decode(other.responses[0]!), { isSupported: false, isDiscoveryEnabled: true });
    });

    test('GetParametersAnnouncement: the static parameters', async () => {
      const res = await goCall(server.socketPath, { method: 'GetParametersAnnouncement', stream: true, messages: await streamOf(REPO), timeoutMs: 60_000 });
      assert.equal(res.code, Status.OK, res.message);
      const { parameterAnnouncements } = ParametersAnnouncementResponse.decode(res.responses[0]!);
      assert.deepEqual(parameterAnnouncements.map(p => [p.name, p.title, p.string]), [['replicas', 'Replicas', '3']]);
    });

    test('a command failing with 68 KB of stderr: grpc-go receives the whole status at once', async () => {
      const t0 = Date.now();
      const res = await goCall(server.socketPath, { method: 'GenerateManifest', stream: true, messages: await streamOf(REPO, { ARGOCD_ENV_MODE: 'stderr' }), timeoutMs: 60_000 });
      assert.equal(res.code, Status.UNKNOWN, res.message.slice(0, 300));
      assert.match(res.message, /^error generating manifests: `sh -c [^`]*` failed exit status 3: une ligne d’erreur très longue\n/);
      assert.ok(Buffer.byteLength(res.message) > 64 * 1024, `the status carries ${Buffer.byteLength(res.message)} bytes`);
      assert.ok(Date.now() - t0 < 20_000, `took ${Date.now() - t0} ms`);
    });

    test("the caller's deadline reaches the plugin: DeadlineExceeded, and its processes stop", async () => {
      const id = `deadline-${mode}`;
      const res = await goCall(server.socketPath, {
        method: 'GenerateManifest',
        stream: true,
        messages: await streamOf(REPO, { ARGOCD_ENV_MODE: 'beat', ARGOCD_ENV_ID: id }),
        timeoutMs: 5_000,
      });
      // As with Argo's server: the command is killed 100 ms before the deadline and its error
      // reaches the client if it comes first; else the deadline's own status (grpc-go's client
      // says "context deadline exceeded", grpc-js's server "Deadline exceeded").
      const killed = /^error generating manifests: `sh -c [^`]*` failed signal: (killed|terminated)$/;
      assert.ok(
        (res.code === Status.DEADLINE_EXCEEDED && /^(context deadline exceeded|Deadline exceeded)$/.test(res.message)) ||
          (res.code === Status.UNKNOWN && killed.test(res.message)),
        `${res.code}: ${res.message.slice(0, 300)}`,
      );
      // Under heavy load the 5 s can pass before the plugin starts: then nothing may start later.
      assert.notEqual(await beatStops(id, 15_000), 'running', 'the plugin after the deadline');
    });

    test('a cancel reaches the plugin: Canceled, and its processes stop', async () => {
      const id = `cancel-${mode}`;
      const res = await goCall(server.socketPath, {
        method: 'GenerateManifest',
        stream: true,
        messages: await streamOf(REPO, { ARGOCD_ENV_MODE: 'beat', ARGOCD_ENV_ID: id }),
        cancelWhenFile: path.join(markers, `beat-${id}`),
        cancelAfterMs: 500,
        timeoutMs: 60_000,
      });
      assert.deepEqual([res.code, res.message], [Status.CANCELLED, 'context canceled']);
      assert.equal(await beatStops(id, 15_000), 'stopped', 'the plugin after the cancel');
    });

    if (mode === 'standalone') {
      test("keepalive pings at Argo's interval (20 s) during a 21 s run: answered, no GOAWAY", async () => {
        const res = await goCall(server.socketPath, {
          method: 'GenerateManifest',
          stream: true,
          messages: await streamOf(REPO, { ARGOCD_ENV_MODE: 'slow' }),
          keepaliveMs: 20_000,
          timeoutMs: 60_000,
        });
        assert.deepEqual([res.code, res.message], [Status.OK, '']);
        assert.deepEqual(ManifestResponse.decode(res.responses[0]!).manifests, ['{"name":"web","replicas":3}']);
      });
    }
  });
}
