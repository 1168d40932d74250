import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appNameOf, escapeKeyPart, KeySpace, queueNameOf } from '../../../cmp/queue/keys.js';

test('every key and the cancel channel start with the prefix', () => {
  const k = new KeySpace('{cmp-offload}');
  for (const name of [k.blob('a'), k.blobUpload('a', 'u'), k.cacheEntry('p', 'app', 'c'), k.result('p', '1'), k.waiters('p', 'w'), k.cancelChannel()]) {
    assert.ok(name.startsWith('{cmp-offload}:'), name);
  }
});

test('variable key parts never contain colons or glob characters', () => {
  assert.equal(escapeKeyPart('ns_app-1.x'), 'ns_app-1.x');
  assert.equal(escapeKeyPart('a:b*c?[d]\\'), 'a%3Ab%2Ac%3F%5Bd%5D%5C');
  assert.equal(escapeKeyPart(''), '~');
  assert.equal(escapeKeyPart('~'), '%7E');
});

test('purge patterns select by plugin and app', () => {
  const k = new KeySpace('{p}');
  assert.equal(k.cachePattern(), '{p}:out:*:*:*');
  assert.equal(k.cachePattern({ app: 'a:b' }), '{p}:out:*:a%3Ab:*');
  assert.equal(k.cachePattern({ plugin: 'x' }), '{p}:out:x:*:*');
  assert.equal(new KeySpace('{a*}').blobPattern(), '{a\\*}:blob:*');
});

test('the queue is the socket name without .sock and the app is the last ARGOCD_APP_NAME', () => {
  assert.equal(queueNameOf('my-plugin-v1.0.sock'), 'my-plugin-v1.0');
  assert.equal(appNameOf([{ name: 'ARGOCD_APP_NAME', value: 'a' }, { name: 'ARGOCD_APP_NAME', value: 'b' }]), 'b');
  assert.equal(appNameOf([]), '');
});
