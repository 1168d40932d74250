import type { Status } from '../cmp/grpc-status.js';
import type { ParameterAnnouncement } from '../proto/generated/reposerver/repository/repository.js';
import type { PluginResult, RpcKind } from '../cmp/plugin/request.js';
import type { RecordedReads } from '../cmp/trace/read-recorder.js';
import { STAGES, type Stage } from '../cmp/observe/stages.js';
import { ResponseEncoder } from '../cmp/split/prepared.js';
import { ProtocolError, READ_PATH_MAX_BYTES, RUNNER_PROTOCOL_VERSION } from './protocol.js';

// Runs in the answer decoder's thread (answer-thread.ts): imports nothing heavy, types aside.

/** A validated answer: the plugin's result (and reads when asked), or the executor's failure. */
export type CheckedAnswer = { stages: [Stage, number][]; spans: RunnerSpan[] } & (
  | { ok: true; result: PluginResult; reads: RecordedReads | undefined }
  | { ok: false; code: Status; message: string }
);

/**
 * A checked answer as the decoder hands it back: a generate result as its ManifestResponse
 * protobuf (prepared.ts: how it is stored and sent), another as its JSON bytes, re-encoded from
 * the checked value; or why it was refused (our words only: JSON.parse's own messages quote the input).
 */
export type EncodedAnswer =
  | ({ stages: [Stage, number][]; spans: RunnerSpan[] } & (
      | ({ ok: true; reads: RecordedReads | undefined } & ({ json: Uint8Array } | { encoded: Uint8Array; manifestBytes: number; count: number }))
      | { ok: false; code: Status; message: string }
    ))
  | { refused: string };

/** Check an ANSWER payload (checkAnswer) and re-encode its result; never throws. */
export function encodeAnswer(payload: Buffer, bounds: AnswerBounds): EncodedAnswer {
  try {
    const a = checkAnswer(payload, bounds);
    if (!a.ok) return a;
    const { reads, stages, spans } = a;
    if (a.result.kind !== 'generate') return { ok: true, json: new TextEncoder().encode(JSON.stringify(a.result)), reads, stages, spans };
    const encoder = new ResponseEncoder();
    for (const m of a.result.manifests) encoder.add(m);
    const encoded = new Uint8Array(encoder.finish());
    return { ok: true, encoded, manifestBytes: encoder.bytes, count: encoder.count, reads, stages, spans };
  } catch (err) {
    return { refused: err instanceof ProtocolError ? err.message : `the answer could not be decoded (${(err as Error).name})` };
  }
}

/** What the answer to one request may hold. */
export interface AnswerBounds {
  kind: RpcKind;
  /** Reads were asked for (traced cache, generate). */
  readsAsked: boolean;
  /** CMP_OFFLOAD_TRACE_MAX_PATHS: paths in each list of reads. */
  maxPaths: number;
  /**
   * CMP_OFFLOAD_MAX_OUTPUT_BYTES: each manifest comes from at least one non-space byte of the
   * generate command's stdout, which holds at most this many.
   */
  maxManifests: number;
}

/**
 * Nesting of the deepest valid answer: answer → result → parameterAnnouncements → announcement
 * → map or array (reads and stages are shallower). Checked on the bytes before JSON.parse,
 * which takes seconds on deep garbage.
 */
export const MAX_ANSWER_DEPTH = 5;

/**
 * Check an ANSWER payload as hostile input: JSON no deeper than a valid answer, of exactly the
 * shape the proxy's encoder and the stores expect for the request's kind, reads only when
 * asked and of bounded count, manifests non-empty and no more than the command's output could
 * hold. Throws ProtocolError (our words only, never the runner's text) on anything else.
 */
