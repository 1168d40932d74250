import path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { openCmpClient, repoMetadata, type CmpTestClient, type RpcOutcome } from '../helpers/grpc-client.js';
import { fixturePath } from '../helpers/paths.js';
import { buildTgz, type TarEntry } from '../helpers/tar-builder.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';

/**
 * appRelPath resolution per RPC (docs/argo-contract.md#app-path) through the real proxy: GenerateManifest and
 * GetParametersAnnouncement join and bound-check it (`illegal appPath: out of workDir bound`,
 * absolute paths re-rooted), MatchRepository clamps it inside the work dir with securejoin.
 * The plugin commands report their working directory (test/fixtures/e2e/list-tree.mjs).
 */

const LIST_TREE = [process.execPath, fixturePath('e2e', 'list-tree.mjs')];
const OUT_OF_BOUND = 'illegal appPath: out of workDir bound';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** One marker file per directory, so a discovery command can tell where it runs. */
const TREE: TarEntry[] = [
  { name: '.', type: 'dir' },
  { name: 'HERE_root', content: '' },
  { name: 'sub/HERE_sub', content: '' },
  { name: 'etc/HERE_etc', content: '' },
  { name: 'other/HERE_other', content: '' },
  { name: 'deep', type: 'dir' },
  { name: 'deep/l', type: 'symlink', linkname: '../other' },
  { name: 'link', type: 'symlink', linkname: 'sub' },
];

/** The request work dir a cwd belongs to, checked to be a UUID directly under a work root. */
function workDirOf(server: CmpServer, cwd: string, rel: string): string {
  const dir = rel === '' ? cwd : cwd.slice(0, -rel.length - 1);
  assert.equal(path.join(dir, rel), cwd, `${cwd} is not <work dir>/${rel}`);
  assert.ok(server.workRoots.includes(path.dirname(dir)), `${dir} is not under a work root (${server.workRoots.join(', ')})`);
  assert.match(path.basename(dir), UUID);
  return dir;
}

function assertStatus(outcome: RpcOutcome<unknown>, code: Status, details: string | RegExp): void {
  assert.ok('code' in outcome, `expected ${Status[code]} ${details}, got ${JSON.stringify(outcome)}`);
  assert.equal(outcome.code, code, outcome.details);
  if (typeof details === 'string') assert.equal(outcome.details, details);
  else assert.match(outcome.details, details);
}

function server(mode: (typeof MODES)[number], name: string, spec: string, workers?: number) {
  const ctx = {} as { server: CmpServer; client: CmpTestClient };
  before(async () => {
    ctx.server = await startCmp(mode, {
      pluginYaml: pluginYaml(name, spec),
      socketName: `${name}.sock`,
      env: { CMP_OFFLOAD_CACHE: 'off' },
      workers,
    });
    ctx.client = openCmpClient(ctx.server.socketPath);
  });
  after(async () => {
    ctx.client?.close();
    await ctx.server?.stop();
  });
  afterEach(async () => {
    const s = ctx.server;
    await eventually(() => leftovers(s).length === 0, 5_000, `empty work roots (left: ${leftovers(s).join(', ')})`);
  });
  return ctx;
}

