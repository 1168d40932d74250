import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { AppStreamRequest, ManifestResponse } from '../../proto/generated/cmpserver/plugin/plugin.js';
import type { StreamCall } from './grpc-client.js';

/**
 * What the server itself answered on one call, as seen on the wire:
 * - `status`: the grpc-status trailer (or trailers-only header) the server sent, with its
 *   grpc-message, and the response messages that came before it;
 * - `noStatus`: the stream or connection ended without any grpc-status (a reset, a dropped
 *   connection, or nothing before `giveUpMs`): the server never answered.
 * Nothing here is decided by the client: it sends `grpc-timeout` but keeps no deadline of its own,
 * unlike grpc-js, whose local deadline timer would answer DEADLINE_EXCEEDED in the server's place.
 */
export type WireOutcome =
  | { status: number; message: string; responses: Buffer[]; ms: number }
  | { noStatus: string; ms: number };

export interface WireCallOptions {
  /** Sent as `grpc-timeout: <n>m`; the client does not enforce it. */
  timeoutMs?: number;
  /** Stop waiting after this long (default: timeoutMs + 30 s, or 120 s) and report `noStatus`. */
  giveUpMs?: number;
  /** Half-close after the last message (default true). */
  halfClose?: boolean;
  /** Extra request headers. */
  headers?: Record<string, string>;
}

/** The largest header list (trailers included) the client accepts: grpc-go's default is 16 MB. */
const MAX_HEADER_LIST_BYTES = 16 * 1024 * 1024;

/** A plain HTTP/2 gRPC client on a unix socket: one call per connection, raw message bytes. */
export function wireCall(socketPath: string, method: string, messages: Uint8Array[], opts: WireCallOptions = {}): Promise<WireOutcome> {
  const started = Date.now();
  const giveUpMs = opts.giveUpMs ?? (opts.timeoutMs === undefined ? 120_000 : opts.timeoutMs + 30_000);
  return new Promise(resolve => {
    const session = http2.connect('http://localhost', {
      createConnection: () => net.connect(path.resolve(socketPath)),
      settings: { maxHeaderListSize: MAX_HEADER_LIST_BYTES, initialWindowSize: 16 * 1024 * 1024 },
      maxHeaderListPairs: 100_000,
      maxSessionMemory: 1024,
    });
    let settled = false;
    const finish = (o: WireOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      session.close();
      if (!session.closed) setTimeout(() => session.destroy(), 1_000).unref();
      resolve(o);
    };
    const timer = setTimeout(() => finish({ noStatus: `no answer within ${giveUpMs} ms`, ms: Date.now() - started }), giveUpMs);
    session.on('error', err => finish({ noStatus: `connection error: ${err.message}`, ms: Date.now() - started }));
    session.on('close', () => finish({ noStatus: 'connection closed', ms: Date.now() - started }));

    const headers: http2.OutgoingHttpHeaders = {
      ':method': 'POST',
      ':path': method,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...(opts.timeoutMs === undefined ? {} : { 'grpc-timeout': `${Math.max(0, Math.round(opts.timeoutMs))}m` }),
      ...opts.headers,
    };
    const stream = session.request(headers, { endStream: false, waitForTrailers: false });
    const responses: Buffer[] = [];
    let pending = Buffer.alloc(0);
    let status: { code: number; message: string } | undefined;
    const statusOf = (h: http2.IncomingHttpHeaders) => {
      const code = h['grpc-status'];
      if (code === undefined) return;
      const raw = String(h['grpc-message'] ?? '');
      let message = raw;
      try {
        message = decodeURIComponent(raw);
      } catch {
        // not percent-encoded: as sent
      }
      status = { code: Number(code), message };
    };
    stream.on('response', statusOf);
    stream.on('trailers', statusOf);
    stream.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 5) {
        const len = pending.readUInt32BE(1);
        if (pending.length < 5 + len) break;
        responses.push(pending.subarray(5, 5 + len));
        pending = pending.subarray(5 + len);
      }
    });
    stream.on('error', () => {});
    stream.on('close', () => {
      const ms = Date.now() - started;
      if (status) finish({ status: status.code, message: status.message, responses, ms });
      else finish({ noStatus: `stream closed without a status (RST_STREAM code ${stream.rstCode})`, ms });
    });

    void (async () => {
      for (const m of messages) {
        if (stream.destroyed || stream.closed) return;
        const frame = Buffer.alloc(5 + m.length);
        frame.writeUInt32BE(m.length, 1);
        frame.set(m, 5);
        if (!stream.write(frame)) await new Promise<void>(r => { stream.once('drain', r); stream.once('close', r); });
      }
      if (opts.halfClose !== false && !stream.destroyed && !stream.closed) stream.end();
    })();
  });
}

const GENERATE = '/plugin.ConfigManagementPluginService/GenerateManifest';

/** A GenerateManifest call over the wire; `value` is the decoded response when the status is OK. */
export async function wireGenerate(socketPath: string, call: StreamCall, opts: Omit<WireCallOptions, 'timeoutMs'> = {}) {
  const messages: AppStreamRequest[] = call.messages ?? [
    ...(call.metadata ? [{ metadata: call.metadata }] : []),
    ...(call.chunks ?? []).map(chunk => ({ file: { chunk: Buffer.from(chunk) } })),
  ];
  const out = await wireCall(socketPath, GENERATE, messages.map(m => AppStreamRequest.encode(m).finish()), {
    ...opts,
    timeoutMs: call.timeoutMs,
    halfClose: call.halfClose,
    headers: call.headers,
  });
  if ('status' in out && out.status === 0 && out.responses.length === 1) return { ...out, value: ManifestResponse.decode(out.responses[0]!) };
  return out;
}

/** GenerateManifest with raw message bytes (for malformed protobuf). */
export function wireGenerateRaw(socketPath: string, messages: Buffer[], opts: WireCallOptions = {}): Promise<WireOutcome> {
  return wireCall(socketPath, GENERATE, messages, opts);
}

/** The status grpc-js's server sends by itself when a call's deadline passes before the handler answered. */
export const GRPC_JS_DEADLINE_TEXT = 'Deadline exceeded';

/**
 * The server answered a call with a deadline of `timeoutMs` either with `expected`, exactly, or,
 * when our answer did not come within the deadline, with grpc-js's own DEADLINE_EXCEEDED at the
 * deadline (never earlier). Use only where our answer depends on work after deadline - 100 ms
 * (kills relayed through Redis): that 100 ms is all Argo's contract leaves, and on a loaded machine
 * several Redis round trips may not fit in it.
 */
export function assertServerAnswer(res: WireOutcome, expected: { code: number; text: string }, timeoutMs: number): void {
  assert.ok('status' in res, `no status from the server: ${JSON.stringify(res)}`);
  if (res.status === 4 && res.message === GRPC_JS_DEADLINE_TEXT) {
    assert.ok(res.ms >= timeoutMs, `grpc-js answered ${timeoutMs - res.ms} ms before the deadline`);
  } else {
    assert.deepEqual({ code: res.status, text: res.message }, expected);
  }
}
