import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appRefOf } from '../../../keeper/app-ref.js';

test("ARGOCD_APP_NAME: a bare name is in Argo CD's namespace, <namespace>_<name> elsewhere", () => {
  assert.deepEqual(appRefOf('guestbook', 'argocd'), { namespace: 'argocd', name: 'guestbook' });
  assert.deepEqual(appRefOf('team-a_web.v2', 'argocd'), { namespace: 'team-a', name: 'web.v2' });
  assert.deepEqual(appRefOf('guestbook', 'gitops'), { namespace: 'gitops', name: 'guestbook' });
});

test('anything that is not an instance name is refused (it would go into an API path)', () => {
  for (const bad of ['', '_web', 'ns_', 'a_b_c', 'Web', '../x', 'web/status', 'ns_web%2F', 'a'.repeat(254), `${'n'.repeat(64)}_web`, 'web?x=1']) {
    assert.equal(appRefOf(bad, 'argocd'), undefined, bad);
  }
});
