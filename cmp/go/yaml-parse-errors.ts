// Rewords js-yaml syntax errors as go-yaml v2 (libyaml) would word them. The mapping is heuristic:
// the two parsers detect problems at different points, so only the common shapes are translated.
//
// go-yaml prints `line N: ` with N = 1-based line for scanner errors, and the 0-based line of the
// offending token for parser errors (omitted when 0).

type Mark = { line: number; column: number; position: number };

function scannerError(mark: Mark, msg: string): string {
  return `line ${mark.line + 1}: ${msg}`;
}

function parserError(line: number, msg: string): string {
  return line > 0 ? `line ${line}: ${msg}` : msg;
}

function lineCount(text: string, end: number): number {
  let n = 0;
  for (let i = text.indexOf('\n'); i >= 0 && i < end; i = text.indexOf('\n', i + 1)) n++;
  return n;
}

/** The innermost flow collection still open at the end of `text` (outside quotes and comments). */
function openFlowCloser(text: string): string {
  const stack: string[] = [];
  let quote = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote !== '') {
      if (c === '\\' && quote === '"') i++;
      else if (c === quote) quote = '';
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '#' && (i === 0 || /\s/.test(text[i - 1]!))) {
      const nl = text.indexOf('\n', i);
      i = nl < 0 ? text.length : nl;
    } else if (c === '{') stack.push('}');
    else if (c === '[') stack.push(']');
    else if ((c === '}' || c === ']') && stack.length > 0) stack.pop();
  }
  return stack.at(-1) ?? '}';
}

/** libyaml reaching the end of the stream inside a flow collection. */
function flowAtEof(text: string): string {
  const line = lineCount(text, text.length);
  // Right after an opener, `,` or `:` it was looking for a node; after a node, for a separator.
  const last = text.replace(/\s+$/, '').at(-1);
  if (last === '[' || last === '{' || last === ',' || last === ':') return parserError(line, 'did not find expected node content');
  return parserError(line, `did not find expected ',' or '${openFlowCloser(text)}'`);
}

function prevNonSpace(text: string, pos: number): string {
  let i = pos - 1;
  while (i >= 0 && (text[i] === ' ' || text[i] === '\t')) i--;
  return i >= 0 ? text[i]! : '';
}

function firstContentChar(text: string): string {
  const m = /^(?:\ufeff)?(?:[ \t]*(?:#[^\n]*)?\r?\n|---[ \t]*(?:#[^\n]*)?\r?\n)*[ \t]*(.)/.exec(text);
  return m?.[1] ?? '';
}

/** go-yaml's message (without `yaml: `) for a js-yaml parse failure `reason` at `mark` in `text`. */
export function goYamlParseError(reason: string, mark: Mark | undefined, text: string, maxDepth: number): string {
  if (mark === undefined) return reason;
  const at = text[mark.position] ?? '';
  if (reason === 'tab characters must not be used in indentation') {
    return scannerError(mark, 'found character that cannot start any token');
  }
  if (reason === 'bad indentation of a mapping entry' || reason === 'bad indentation of a sequence entry') {
    if (at === ':') return scannerError(mark, 'mapping values are not allowed in this context');
    if ((at === '}' || at === ']') && prevNonSpace(text, mark.position) === ':') {
      return parserError(mark.line, 'did not find expected node content');
    }
    return parserError(mark.line, 'did not find expected key');
  }
  if (reason === 'end of the stream or a document separator is expected') {
    if (at === '@' || at === '`') return scannerError(mark, 'found character that cannot start any token');
    if (firstContentChar(text) === '-') return parserError(mark.line, "did not find expected '-' indicator");
    return parserError(mark.line, 'did not find expected key');
  }
  const atEnd = text.slice(mark.position).trim() === '';
  if (reason === 'unexpected end of the stream within a flow collection' || (reason === 'deficient indentation' && atEnd)) {
    return flowAtEof(text);
  }
  if (reason === 'missed comma between flow collection entries') {
    return parserError(mark.line, `did not find expected ',' or '${openFlowCloser(text.slice(0, mark.position))}'`);
  }
  if (reason.startsWith('unexpected end of the stream within a') || reason.startsWith('unexpected end of the document within a')) {
    return scannerError(mark, 'found unexpected end of stream');
  }
  if (reason === "expected the node content, but found ','") return parserError(mark.line, 'did not find expected node content');
  if (reason === 'directives end mark is expected') return parserError(mark.line, 'did not find expected <document start>');
  if (reason.startsWith('can not read a block mapping entry')) return scannerError(mark, "could not find expected ':'");
  if (reason === 'unknown escape sequence' || reason === 'expected hexadecimal character') {
    return scannerError(mark, 'found unknown escape character');
  }
  if (reason.startsWith('undeclared tag handle')) return parserError(mark.line, 'found undefined tag handle');
  if (reason.startsWith('nesting exceeded maxDepth')) return scannerError(mark, `exceeded max depth of ${maxDepth}`);
  return scannerError(mark, reason);
}
