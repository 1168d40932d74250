import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_ASKPASS_SOCKET, GIT_CREDS_ENV, gitCredsOf, rewriteGitCredsEnv } from '../../../cmp/askpass/git-creds-env.js';
import type { EnvEntry } from '../../../cmp/plugin/request.js';

/** `NAME=value` strings as entries (split at the first `=`). */
const env = (...kv: string[]): EnvEntry[] =>
  kv.map(s => {
    const i = s.indexOf('=');
    return { name: s.slice(0, i), value: s.slice(i + 1) };
  });

/** What Argo's repo-server adds for an HTTPS repository with a username and password. */
const ASKPASS = ['GIT_ASKPASS=argocd', 'ARGOCD_GIT_ASKPASS_NONCE=8c5c7f4e-0f7a-4b53-9a38-2f4d3f0d7e11', 'GIT_TERMINAL_PROMPT=0', 'ARGOCD_BINARY_NAME=argocd-git-ask-pass'];
const NONCE = '8c5c7f4e-0f7a-4b53-9a38-2f4d3f0d7e11';

test('GIT_CREDS_ENV: every name the repo-server sets for git credentials', () => {
  assert.deepEqual([...GIT_CREDS_ENV].sort(), [
    'ARGOCD_ASK_PASS_SOCK', 'ARGOCD_BINARY_NAME', 'ARGOCD_GIT_ASKPASS_NONCE', 'ARGOCD_GIT_AUTH_HEADER', 'ARGOCD_GIT_BEARER_AUTH_HEADER',
    'GIT_ASKPASS', 'GIT_SSH_COMMAND', 'GIT_SSL_CAINFO', 'GIT_SSL_CERT', 'GIT_SSL_KEY', 'GIT_SSL_NO_VERIFY', 'GIT_TERMINAL_PROMPT',
    'SOCKS5_PASSWD', 'SOCKS5_USER',
  ]);
});

test("gitCredsOf: Argo's HTTPS askpass env, with and without ARGOCD_ASK_PASS_SOCK", () => {
  assert.deepEqual(gitCredsOf(env('ARGOCD_APP_NAME=a', ...ASKPASS, 'ARGOCD_ASK_PASS_SOCK=/run/argo/ask.sock')), { nonce: NONCE, socket: '/run/argo/ask.sock', files: [] });
  assert.deepEqual(gitCredsOf(env(...ASKPASS)), { nonce: NONCE, socket: DEFAULT_ASKPASS_SOCKET, files: [] });
  assert.equal(DEFAULT_ASKPASS_SOCKET, '/tmp/reposerver-ask-pass.sock');
  // An empty socket value is Argo's default too (env.StringFromEnv).
  assert.equal(gitCredsOf(env(...ASKPASS, 'ARGOCD_ASK_PASS_SOCK='))?.socket, DEFAULT_ASKPASS_SOCKET);
});

test('gitCredsOf: the last entry of a name wins, as in the command env', () => {
  assert.deepEqual(gitCredsOf(env('ARGOCD_GIT_ASKPASS_NONCE=first', 'ARGOCD_ASK_PASS_SOCK=/a.sock', 'ARGOCD_GIT_ASKPASS_NONCE=second', 'ARGOCD_ASK_PASS_SOCK=/b.sock')), {
    nonce: 'second',
    socket: '/b.sock',
    files: [],
  });
  // A last empty nonce is no nonce: with no file either, nothing to relay.
  assert.equal(gitCredsOf(env('ARGOCD_GIT_ASKPASS_NONCE=first', 'ARGOCD_GIT_ASKPASS_NONCE=')), undefined);
  // Only the effective GIT_SSL_CERT counts; an earlier one is not a file the command reads.
  assert.deepEqual(gitCredsOf(env('GIT_SSL_CERT=/tmp/old.crt', 'GIT_SSL_CERT=/tmp/new.crt'))?.files, ['/tmp/new.crt']);
});

test('gitCredsOf: nothing to relay without a nonce or a file reference', () => {
  assert.equal(gitCredsOf([]), undefined);
  assert.equal(gitCredsOf(env('GIT_ASKPASS=argocd', 'GIT_TERMINAL_PROMPT=0', 'ARGOCD_ASK_PASS_SOCK=/x.sock', 'GIT_SSL_NO_VERIFY=true')), undefined);
  assert.equal(gitCredsOf(env('ARGOCD_GIT_AUTH_HEADER=Authorization: Basic dTpw', 'SOCKS5_USER=u', 'SOCKS5_PASSWD=p')), undefined);
  // File names under other names are not git credentials.
  assert.equal(gitCredsOf(env('MY_CERT=/tmp/c.crt', 'ARGOCD_ENV_GIT_SSL_CERT=/tmp/c.crt')), undefined);
  assert.equal(gitCredsOf(env('GIT_SSH_COMMAND=ssh -i id_rsa -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null')), undefined);
});

