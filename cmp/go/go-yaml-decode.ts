// go-yaml v2's decoder (decode.go) for `yaml.Unmarshal(in, &interface{})`, driven by js-yaml's event
// stream instead of go-yaml's node tree, plus sigs.k8s.io/yaml's key conversion. Reproduced on purpose:
// merge keys applied in document order, alias re-expansion with the "excessive aliasing" ratio, key
// typing/stringification, and the error texts.
import { EVENT_ID, SCALAR_STYLE, getScalarValue, type Event, type ScalarEvent } from 'js-yaml';
import { GoFloat, MAX_INT64, formatFloat32Key, goSharpV, type GoKey, type GoMap, type GoValue } from './go-values.js';
import { GoYamlError, MERGE_TAG, expandTag, resolvePlain, resolveTagged } from './go-yaml-resolve.js';

const NO_RANGE = -1;

/** go-yaml's allowedAliasRatio: how much of the decode work may come from alias expansion. */
function allowedAliasRatio(decodeCount: number): number {
  if (decodeCount <= 400000) return 0.99;
  if (decodeCount >= 4000000) return 0.1;
  return 0.99 - 0.89 * ((decodeCount - 400000) / 3600000);
}

class Decoder {
  private decodeCount = 1; // the document node itself
  private aliasCount = 0;
  private aliasDepth = 0;
  private readonly expanding = new Set<number>();
  /** Alias event index → the event index of the node it refers to (resolved in document order). */
  private readonly aliasTarget = new Map<number, number>();
  /**
   * Each alias target decoded whole, with the nodes go-yaml decodes for it. A later alias shares
   * the value instead of decoding it again (the values are never changed once built), so the
   * decoded document stays the size of its text; go-yaml's counts are replayed node by node.
   */
  private readonly decoded = new Map<number, { value: GoValue; nodes: number }>();
  private readonly targets = new Set<number>();
  /** Set when a map got a key sigs.k8s.io/yaml cannot convert (nil or uint64). */
  sawBadKey = false;
  /** Index of the event after the node decoded last. */
  private next = 0;

  constructor(
    private readonly events: Event[],
    private readonly src: string,
  ) {
    this.resolveAliases();
  }

  /** go-yaml's parser binds each alias to the latest anchor of that name seen before it. */
  private resolveAliases(): void {
    const anchors = new Map<string, number>();
    const events = this.events;
    for (let i = 0; i < events.length; i++) {
      const ev = events[i]!;
      if (ev.type === EVENT_ID.ALIAS) {
        const name = this.src.slice(ev.anchorStart, ev.anchorEnd);
        const target = anchors.get(name);
        if (target === undefined) throw new GoYamlError(`unknown anchor '${name}' referenced`);
        this.aliasTarget.set(i, target);
        this.targets.add(target);
      } else if (ev.type === EVENT_ID.SCALAR || ev.type === EVENT_ID.MAPPING || ev.type === EVENT_ID.SEQUENCE) {
        if (ev.anchorStart !== NO_RANGE) anchors.set(this.src.slice(ev.anchorStart, ev.anchorEnd), i);
      }
    }
  }

  /** go-yaml's count of one node decoded, and its "billion laughs" check. */
  private count(): void {
    this.decodeCount++;
    if (this.aliasDepth > 0) this.aliasCount++;
    if (
      this.aliasCount > 100 &&
      this.decodeCount > 1000 &&
      this.aliasCount / this.decodeCount > allowedAliasRatio(this.decodeCount)
    ) {
      throw new GoYamlError('document contains excessive aliasing');
    }
  }

  /** Decodes the node at event `i`; mappings are decoded into `into` when given (merge). */
  unmarshal(i: number, into?: GoMap): GoValue {
    const before = this.decodeCount;
    const value = this.node(i, into);
    if (into === undefined && this.targets.has(i) && !this.decoded.has(i)) this.decoded.set(i, { value, nodes: this.decodeCount - before });
    return value;
  }

  private node(i: number, into: GoMap | undefined): GoValue {
    this.count();
    const ev = this.events[i]!;
    switch (ev.type) {
      case EVENT_ID.SCALAR:
        this.next = i + 1;
        return this.scalar(ev);
      case EVENT_ID.SEQUENCE: {
        const out: GoValue[] = [];
        let j = i + 1;
        while (this.events[j]!.type !== EVENT_ID.POP) {
          out.push(this.unmarshal(j));
          j = this.next;
        }
        this.next = j + 1;
        return out;
      }
      case EVENT_ID.MAPPING:
        return this.mapping(i, into ?? new Map());
      case EVENT_ID.ALIAS: {
        const target = this.aliasTarget.get(i)!;
        if (this.expanding.has(target)) {
          throw new GoYamlError(`anchor '${this.src.slice(ev.anchorStart, ev.anchorEnd)}' value contains itself`);
        }
        this.aliasDepth++;
        const seen = this.decoded.get(target);
        let v: GoValue;
        if (seen) {
          // go-yaml decodes the target again: as many nodes, each counted under the alias.
          for (let n = 0; n < seen.nodes; n++) this.count();
          if (into) for (const [k, x] of seen.value as GoMap) into.set(k, x);
          v = into ?? seen.value;
        } else {
          this.expanding.add(target);
          v = this.unmarshal(target, into);
          this.expanding.delete(target);
        }
        this.aliasDepth--;
        this.next = i + 1;
        return v;
      }
      default:
        throw new GoYamlError(`unexpected event ${ev.type}`);
    }
  }

