import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient, type RpcOutcome } from '../helpers/grpc-client.js';
import { fixturePath } from '../helpers/paths.js';
import { RUNNER_UID } from '../helpers/runner-process.js';
import {
  buildTar,
  buildTgz,
  flipBit,
  gzipBytes,
  gzipMembers,
  metaEntry,
  paxRecord,
  truncated,
  type TarEntry,
} from '../helpers/tar-builder.js';
import { eventually, leftovers, MODES, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';

/**
 * Server-side extraction (docs/argo-contract.md#extraction) through the real proxy: the plugin's generate command
 * lists the tree it runs in (test/fixtures/e2e/list-tree.mjs), errors come back as statuses.
 * After every test the work roots are empty and nothing appeared outside them.
 */

const LIST_TREE = [process.execPath, fixturePath('e2e', 'list-tree.mjs')];
const PREFIX = 'generate manifest error receiving stream: error decompressing tgz file';
const umask = process.umask();
const masked = (mode: number) => (mode & ~umask).toString(8).padStart(4, '0');
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const reEscape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

interface Tree {
  cwd: string;
  mode: string;
  entries: Record<string, string>;
}

/**
 * `template` as an anchored pattern: `{D}` is the request work dir (a UUID directly under one of
 * the server's work roots) and `{ROOT}` that work root; the rest is literal.
 */
function pathPattern(server: CmpServer, template: string): RegExp {
  const roots = server.workRoots.map(reEscape).join('|');
  let root = false;
  let uuid = false;
  const body = template
    .split(/(\{D\}|\{ROOT\})/)
    .map(part => {
      if (part !== '{D}' && part !== '{ROOT}') return reEscape(part);
      const r = root ? '\\k<root>' : `(?<root>${roots})`;
      root = true;
      if (part === '{ROOT}') return r;
      const u = uuid ? '\\k<uuid>' : `(?<uuid>${UUID})`;
      uuid = true;
      return `${r}/${u}`;
    })
    .join('');
  return new RegExp(`^${body}$`);
}

function assertStatus(server: CmpServer, outcome: RpcOutcome<unknown>, code: Status, template: string): void {
  assert.ok('code' in outcome, `expected ${Status[code]} ${template}, got ${JSON.stringify(outcome)}`);
  assert.equal(outcome.code, code, outcome.details);
  assert.match(outcome.details, pathPattern(server, template));
}

/**
 * Every path under the directories that hold the work roots, except the work roots themselves
 * (a proxy listens before it creates its work root, so that may appear after a first snapshot).
 */
function outside(server: CmpServer): string[] {
  const roots = new Set(server.workRoots);
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const name of fs.readdirSync(dir)) {
      const p = path.join(dir, name);
      if (roots.has(p)) continue;
      out.push(p);
      if (fs.lstatSync(p).isDirectory()) walk(p);
    }
  };
  for (const base of new Set(server.workRoots.map(r => path.dirname(path.dirname(r))))) if (fs.existsSync(base)) walk(base);
  return out.sort();
}

/** Per-server test plumbing: a client, the extracted tree of a tarball, and the clean-up checks. */
function suite(mode: (typeof MODES)[number], name: string, spec: string, workers?: number) {
  const ctx = {} as { server: CmpServer; client: CmpTestClient; before: string[] };
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
  beforeEach(() => {
    ctx.before = outside(ctx.server);
  });
  afterEach(async () => {
    const { server } = ctx;
    await eventually(() => leftovers(server).length === 0, 5_000, `empty work roots (left: ${leftovers(server).join(', ')})`);
    assert.deepEqual(outside(server), ctx.before, 'nothing may be written outside the work roots');
  });
  const generate = (tgz: Buffer) => ctx.client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024) });
  /** The tree the plugin saw, after checking where it ran. */
  const tree = async (tgz: Buffer): Promise<Tree> => {
    const r = await generate(tgz);
    assert.ok('value' in r, JSON.stringify(r));
    assert.equal(r.value.manifests.length, 1);
    const t = JSON.parse(r.value.manifests[0]!) as Tree;
    assert.match(t.cwd, pathPattern(ctx.server, '{D}'));
    return t;
  };
  const fails = async (tgz: Buffer, template: string, code = Status.UNKNOWN) =>
    assertStatus(ctx.server, await generate(tgz), code, `${PREFIX}: ${template}`);
  return { ctx, generate, tree, fails };
}

