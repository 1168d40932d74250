import { createHash } from 'node:crypto';
import { buildTar, buildTgz, flipBit, gzipBytes, truncated, type TarEntry } from '../../helpers/tar-builder.js';
import { rawChunkMessage, rawMetadataMessage, type RawMetadata } from './raw-call.js';
import { pluginYaml } from '../../helpers/plugin-yaml.js';

/** One generated hostile request: the raw messages and what kind of hostility it is. */
export interface HostileCase {
  kind: string;
  messages: Buffer[];
}

/** What the plugin does (request env MODE): normal, or one of the hostile outputs. */
export const MODES = ['normal', 'walk', 'binary', 'huge', 'utf8', 'bomb', 'deep'] as const;

export function hostilePlugin(): string {
  return pluginYaml('hostile', `generate:
  command: [sh, -c]
  args:
    - |
      case "$ARGOCD_ENV_MODE" in
        binary) head -c 3000 /dev/urandom ;;
        huge) head -c 12000000 /dev/zero | tr '\\0' 'a' ;;
        utf8) printf 'kind: ConfigMap\\nmetadata:\\n  name: "\\377\\376"\\n---\\n{"a": "\\377"}\\n' ;;
        bomb) printf 'a: &a ["x","x","x","x","x","x","x","x","x"]\\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\\n' ;;
        deep) i=0; s=''; while [ $i -lt 3000 ]; do s="$s["; i=$((i+1)); done; echo "a: $s" ;;
        walk) find . 2>/dev/null | head -c 100000 | sed 's/^/# /'; cat ./*/* 2>/dev/null | head -c 10000 | sed 's/^/# /'; echo 'kind: A' ;;
        *) echo 'kind: A' ;;
      esac`);
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const utf8 = (s: string) => Buffer.from(s, 'utf8');

/**
 * The i-th hostile request of a seeded series. `outside` is a directory the tarballs aim at
 * (absolute symlinks and paths); every name meant to escape contains `esc` so that a search
 * afterwards finds any that got out.
 */
export function hostileCase(i: number, rand: () => number, ctx: { outside: string; esc: string; token: string; reduced: boolean }): HostileCase {
  const int = (n: number) => Math.floor(rand() * n);
  const mode = MODES[int(MODES.length)]!;
  const env = (m: string = mode) => [
    { name: utf8('ARGOCD_APP_NAME'), value: utf8(`hostile-${i}`) },
    { name: utf8('ARGOCD_ENV_RELTOKEN'), value: utf8(ctx.token) },
    { name: utf8('ARGOCD_ENV_MODE'), value: utf8(m) },
  ];
  const request = (tgz: Buffer, meta: Partial<RawMetadata> = {}, chunk = 1024): Buffer[] => {
    const m: RawMetadata = { appName: utf8(`hostile-${i}`), appRelPath: utf8('.'), checksum: utf8(sha(tgz)), size: tgz.length, env: env(), ...meta };
    const out = [rawMetadataMessage(m)];
    for (let off = 0; off < tgz.length; off += chunk) out.push(rawChunkMessage(tgz.subarray(off, off + chunk)));
    return out;
  };
  const base = (): TarEntry[] => [
    { name: 'values.yaml', content: 'a: 1\n' },
    { name: 'app/', type: 'dir' },
    { name: 'app/values.yaml', content: `n: ${i}\n` },
  ];
  const esc = `${ctx.esc}-${i}`;
  switch (i % 16) {
    case 0: // valid tarball, hostile plugin output
      return { kind: `output:${mode}`, messages: request(buildTgz(base())) };
    case 1: { // truncated gzip
      const tgz = buildTgz([...base(), { name: 'big.txt', content: 'x'.repeat(20000 + int(50000)) }]);
      const cut = truncated(tgz, 1 + int(tgz.length - 1));
      return { kind: 'gzip:truncated', messages: request(cut) };
    }
    case 2: { // bit flips in the gzip stream
      let tgz = buildTgz([...base(), { name: 'f.txt', content: 'y'.repeat(int(5000)) }]);
      for (let k = 0; k <= int(3); k++) tgz = flipBit(tgz, int(tgz.length), int(8));
      return { kind: 'gzip:bitflip', messages: request(tgz) };
    }
    case 3: { // bit flips in the tar, valid gzip
      let tar = buildTar([...base(), { name: 'f.txt', content: 'z'.repeat(int(3000)) }]);
      for (let k = 0; k <= int(3); k++) tar = flipBit(tar, int(tar.length), int(8));
      return { kind: 'tar:bitflip', messages: request(gzipBytes(tar)) };
    }
    case 4: { // wrong checksum or size
      const tgz = buildTgz(base());
      const wrong = rand() < 0.5 ? { checksum: utf8(sha(Buffer.from('other'))) } : { size: tgz.length + 1 + int(1000) };
      return { kind: 'metadata:checksum-or-size', messages: request(tgz, wrong) };
    }
    case 5: { // path escapes by name
      const names = [`../${esc}`, `../../../${esc}`, `a/../../${esc}`, `${ctx.outside}/${esc}`, `/${esc}`, `./../${esc}/x`];
      return { kind: 'tar:path-escape', messages: request(buildTgz([...base(), { name: names[int(names.length)]!, content: 'escaped' }])) };
    }
    case 6: { // escapes through symlinks
      const variants: TarEntry[][] = [
        [{ name: 'lnk', type: 'symlink', linkname: ctx.outside }, { name: `lnk/${esc}`, content: 'through a link' }],
        [{ name: 'lnk', type: 'symlink', linkname: '../../../..' }, { name: `lnk/${esc}`, content: 'through a link' }],
        [{ name: 'app/up', type: 'symlink', linkname: '..' }, { name: 'app/up/up', type: 'symlink', linkname: '..' }, { name: `app/up/up/up/${esc}`, content: 'x' }],
        [{ name: esc, type: 'symlink', linkname: `${ctx.outside}/${esc}-target` }],
        [{ name: 'hl', type: 'hardlink', linkname: '/etc/passwd' }],
        [{ name: 'hl', type: 'hardlink', linkname: `../${esc}` }],
      ];
      return { kind: 'tar:symlink-escape', messages: request(buildTgz([...base(), ...variants[int(variants.length)]!])) };
    }
    case 7: { // symlink chains and loops
      const n = 2 + int(200);
      const chain: TarEntry[] = Array.from({ length: n }, (_, k) => ({ name: `l${k}`, type: 'symlink' as const, linkname: k === n - 1 ? (rand() < 0.5 ? 'l0' : 'values.yaml') : `l${k + 1}` }));
      const loops: TarEntry[] = [{ name: 'self', type: 'symlink', linkname: 'self' }, { name: 'a', type: 'symlink', linkname: 'b' }, { name: 'b', type: 'symlink', linkname: 'a' }];
      return { kind: 'tar:symlink-chain', messages: request(buildTgz([...base(), ...(rand() < 0.5 ? chain : loops)]), { env: env('walk') }) };
    }
    case 8: { // huge names
      const len = 300 + int(rand() < 0.2 && !ctx.reduced ? 300_000 : 8_000);
      const name = 'n'.repeat(len);
      const entry: TarEntry = rand() < 0.5 ? { name, content: 'long' } : { name: `d/${'x'.repeat(len)}`, longNames: 'gnu', content: 'gnu' };
      return { kind: 'tar:huge-name', messages: request(buildTgz([...base(), entry]), { env: env('walk') }) };
    }
    case 9: { // deep trees
      // Up to 3100 levels; the reduced run stays shallower.
      const depth = 100 + int(ctx.reduced ? 1000 : 3000);
      const dir = Array.from({ length: depth }, () => 'd').join('/');
      if (rand() < 0.5) return { kind: 'tar:deep-tree', messages: request(buildTgz([...base(), { name: `${dir}/leaf.yaml`, content: 'deep: true\n' }]), { env: env('walk') }) };
      // Crafted: PAX names of up to 250 000 levels, several sharing long prefixes (pathTooLong),
      // or many fresh names just under the 4096-byte bound (the index's implied-directory budget).
      const levels = 2_000 + int(ctx.reduced ? 50_000 : 248_000);
      const shared = `${'a/'.repeat(levels)}`;
      const variants: TarEntry[][] = [
        [{ name: `${shared}leaf`, content: 'x' }],
        Array.from({ length: 12 }, (_, k) => ({ name: `${shared}k${k}/${'c/'.repeat(1 + int(1000))}f`, content: 'y' })),
        Array.from({ length: 50 + int(200) }, (_, k) => ({ name: `k${k}/${'a/'.repeat(2040)}f`, content: 'z' })),
      ];
      return { kind: 'tar:crafted-deep-tree', messages: request(buildTgz([...base(), ...variants[int(variants.length)]!])) };
    }
    case 10: { // odd entry types, lying sizes, missing end, duplicates
      const variants: TarEntry[][] = [
        [{ name: 'dev', type: 'char' }, { name: 'blk', type: 'block' }, { name: 'fifo', type: 'fifo' }],
        [{ name: 'raw', typeflag: 'Z', content: 'unknown type' }, { name: 'g', typeflag: 'g', content: '' }],
        [{ name: 'liar', content: 'short', size: 100_000 }],
        [{ name: 'dup', content: 'one' }, { name: 'dup', content: 'two' }, { name: 'dup', type: 'dir' }],
        [{ name: 'values.yaml', type: 'dir' }, { name: 'values.yaml/x', content: 'file under a file' }],
      ];
      const end = rand() < 0.3 ? { end: false } : {};
      return { kind: 'tar:odd-entries', messages: request(buildTgz([...base(), ...variants[int(variants.length)]!], end), { env: env('walk') }) };
    }
    case 11: { // bogus app paths
      const paths = ['../..', '/etc', `../${esc}`, 'a'.repeat(100_000), 'app/../../..', 'values.yaml', 'missing/dir', '\0', ''];
      return { kind: 'metadata:app-path', messages: request(buildTgz(base()), { appRelPath: utf8(paths[int(paths.length)]!) }) };
    }
    case 12: { // invalid UTF-8 in metadata strings
      const bad = Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xe2, 0x82]);
      const field = int(4);
      const meta: Partial<RawMetadata> =
        field === 0 ? { appName: bad } : field === 1 ? { appRelPath: bad } : field === 2 ? { checksum: bad } : { env: [...env(), { name: Buffer.concat([utf8('ARGOCD_ENV_'), bad]), value: bad }] };
      return { kind: 'metadata:invalid-utf8', messages: request(buildTgz(base()), meta) };
    }
    case 13: { // huge env
      const many = Array.from({ length: 1 + int(2000) }, (_, k) => ({ name: utf8(`ARGOCD_ENV_V${k}${'n'.repeat(int(200))}`), value: utf8('v'.repeat(int(2000))) }));
      const odd = [{ name: utf8('A=B'), value: utf8('c') }, { name: utf8(''), value: utf8('empty name') }, { name: utf8('LD_PRELOAD'), value: utf8('/nonexistent.so') }];
      return { kind: 'metadata:huge-env', messages: request(buildTgz(base()), { env: [...env(), ...(rand() < 0.5 ? many : odd)] }) };
    }
    case 14: { // message sequence and framing
      const tgz = buildTgz(base());
      const good = request(tgz);
      const variants = [
        [], // nothing at all
        good.slice(1), // chunks without metadata
        [good[0]!, good[0]!, ...good.slice(1)], // two metadata messages
        [good[0]!], // metadata only
        [Buffer.from([0xff, 0xff, 0xff])], // not protobuf
        [good[0]!, Buffer.from([0x12, 0x80])], // truncated field
        [good[0]!, rawChunkMessage(Buffer.alloc(0)), ...good.slice(1)], // empty chunk
      ];
      return { kind: 'stream:framing', messages: variants[int(variants.length)]! };
    }
    default: { // random bytes as the tarball, sometimes gzip of random bytes
      const junk = Buffer.alloc(1 + int(20_000));
      for (let k = 0; k < junk.length; k++) junk[k] = int(256);
      return { kind: 'gzip:junk', messages: request(rand() < 0.5 ? junk : gzipBytes(junk)) };
    }
  }
}
