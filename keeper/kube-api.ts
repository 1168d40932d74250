import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { GENERATE_PATHS_ANNOTATION } from '../cmp/cache/generate-paths.js';
import type { AppRef } from './app-ref.js';
import type { Application } from './served.js';

/** The field manager of our server-side applies: `kubectl get -o yaml --show-managed-fields` names it. */
export const FIELD_MANAGER = 'cmp-offload';
const REQUEST_TIMEOUT_MS = 10_000;
/** An Application is a few KiB; a larger answer is refused rather than buffered. */
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

export interface KubeApiOptions {
  /** `https://host:port` (or `http://` for a test server). */
  url: string;
  /** Bearer token file, read for every request (projected service account tokens rotate); absent: no token. */
  tokenFile: string;
  /** CA bundle for https; absent: the system's CAs. */
  caFile: string;
}

export class KubeApiError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
  ) {
    super(message);
  }
}

/**
 * The two calls the keeper makes, on applications.argoproj.io: GET, and a server-side apply
 * (PATCH application/apply-patch+yaml, our field manager, force) of an object holding only the
 * name and the manifest-generate-paths annotation. Without a value the apply holds no
 * annotation: the server then removes the one we set (a value set by another manager stays).
 */
export class KubeApi {
  private readonly ca: Buffer | undefined;

  constructor(private readonly opts: KubeApiOptions) {
    this.ca = opts.url.startsWith('https:') && fs.existsSync(opts.caFile) ? fs.readFileSync(opts.caFile) : undefined;
  }

  /** The Application, or undefined when it does not exist. */
  async get(ref: AppRef): Promise<Application | undefined> {
    const res = await this.request('GET', appPath(ref), undefined);
    if (res.status === 404) return undefined;
    return res.body as Application;
  }

  async apply(ref: AppRef, value: string | undefined): Promise<Application> {
    const metadata = { name: ref.name, namespace: ref.namespace, ...(value !== undefined ? { annotations: { [GENERATE_PATHS_ANNOTATION]: value } } : {}) };
    // JSON is YAML: the apply-patch+yaml content type takes it as it is.
    const body = JSON.stringify({ apiVersion: 'argoproj.io/v1alpha1', kind: 'Application', metadata });
    const res = await this.request('PATCH', `${appPath(ref)}?fieldManager=${FIELD_MANAGER}&force=true`, body);
    return res.body as Application;
  }

  private token(): string | undefined {
    try {
      return fs.readFileSync(this.opts.tokenFile, 'utf8').trim() || undefined;
    } catch {
      return undefined; // no token file (outside a pod): requests go without one
    }
  }

  private request(method: 'GET' | 'PATCH', path: string, body: string | undefined): Promise<{ status: number; body: unknown }> {
    const url = new URL(path, this.opts.url);
    const token = this.token();
    const headers: Record<string, string> = { accept: 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) };
    if (body !== undefined) headers['content-type'] = 'application/apply-patch+yaml';
    const options: https.RequestOptions = { method, headers, timeout: REQUEST_TIMEOUT_MS, ...(this.ca ? { ca: this.ca } : {}) };
    return new Promise((resolve, reject) => {
      const onResponse = (res: http.IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > MAX_RESPONSE_BYTES) req.destroy(new KubeApiError(`${method} ${url.pathname}: answer over ${MAX_RESPONSE_BYTES} bytes`, res.statusCode));
          else chunks.push(c);
        });
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          let parsed: unknown;
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            parsed = undefined; // not JSON: the status says what happened
          }
          if (status === 404 && method === 'GET') return resolve({ status, body: undefined });
          if (status < 200 || status >= 300 || typeof parsed !== 'object' || parsed === null) {
            const message = (parsed as { message?: unknown } | undefined)?.message;
            return reject(new KubeApiError(`${method} ${url.pathname}: HTTP ${status}${typeof message === 'string' ? `: ${message.slice(0, 300)}` : ''}`, status));
          }
          resolve({ status, body: parsed });
        });
        res.on('error', reject);
      };
      const req = url.protocol === 'https:' ? https.request(url, options, onResponse) : http.request(url, options, onResponse);
      req.on('timeout', () => req.destroy(new KubeApiError(`${method} ${url.pathname}: no answer within ${REQUEST_TIMEOUT_MS} ms`, undefined)));
      req.on('error', reject);
      req.end(body);
    });
  }
}

function appPath(ref: AppRef): string {
  return `/apis/argoproj.io/v1alpha1/namespaces/${encodeURIComponent(ref.namespace)}/applications/${encodeURIComponent(ref.name)}`;
}
