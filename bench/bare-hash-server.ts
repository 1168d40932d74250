/**
 * The ingest baseline: a grpc-js server with the plugin service's definition whose streaming
 * RPCs only sha256 the chunks and answer. Nothing cheaper can receive the stream, so it is the
 * stack's ceiling. Run as its own process (like the proxy): `node bare-hash-server.js <socket>`;
 * prints `listening` when ready.
 */
import { createHash } from 'node:crypto';
import { Server, ServerCredentials, type sendUnaryData, type ServerReadableStream } from '@grpc/grpc-js';
import { ConfigManagementPluginServiceService, type AppStreamRequest } from '../proto/generated/cmpserver/plugin/plugin.js';

const socket = process.argv[2];
if (!socket) throw new Error('usage: bare-hash-server <socket path>');

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

const server = new Server({ 'grpc.max_receive_message_length': 100 * 1024 * 1024 });
server.addService(ConfigManagementPluginServiceService, {
  generateManifest: hashing({ manifests: [], sourceType: '' }),
  matchRepository: hashing({ isSupported: false, isDiscoveryEnabled: true }),
  getParametersAnnouncement: hashing({ parameterAnnouncements: [] }),
  checkPluginConfiguration: (_call: unknown, callback: sendUnaryData<object>) => callback(null, { isDiscoveryConfigured: true, provideGitCreds: false }),
});
server.bindAsync(`unix:${socket}`, ServerCredentials.createInsecure(), err => {
  if (err) throw err;
  process.stdout.write('listening\n');
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
