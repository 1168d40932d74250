import fs from 'node:fs';
import path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import { leftovers, MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';

/** Send `tgz` as the repo-server does (1 KiB chunks) with the given metadata overrides. */
function call(tgz: Buffer, opts: Parameters<typeof repoMetadata>[1] = {}) {
  return { metadata: repoMetadata(tgz, opts), chunks: chunksOf(tgz, 1024) };
}

function env(vars: Record<string, string>) {
  return Object.entries(vars).map(([name, value]) => ({ name, value }));
}

const REPO = {
  'apps/a/config.yaml': 'replicas: 3\n',
  'apps/a/Chart.yaml': 'name: a\n',
  'apps/b/kustomization.yaml': 'resources: []\n',
  'apps/b/deep/er/kustomization.yaml': 'resources: []\n',
  'base/common.yaml': 'x: 1\n',
};

/** A generate step that prints `$OUT` verbatim when set (to test splitting), else a small report. */
const GENERATE = [
  'init:',
  '  command: [sh, -c]',
  '  args: ["test -z \\"$FAIL_INIT\\" || { echo \'  init broke  \' >&2; exit 7; }; echo written-by-init > from-init.txt"]',
  'generate:',
  '  command: [sh, -c]',
  '  args: ["if [ -n \\"$OUT\\" ]; then printf \'%s\' \\"$OUT\\"; else cat config.yaml; echo ---; echo \\"init: $(cat from-init.txt)\\"; echo \\"env: $MY_VAR\\"; echo \\"pwd: $(pwd | sed s,.*/,,)\\"; fi"]',
].join('\n');

for (const mode of MODES) {
  describe(`GenerateManifest (${mode})`, () => {
    let server: CmpServer;
    let client: CmpTestClient;
    before(async () => {
      server = await startCmp(mode, {
        pluginYaml: pluginYaml('gen', GENERATE),
        socketName: 'gen.sock',
        env: { MY_VAR: 'from-sidecar', CMP_OFFLOAD_CACHE: 'off' },
      });
      client = openCmpClient(server.socketPath);
    });
    after(async () => {
      client.close();
      await server.stop();
    });
    afterEach(() => assert.deepEqual(leftovers(server), [], 'no work dir left behind'));

    test('runs init then generate in the app dir and returns sorted compact JSON per document', async () => {
      const tgz = await tarballOf(REPO);
      const res = await client.generate(call(tgz, { appRelPath: 'apps/a' }));
      assert.deepEqual(res, {
        value: { manifests: ['{"replicas":3}', '{"env":"from-sidecar","init":"written-by-init","pwd":"a"}'], sourceType: '' },
      });
    });

    test('request env overrides the sidecar env of the same name, and empty values are passed', async () => {
      const tgz = await tarballOf(REPO);
      const res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ MY_VAR: 'from-request', EMPTY: '' }) }));
      assert.ok('value' in res);
      assert.equal(res.value.manifests[1], '{"env":"from-request","init":"written-by-init","pwd":"a"}');
    });

    test('JSON output is passed through byte for byte, YAML is converted with YAML 1.1 typing', async () => {
      const tgz = await tarballOf(REPO);
      const json = '{\n  "kind": "ConfigMap",\n  "apiVersion": "v1", "n": 1.0, "h": "<&>"\n}\n{"b":2}';
      let res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ OUT: json }) }));
      assert.deepEqual(res, { value: { manifests: ['{\n  "kind": "ConfigMap",\n  "apiVersion": "v1", "n": 1.0, "h": "<&>"\n}', '{"b":2}'], sourceType: '' } });
      const yaml = 'b: yes\na: 0777\nc: <&>\n---\n# only a comment\n---\nnull\n---\n- y\n- 1e3\n';
      res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ OUT: yaml }) }));
      assert.deepEqual(res, { value: { manifests: ['{"a":511,"b":true,"c":"\\u003c\\u0026\\u003e"}', '[true,1000]'], sourceType: '' } });
    });

    test('empty output is an empty manifest list', async () => {
      const tgz = await tarballOf(REPO);
      const res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ OUT: '---\n' }) }));
      assert.deepEqual(res, { value: { manifests: [], sourceType: '' } });
    });

    test('a failing init is reported with the quoted command and trimmed stderr', async () => {
      const tgz = await tarballOf(REPO);
      const res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ FAIL_INIT: '1' }) }));
      assert.deepEqual(res, {
        code: Status.UNKNOWN,
        details:
          'error generating manifests: `sh -c "test -z \\"$FAIL_INIT\\" || { echo \'  init broke  \' >&2; exit 7; }; echo written-by-init > from-init.txt"` failed exit status 7: init broke',
      });
    });

    test('unparseable output fails the whole request with the splitter error', async () => {
      const tgz = await tarballOf(REPO);
      let res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ OUT: 'a: 1\n--- b: 2\n' }) }));
      assert.deepEqual(res, { code: Status.UNKNOWN, details: 'error generating manifests: failed to unmarshal manifest: invalid Yaml document separator: b: 2' });
      res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ OUT: 'a: .inf\n' }) }));
      assert.deepEqual(res, {
        code: Status.UNKNOWN,
        details: 'error generating manifests: failed to unmarshal manifest: error converting YAML to JSON: json: unsupported value: +Inf',
      });
      res = await client.generate(call(tgz, { appRelPath: 'apps/a', env: env({ OUT: '{"a": [}' }) }));
      assert.deepEqual(res, {
        code: Status.UNKNOWN,
        details: "error generating manifests: failed to unmarshal manifest: json: offset 8: invalid character '}' looking for beginning of value",
      });
    });

    test('an app path that does not exist fails to start the command', async () => {
      const tgz = await tarballOf(REPO);
      const res = await client.generate(call(tgz, { appRelPath: 'apps/missing' }));
      assert.ok('code' in res);
      assert.equal(res.code, Status.UNKNOWN);
      assert.match(res.details, /^error generating manifests: .*no such file or directory$/);
    });

    test('an app path outside the work dir is refused without the RPC prefix', async () => {
      const tgz = await tarballOf(REPO);
      const res = await client.generate(call(tgz, { appRelPath: '../x' }));
      assert.deepEqual(res, { code: Status.UNKNOWN, details: 'illegal appPath: out of workDir bound' });
    });

    test('20 concurrent calls on distinct apps each get their own output', async () => {
      const tgz = await tarballOf(Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`apps/app${i}/config.yaml`, `app: ${i}\n`])));
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => client.generate(call(tgz, { appRelPath: `apps/app${i}`, env: env({ MY_VAR: `v${i}` }) }))),
      );
      results.forEach((res, i) =>
        assert.deepEqual(res, { value: { manifests: [`{"app":${i}}`, `{"env":"v${i}","init":"written-by-init","pwd":"app${i}"}`], sourceType: '' } }),
      );
    });
  });

  describe(`MatchRepository and GetParametersAnnouncement (${mode})`, () => {
    const servers: CmpServer[] = [];
    const clients: CmpTestClient[] = [];
    async function serve(name: string, spec: string, extraEnv: Record<string, string> = {}): Promise<CmpTestClient> {
      const server = await startCmp(mode, { pluginYaml: pluginYaml(name, spec), socketName: `${name}.sock`, env: extraEnv });
      servers.push(server);
      const client = openCmpClient(server.socketPath);
      clients.push(client);
      return client;
    }
    let fileName: CmpTestClient, glob: CmpTestClient, command: CmpTestClient, none: CmpTestClient, params: CmpTestClient;
    before(async () => {
      // One at a time: five servers (and their workers) starting at once overload a 2-core CI box.
      const starts = [
        () => serve('by-filename', 'discover: {fileName: "Chart.y*ml"}\ngenerate: {command: [sh]}'),
        () => serve('by-glob', 'discover: {find: {glob: "**/kustomization.yaml"}}\ngenerate: {command: [sh]}'),
        () => serve('by-command', 'discover:\n  find:\n    command: [sh, -c]\n    args: ["test -z \\"$FAIL\\" || exit 3; ls | grep -x config.yaml || true"]\ngenerate: {command: [sh]}'),
        () => serve('no-discovery', 'generate: {command: [sh]}'),
        () => serve(
          'params',
          [
            'generate: {command: [sh]}',
            'parameters:',
            '  static:',
            '  - {name: replicas, title: Replicas, required: true, itemType: string, collectionType: string, string: "1"}',
            '  - {name: images, collectionType: array, array: [a, b]}',
            '  dynamic:',
            '    command: [sh, -c]',
            '    args: ["if [ -n \\"$PARAMS\\" ]; then printf \'%s\' \\"$PARAMS\\"; else echo \'[{\\"NAME\\": \\"dyn\\", \\"map\\": {\\"k\\": \\"v\\"}, \\"unknown\\": 1}]\'; fi"]',
          ].join('\n'),
        ),
      ];
      const started: CmpTestClient[] = [];
      for (const start of starts) started.push(await start());
      [fileName, glob, command, none, params] = started as [CmpTestClient, CmpTestClient, CmpTestClient, CmpTestClient, CmpTestClient];
    });
    after(async () => {
      clients.forEach(c => c.close());
      await Promise.all(servers.map(s => s.stop()));
    });

    test('CheckPluginConfiguration reports whether discovery is configured', async () => {
      assert.deepEqual(await fileName.check(), { value: { isDiscoveryConfigured: true, provideGitCreds: false } });
      assert.deepEqual(await none.check(), { value: { isDiscoveryConfigured: false, provideGitCreds: false } });
    });

    test('fileName matches relative to the app path with Go filepath.Glob', async () => {
      const tgz = await tarballOf(REPO);
      assert.deepEqual(await fileName.match(call(tgz, { appRelPath: 'apps/a' })), { value: { isSupported: true, isDiscoveryEnabled: true } });
      assert.deepEqual(await fileName.match(call(tgz, { appRelPath: 'apps/b' })), { value: { isSupported: false, isDiscoveryEnabled: true } });
      // MatchRepository clamps `..` at the work dir (securejoin) instead of failing.
      assert.deepEqual(await fileName.match(call(tgz, { appRelPath: '../../apps/a' })), { value: { isSupported: true, isDiscoveryEnabled: true } });
    });

    test('find.glob matches with zglob semantics', async () => {
      const tgz = await tarballOf(REPO);
      assert.deepEqual(await glob.match(call(tgz, { appRelPath: 'apps/b' })), { value: { isSupported: true, isDiscoveryEnabled: true } });
      assert.deepEqual(await glob.match(call(tgz, { appRelPath: 'apps/a' })), { value: { isSupported: false, isDiscoveryEnabled: true } });
    });

    test('find.command decides by non-empty stdout, and a failing command is an error', async () => {
      const tgz = await tarballOf(REPO);
      assert.deepEqual(await command.match(call(tgz, { appRelPath: 'apps/a' })), { value: { isSupported: true, isDiscoveryEnabled: true } });
      assert.deepEqual(await command.match(call(tgz, { appRelPath: 'apps/b' })), { value: { isSupported: false, isDiscoveryEnabled: true } });
      assert.deepEqual(await command.match(call(tgz, { appRelPath: 'apps/a', env: env({ FAIL: '1' }) })), {
        code: Status.UNKNOWN,
        details: 'match repository error: error running find command: `sh -c "test -z \\"$FAIL\\" || exit 3; ls | grep -x config.yaml || true"` failed exit status 3',
      });
    });

    test('without discovery rules nothing is supported and discovery is not enabled', async () => {
      const tgz = await tarballOf(REPO);
      assert.deepEqual(await none.match(call(tgz)), { value: { isSupported: false, isDiscoveryEnabled: false } });
    });

    test('parameters: dynamic entries first, then static ones, decoded like Go encoding/json', async () => {
      const tgz = await tarballOf(REPO);
      const res = await params.params(call(tgz, { appRelPath: 'apps/a' }));
      const blank = { title: '', tooltip: '', required: false, itemType: '', collectionType: '', string: '', array: [], map: {} };
      assert.deepEqual(res, {
        value: {
          parameterAnnouncements: [
            { ...blank, name: 'dyn', map: { k: 'v' } },
            { ...blank, name: 'replicas', title: 'Replicas', required: true, itemType: 'string', collectionType: 'string', string: '1' },
            { ...blank, name: 'images', collectionType: 'array', array: ['a', 'b'] },
          ],
        },
      });
    });

    test('parameters: bad dynamic output is reported with the Go json error', async () => {
      const tgz = await tarballOf(REPO);
      const prefix = 'get parameters announcement error: error unmarshaling dynamic parameter output into ParametersAnnouncementResponse: ';
      const cases: Array<[string, string]> = [
        ['[', 'unexpected end of JSON input'],
        ['{}', 'json: cannot unmarshal object into Go value of type []*apiclient.ParameterAnnouncement'],
        ['[{"required":"true"}]', 'json: cannot unmarshal string into Go struct field ParameterAnnouncement.required of type bool'],
        ['[] true', "invalid character 't' after top-level value"],
      ];
      for (const [out, message] of cases) {
        assert.deepEqual(await params.params(call(tgz, { appRelPath: 'apps/a', env: env({ PARAMS: out }) })), {
          code: Status.UNKNOWN,
          details: prefix + message,
        });
      }
      assert.deepEqual(await params.params(call(tgz, { appRelPath: '..' })), { code: Status.UNKNOWN, details: 'illegal appPath: out of workDir bound' });
    });
  });
}

