import { test } from 'node:test';
import assert from 'node:assert/strict';
import { annotationOf, whyNotServed, type Application } from '../../../keeper/served.js';

const view = { plugin: 'kustomize-like-v1.0', repoUrl: 'https://git.example/monorepo.git', sourcePath: 'apps/a01' };
const app = (source: Record<string, unknown> | undefined, extra: Record<string, unknown> = {}): Application =>
  ({ metadata: { annotations: { 'argocd.argoproj.io/manifest-generate-paths': '/apps/a01' } }, spec: { source, ...extra } }) as Application;

test('an app is ours when its single source names the plugin, repository and path of the record', () => {
  assert.equal(whyNotServed(app({ repoURL: 'https://git.example/monorepo.git', path: 'apps/a01', plugin: { name: 'kustomize-like-v1.0' } }), view), undefined);
  // Argo CD's URL spellings and path forms.
  assert.equal(whyNotServed(app({ repoURL: 'https://GIT.example/monorepo/', path: './apps/a01/', plugin: { name: 'kustomize-like-v1.0' } }), view), undefined);
  assert.equal(annotationOf(app({})), '/apps/a01');
  assert.equal(annotationOf({}), undefined);
});

test('any other app is left alone, with the reason', () => {
  const src = { repoURL: 'https://git.example/monorepo.git', path: 'apps/a01', plugin: { name: 'kustomize-like-v1.0' } };
  assert.match(whyNotServed(app({ ...src, plugin: { name: 'other-plugin' } }), view)!, /names plugin "other-plugin"/);
  assert.match(whyNotServed(app({ ...src, plugin: {} }), view)!, /names no plugin/);
  assert.match(whyNotServed(app({ ...src, plugin: undefined }), view)!, /names no plugin/);
  assert.match(whyNotServed(app({ ...src, path: 'apps/a02' }), view)!, /source path/);
  assert.match(whyNotServed(app({ ...src, repoURL: 'https://git.example/other.git' }), view)!, /repository/);
  assert.match(whyNotServed(app(undefined, { sources: [src] }), view)!, /multi-source/);
  assert.match(whyNotServed(app(src, { sources: [src, src] }), view)!, /multi-source/);
  assert.match(whyNotServed(app(undefined), view)!, /no source/);
});
