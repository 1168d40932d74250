import type { EnvEntry } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { chunksOf, repoMetadata, type CmpTestClient, type StreamCall } from '../../test/helpers/grpc-client.js';
import { msSince } from './stats.js';

/** A GenerateManifest call for an in-memory tarball, 1 KiB chunks; `env` become ARGOCD_ENV_* entries. */
export function generateCall(tgz: Buffer, env: Record<string, string> = {}, opts: { appName?: string; timeoutMs?: number } = {}): StreamCall {
  const entries: EnvEntry[] = [{ name: 'ARGOCD_APP_NAME', value: opts.appName ?? 'bench' }];
  for (const [k, v] of Object.entries(env)) entries.push({ name: `ARGOCD_ENV_${k}`, value: v });
  return { metadata: repoMetadata(tgz, { appName: opts.appName, env: entries }), chunks: chunksOf(tgz, 1024), timeoutMs: opts.timeoutMs };
}

/** Run a GenerateManifest call and return its latency in ms; throws when it did not succeed. */
export async function timedGenerate(client: CmpTestClient, call: StreamCall): Promise<{ ms: number; manifests: string[] }> {
  const start = process.hrtime.bigint();
  const outcome = await client.generate(call);
  const ms = msSince(start);
  if (!('value' in outcome)) throw new Error(`request failed: ${JSON.stringify(outcome)}`);
  return { ms, manifests: outcome.value.manifests };
}
