import type { CmpError } from '../errors.js';
import { ourError } from '../errors.js';
import type { TarGuard } from '../go/go-tar-reader.js';
import { checkPathLength } from './path-limit.js';

/** Our bounds on a tarball's contents (CMP_OFFLOAD_MAX_EXTRACTED_BYTES, CMP_OFFLOAD_MAX_ENTRIES). */
export interface TarLimits {
  maxExtractedBytes: number;
  maxEntries: number;
}

/** The tar reader's hooks for `limits`, with our error texts; names are checked before anyone splits them. */
export function tarGuard(limits: TarLimits): TarGuard {
  return {
    entry(name, count) {
      checkPathLength(name);
      if (count > limits.maxEntries) throw tooManyEntries(limits.maxEntries);
    },
    bytes(total) {
      if (total > limits.maxExtractedBytes) throw extractedBytesExceeded(limits.maxExtractedBytes);
    },
  };
}

/** `extracted size exceeds the limit of <n> bytes (CMP_OFFLOAD_MAX_EXTRACTED_BYTES)` */
function extractedBytesExceeded(max: number): CmpError {
  return ourError('extractedTooLarge', max);
}

/** `tarball has more than <n> entries (CMP_OFFLOAD_MAX_ENTRIES)` */
function tooManyEntries(max: number): CmpError {
  return ourError('tooManyEntries', max);
}
