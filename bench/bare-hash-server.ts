/**
 * The ingest baseline: a grpc-js server with the plugin service's definition whose streaming
 * RPCs only sha256 the chunks and answer. Nothing cheaper can receive the stream, so it is the
 * stack's ceiling. Run as its own process (like the proxy): `node bare-hash-server.js <socket>`;
 * prints `listening` when ready.
 *
 * With `--extract` it is stock-like instead: what argocd-cmp-server does before it runs a plugin,
 * sha256 of the stream and the tarball gunzipped and written out file by file (GNU tar, a child
 * process: its CPU shows in this process's children's times), then the dir removed.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Server, ServerCredentials, type sendUnaryData, type ServerReadableStream } from '@grpc/grpc-js';
import { ConfigManagementPluginServiceService, type AppStreamRequest } from '../proto/generated/cmpserver/plugin/plugin.js';

const socket = process.argv[2];
if (!socket) throw new Error('usage: bare-hash-server <socket path> [--extract]');
const extract = process.argv[3] === '--extract';

function hashing<R>(answer: R) {
  return (call: ServerReadableStream<AppStreamRequest, R>, callback: sendUnaryData<R>) => {
    const hash = createHash('sha256');
    call.on('data', (msg: AppStreamRequest) => {
      if (msg.file) hash.update(msg.file.chunk);
    });
    call.on('end', () => {
      hash.digest();
      callback(null, answer);
    });
  };
}

function extracting<R>(answer: R) {
  return (call: ServerReadableStream<AppStreamRequest, R>, callback: sendUnaryData<R>) => {
    const hash = createHash('sha256');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-stock-'));
    const tar = spawn('tar', ['-xzf', '-', '-C', dir], { stdio: ['pipe', 'ignore', 'inherit'] });
    const exited = new Promise<number | null>(resolve => tar.once('close', resolve));
    // A tar that died shows in its exit code; the pipe's EPIPE must not crash the server.
    tar.stdin.on('error', () => {});
    call.on('data', (msg: AppStreamRequest) => {
      if (!msg.file) return;
      hash.update(msg.file.chunk);
      tar.stdin.write(msg.file.chunk);
    });
    call.on('end', () => {
      hash.digest();
      tar.stdin.end();
      void exited.then(async code => {
        await fs.promises.rm(dir, { recursive: true, force: true });
        callback(code === 0 ? null : new Error(`tar exited with ${code}`), answer);
      });
    });
  };
}

const handler = extract ? extracting : hashing;
const server = new Server({ 'grpc.max_receive_message_length': 100 * 1024 * 1024 });
server.addService(ConfigManagementPluginServiceService, {
  generateManifest: handler({ manifests: [], sourceType: '' }),
  matchRepository: handler({ isSupported: false, isDiscoveryEnabled: true }),
  getParametersAnnouncement: handler({ parameterAnnouncements: [] }),
  checkPluginConfiguration: (_call: unknown, callback: sendUnaryData<object>) => callback(null, { isDiscoveryConfigured: true, provideGitCreds: false }),
});
server.bindAsync(`unix:${socket}`, ServerCredentials.createInsecure(), err => {
  if (err) throw err;
  process.stdout.write('listening\n');
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
