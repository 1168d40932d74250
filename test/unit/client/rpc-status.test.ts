import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { formatRpcError, goCodeName } from '../../../cmp/rpc-status.js';

test('a status prints as grpc-go prints it: rpc error: code = <Code> desc = <message>', () => {
  assert.equal(
    formatRpcError(Status.UNKNOWN, 'error generating manifests: `sh -c "exit 3"` failed exit status 3'),
    'rpc error: code = Unknown desc = error generating manifests: `sh -c "exit 3"` failed exit status 3',
  );
  assert.equal(
    formatRpcError(Status.DEADLINE_EXCEEDED, 'context deadline exceeded'),
    'rpc error: code = DeadlineExceeded desc = context deadline exceeded',
  );
  assert.equal(formatRpcError(Status.OK, ''), 'rpc error: code = OK desc = ');
});

test('every gRPC code has its Go name, and unknown codes print as Code(n)', () => {
  assert.deepEqual(
    [
      Status.CANCELLED,
      Status.INVALID_ARGUMENT,
      Status.NOT_FOUND,
      Status.ALREADY_EXISTS,
      Status.PERMISSION_DENIED,
      Status.RESOURCE_EXHAUSTED,
      Status.FAILED_PRECONDITION,
      Status.ABORTED,
      Status.OUT_OF_RANGE,
      Status.UNIMPLEMENTED,
      Status.INTERNAL,
      Status.UNAVAILABLE,
      Status.DATA_LOSS,
      Status.UNAUTHENTICATED,
    ].map(goCodeName),
    [
      'Canceled',
      'InvalidArgument',
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
    ],
  );
  assert.equal(goCodeName(42), 'Code(42)');
});
