import { parseArgs } from 'node:util';
import { allAppPaths, noAppPaths, viewOf, type AppPaths } from '../cmp/cache/app-paths.js';
import { GENERATE_PATHS_ANNOTATION } from '../cmp/cache/generate-paths.js';
import { compileOptions } from '../cmp/config/options.js';
import { messageOf } from '../cmp/errors.js';
import { RedisAppPaths } from '../cmp/queue/app-paths-store.js';
import { withRedis, type Io } from './cache-cli.js';
import { KeySpace } from '../cmp/queue/keys.js';

export const PATHS_USAGE = `usage: cmp-offload paths (--app NAME | --all) [--json] [--proxy URL]
The ${GENERATE_PATHS_ANNOTATION} value derived from each app's latest traced
generation (CMP_OFFLOAD_CACHE=traced), and when. Distributed mode reads Redis with
CMP_OFFLOAD_REDIS_URL, CMP_OFFLOAD_REDIS_SENTINEL_*, CMP_OFFLOAD_QUEUE_PREFIX and
CMP_OFFLOAD_SIGNING_KEY like the proxy; --proxy http://HOST:9101 asks a proxy's ops HTTP
instead (standalone mode keeps the values in the proxy), with CMP_OFFLOAD_DASHBOARD_TOKEN.
`;

/** `cmp-offload paths`: print apps' derived manifest-generate-paths. */
export async function runPathsCommand(argv: string[], io: Io): Promise<number> {
  let values: { app?: string; all?: boolean; json?: boolean; proxy?: string };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { app: { type: 'string' }, all: { type: 'boolean' }, json: { type: 'boolean' }, proxy: { type: 'string' } },
      strict: true,
    }));
  } catch (err) {
    io.stderr.write(`${messageOf(err)}\n${PATHS_USAGE}`);
    return 2;
  }
  if ((values.app === undefined) === !values.all) {
    io.stderr.write(PATHS_USAGE);
    return 2;
  }
  const app = values.app;
  const print = (views: AppPaths[]): number => {
    if (app !== undefined && views.length === 0) {
      io.stderr.write(`cmp-offload paths: ${noAppPaths(app)}\n`);
      return 1;
    }
    if (values.json) {
      const doc = app !== undefined ? { annotation: GENERATE_PATHS_ANNOTATION, ...views[0] } : { annotation: GENERATE_PATHS_ANNOTATION, apps: views };
      io.stdout.write(`${JSON.stringify(doc, null, 2)}\n`);
    } else if (views.length === 0) {
      io.stderr.write('cmp-offload paths: no records yet (an Application has one after its first traced generate)\n');
    } else {
      for (const v of views) io.stdout.write(`${v.app}\t${v.derivedAt}\t${v.value ?? `(no value: ${v.reason})`}\n`);
    }
    return 0;
  };
  if (values.proxy !== undefined) {
    try {
      const token = compileOptions(process.env).dashboardToken;
      if (!token) throw new Error('CMP_OFFLOAD_DASHBOARD_TOKEN is not set: the proxy serves /generate-paths only with it');
      return print(await fromProxy(values.proxy, app, token));
    } catch (err) {
      io.stderr.write(`cmp-offload paths: ${messageOf(err)}\n`);
      return 1;
    }
  }
  return withRedis('paths', io, async (redis, ro) => {
    if (!ro.signingKey) throw new Error('CMP_OFFLOAD_SIGNING_KEY is not set: the records cannot be verified');
    const store = new RedisAppPaths(redis, ro.signingKey, new KeySpace(ro.prefix));
    const view = app !== undefined ? viewOf(await store.get(app)) : undefined;
    return print(app !== undefined ? (view ? [view] : []) : await allAppPaths(store));
  });
}

/** The same views from a proxy's `/generate-paths` endpoints. */
async function fromProxy(base: string, app: string | undefined, token: string): Promise<AppPaths[]> {
  const url = new URL(app === undefined ? 'generate-paths' : `generate-paths/${encodeURIComponent(app)}`, base.endsWith('/') ? base : `${base}/`);
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(10_000) });
  if (res.status === 404 && app !== undefined) return [];
  if (!res.ok) throw new Error(`${url.href}: HTTP ${res.status}`);
  const doc = (await res.json()) as AppPaths & { apps?: AppPaths[] };
  return app === undefined ? (doc.apps ?? []) : [doc];
}
