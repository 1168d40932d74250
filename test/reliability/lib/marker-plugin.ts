import fs from 'node:fs';
import path from 'node:path';
import type { EnvEntry } from '../../../proto/generated/cmpserver/plugin/plugin.js';
import { chunksOf, repoMetadata, type StreamCall } from '../../helpers/grpc-client.js';
import { pluginYaml } from '../../helpers/plugin-yaml.js';

/**
 * A plugin that leaves markers: `starts` and `ends` get "<worker work dir> <tag>" when a run
 * begins and when it finishes; SLEEP (request env) makes it slower. Its output depends only on
 * the tag, so every answer can be compared byte for byte with `expectedManifests`.
 */
export function markerPlugin(name: string, markers: string): string {
  return pluginYaml(name, `generate:
  command: [sh, -c]
  args:
    - |
      echo "$ARGOCD_CMP_WORKDIR $ARGOCD_ENV_TAG" >> "${markers}/starts"
      sleep "\${ARGOCD_ENV_SLEEP:-0}"
      echo "$ARGOCD_CMP_WORKDIR $ARGOCD_ENV_TAG" >> "${markers}/ends"
      printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\ndata:\\n  tag: "%s"\\n  num: 1.50\\n' "$ARGOCD_ENV_TAG" "$ARGOCD_ENV_TAG"`);
}

/** What the plugin's output splits into, written out by hand (Go JSON: sorted keys, compact). */
export function expectedManifests(tag: string): string[] {
  return [`{"data":{"num":1.5,"tag":"${tag}"},"kind":"ConfigMap","metadata":{"name":"${tag}"}}`];
}

/** A GenerateManifest call of the marker plugin for `tag`, with the scenario token in its env. */
export function markerCall(tgz: Buffer, token: string, tag: string, extra: Record<string, string> = {}, timeoutMs = 60_000): StreamCall {
  const env: EnvEntry[] = [
    { name: 'ARGOCD_APP_NAME', value: `app-${tag}` },
    { name: 'ARGOCD_ENV_RELTOKEN', value: token },
    { name: 'ARGOCD_ENV_TAG', value: tag },
    ...Object.entries(extra).map(([k, v]) => ({ name: `ARGOCD_ENV_${k}`, value: v })),
  ];
  return { metadata: repoMetadata(tgz, { appName: `app-${tag}`, env }), chunks: chunksOf(tgz, 1024), timeoutMs };
}

/** Marker lines as [work dir, tag] pairs. */
export function markerLines(markers: string, which: 'starts' | 'ends'): [string, string][] {
  const f = path.join(markers, which);
  if (!fs.existsSync(f)) return [];
  return fs
    .readFileSync(f, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map(l => {
      const i = l.lastIndexOf(' ');
      return [l.slice(0, i), l.slice(i + 1)];
    });
}