export function checkAnswer(payload: Buffer, bounds: AnswerBounds): CheckedAnswer {
  checkDepth(payload, MAX_ANSWER_DEPTH);
  let a: unknown;
  try {
    a = JSON.parse(payload.toString('utf8'));
  } catch {
    throw new ProtocolError('the answer is not JSON');
  }
  if (!isObject(a)) throw new ProtocolError('the answer is not an object');
  if (a.v !== RUNNER_PROTOCOL_VERSION) throw new ProtocolError(`the answer is not of protocol version ${RUNNER_PROTOCOL_VERSION}`);
  const stages = checkStages(a.stages);
  const spans = checkSpans(a.spans);
  if (a.ok === false) {
    if (!Number.isInteger(a.code) || (a.code as number) < 1 || (a.code as number) > 16) throw new ProtocolError('the failure has no valid status code');
    if (typeof a.message !== 'string') throw new ProtocolError('the failure has no message');
    return { ok: false, code: a.code as Status, message: a.message, stages, spans };
  }
  if (a.ok !== true) throw new ProtocolError('the answer is neither a result nor a failure');
  const result = checkResult(a.result, bounds);
  if (!bounds.readsAsked) {
    if (a.reads !== undefined) throw new ProtocolError('the answer has reads that were not asked for');
    return { ok: true, result, reads: undefined, stages, spans };
  }
  return { ok: true, result, reads: a.reads === undefined ? undefined : checkReads(a.reads, bounds.maxPaths), stages, spans };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Refuse JSON text nested deeper than `max` (arrays and objects), in one pass over the bytes:
 * strings are skipped with indexOf (an escaped quote is one after an odd run of backslashes).
 * Malformed text is left to JSON.parse.
 */
export function checkDepth(bytes: Buffer, max: number): void {
  let depth = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (b === QUOTE) {
      for (;;) {
        i = bytes.indexOf(QUOTE, i + 1);
        if (i < 0) return;
        let k = i - 1;
        while (bytes[k] === BACKSLASH) k--;
        if ((i - 1 - k) % 2 === 0) break;
      }
    } else if (b === 0x5b || b === 0x7b) {
      if (++depth > max) throw new ProtocolError(`the answer nests deeper than ${max} levels`);
    } else if (b === 0x5d || b === 0x7d) {
      depth--;
    }
  }
}

/** A day in ms: no stage of one run lasts longer. */
const MAX_STAGE_MS = 86_400_000;

/**
 * A stage of the run as a span (tracing): stage, start and end (ms since the epoch), the
 * command's name and step (`exec` only, else empty). A run has a handful (extract, init,
 * generate, split); the worker re-parents them under its job span.
 */
export type RunnerSpan = [Stage, number, number, string, string];
const MAX_SPANS = 16;
const MAX_SPAN_TEXT = 128;

function checkSpans(s: unknown): RunnerSpan[] {
  if (s === undefined) return [];
  if (!Array.isArray(s) || s.length > MAX_SPANS) throw new ProtocolError('the spans are not a short list');
  const text = (v: unknown) => typeof v === 'string' && v.length <= MAX_SPAN_TEXT;
  const time = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v >= 0;
  for (const e of s) {
    if (!Array.isArray(e) || e.length !== 5 || !(STAGES as readonly unknown[]).includes(e[0]) || !time(e[1]) || !time(e[2]) || !text(e[3]) || !text(e[4])) {
      throw new ProtocolError('the spans are not stage spans');
    }
  }
  return s as RunnerSpan[];
}

function checkStages(s: unknown): [Stage, number][] {
  if (s === undefined) return [];
  if (!isObject(s)) throw new ProtocolError('the stages are not an object');
  const out: [Stage, number][] = [];
  for (const [k, v] of Object.entries(s)) {
    if (!(STAGES as readonly string[]).includes(k) || typeof v !== 'number' || !(v >= 0 && v <= MAX_STAGE_MS)) {
      throw new ProtocolError('the stages are not durations of known stages');
    }
    out.push([k as Stage, v]);
  }
  return out;
}

