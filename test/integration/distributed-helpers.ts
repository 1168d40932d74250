import fs from 'node:fs';
import path from 'node:path';
import type { EnvEntry } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { chunksOf, repoMetadata, type StreamCall } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';

/**
 * A plugin that leaves markers: `starts` gets "<worker work dir> <tag>" when a run begins,
 * `ends` gets "<tag>" when it finishes. SLEEP (request env) makes it slow; FAIL makes it fail.
 */
export function markerPlugin(name: string): string {
  return pluginYaml(name, `generate:
  command: [sh, -c]
  args:
    - |
      echo "$ARGOCD_CMP_WORKDIR $ARGOCD_ENV_TAG" >> "$MARKERS/starts"
      sleep "\${ARGOCD_ENV_SLEEP:-0}"
      if [ -n "$ARGOCD_ENV_FAIL" ]; then echo "it broke: $ARGOCD_ENV_FAIL" >&2; exit 3; fi
      echo "$ARGOCD_ENV_TAG" >> "$MARKERS/ends"
      printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\ndata:\\n  on: 1.50\\n' "$ARGOCD_ENV_TAG"`);
}

/** Lines of a marker file (none when it does not exist). */
export function lines(file: string): string[] {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
}

/** Runs started for a tag, with the work dir of the process that ran each. */
export function startsOf(markers: string, tag: string): string[] {
  return lines(path.join(markers, 'starts'))
    .filter(l => l.endsWith(` ${tag}`))
    .map(l => l.slice(0, -tag.length - 1));
}

export function endsOf(markers: string, tag: string): number {
  return lines(path.join(markers, 'ends')).filter(l => l === tag).length;
}

/** A GenerateManifest call for the marker plugin. */
export function generateCall(
  tgz: Buffer,
  env: Record<string, string>,
  opts: { appName?: string; timeoutMs?: number } = {},
): StreamCall {
  const entries: EnvEntry[] = [{ name: 'ARGOCD_APP_NAME', value: opts.appName ?? 'app' }];
  for (const [k, v] of Object.entries(env)) entries.push({ name: `ARGOCD_ENV_${k}`, value: v });
  return {
    metadata: repoMetadata(tgz, { appName: opts.appName, env: entries }),
    chunks: chunksOf(tgz, 1024),
    timeoutMs: opts.timeoutMs,
  };
}

export const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

/** Poll until `check` gives something truthy (returned) or fail after `ms`. */
export async function until<T>(check: () => T | Promise<T>, ms: number, what: string): Promise<NonNullable<T>> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v as NonNullable<T>;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}

/**
 * The code and text a worker stored as a job's failedReason (its signed failure; the signature
 * is not checked here), or undefined when the reason is not one.
 */
export function failureOf(reason: string): { code: number; message: string; canceled: boolean } | undefined {
  const m = /^cmp-offload\/failure\/v2:[0-9a-f]{64}:(.*)$/s.exec(reason);
  if (!m) return undefined;
  const [code, message, canceled] = JSON.parse(m[1]!) as [number, string, boolean];
  return { code, message, canceled };
}
