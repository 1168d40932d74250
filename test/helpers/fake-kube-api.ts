import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { GENERATE_PATHS_ANNOTATION } from '../../cmp/cache/generate-paths.js';

/** One request the fake API server received. */
export interface KubeRequest {
  method: string;
  namespace: string;
  name: string;
  query: URLSearchParams;
  contentType: string | undefined;
  authorization: string | undefined;
  body: unknown;
  at: number;
}

export interface FakeKubeApi {
  url: string;
  requests: KubeRequest[];
  /** The Applications as the server holds them, by `namespace/name`. */
  apps: Map<string, Record<string, any>>;
  /** Add an Application with a single plugin source. */
  addApp(namespace: string, name: string, source: Record<string, unknown>, annotations?: Record<string, string>): void;
  annotation(namespace: string, name: string): string | undefined;
  patches(name: string): KubeRequest[];
  close(): Promise<void>;
}

const PATH = /^\/apis\/argoproj\.io\/v1alpha1\/namespaces\/([^/]+)\/applications\/([^/]+)$/;

/**
 * A local HTTP server speaking the two calls the keeper makes on applications.argoproj.io: GET
 * and a server-side apply (PATCH application/apply-patch+yaml). No cluster runs here; this is
 * the part of the API the keeper meets. The apply follows the rule that matters for one field:
 * an applied annotation is set and owned by the field manager; an apply by that manager
 * without it removes it when that manager owned it.
 */
export async function startFakeKubeApi(token: string): Promise<FakeKubeApi> {
  const requests: KubeRequest[] = [];
  const apps = new Map<string, Record<string, any>>();
  const owned = new Set<string>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const m = PATH.exec(url.pathname);
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (!m) return send(404, { kind: 'Status', message: 'not found' });
      const [namespace, name] = [decodeURIComponent(m[1]!), decodeURIComponent(m[2]!)];
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = text;
      }
      requests.push({ method: req.method!, namespace, name, query: url.searchParams, contentType: req.headers['content-type'], authorization: req.headers.authorization, body, at: Date.now() });
      if (req.headers.authorization !== `Bearer ${token}`) return send(401, { kind: 'Status', message: 'Unauthorized' });
      const key = `${namespace}/${name}`;
      const app = apps.get(key);
      if (!app) return send(404, { kind: 'Status', message: `applications.argoproj.io "${name}" not found` });
      if (req.method === 'GET') return send(200, app);
      if (req.method !== 'PATCH') return send(405, { kind: 'Status', message: 'method not allowed' });
      if (req.headers['content-type'] !== 'application/apply-patch+yaml') return send(415, { kind: 'Status', message: 'unsupported patch type' });
      const manager = url.searchParams.get('fieldManager') ?? '';
      const value = (body as { metadata?: { annotations?: Record<string, string> } })?.metadata?.annotations?.[GENERATE_PATHS_ANNOTATION];
      const annotations = (app.metadata.annotations ??= {});
      const ownerKey = `${key}\0${manager}`;
      if (value !== undefined) {
        annotations[GENERATE_PATHS_ANNOTATION] = value;
        owned.add(ownerKey);
      } else if (owned.has(ownerKey)) {
        delete annotations[GENERATE_PATHS_ANNOTATION];
        owned.delete(ownerKey);
      }
      return send(200, app);
    });
  });
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    apps,
    addApp(namespace, name, source, annotations = {}) {
      apps.set(`${namespace}/${name}`, {
        apiVersion: 'argoproj.io/v1alpha1',
        kind: 'Application',
        metadata: { name, namespace, annotations: { ...annotations } },
        spec: { project: 'default', source, destination: { server: 'https://kubernetes.default.svc', namespace: 'default' } },
      });
    },
    annotation(namespace, name) {
      return apps.get(`${namespace}/${name}`)?.metadata.annotations?.[GENERATE_PATHS_ANNOTATION];
    },
    patches(name) {
      return requests.filter(r => r.method === 'PATCH' && r.name === name);
    },
    close: () =>
      new Promise<void>(resolve => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