function checkResult(r: unknown, { kind, maxManifests }: AnswerBounds): PluginResult {
  if (!isObject(r) || r.kind !== kind) throw new ProtocolError(`the result is not a ${kind} result`);
  switch (kind) {
    case 'generate':
      if (!isStringArray(r.manifests)) throw new ProtocolError('the manifests are not a list of strings');
      if (r.manifests.length > maxManifests) {
        throw new ProtocolError(`the answer has more manifests (${r.manifests.length}) than the command's output may hold (${maxManifests}, CMP_OFFLOAD_MAX_OUTPUT_BYTES)`);
      }
      if (r.manifests.some(m => m.length === 0)) throw new ProtocolError('the answer has an empty manifest');
      return { kind, manifests: r.manifests };
    case 'match':
      if (typeof r.isSupported !== 'boolean' || typeof r.isDiscoveryEnabled !== 'boolean') {
        throw new ProtocolError('the match result has non-boolean fields');
      }
      return { kind, isSupported: r.isSupported, isDiscoveryEnabled: r.isDiscoveryEnabled };
    case 'parameters':
      if (!Array.isArray(r.parameterAnnouncements)) throw new ProtocolError('the parameter announcements are not a list');
      return { kind, parameterAnnouncements: r.parameterAnnouncements.map(checkAnnouncement) };
  }
}

const ANNOUNCEMENT_STRINGS = ['name', 'title', 'tooltip', 'itemType', 'collectionType', 'string'] as const;

/** A ParameterAnnouncement rebuilt field by field: nothing else reaches the encoder. */
function checkAnnouncement(p: unknown): ParameterAnnouncement {
  if (!isObject(p)) throw new ProtocolError('a parameter announcement is not an object');
  for (const f of ANNOUNCEMENT_STRINGS) if (typeof p[f] !== 'string') throw new ProtocolError(`a parameter announcement's ${f} is not a string`);
  if (typeof p.required !== 'boolean') throw new ProtocolError("a parameter announcement's required is not a boolean");
  if (!isStringArray(p.array)) throw new ProtocolError("a parameter announcement's array is not a list of strings");
  if (!isObject(p.map) || Array.isArray(p.map) || !Object.values(p.map).every(v => typeof v === 'string')) {
    throw new ProtocolError("a parameter announcement's map is not a map of strings");
  }
  const map: Record<string, string> = {};
  for (const [k, v] of Object.entries(p.map)) Object.defineProperty(map, k, { value: v, enumerable: true, writable: true, configurable: true });
  return {
    name: p.name as string,
    title: p.title as string,
    tooltip: p.tooltip as string,
    required: p.required,
    itemType: p.itemType as string,
    collectionType: p.collectionType as string,
    string: p.string as string,
    array: p.array,
    map,
  };
}

function checkReads(r: unknown, maxPaths: number): RecordedReads {
  if (!isObject(r)) throw new ProtocolError('the reads are not an object');
  if (r.complete === false) {
    if (typeof r.reason !== 'string') throw new ProtocolError('incomplete reads have no reason');
    return { complete: false, reason: r.reason };
  }
  if (r.complete !== true) throw new ProtocolError('the reads are neither complete nor incomplete');
  // A runner from before `traversed` resolved paths lexically: its record cannot be used.
  if (r.traversed === undefined) return { complete: false, reason: 'the runner does not report traversed paths (an older version)' };
  const list = (name: 'touched' | 'listed' | 'moved' | 'traversed'): string[] => {
    const v = r[name];
    if (!isStringArray(v) || v.length > maxPaths || v.some(s => Buffer.byteLength(s) > READ_PATH_MAX_BYTES)) {
      throw new ProtocolError(`the ${name} reads are not a list of at most ${maxPaths} paths`);
    }
    return v;
  };
  return { complete: true, touched: list('touched'), listed: list('listed'), moved: list('moved'), traversed: list('traversed') };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every(s => typeof s === 'string');
}
