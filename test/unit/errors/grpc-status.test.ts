import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { Status } from '../../../cmp/grpc-status.js';

test('the local gRPC status table has exactly the names and numbers of grpc-js', () => {
  const theirs = Object.entries(status).filter(([name]) => Number.isNaN(Number(name)));
  assert.deepEqual(Object.entries(Status), theirs);
});
