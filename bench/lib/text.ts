const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'tor', 'vel', 'sa', 'rin', 'do', 'xu', 'pe', 'qua', 'bri', 'zen', 'fo', 'gal', 'hu', 'jy', 'wen', 'ost'];
const KEYWORDS = ['name', 'namespace', 'labels', 'image', 'replicas', 'value', 'port', 'enabled', 'resources', 'limits', 'cpu',
  'memory', 'func', 'return', 'if', 'else', 'const', 'import', 'export', 'type', 'string', 'true', 'false', 'nil', 'err'];

/** Share of lines made fresh rather than repeated: tuned for a ~6:1 gzip ratio. */
const FRESH = 0.25;

/**
 * Source-like text (YAML keys, code keywords, identifiers, numbers, hex ids) that gzips about
 * 6:1 like a typical config/code repository, generated from `rand`.
 */
export class TextGen {
  private readonly words: string[];

  constructor(private readonly rand: () => number) {
    this.words = Array.from({ length: 1500 }, () => {
      let w = '';
      const n = 2 + Math.floor(rand() * 3);
      for (let i = 0; i < n; i++) w += SYLLABLES[Math.floor(rand() * SYLLABLES.length)];
      return w;
    });
  }

  /** One word, Zipf-like: a few are very common, most are rare. */
  private word(): string {
    const r = this.rand();
    return this.words[Math.floor(r * r * r * r * this.words.length)]!;
  }

  private line(): string {
    const r = this.rand();
    const indent = ' '.repeat(2 * Math.floor(this.rand() * 5));
    if (r < 0.35) return `${indent}${KEYWORDS[Math.floor(this.rand() * KEYWORDS.length)]}: ${this.word()}-${this.word()}`;
    if (r < 0.55) return `${indent}${this.word()}: ${Math.floor(this.rand() * 100)}`;
    if (r < 0.58) return `${indent}checksum: ${Math.floor(this.rand() * 2 ** 32).toString(16)}${Math.floor(this.rand() * 2 ** 32).toString(16)}`;
    const n = 3 + Math.floor(this.rand() * 7);
    const parts: string[] = [];
    for (let i = 0; i < n; i++) parts.push(i % 4 === 0 ? KEYWORDS[Math.floor(this.rand() * KEYWORDS.length)]! : this.word());
    return `${indent}${parts.join(' ')}`;
  }

  /** Boilerplate: lines that recur across files, as imports, headers and common keys do. */
  private common: string[] | undefined;

  private nextLine(): string {
    this.common ??= Array.from({ length: 400 }, () => this.line());
    if (this.rand() < FRESH) return this.line();
    const r = this.rand();
    return this.common[Math.floor(r * r * this.common.length)]!;
  }

  /** About `bytes` of text, ending with a newline. */
  text(bytes: number): string {
    const lines: string[] = [];
    let size = 0;
    while (size < bytes) {
      const l = this.nextLine();
      lines.push(l);
      size += l.length + 1;
    }
    return lines.join('\n') + '\n';
  }
}
