import { dump } from 'js-yaml';
import { ParameterAnnouncement } from '../proto/generated/reposerver/repository/repository.js';

/**
 * Manifests (each a JSON document, as the plugin service returns them) as a YAML stream: one
 * block-style document per manifest, separated by `---`. A string that is not JSON is printed as is.
 */
export function manifestsAsYaml(manifests: readonly string[]): string {
  return manifests
    .map((m) => {
      let doc: unknown;
      try {
        doc = JSON.parse(m);
      } catch {
        return m.endsWith('\n') ? m : `${m}\n`; // not JSON: printed as it is
      }
      return dump(doc);
    })
    .join('---\n');
}

/**
 * Manifests as one JSON array. The manifests' own text is kept byte for byte (JSON.parse would
 * round integers beyond 2^53); each must parse as JSON.
 */
export function manifestsAsJson(manifests: readonly string[]): string {
  manifests.forEach((m, i) => {
    try {
      JSON.parse(m);
    } catch (err) {
      throw new Error(`manifest ${i} is not JSON: ${(err as Error).message}`);
    }
  });
  return manifests.length === 0 ? '[]\n' : `[\n${manifests.join(',\n')}\n]\n`;
}

export function matchLine(isSupported: boolean, isDiscoveryEnabled: boolean): string {
  return `isSupported=${isSupported} isDiscoveryEnabled=${isDiscoveryEnabled}\n`;
}

/** Announcements as a JSON array, unset fields omitted (Go's `omitempty` tags). */
export function announcementsAsJson(announcements: readonly ParameterAnnouncement[]): string {
  return `${JSON.stringify(announcements.map((a) => ParameterAnnouncement.toJSON(a)), null, 2)}\n`;
}
