import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Server, ServerCredentials, status as Status, type ServerReadableStream, type sendUnaryData } from '@grpc/grpc-js';
import {
  ConfigManagementPluginServiceService,
  type AppStreamRequest,
  type ConfigManagementPluginServiceServer,
} from '../../../proto/generated/cmpserver/plugin/plugin.js';

/** What one call delivered to the server. */
export interface RecordedCall {
  rpc: string;
  messages: AppStreamRequest[];
  halfClosed: boolean;
  /** The deadline the client sent (grpc-js reports Infinity when there is none). */
  deadline: number;
}

/**
 * How the server answers: after the client half-closes (default), or right away on the first
 * message, or never (`hang`, until the call ends). `pause` stops reading after the first message.
 */
export interface Behaviour {
  when?: 'end' | 'first-message' | 'hang';
  pause?: boolean;
  error?: { code: Status; details: string };
  /** GenerateManifest's manifests. */
  manifests?: string[];
}

export interface RecordingServer {
  socketPath: string;
  calls: RecordedCall[];
  behaviour: Behaviour;
  /** Resolves when the n-th call (1-based) has finished on the server side. */
  callEnded(n: number): Promise<RecordedCall>;
  resumeAll(): void;
  stop(): Promise<void>;
}

/** A real grpc-js server with the generated plugin service, on a temp unix socket, recording every stream. */
export async function startRecordingServer(behaviour: Behaviour = {}): Promise<RecordingServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-client-'));
  const socketPath = path.join(dir, 'plugin.sock');
  const calls: RecordedCall[] = [];
  const ended: Array<(c: RecordedCall) => void> = [];
  const endedPromises: Promise<RecordedCall>[] = [];
  const paused: ServerReadableStream<AppStreamRequest, unknown>[] = [];
  const state: RecordingServer = {
    socketPath,
    calls,
    behaviour,
    callEnded: (n) => endedPromises[n - 1] ?? waitFor(n),
    resumeAll: () => paused.splice(0).forEach((c) => c.resume()),
    stop,
  };
  const waitFor = async (n: number): Promise<RecordedCall> => {
    while (!endedPromises[n - 1]) await new Promise((r) => setTimeout(r, 5));
    return endedPromises[n - 1]!;
  };

  function handler<T>(rpc: string, ok: () => T) {
    return (call: ServerReadableStream<AppStreamRequest, T>, callback: sendUnaryData<T>) => {
      const b = state.behaviour;
      const rec: RecordedCall = { rpc, messages: [], halfClosed: false, deadline: Number(call.getDeadline()) };
      calls.push(rec);
      endedPromises.push(new Promise((resolve) => ended.push(resolve)));
      const done = ended[ended.length - 1]!;
      let answered = false;
      const answer = () => {
        if (answered || b.when === 'hang') return;
        answered = true;
        if (b.error) callback({ code: b.error.code, details: b.error.details });
        else callback(null, ok());
      };
      call.on('data', (m: AppStreamRequest) => {
        rec.messages.push(m);
        if (rec.messages.length === 1) {
          if (b.pause) {
            call.pause();
            paused.push(call as ServerReadableStream<AppStreamRequest, unknown>);
          }
          if (b.when === 'first-message') answer();
        }
      });
      call.on('end', () => {
        rec.halfClosed = true;
        answer();
        done(rec);
      });
      call.on('cancelled', () => done(rec));
      call.on('error', () => done(rec));
    };
  }

  const impl: ConfigManagementPluginServiceServer = {
    generateManifest: handler('generateManifest', () => ({ manifests: state.behaviour.manifests ?? [], sourceType: '' })),
    matchRepository: handler('matchRepository', () => ({ isSupported: true, isDiscoveryEnabled: true })),
    getParametersAnnouncement: handler('getParametersAnnouncement', () => ({ parameterAnnouncements: [] })),
    checkPluginConfiguration: (_call, callback) => callback(null, { isDiscoveryConfigured: true, provideGitCreds: false }),
  };
  const server = new Server({ 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  server.addService(ConfigManagementPluginServiceService, impl);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix:${socketPath}`, ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );

  async function stop(): Promise<void> {
    state.resumeAll();
    server.forceShutdown();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return state;
}