  private scalar(ev: ScalarEvent): GoValue {
    const s = getScalarValue(this.src, ev);
    if (ev.tagStart === NO_RANGE) return ev.style === SCALAR_STYLE.PLAIN ? resolvePlain(s) : s;
    const raw = this.src.slice(ev.tagStart, ev.tagEnd);
    // The non-specific tag `!` makes the scalar implicit but unresolvable: a string.
    if (raw === '!') return s;
    return resolveTagged(expandTag(raw), s);
  }

  private isMergeKey(ev: Event): boolean {
    if (ev.type !== EVENT_ID.SCALAR || getScalarValue(this.src, ev) !== '<<') return false;
    if (ev.tagStart === NO_RANGE) return ev.style === SCALAR_STYLE.PLAIN;
    const raw = this.src.slice(ev.tagStart, ev.tagEnd);
    return raw === '!' || expandTag(raw) === MERGE_TAG;
  }

  private mapping(i: number, out: GoMap): GoMap {
    const events = this.events;
    let j = i + 1;
    while (events[j]!.type !== EVENT_ID.POP) {
      if (this.isMergeKey(events[j]!)) {
        this.merge(j + 1, out);
        j = this.next;
        continue;
      }
      const k = this.unmarshal(j);
      if (Array.isArray(k) || k instanceof Map) throw new GoYamlError(`invalid map key: ${goSharpV(k)}`);
      const v = this.unmarshal(this.next);
      j = this.next;
      out.set(this.convertKey(k), v);
    }
    this.next = j + 1;
    return out;
  }

  /** go-yaml `merge`: decode the source map(s) into `out`; for a list, earlier maps win. */
  private merge(i: number, out: GoMap): void {
    const ev = this.events[i]!;
    if (ev.type === EVENT_ID.MAPPING) {
      this.unmarshal(i, out);
      return;
    }
    if (ev.type === EVENT_ID.ALIAS) {
      this.requireMapAlias(i);
      this.unmarshal(i, out);
      return;
    }
    if (ev.type !== EVENT_ID.SEQUENCE) throw wantMap();
    const children: number[] = [];
    let j = i + 1;
    while (this.events[j]!.type !== EVENT_ID.POP) {
      children.push(j);
      j = this.skip(j);
    }
    for (let c = children.length - 1; c >= 0; c--) {
      const ci = children[c]!;
      const cev = this.events[ci]!;
      if (cev.type === EVENT_ID.ALIAS) this.requireMapAlias(ci);
      else if (cev.type !== EVENT_ID.MAPPING) throw wantMap();
      this.unmarshal(ci, out);
    }
    this.next = j + 1;
  }

  private requireMapAlias(i: number): void {
    if (this.events[this.aliasTarget.get(i)!]!.type !== EVENT_ID.MAPPING) throw wantMap();
  }

  /** Index of the event after the node starting at `i`. */
  private skip(i: number): number {
    const t = this.events[i]!.type;
    if (t !== EVENT_ID.MAPPING && t !== EVENT_ID.SEQUENCE) return i + 1;
    let depth = 0;
    let j = i;
    do {
      const tj = this.events[j]!.type;
      if (tj === EVENT_ID.MAPPING || tj === EVENT_ID.SEQUENCE) depth++;
      else if (tj === EVENT_ID.POP) depth--;
      j++;
    } while (depth > 0);
    return j;
  }

  /** sigs.k8s.io/yaml's key conversion; nil and uint64 keys are kept for the later conversion error. */
  private convertKey(k: GoValue): GoKey {
    if (typeof k === 'string') return k;
    if (typeof k === 'number') return String(k);
    if (typeof k === 'boolean') return k ? 'true' : 'false';
    if (k instanceof GoFloat) return formatFloat32Key(k.value);
    if (typeof k === 'bigint') {
      if (k <= MAX_INT64) return k.toString();
      this.sawBadKey = true;
      return k;
    }
    this.sawBadKey = true;
    return null;
  }
}

function wantMap(): GoYamlError {
  return new GoYamlError('map merge requires map or sequence of maps as the value');
}

/** sigs.k8s.io/yaml convertToJSONableObject's error for the first key it cannot turn into a string. */
function findBadKey(v: GoValue): string | undefined {
  if (Array.isArray(v)) {
    for (const x of v) {
      const e = findBadKey(x);
      if (e !== undefined) return e;
    }
  } else if (v instanceof Map) {
    for (const [k, x] of v) {
      if (k === null) return `unsupported map key of type: %!s(<nil>), key: <nil>, value: ${goSharpV(x)}`;
      if (typeof k === 'bigint') return `unsupported map key of type: uint64, key: 0x${k.toString(16)}, value: ${goSharpV(x)}`;
      const e = findBadKey(x);
      if (e !== undefined) return e;
    }
  }
  return undefined;
}

/**
 * Decodes the first document of an event stream like `yaml.Unmarshal` into interface{} followed by
 * sigs.k8s.io/yaml's key conversion. Throws GoYamlError (go-yaml failures, message without `yaml: `)
 * or Error (conversion failures, full message).
 */
export function decodeGoYaml(events: Event[], src: string): GoValue {
  if (events.length === 0 || events[1]?.type === EVENT_ID.POP) return null;
  const d = new Decoder(events, src);
  const value = d.unmarshal(1);
  if (d.sawBadKey) {
    const err = findBadKey(value);
    if (err !== undefined) throw new Error(err);
  }
  return value;
}
