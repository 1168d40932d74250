// go-yaml's Unmarshal reads only the first document of its input: anything after a `...` end marker
// or a second `---` is never parsed. js-yaml parses whole streams, so we cut the text first.
import { GoYamlError } from './go-yaml-resolve.js';

const MARKER_LINE = /^(?:---|\.\.\.)(?=[ \t\r\n]|$)/gm;

function markerAt(text: string, pos: number, ch: number): boolean {
  if (text.charCodeAt(pos) !== ch || text.charCodeAt(pos + 1) !== ch || text.charCodeAt(pos + 2) !== ch) return false;
  const next = text.charCodeAt(pos + 3);
  return Number.isNaN(next) || next === 0x20 || next === 0x09 || next === 0x0d || next === 0x0a;
}

/**
 * The part of `text` that makes up its first YAML document. A `...` before any content is go-yaml's
 * `did not find expected node content` (the implicit first document has no node).
 */
export function firstDocument(text: string): string {
  let pos = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let line = 0;
  while (pos < text.length) {
    const nl = text.indexOf('\n', pos);
    const end = nl < 0 ? text.length : nl;
    if (markerAt(text, pos, 0x2d)) {
      pos = end + 1;
      break;
    }
    if (markerAt(text, pos, 0x2e)) {
      throw new GoYamlError(`${line > 0 ? `line ${line}: ` : ''}did not find expected node content`);
    }
    let k = pos;
    while (k < end && (text.charCodeAt(k) === 0x20 || text.charCodeAt(k) === 0x09 || text.charCodeAt(k) === 0x0d)) k++;
    const c = text.charCodeAt(k);
    if (k < end && c !== 0x23 && c !== 0x25) break; // content (not a comment or a directive)
    pos = end + 1;
    line++;
  }
  if (pos >= text.length) return text;
  MARKER_LINE.lastIndex = pos;
  const m = MARKER_LINE.exec(text);
  return m === null ? text : text.slice(0, m.index);
}
