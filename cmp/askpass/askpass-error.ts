/**
 * What the askpass protocol carries, without grpc-js: the runner and the worker handle these for
 * every git credentials request, and load grpc-js only where a socket is served or dialled.
 */
export interface GitCredentials {
  username: string;
  password: string;
}

/** A gRPC status for an askpass answer: `code` is a status number (cmp/grpc-status.ts), `details` its text. */
export class AskpassError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(details);
    this.name = 'AskpassError';
  }
}