for (const mode of MODES) {
  describe(`appRelPath with command-run plugins (${mode})`, () => {
    const ctx = server(
      mode,
      'app-path',
      [
        `generate:`,
        `  command: ${JSON.stringify(LIST_TREE)}`,
        `discover:`,
        `  find:`,
        `    command: [sh, -c, 'if [ -e "HERE_$WANT" ]; then echo yes; fi']`,
        `parameters:`,
        `  static:`,
        `    - name: static-one`,
        `  dynamic:`,
        `    command: ${JSON.stringify([...LIST_TREE, 'params'])}`,
      ].join('\n'),
    );
    const tgz = buildTgz(TREE);
    const request = (appRelPath: string, env: Array<{ name: string; value: string }> = []) => ({
      metadata: repoMetadata(tgz, { appRelPath, env }),
      chunks: [tgz],
    });
    const generateCwd = async (appRelPath: string): Promise<string> => {
      const r = await ctx.client.generate(request(appRelPath));
      assert.ok('value' in r, `${JSON.stringify(appRelPath)}: ${JSON.stringify(r)}`);
      return (JSON.parse(r.value.manifests[0]!) as { cwd: string }).cwd;
    };

    test('GenerateManifest runs in the work dir for . and empty, joins relative paths and re-roots absolute ones', async () => {
      const cases: Array<[string, string]> = [
        ['.', ''],
        ['', ''],
        ['./', ''],
        ['sub', 'sub'],
        ['sub/', 'sub'],
        ['./sub/.', 'sub'],
        ['etc/../sub', 'sub'],
        ['/sub', 'sub'],
        ['/etc', 'etc'],
        ['//etc/../other', 'other'],
      ];
      for (const [appRelPath, rel] of cases) workDirOf(ctx.server, await generateCwd(appRelPath), rel);
    });

    test('GenerateManifest refuses paths that leave the work dir with the unprefixed out-of-bound text', async () => {
      for (const appRelPath of ['..', '../', '../x', '../../etc', 'sub/../..', 'sub/../../sub', '../' + 'a'.repeat(40)]) {
        assertStatus(await ctx.client.generate(request(appRelPath)), Status.UNKNOWN, OUT_OF_BOUND);
      }
    });

    test('GenerateManifest in an app dir that does not exist fails when the command starts', async () => {
      assertStatus(
        await ctx.client.generate(request('missing')),
        Status.UNKNOWN,
        /^error generating manifests: .*no such file or directory$/,
      );
    });

    test('GetParametersAnnouncement follows the same rules as GenerateManifest', async () => {
      const cwdOf = async (appRelPath: string) => {
        const r = await ctx.client.params(request(appRelPath));
        assert.ok('value' in r, `${JSON.stringify(appRelPath)}: ${JSON.stringify(r)}`);
        const names = r.value.parameterAnnouncements.map(p => p.name);
        assert.deepEqual(names, ['cwd', 'static-one'], 'dynamic entries first, then static ones');
        return r.value.parameterAnnouncements[0]!.string;
      };
      workDirOf(ctx.server, await cwdOf('.'), '');
      workDirOf(ctx.server, await cwdOf(''), '');
      workDirOf(ctx.server, await cwdOf('/sub'), 'sub');
      workDirOf(ctx.server, await cwdOf('other'), 'other');
      for (const appRelPath of ['..', '../x', 'sub/../..']) {
        assertStatus(await ctx.client.params(request(appRelPath)), Status.UNKNOWN, OUT_OF_BOUND);
      }
      assertStatus(
        await ctx.client.params(request('missing')),
        Status.UNKNOWN,
        /^get parameters announcement error: error executing dynamic parameter output command: .*no such file or directory$/,
      );
    });

    test('MatchRepository clamps .. at the work dir instead of failing, and re-roots absolute paths', async () => {
      const cases: Array<[string, string, boolean]> = [
        ['.', 'root', true],
        ['', 'root', true],
        ['..', 'root', true],
        ['..', 'sub', false],
        ['../..', 'root', true],
        ['../sub', 'sub', true],
        ['../../etc', 'etc', true],
        ['/etc', 'etc', true],
        ['/etc', 'root', false],
        ['sub/../..', 'root', true],
        ['sub/../../other', 'other', true],
      ];
      for (const [appRelPath, want, supported] of cases) {
        assert.deepEqual(
          await ctx.client.match(request(appRelPath, [{ name: 'WANT', value: want }])),
          { value: { isSupported: supported, isDiscoveryEnabled: true } },
          `appRelPath ${JSON.stringify(appRelPath)}, looking for HERE_${want}`,
        );
      }
    });

    test('MatchRepository resolves symlinks inside the work dir before applying ..', async () => {
      const cases: Array<[string, string, boolean]> = [
        ['link', 'sub', true],
        ['deep/l', 'other', true],
        // securejoin: deep/l is other, so .. is the work dir (lexically it would be deep).
        ['deep/l/..', 'root', true],
        ['deep/l/../sub', 'sub', true],
        ['deep/l/../../..', 'root', true],
      ];
      for (const [appRelPath, want, supported] of cases) {
        assert.deepEqual(
          await ctx.client.match(request(appRelPath, [{ name: 'WANT', value: want }])),
          { value: { isSupported: supported, isDiscoveryEnabled: true } },
          `appRelPath ${JSON.stringify(appRelPath)}, looking for HERE_${want}`,
        );
      }
    });

    test('MatchRepository in an app dir that does not exist fails when the find command starts', async () => {
      assertStatus(
        await ctx.client.match(request('missing', [{ name: 'WANT', value: 'root' }])),
        Status.UNKNOWN,
        /^match repository error: error running find command: .*no such file or directory$/,
      );
    });
  });

  describe(`appRelPath with fileName discovery (${mode})`, () => {
    // One worker is enough in distributed mode: most of these are answered by the proxy.
    const ctx = server(mode, 'app-path-file', [`generate:`, `  command: [sh, -c, 'true']`, `discover:`, `  fileName: HERE`].join('\n'), 1);
    const plain = buildTgz([{ name: 'f', content: '' }, { name: 'sub/HERE', content: '' }, { name: 'other/x', content: '' }]);
    // Symlinks make the tree something only an extraction can answer for.
    const linked = buildTgz([
      { name: 'f', content: '' },
      { name: 'sub/HERE', content: '' },
      { name: 'other/x', content: '' },
      { name: 'link', type: 'symlink', linkname: 'sub' },
      { name: 'deep', type: 'dir' },
      { name: 'deep/l', type: 'symlink', linkname: '../other' },
    ]);
    const match = (tgz: Buffer, appRelPath: string) => ctx.client.match({ metadata: repoMetadata(tgz, { appRelPath }), chunks: [tgz] });

    test('a plain tree: .. is clamped at the work dir and absolute paths are re-rooted', async () => {
      const cases: Array<[string, boolean]> = [
        ['.', false],
        ['', false],
        ['sub', true],
        ['../sub', true],
        ['../../sub', true],
        ['/sub', true],
        ['sub/../..', false],
        ['../..', false],
        ['other/../sub', true],
        ['nowhere', false],
      ];
      for (const [appRelPath, supported] of cases) {
        assert.deepEqual(await match(plain, appRelPath), { value: { isSupported: supported, isDiscoveryEnabled: true } }, appRelPath);
      }
    });

    test('a tree with symlinks: they are resolved inside the work dir before .. is applied', async () => {
      const cases: Array<[string, boolean]> = [
        ['link', true],
        ['../link', true],
        ['deep/l', false],
        ['deep/l/../sub', true],
        ['deep/l/..', false],
        ['/deep/l/../../link', true],
      ];
      for (const [appRelPath, supported] of cases) {
        assert.deepEqual(await match(linked, appRelPath), { value: { isSupported: supported, isDiscoveryEnabled: true } }, appRelPath);
      }
    });
  });
}
