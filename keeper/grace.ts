/** A derived value that drops paths of the annotation, and since when it is the derived one. */
export interface Narrowing {
  value: string;
  since: number;
}

/** What the annotation should say now (undefined: no annotation), why, and a narrowing under way. */
export interface Decision {
  value: string | undefined;
  reason: string;
  narrowing?: Narrowing;
}

export function entriesOf(value: string): string[] {
  return value
    .split(';')
    .map(e => e.trim())
    .filter(Boolean);
}

/**
 * Whether `entry` of the current annotation matches nothing that `derived` entries miss: it is
 * one of them or lies under a root-relative directory entry of them (the only entries we derive).
 */
function covered(entry: string, derived: string[]): boolean {
  return derived.some(d => d === entry || d === '/' || (d.startsWith('/') && entry.startsWith(`${d}/`)));
}

/**
 * The annotation to apply for a derived value. No value removes the annotation at once (Argo
 * then always regenerates: safe). A value that drops paths of the current annotation first
 * joins them (the union) for `graceMs` from when it became the derived value, then replaces
 * them: revisions generated before the change (the synced one, until the app syncs) may still
 * depend on the dropped paths. Anything else is applied as derived.
 */
export function decide(derived: string | undefined, current: string | undefined, narrowing: Narrowing | undefined, now: number, graceMs: number): Decision {
  if (derived === undefined) return { value: undefined, reason: 'no derived value' };
  if (current === undefined || current === derived) return { value: derived, reason: 'derived from the latest traced generation' };
  const next = entriesOf(derived);
  const dropped = entriesOf(current).filter(e => !covered(e, next));
  if (dropped.length === 0) return { value: derived, reason: 'derived from the latest traced generation (drops no path)' };
  const n = narrowing?.value === derived ? narrowing : { value: derived, since: now };
  const until = n.since + graceMs;
  if (now >= until) return { value: derived, reason: `grace period over: drops ${dropped.join(';')}` };
  const union = [...new Set([...entriesOf(current), ...next])].sort().join(';');
  return { value: union, reason: `keeps ${dropped.join(';')}, dropped by the derived value, until ${new Date(until).toISOString()} (grace period)`, narrowing: n };
}
