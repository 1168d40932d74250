import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { textLine } from '../../../cmp/log.js';
import { goCodeName, goPeerAddress, goTimeMs, grpcFinishFields, serverCodeLevel } from '../../../cmp/observe/grpc-log-fields.js';

test('grpc.code is the grpc-go constant name; unknown numbers are Code(n)', () => {
  assert.equal(goCodeName(Status.OK), 'OK');
  assert.equal(goCodeName(Status.CANCELLED), 'Canceled');
  assert.equal(goCodeName(Status.DEADLINE_EXCEEDED), 'DeadlineExceeded');
  assert.equal(goCodeName(Status.UNKNOWN), 'Unknown');
  assert.equal(goCodeName(Status.UNAUTHENTICATED), 'Unauthenticated');
  assert.equal(goCodeName(42 as Status), 'Code(42)');
});

test("the line's level follows logging.DefaultServerCodeToLevel", () => {
  assert.equal(serverCodeLevel(Status.OK), 'info');
  assert.equal(serverCodeLevel(Status.INVALID_ARGUMENT), 'info');
  assert.equal(serverCodeLevel(Status.DEADLINE_EXCEEDED), 'warn');
  assert.equal(serverCodeLevel(Status.RESOURCE_EXHAUSTED), 'warn');
  assert.equal(serverCodeLevel(Status.UNKNOWN), 'error');
  assert.equal(serverCodeLevel(Status.INTERNAL), 'error');
});

test('grpc.time_ms is Go\'s %v of float32(µs)/1000: shortest float32 digits, %e from 1e6 ms', () => {
  assert.equal(goTimeMs(12.935), '12.935');
  assert.equal(goTimeMs(27702.4651), '27702.465');
  assert.equal(goTimeMs(0.0004), '0');
  assert.equal(goTimeMs(0.001), '0.001');
  assert.equal(goTimeMs(5), '5');
  assert.equal(goTimeMs(136.5629), '136.562');
  assert.equal(goTimeMs(999_999.5), '999999.5');
  assert.equal(goTimeMs(1_000_000), '1e+06');
  assert.equal(goTimeMs(1_234_567.891), '1.2345679e+06');
});

test('peer.address: a unix-socket client is @ as in grpc-go; IPv6 hosts are bracketed', () => {
  assert.equal(goPeerAddress('unknown'), '@');
  assert.equal(goPeerAddress('10.0.0.1:5000'), '10.0.0.1:5000');
  assert.equal(goPeerAddress('::1:5000'), '[::1]:5000');
  assert.equal(goPeerAddress('[::1]:5000'), '[::1]:5000');
});

test("Argo's finished-call fields, and how the text format prints them", () => {
  const prev = process.env.TZ;
  process.env.TZ = 'UTC';
  try {
    const call = {
      service: 'plugin.ConfigManagementPluginService',
      method: 'GenerateManifest',
      methodType: 'client_stream' as const,
      peer: 'unknown',
      start: new Date(Date.UTC(2026, 0, 2, 15, 4, 5, 678)),
      deadline: new Date(Date.UTC(2026, 0, 2, 15, 5, 5, 999)),
    };
    const fields = grpcFinishFields(call, Status.DEADLINE_EXCEEDED, 60_000.4);
    assert.deepEqual(fields, {
      protocol: 'grpc',
      'grpc.component': 'server',
      'grpc.service': 'plugin.ConfigManagementPluginService',
      'grpc.method': 'GenerateManifest',
      'grpc.method_type': 'client_stream',
      'peer.address': '@',
      'grpc.start_time': '2026-01-02T15:04:05Z',
      'grpc.request.deadline': '2026-01-02T15:05:05Z',
      'grpc.code': 'DeadlineExceeded',
      'grpc.time_ms': '60000.4',
    });
    assert.equal('grpc.request.deadline' in grpcFinishFields({ ...call, deadline: Infinity }, Status.OK, 1), false);
    // grpc-js's server calls give the deadline as epoch ms.
    assert.equal(grpcFinishFields({ ...call, deadline: call.deadline.getTime() }, Status.OK, 1)['grpc.request.deadline'], '2026-01-02T15:05:05Z');
    const line = textLine(JSON.stringify({ level: 'warning', time: 't', msg: 'request', ...fields }));
    assert.equal(
      line,
      'time=t level=warning msg=request grpc.code=DeadlineExceeded grpc.component=server grpc.method=GenerateManifest ' +
        'grpc.method_type=client_stream grpc.request.deadline="2026-01-02T15:05:05Z" grpc.service=plugin.ConfigManagementPluginService ' +
        'grpc.start_time="2026-01-02T15:04:05Z" grpc.time_ms=60000.4 peer.address=@ protocol=grpc\n',
    );
  } finally {
    if (prev === undefined) delete process.env.TZ;
    else process.env.TZ = prev;
  }
});
