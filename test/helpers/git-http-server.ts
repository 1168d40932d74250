import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface GitHttpServer {
  /** The repository's clone URL, e.g. http://127.0.0.1:PORT/repo.git */
  url: string;
  /** The one commit on its `main` branch. */
  commit: string;
  /** Requests that carried the right credentials (the ones passed on to git). */
  requests(): number;
  stop(): Promise<void>;
}

/** git without the machine's or the user's configuration. */
const GIT_ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin', GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', HOME: os.tmpdir() };

function git(args: string[], env: Record<string, string> = {}): string {
  return execFileSync('git', args, { env: { ...GIT_ENV, ...env }, encoding: 'utf8' }).trim();
}

/**
 * A bare repository with one commit served over smart HTTP by `git http-backend` (as CGI) behind
 * HTTP basic auth with these credentials: without them, 401 with `WWW-Authenticate: Basic
 * realm="test"`, so that git asks its askpass helper. Listens on 127.0.0.1 only.
 */
export async function startGitHttpServer(creds: { username: string; password: string }): Promise<GitHttpServer> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'git-http-'));
  const work = path.join(root, 'work');
  const ident = { GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@example.com', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@example.com' };
  git(['init', '-q', '-b', 'main', work]);
  fs.writeFileSync(path.join(work, 'README'), 'served over http\n');
  git(['-C', work, 'add', 'README']);
  git(['-C', work, 'commit', '-q', '-m', 'one'], ident);
  const commit = git(['-C', work, 'rev-parse', 'HEAD']);
  git(['clone', '-q', '--bare', work, path.join(root, 'repo.git')]);
  fs.rmSync(work, { recursive: true, force: true });
  const backend = path.join(git(['--exec-path']), 'git-http-backend');
  const expected = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;
  let authenticated = 0;

  const server = http.createServer((req, res) => {
    if (req.headers.authorization !== expected) {
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="test"', 'Content-Type': 'text/plain' });
      res.end('authentication required\n');
      req.resume();
      return;
    }
    authenticated++;
    const url = new URL(req.url ?? '/', 'http://localhost');
    const cgi = spawn(backend, [], {
      env: {
        ...GIT_ENV,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: decodeURIComponent(url.pathname),
        REQUEST_METHOD: req.method ?? 'GET',
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        REMOTE_USER: creds.username,
        REMOTE_ADDR: req.socket.remoteAddress ?? '',
        // Protocol v2 and gzip-compressed request bodies reach http-backend as CGI meta-variables.
        HTTP_GIT_PROTOCOL: String(req.headers['git-protocol'] ?? ''),
        HTTP_CONTENT_ENCODING: String(req.headers['content-encoding'] ?? ''),
      },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    req.pipe(cgi.stdin);
    cgi.stdin.on('error', () => {}); // a backend that exits before reading all of the body
    relayCgi(cgi.stdout, res);
    cgi.on('error', err => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(err));
    });
  });
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/repo.git`,
    commit,
    requests: () => authenticated,
    async stop() {
      server.closeAllConnections();
      await new Promise<void>(resolve => server.close(() => resolve()));
      fs.rmSync(root, { recursive: true, force: true });
    },
  };
}

/** A CGI response (headers, a blank line, the body; `Status: 404 Not Found` for a status) as the HTTP response. */
function relayCgi(out: NodeJS.ReadableStream, res: http.ServerResponse): void {
  let head = Buffer.alloc(0);
  let inBody = false;
  out.on('data', (chunk: Buffer) => {
    if (inBody) {
      res.write(chunk);
      return;
    }
    head = Buffer.concat([head, chunk]);
    const crlf = head.indexOf('\r\n\r\n');
    const lf = head.indexOf('\n\n');
    const end = crlf >= 0 && (lf < 0 || crlf < lf) ? { at: crlf, len: 4 } : lf >= 0 ? { at: lf, len: 2 } : undefined;
    if (end === undefined) return;
    let status = 200;
    for (const line of head.subarray(0, end.at).toString('latin1').split(/\r?\n/)) {
      const i = line.indexOf(':');
      if (i < 0) continue;
      const name = line.slice(0, i).trim();
      const value = line.slice(i + 1).trim();
      if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10);
      else res.setHeader(name, value);
    }
    res.writeHead(status);
    inBody = true;
    res.write(head.subarray(end.at + end.len));
  });
  out.on('end', () => {
    if (!inBody) res.writeHead(502);
    res.end();
  });
}
