// sigs.k8s.io/yaml `YAMLToJSON` of one chunk, with go-yaml v2 typing and Go json.Marshal output.
import { YAMLException, parseEvents, type Event } from 'js-yaml';
import { EncodeLimit, goJsonMarshal } from './go-json-encode.js';
import type { GoValue } from './go-values.js';
import { decodeGoYaml } from './go-yaml-decode.js';
import { GoYamlError } from './go-yaml-resolve.js';
import { firstDocument } from './yaml-first-document.js';
import { goYamlParseError } from './yaml-parse-errors.js';
import { readYamlText } from './yaml-reader-check.js';

const PREFIX = 'error converting YAML to JSON: ';
// Deep enough for anything real; js-yaml's parser recurses, so it must stay well below the JS stack.
const MAX_DEPTH = 1000;

function fail(message: string): never {
  throw new Error(PREFIX + message);
}

function parse(text: string): Event[] {
  try {
    return parseEvents(text, { maxDepth: MAX_DEPTH });
  } catch (err) {
    if (err instanceof YAMLException) return fail('yaml: ' + goYamlParseError(err.reason, err.mark, text, MAX_DEPTH));
    if (err instanceof RangeError) return fail(`yaml: exceeded max depth of ${MAX_DEPTH}`);
    throw err;
  }
}

/** Converts already-decoded YAML text (reader checks done) to Go-compatible JSON. */
export function yamlTextToJson(text: string): string {
  return convertYamlText(text, v => goJsonMarshal(v));
}

/**
 * Decodes already-decoded YAML text (reader checks done) and hands the value to `emit` (which
 * encodes or measures it), with YAMLToJSON's error texts for both steps. EncodeLimit passes through.
 */
export function convertYamlText<T>(text: string, emit: (value: GoValue) => T): T {
  try {
    const doc = firstDocument(text);
    return emit(decodeGoYaml(parse(doc), doc));
  } catch (err) {
    if (err instanceof EncodeLimit) throw err;
    if (err instanceof GoYamlError) return fail('yaml: ' + err.message);
    if (err instanceof Error && !err.message.startsWith(PREFIX)) return fail(err.message);
    throw err;
  }
}

/**
 * sigs.k8s.io/yaml `YAMLToJSON` of one YAML chunk as Argo's Go code does it: go-yaml v2 (YAML 1.1-ish)
 * typing of the first document, serialised like Go `json.Marshal` (compact, sorted keys, HTML-safe).
 * An empty document gives `null`. Errors are thrown with Go's text, prefixed
 * `error converting YAML to JSON: ` (e.g. `... yaml: line 2: mapping values are not allowed in this context`).
 */
export function yamlToJson(src: string | Buffer): string {
  const read = readYamlText(typeof src === 'string' ? Buffer.from(src, 'utf8') : src);
  if ('error' in read) return fail('yaml: ' + read.error);
  return yamlTextToJson(read.text);
}
