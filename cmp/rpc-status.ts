import { status as Status } from '@grpc/grpc-js';

/** The outcome of one RPC: the decoded response, or the status the call ended with. */
export type RpcOutcome<T> = { value: T } | { code: Status; details: string };

/** Go's codes.Code.String() names, indexed by code number. */
const GO_CODE_NAMES = [
  'OK',
  'Canceled',
  'Unknown',
  'InvalidArgument',
  'DeadlineExceeded',
  'NotFound',
  'AlreadyExists',
  'PermissionDenied',
  'ResourceExhausted',
  'FailedPrecondition',
  'Aborted',
  'OutOfRange',
  'Unimplemented',
  'Internal',
  'Unavailable',
  'DataLoss',
  'Unauthenticated',
] as const;

/** The name grpc-go prints for a status code (`Code(42)` for codes it does not know). */
export function goCodeName(code: number): string {
  return GO_CODE_NAMES[code] ?? `Code(${code})`;
}

/** A status as the repo-server prints it: grpc-go's `status.Error(...).Error()` (docs/argo-contract.md#error-statuses). */
export function formatRpcError(code: number, details: string): string {
  return `rpc error: code = ${goCodeName(code)} desc = ${details}`;
}