const SPEC = [
  `generate:`,
  `  command: ${JSON.stringify(LIST_TREE)}`,
  `discover:`,
  `  find:`,
  `    command: [sh, -c, echo found]`,
].join('\n');

/** A name that climbs from the request work dir to `/` whatever the depth of the temp dirs. */
const toFsRoot = (rest: string) => `${'../'.repeat(40)}${rest}`;

for (const mode of MODES) {
  describe(`extraction of the uploaded tarball (${mode})`, () => {
    const { ctx, tree, fails } = suite(mode, 'extract', SPEC);

    test('files get 0644 and directories 0755 whatever the header says, parents of files are created, nothing else is in the work dir', async () => {
      const t = await tree(
        buildTgz([
          { name: '.', type: 'dir', mode: 0o700 },
          { name: './', type: 'dir', mode: 0o700 },
          { name: 'sub', type: 'dir', mode: 0o700 },
          { name: 'sub/a.txt', content: 'A', mode: 0o4777 },
          { name: 'deep/er/b.txt', content: 'BB', mode: 0o600 },
          { name: 'exec.sh', content: '#!/bin/sh', mode: 0o755 },
        ]),
      );
      assert.equal(t.mode, '0755', 'the work dir keeps its own mode, not the root entry mode');
      assert.deepEqual(t.entries, {
        deep: `dir ${masked(0o755)}`,
        'deep/er': `dir ${masked(0o755)}`,
        'deep/er/b.txt': `file ${masked(0o644)} BB`,
        'exec.sh': `file ${masked(0o644)} #!/bin/sh`,
        sub: `dir ${masked(0o755)}`,
        'sub/a.txt': `file ${masked(0o644)} A`,
      });
    });

    test('duplicate file entries overwrite: the last content wins', async () => {
      const t = await tree(buildTgz([{ name: 'f', content: 'first version' }, { name: 'f', content: 'second' }]));
      assert.deepEqual(t.entries, { f: `file ${masked(0o644)} second` });
    });

    test('names leaving the work dir are rejected with the cleaned target: ../x, a/../../x, a/.., the empty name, ../ up to /', async () => {
      const escapee = `cmp-offload-e2e-${randomUUID()}`;
      const cases: Array<[string, string]> = [
        ['../x', 'illegal filepath in archive: {ROOT}/x'],
        ['a/../../x', 'illegal filepath in archive: {ROOT}/x'],
        ['a/..', 'illegal filepath in archive: {D}'],
        ['', 'illegal filepath in archive: {D}'],
        [toFsRoot(`tmp/${escapee}`), `illegal filepath in archive: /tmp/${escapee}`],
      ];
      for (const [name, template] of cases) {
        // A good entry first: the partial extraction must be cleaned up too.
        await fails(buildTgz([{ name: 'ok', content: 'ok' }, { name, content: 'escaped' }]), template);
      }
      assert.equal(fs.existsSync(`/tmp/${escapee}`), false);
    });

    test('absolute names are re-rooted inside the work dir, and . and ./ entries are skipped', async () => {
      const t = await tree(
        buildTgz([
          { name: './', type: 'dir' },
          { name: '/etc/x', content: 'inside' },
          { name: '/abs/dir/', type: 'dir' },
          { name: './rel/./y', content: 'y' },
        ]),
      );
      assert.deepEqual(t.entries, {
        abs: `dir ${masked(0o755)}`,
        'abs/dir': `dir ${masked(0o755)}`,
        etc: `dir ${masked(0o755)}`,
        'etc/x': `file ${masked(0o644)} inside`,
        rel: `dir ${masked(0o755)}`,
        'rel/y': `file ${masked(0o644)} y`,
      });
    });

    test('hard links, devices, FIFOs, contiguous files and PAX global headers create nothing', async () => {
      const t = await tree(
        buildTgz([
          { name: 'keep', content: 'k' },
          { name: 'hard', type: 'hardlink', linkname: 'keep' },
          { name: 'hard-out', type: 'hardlink', linkname: '/etc/passwd' },
          { name: 'fifo', type: 'fifo' },
          { name: 'chr', type: 'char' },
          { name: 'blk', type: 'block' },
          { name: 'cont', type: 'contiguous', content: 'contiguous data is skipped' },
          { name: 'pax_global_header', typeflag: 'g', content: paxRecord('comment', 'hi') },
        ]),
      );
      assert.deepEqual(t.entries, { keep: `file ${masked(0o644)} k` });
    });

    test('ignored entry types still have their names bounds-checked', async () => {
      for (const type of ['hardlink', 'fifo', 'char', 'block', 'contiguous'] as const) {
        await fails(buildTgz([{ name: '../escape', type, linkname: 'keep' }]), 'illegal filepath in archive: {ROOT}/escape');
      }
      const escapee = `cmp-offload-e2e-${randomUUID()}`;
      const global = Buffer.concat([
        metaEntry('g', paxRecord('path', toFsRoot(escapee)), 'pax_global_header'),
        buildTar([{ name: 'f', content: 'x' }]),
      ]);
      await fails(gzipBytes(global), `illegal filepath in archive: /${escapee}`);
    });

    test('symlinks: absolute targets are re-rooted, targets relativised, chains flattened, dangling links kept', async () => {
      const t = await tree(
        buildTgz([
          { name: 'app', type: 'dir' },
          { name: 'f', content: 'F' },
          { name: 'app/passwd', type: 'symlink', linkname: '/etc/passwd' },
          { name: 'l1', type: 'symlink', linkname: 'f' },
          { name: 'app/l2', type: 'symlink', linkname: '../l1' },
          { name: 'app/l3', type: 'symlink', linkname: '../app/./../f' },
          { name: 'dirlink', type: 'symlink', linkname: '/app' },
          { name: 'dangling', type: 'symlink', linkname: 'nowhere/x' },
          { name: 'app/sub', type: 'dir' },
          { name: 'app/sub/up', type: 'symlink', linkname: '..' },
          { name: 'viaup', type: 'symlink', linkname: 'app/sub/up' },
        ]),
      );
      assert.deepEqual(t.entries, {
        app: `dir ${masked(0o755)}`,
        'app/l2': 'link ../f',
        'app/l3': 'link ../f',
        'app/passwd': 'link etc/passwd',
        'app/sub': `dir ${masked(0o755)}`,
        'app/sub/up': 'link ..',
        dangling: 'link nowhere/x',
        dirlink: 'link app',
        f: `file ${masked(0o644)} F`,
        l1: 'link f',
        viaup: 'link app',
      });
    });

    test('a symlink resolving outside the work dir or onto it is rejected with the unresolved target', async () => {
      const cases: Array<[TarEntry[], string]> = [
        [[{ name: 'app/x', content: '' }, { name: 'app/l', type: 'symlink', linkname: '../../etc/passwd' }], '{ROOT}/etc/passwd'],
        [[{ name: 'l', type: 'symlink', linkname: '.' }], '{D}'],
        [[{ name: 'a/x', content: '' }, { name: 'a/l', type: 'symlink', linkname: '..' }], '{D}'],
        [[{ name: 'l', type: 'symlink', linkname: '' }], '{D}'],
        [[{ name: 'l', type: 'symlink', linkname: '/' }], '{D}'],
      ];
      for (const [entries, target] of cases) {
        await fails(buildTgz([{ name: 'ok', content: '' }, ...entries]), `illegal filepath in symlink: ${target}`);
      }
    });

    test('a symlink planted through a shallower in-tree symlink cannot reach outside the work dir', async () => {
      // Relativised from the lexical dir a/b/c/x, the link would really live in a/x and point
      // two levels above the work dir; the file entry after it would then write outside.
      await fails(
        buildTgz([
          { name: 'a/b', type: 'dir' },
          { name: 'a/b/c', type: 'symlink', linkname: '..' },
          { name: 'a/b/c/x/f', content: 'ok' },
          { name: 'a/b/c/x/s', type: 'symlink', linkname: '../../../../p' },
          { name: 'a/b/c/x/s', content: 'pwned' },
        ]),
        'illegal filepath in symlink: {D}/p',
      );
    });

    test('a file entry writes through an existing in-tree symlink', async () => {
      const t = await tree(
        buildTgz([
          { name: 'real', content: 'old' },
          { name: 'link', type: 'symlink', linkname: 'real' },
          { name: 'link', content: 'new' },
        ]),
      );
      assert.deepEqual(t.entries, { link: 'link real', real: `file ${masked(0o644)} new` });
    });

    test('symlink creation errors carry Go texts: missing parent, existing path, a file in the resolved path', async () => {
      await fails(
        buildTgz([{ name: 'f', content: '' }, { name: 'nodir/l', type: 'symlink', linkname: '../f' }]),
        'error creating symlink: symlink ../f {D}/nodir/l: no such file or directory',
      );
      await fails(
        buildTgz([{ name: 'f', content: '' }, { name: 'f2', content: '' }, { name: 'f2', type: 'symlink', linkname: 'f' }]),
        'error creating symlink: symlink f {D}/f2: file exists',
      );
      await fails(
        buildTgz([{ name: 'f', content: '' }, { name: 'l', type: 'symlink', linkname: 'f/x' }]),
        'error checking symlink realpath: not a directory',
      );
    });

    test('a file over a directory fails with "is a directory", a directory over a file with "not a directory"', async () => {
      await fails(
        buildTgz([{ name: 'a', type: 'dir' }, { name: 'a', content: 'x' }]),
        'error creating file "{D}/a": open {D}/a: is a directory',
      );
      await fails(
        buildTgz([{ name: 'a', content: 'x' }, { name: 'a/b/c', content: 'y' }]),
        'error creating nested folders: mkdir {D}/a: not a directory',
      );
      await fails(
        buildTgz([{ name: 'a', content: 'x' }, { name: 'a', type: 'dir' }]),
        'error creating nested folders: mkdir {D}/a: not a directory',
      );
    });

    test('PAX and GNU long names and link targets, non-ASCII names and legacy type flags are read like Go', async () => {
      const long = `${'d'.repeat(120)}/${'f'.repeat(150)}.txt`;
      const gnu = `gnu/${'g'.repeat(200)}`;
      const link = `l${'l'.repeat(120)}`;
      const t = await tree(
        buildTgz([
          { name: long, content: 'pax' },
          { name: gnu, content: 'gnu', longNames: 'gnu' },
          { name: link, type: 'symlink', linkname: long, longNames: 'gnu' },
          { name: 'legacy', typeflag: '\0', content: 'old' },
          { name: 'legacydir/', typeflag: '\0' },
          { name: 'ünïcode-名前', content: 'utf8', pax: { path: 'ünïcode-名前' } },
        ]),
      );
      assert.deepEqual(t.entries, {
        [long.split('/')[0]!]: `dir ${masked(0o755)}`,
        [long]: `file ${masked(0o644)} pax`,
        gnu: `dir ${masked(0o755)}`,
        [gnu]: `file ${masked(0o644)} gnu`,
        [link]: `link ${long}`,
        legacy: `file ${masked(0o644)} old`,
        legacydir: `dir ${masked(0o755)}`,
        'ünïcode-名前': `file ${masked(0o644)} utf8`,
      });
    });

    test('input that is not gzip fails with Go gzip texts, the empty input with "error reading file: EOF"', async () => {
      const cases: Array<[Buffer, string]> = [
        [Buffer.alloc(0), 'error reading file: EOF'],
        [Buffer.from('hello'), 'error reading file: unexpected EOF'],
        [Buffer.from('this is not a gzip file at all'), 'error reading file: gzip: invalid header'],
        [buildTar([{ name: 'f', content: 'plain tar' }]), 'error reading file: gzip: invalid header'],
        [flipBit(buildTgz([{ name: 'f', content: 'x' }]), 2), 'error reading file: gzip: invalid header'],
      ];
      for (const [bytes, text] of cases) await fails(bytes, text);
    });

    test('a truncated or corrupt tar fails with the tar reader texts', async () => {
      const tar = buildTar([{ name: 'a', content: 'A' }, { name: 'big', content: Buffer.alloc(200_000, 'abcdefghij') }]);
      await fails(gzipBytes(truncated(tar, 512 + 512 + 100)), 'error while iterating on tar reader: unexpected EOF');
      await fails(gzipBytes(truncated(tar, 512 * 3 + 1000)), 'error writing tgz file: unexpected EOF');
      const tgz = gzipBytes(tar, 0);
      await fails(truncated(tgz, Math.floor(tgz.length / 2)), 'error writing tgz file: unexpected EOF');
      await fails(gzipBytes(Buffer.alloc(512, 'x')), 'error while iterating on tar reader: archive/tar: invalid tar header');
    });

    test('an empty gzip stream, or one holding only end blocks, extracts nothing and succeeds', async () => {
      for (const tgz of [gzipBytes(Buffer.alloc(0)), gzipBytes(Buffer.alloc(1024)), gzipBytes(Buffer.alloc(512))]) {
        assert.deepEqual((await tree(tgz)).entries, {});
      }
    });

    test('a multi-member gzip is read as one stream', async () => {
      const tar = buildTar([{ name: 'one', content: '1' }, { name: 'two', content: '2' }]);
      const t = await tree(gzipMembers(tar.subarray(0, 1024), tar.subarray(1024)));
      assert.deepEqual(t.entries, { one: `file ${masked(0o644)} 1`, two: `file ${masked(0o644)} 2` });
    });

    test('extraction errors carry the prefix of each RPC', async () => {
      const tgz = buildTgz([{ name: '../x', content: 'x' }]);
      const call = { metadata: repoMetadata(tgz), chunks: [tgz] };
      assertStatus(
        ctx.server,
        await ctx.client.match(call),
        Status.UNKNOWN,
        'match repository error receiving stream: error decompressing tgz file: illegal filepath in archive: {ROOT}/x',
      );
      assertStatus(
        ctx.server,
        await ctx.client.params(call),
        Status.UNKNOWN,
        'parameters announcement error receiving stream: error decompressing tgz file: illegal filepath in archive: {ROOT}/x',
      );
    });
  });

  describe(`extraction with preserveFileMode (${mode})`, () => {
    // One worker is enough in distributed mode: this suite is about modes, not placement.
    const { tree } = suite(mode, 'extract-modes', `${SPEC}\npreserveFileMode: true`, 1);

    test('only the permission bits of header modes apply; parents made for files stay 0755', async () => {
      const t = await tree(
        buildTgz([
          { name: 'd', type: 'dir', mode: 0o3750 },
          { name: 'd/run.sh', content: '#!/bin/sh', mode: 0o4751 },
          { name: 'e/f/g.txt', content: 'g', mode: 0o600 },
          { name: 'h/i', type: 'dir', mode: 0o711 },
          { name: 'locked', content: 'z', mode: 0o000 },
          { name: 'twice', content: 'first', mode: 0o600 },
          { name: 'twice', content: 'second', mode: 0o777 },
        ]),
      );
      assert.equal(t.mode, '0755');
      assert.deepEqual(t.entries, {
        d: `dir ${masked(0o750)}`,
        'd/run.sh': `file ${masked(0o751)} #!/bin/sh`,
        e: `dir ${masked(0o755)}`,
        'e/f': `dir ${masked(0o755)}`,
        'e/f/g.txt': `file ${masked(0o600)} g`,
        h: `dir ${masked(0o711)}`,
        'h/i': `dir ${masked(0o711)}`,
        // Plugin commands run as root only in standalone mode when the tests do (runners: RUNNER_UID).
        locked: `file 0000 ${process.getuid?.() === 0 && (mode === 'standalone' || RUNNER_UID === undefined) ? 'z' : '<unreadable>'}`,
        twice: `file ${masked(0o600)} second`,
      });
    });
  });
}