test('gitCredsOf: TLS client certificate and CA files, distinct, in first-seen order; relative paths ignored', () => {
  const e = env('GIT_SSL_CAINFO=/tmp/ca.pem', ...ASKPASS, 'GIT_SSL_CERT=/tmp/c.crt', 'GIT_SSL_KEY=/tmp/c.key', 'GIT_SSL_NO_VERIFY=true');
  assert.deepEqual(gitCredsOf(e), { nonce: NONCE, socket: DEFAULT_ASKPASS_SOCKET, files: ['/tmp/ca.pem', '/tmp/c.crt', '/tmp/c.key'] });
  assert.deepEqual(gitCredsOf(env('GIT_SSL_CERT=/tmp/both.pem', 'GIT_SSL_KEY=/tmp/both.pem', 'GIT_SSL_CAINFO=ca.pem'))?.files, ['/tmp/both.pem']);
  assert.deepEqual(gitCredsOf(env('GIT_SSL_CERT=', 'GIT_SSL_KEY=./k', 'GIT_SSL_CAINFO=/tmp/ca')), { socket: DEFAULT_ASKPASS_SOCKET, files: ['/tmp/ca'] });
});

test("gitCredsOf: GIT_SSH_COMMAND as Argo writes it, strict and insecure, with a SOCKS proxy, and other spellings", () => {
  const files = (cmd: string) => gitCredsOf(env(`GIT_SSH_COMMAND=${cmd}`))?.files;
  assert.deepEqual(files('ssh -i /dev/shm/4131842 -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/app/config/ssh/ssh_known_hosts'), [
    '/dev/shm/4131842',
    '/app/config/ssh/ssh_known_hosts',
  ]);
  assert.deepEqual(files('ssh -i /dev/shm/4131842 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'), ['/dev/shm/4131842']);
  assert.deepEqual(
    files("ssh -i /dev/shm/77 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ProxyCommand='connect-proxy -S proxy.example:1080 -5 %h %p'"),
    ['/dev/shm/77'],
  );
  // Glued, tabs and runs of spaces, ssh's case-insensitive option names.
  assert.deepEqual(files('ssh  -i/dev/shm/k1\t-oUserKnownHostsFile=/etc/kh1 -o userknownhostsfile=/etc/kh2 -oUSERKNOWNHOSTSFILE=/etc/kh3'), [
    '/dev/shm/k1',
    '/etc/kh1',
    '/etc/kh2',
    '/etc/kh3',
  ]);
  // Relative paths, a trailing -i with no argument, -o options that name no file, the same key twice.
  assert.deepEqual(files('ssh -i key -i ./k2 -i /k -i /k -o UserKnownHostsFile=known -o IdentitiesOnly=yes -i'), ['/k']);
  // `-o` takes the next token whatever it is: `-i` there is an option value, not a key flag.
  assert.deepEqual(files('ssh -o -i /not-a-key'), undefined);
});

test('gitCredsOf: SSH and TLS files together, each once', () => {
  const e = env('GIT_SSL_CAINFO=/app/config/ssh/ssh_known_hosts', 'GIT_SSH_COMMAND=ssh -i /dev/shm/1 -o UserKnownHostsFile=/app/config/ssh/ssh_known_hosts');
  assert.deepEqual(gitCredsOf(e)?.files, ['/app/config/ssh/ssh_known_hosts', '/dev/shm/1']);
});

