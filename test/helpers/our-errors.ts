import assert from 'node:assert/strict';
import { OUR_ERRORS } from '../../cmp/errors.js';

/**
 * Assertions on one of our own errors (cmp/errors.ts `OUR_ERRORS`) as the service produced it.
 *
 * `assertOurError(kind, seen, args)` checks the gRPC status code and the whole text of the entry
 * `kind`. Behavioural tests (test/e2e, integration, security, reliability) call it with what the
 * real service answered; the meta-test test/unit/errors/our-errors-covered.test.ts requires such a
 * call for every entry, so an error nobody provokes is noticed.
 */

type Table = typeof OUR_ERRORS;
type Kind = keyof Table;

/** An argument the test cannot know (a job id, an OS error text): matched by any non-empty text. */
export const ANY = Symbol('any');

type Open<T extends unknown[]> = { [I in keyof T]: T[I] | typeof ANY };
type Args<K extends Kind> = Open<Parameters<Table[K]['text']>>;

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The exact text of entry `kind`, as an anchored pattern (after `prefix`), with ANY arguments open. */
export function ourErrorPattern<K extends Kind>(kind: K, args: Args<K>, prefix = ''): RegExp {
  const holes = (args as unknown[]).map((a, i) => (a === ANY ? `\u0000ANY${i}\u0000` : a));
  const text = (OUR_ERRORS[kind].text as (...a: unknown[]) => string)(...holes);
  const source = escape(prefix + text).replace(/\u0000ANY\d+\u0000/g, '[\\s\\S]+?');
  return new RegExp(`^${source}$`);
}

/**
 * `seen` (a call outcome `{code, details}`, or a worker's failure as `{code, details}`) is entry
 * `kind` with these arguments: its status code and its whole text (after `prefix`, for errors a
 * caller sees wrapped, e.g. `error receiving tgz file: `).
 */
export function assertOurError<K extends Kind>(
  kind: K,
  seen: { value: unknown } | { code: number; details: string },
  args: Args<K>,
  opts: { prefix?: string } = {},
): void {
  assert.ok('code' in seen, `expected ${kind}, got ${JSON.stringify(seen)}`);
  assert.equal(seen.code, OUR_ERRORS[kind].code, `status of ${kind}: ${JSON.stringify(seen)}`);
  assert.match(seen.details, ourErrorPattern(kind, args, opts.prefix));
}
