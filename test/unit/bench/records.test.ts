import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  findRecord, label, latestRecord, LookupError, readRecords, resolveRecord, toRecord, withRecord, writeRecords,
} from '../../../bench/lib/records.js';
import { benchRecord, benchRow } from './fixture.js';

const rows = [benchRow('split', 'YAML stream', 1.06, '×')];
const RECORDS = [
  benchRecord('a4b337b', rows),
  benchRecord('a4c0001', rows),
  benchRecord('f396b37', rows),
  benchRecord('f396b37', rows, { dirty: true }),
  benchRecord('1234567', rows),
];

test('a run becomes a record of its commit, dirty flag, date and Node version, with its rows', () => {
  const { commit: _c, dirty: _d, date: _t, node: _n, ...results } = benchRecord('x', rows);
  const r = toRecord(results, { commit: '0fa4069', dirty: true });
  assert.deepEqual([r.commit, r.dirty, r.date, r.node, r.rows], ['0fa4069', true, '2026-12-03T13:28:31.309Z', 'v20.20.2', rows]);
  assert.equal(label(r), '0fa4069-dirty');
});

test('a record is found by its sha, a prefix of it or a longer sha; -dirty names the run of a changed tree', () => {
  assert.equal(label(findRecord(RECORDS, 'a4b3')), 'a4b337b');
  assert.equal(label(findRecord(RECORDS, 'A4B337B')), 'a4b337b');
  assert.equal(label(findRecord(RECORDS, 'a4b337b5d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6')), 'a4b337b');
  assert.equal(label(findRecord(RECORDS, 'f396')), 'f396b37', 'a plain sha takes the clean run');
  assert.equal(label(findRecord(RECORDS, 'f396-dirty')), 'f396b37-dirty');
  assert.equal(label(findRecord(RECORDS, '1234')), '1234567', 'an all-digit sha');
});

test('an ambiguous prefix, a missing commit and a name that is no sha are one-line errors', () => {
  assert.throws(() => findRecord(RECORDS, 'a4b0'), {
    message: 'no record for a4b0 in bench/results.json; records: a4b337b, a4c0001, f396b37, f396b37-dirty, 1234567',
  });
  assert.throws(() => findRecord(RECORDS, 'a4'), { message: 'a4 is neither a commit (4 to 40 hex digits, optionally -dirty) nor a .json file' });
  assert.throws(() => findRecord(RECORDS.slice(0, 2), 'a4b3-dirty'), { message: /^no record for a4b3-dirty in bench\/results\.json; records: a4b337b, a4c0001$/ });
  assert.throws(() => findRecord([...RECORDS, benchRecord('a4b3999', rows)], 'a4b3'), {
    name: 'Error',
    message: 'a4b3 fits several records in bench/results.json: a4b337b, a4b3999; give more digits',
  });
  assert.throws(() => findRecord([], 'a4b3'), LookupError);
  assert.throws(() => findRecord([], 'a4b3'), { message: 'no record for a4b3 in bench/results.json; records: none' });
  assert.throws(() => latestRecord([]), /has no records yet/);
});

test('a new record goes last and replaces the one of the same commit and dirty flag', () => {
  const again = benchRecord('f396b37', [], { date: '2026-12-04T00:00:00.000Z' });
  const next = withRecord(RECORDS, again);
  assert.deepEqual(next.map(label), ['a4b337b', 'a4c0001', 'f396b37-dirty', '1234567', 'f396b37']);
  assert.equal(latestRecord(next), again);
});

test('records round-trip through the file in order; a file of one run and a missing file are read too', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-records-'));
  try {
    const file = path.join(dir, 'results.json');
    assert.deepEqual(readRecords(file), []);
    writeRecords(file, RECORDS);
    assert.deepEqual(readRecords(file), RECORDS);
    assert.equal(label(resolveRecord([], file)), '1234567', 'a records file on the command line means its latest record');

    const { commit: _c, dirty: _d, date: _t, node: _n, ...run } = benchRecord('x', rows);
    const partial = path.join(dir, 'results-partial.json');
    fs.writeFileSync(partial, JSON.stringify(run));
    const r = resolveRecord([], partial);
    assert.deepEqual([label(r), r.date, r.node, r.rows], ['results-partial', run.environment.date, 'v20.20.2', rows]);

    assert.throws(() => resolveRecord([], path.join(dir, 'gone.json')), { message: `no such file: ${path.join(dir, 'gone.json')}` });
    fs.writeFileSync(partial, '{"rows": 1}');
    assert.throws(() => resolveRecord([], partial), { message: 'results-partial holds neither bench records nor the results of a run' });
    assert.equal(label(resolveRecord(RECORDS, 'a4c0')), 'a4c0001', 'a name without / or .json is a commit');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