test('rewriteGitCredsEnv: socket and file paths replaced in every entry of those names, all else unchanged', () => {
  const e = env(
    'GIT_SSL_CERT=/tmp/old.crt',
    'A=1',
    ...ASKPASS,
    'ARGOCD_ASK_PASS_SOCK=/tmp/reposerver-ask-pass.sock',
    'GIT_SSL_CERT=/tmp/c.crt',
    'GIT_SSL_KEY=/tmp/c.key',
    'MY_CERT=/tmp/c.crt',
    'GIT_SSL_CAINFO=relative/c.crt',
    'GIT_SSH_COMMAND=ssh  -i /dev/shm/9\t-o StrictHostKeyChecking=yes -oUserKnownHostsFile=/kh -o UserKnownHostsFile=/dev/null -i/dev/shm/9',
    'ARGOCD_ASK_PASS_SOCK=/tmp/reposerver-ask-pass.sock',
  );
  const files = new Map([
    ['/tmp/old.crt', '/w/old.crt'],
    ['/tmp/c.crt', '/w/c.crt'],
    ['/dev/shm/9', '/w/key9'],
    ['/kh', '/w/kh'],
    ['relative/c.crt', '/w/never'],
  ]);
  assert.deepEqual(
    rewriteGitCredsEnv(e, { socket: '/w/askpass.sock', files }),
    env(
      'GIT_SSL_CERT=/w/old.crt',
      'A=1',
      ...ASKPASS,
      'ARGOCD_ASK_PASS_SOCK=/w/askpass.sock',
      'GIT_SSL_CERT=/w/c.crt',
      'GIT_SSL_KEY=/tmp/c.key', // not in the map
      'MY_CERT=/tmp/c.crt',
      'GIT_SSL_CAINFO=relative/c.crt',
      'GIT_SSH_COMMAND=ssh  -i /w/key9\t-o StrictHostKeyChecking=yes -oUserKnownHostsFile=/w/kh -o UserKnownHostsFile=/dev/null -i/w/key9',
      'ARGOCD_ASK_PASS_SOCK=/w/askpass.sock',
    ),
  );
  assert.equal(e[0]!.value, '/tmp/old.crt', 'the input is not modified');
  // The result points where the copies are.
  const copied = gitCredsOf(rewriteGitCredsEnv(e, { socket: '/w/askpass.sock', files }));
  assert.deepEqual(copied, { nonce: NONCE, socket: '/w/askpass.sock', files: ['/w/c.crt', '/tmp/c.key', '/w/key9', '/w/kh'] });
});

test("rewriteGitCredsEnv: ARGOCD_ASK_PASS_SOCK is appended when the env relied on Argo's default; left alone without `socket`", () => {
  assert.deepEqual(rewriteGitCredsEnv(env(...ASKPASS), { socket: '/w/a.sock', files: new Map() }), env(...ASKPASS, 'ARGOCD_ASK_PASS_SOCK=/w/a.sock'));
  const e = env(...ASKPASS, 'ARGOCD_ASK_PASS_SOCK=/x.sock', 'GIT_SSL_CAINFO=/ca');
  assert.deepEqual(rewriteGitCredsEnv(e, { files: new Map() }), e);
  assert.deepEqual(rewriteGitCredsEnv(env(...ASKPASS), { files: new Map() }), env(...ASKPASS));
});

test('rewriteGitCredsEnv: a copy path with whitespace cannot stand in GIT_SSH_COMMAND', () => {
  assert.throws(
    () => rewriteGitCredsEnv(env('GIT_SSH_COMMAND=ssh -i /dev/shm/1'), { files: new Map([['/dev/shm/1', '/w/a b']]) }),
    { message: 'cannot put "/w/a b" in GIT_SSH_COMMAND: the path has whitespace' },
  );
});

test('a hostile 4 MiB value is handled in linear time', () => {
  const MiB4 = 4 * 1024 * 1024;
  const hostile = [
    // Many short tokens, every one a key path (all the same: one file).
    'ssh ' + '-i /k '.repeat(MiB4 / 6),
    // Many -o with a known hosts file each, distinct.
    'ssh ' + Array.from({ length: MiB4 / 32 }, (_, i) => `-oUserKnownHostsFile=/h${i}`).join(' '),
    // One huge token, and one huge run of whitespace.
    '-i' + '/'.repeat(MiB4),
    'ssh' + ' '.repeat(MiB4) + '-i /end',
    // Alternating -o -o -o …
    '-o '.repeat(MiB4 / 3),
  ];
  for (const value of hostile) {
    const e = env('GIT_SSL_CERT=/' + 'c'.repeat(MiB4), `GIT_SSH_COMMAND=${value}`);
    const t0 = performance.now();
    const found = gitCredsOf(e);
    const files = new Map((found?.files ?? []).slice(0, 1000).map(f => [f, '/w/x']));
    const out = rewriteGitCredsEnv(e, { socket: '/w/s', files });
    const took = performance.now() - t0;
    assert.ok(found !== undefined && out.length === 3);
    // Linear work on 8 MiB took 0.1-1.2 s here (the 700k tokens of the first value the most, and
    // 3.8 s once under a loaded clean-clone run); anything quadratic would take hours.
    assert.ok(took < 30_000, `${value.slice(0, 20)}…: ${took.toFixed(0)} ms`);
  }
});