describe('client CLI against the proxy', () => {
  test('`cmp-offload generate --local` and `--socket` print the same manifests for the example app', async () => {
    const { runClientCommand } = await import('../../cli/client-cli.js');
    const { REPO_ROOT } = await import('../helpers/paths.js');
    const capture = async (args: string[]) => {
      let out = '';
      let err = '';
      const code = await runClientCommand('generate', args, {
        stdout: { write: (s: string) => ((out += s), true) } as unknown as NodeJS.WritableStream,
        stderr: { write: (s: string) => ((err += s), true) } as unknown as NodeJS.WritableStream,
      });
      return { code, out, err };
    };
    const repo = path.join(REPO_ROOT, 'examples', 'repo');
    const local = await capture([repo, '--app-path', 'apps/guestbook', '--local', '--config-dir-path', path.join(REPO_ROOT, 'examples', 'plugin'), '--output', 'json']);
    assert.equal(local.code, 0, local.err);
    const server = await startCmp('standalone', {
      pluginYaml: fs.readFileSync(path.join(REPO_ROOT, 'examples', 'plugin', 'plugin.yaml'), 'utf8'),
      socketName: 'example-plugin-v1.0.sock',
    });
    try {
      const remote = await capture([repo, '--app-path', 'apps/guestbook', '--socket', server.socketPath, '--output', 'json']);
      assert.equal(remote.code, 0, remote.err);
      assert.equal(remote.out, local.out);
      const kinds = (JSON.parse(remote.out) as Array<{ kind: string }>).map(m => m.kind);
      assert.deepEqual(kinds, ['Deployment', 'Service', 'ConfigMap']);
    } finally {
      await server.stop();
    }
  });
});
