import { status as Status } from '@grpc/grpc-js';

/**
 * An error with a gRPC status code. Argo's handlers return Go errors wrapped with `%w` at every
 * layer, and grpc-go derives the status from the innermost status/context error in the chain
 * (cmp-contract §15). We keep the same shape: the message is the full wrapped text, the code
 * travels with it and survives wrapping.
 */
export class CmpError extends Error {
  readonly code: Status;
  constructor(message: string, code: Status = Status.UNKNOWN) {
    super(message);
    this.name = 'CmpError';
    this.code = code;
  }
}

/** `context deadline exceeded` / `context canceled`, as Go's context package words them. */
export const DEADLINE_EXCEEDED_TEXT = 'context deadline exceeded';
export const CANCELED_TEXT = 'context canceled';

export function deadlineExceeded(): CmpError {
  return new CmpError(DEADLINE_EXCEEDED_TEXT, Status.DEADLINE_EXCEEDED);
}

export function canceled(): CmpError {
  return new CmpError(CANCELED_TEXT, Status.CANCELLED);
}

/** The status code an arbitrary thrown value maps to (UNKNOWN unless it carries one). */
export function codeOf(err: unknown): Status {
  return err instanceof CmpError ? err.code : Status.UNKNOWN;
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Go's `fmt.Errorf("<prefix>: %w", err)`: prefix the text, keep the code. */
export function wrap(prefix: string, err: unknown): CmpError {
  return new CmpError(`${prefix}: ${messageOf(err)}`, codeOf(err));
}
