/**
 * The few pieces of Go's encoding/json (json.Marshal, HTML escaping on) the repo-server's
 * ARGOCD_APP_PARAMETERS needs: strings, string lists and string maps with byte-wise sorted keys.
 */
import { goJsonQuote } from './go-json-encode.js';

/** A JS string as Go's json.Marshal writes a string. */
export const goJsonString = goJsonQuote;

export function goJsonStringArray(items: readonly string[]): string {
  return `[${items.map(goJsonString).join(',')}]`;
}

/** A map[string]string: keys in Go's order (byte-wise on UTF-8, not JS's UTF-16 order). */
export function goJsonStringMap(map: Readonly<Record<string, string>>): string {
  const keys = Object.keys(map).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return `{${keys.map((k) => `${goJsonString(k)}:${goJsonString(map[k]!)}`).join(',')}}`;
}
