import { status as Status, type ServerErrorResponse } from '@grpc/grpc-js';
import { CmpError, messageOf } from '../../cmp/errors.js';

/** Any thrown value → the gRPC status the repo-server sees (docs/argo-contract.md#error-statuses). */
export function toStatus(err: unknown): ServerErrorResponse {
  // A bug in our code is Go's panic, which the recovery interceptor turns into INTERNAL.
  const isBug = err instanceof TypeError || err instanceof RangeError || err instanceof ReferenceError;
  const code = err instanceof CmpError ? err.code : isBug ? Status.INTERNAL : Status.UNKNOWN;
  const details = messageOf(err);
  return Object.assign(new Error(details), { code, details });
}
