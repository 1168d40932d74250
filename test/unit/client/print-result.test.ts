import { test } from 'node:test';
import assert from 'node:assert/strict';
import { announcementsAsJson, manifestsAsJson, manifestsAsYaml, matchLine } from '../../../cli/print-result.js';

const cm = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"enabled":"yes","n":"0777"}}';
const big = '{"kind":"X","spec":{"n":18446744073709551615}}';

test('manifests print as a block-YAML stream separated by ---, quoting strings YAML would retype', () => {
  assert.equal(
    manifestsAsYaml([cm, '{"kind":"Secret"}']),
    'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  enabled: \'yes\'\n  \'n\': \'0777\'\n---\nkind: Secret\n',
  );
  assert.equal(manifestsAsYaml([]), '');
});

test('the JSON output is an array that keeps each manifest text byte for byte', () => {
  const out = manifestsAsJson([cm, big]);
  assert.equal(out, `[\n${cm},\n${big}\n]\n`);
  assert.equal(JSON.parse(out).length, 2);
  assert.equal(manifestsAsJson([]), '[]\n');
  assert.throws(() => manifestsAsJson(['not json']), /manifest 0 is not JSON/);
});

test('match prints both flags on one line', () => {
  assert.equal(matchLine(true, false), 'isSupported=true isDiscoveryEnabled=false\n');
});

test('announcements print as JSON with unset fields left out', () => {
  const out = announcementsAsJson([
    {
      name: 'replicas',
      title: 'Replicas',
      tooltip: '',
      required: true,
      itemType: '',
      collectionType: '',
      string: '2',
      array: [],
      map: {},
    },
  ]);
  assert.deepEqual(JSON.parse(out), [{ name: 'replicas', title: 'Replicas', required: true, string: '2' }]);
});
