import path from 'node:path';
import { wrap } from '../errors.js';
import type { PluginConfig } from '../config/plugin-config.js';
import { goGlob } from '../go/filepath-glob.js';
import { zglob } from '../go/zglob.js';
import { realFs, type GlobFs } from '../go/glob-fs.js';
import { goQuote } from '../go/go-quote.js';

/**
 * MatchRepository's `fileName` / `find.glob` rules (docs/argo-contract.md#matchrepository), on the extracted
 * tree or on a virtual one built from the tarball index (same paths, no extraction).
 */
export async function discoverByPattern(
  discover: PluginConfig['spec']['discover'],
  appPath: string,
  fs: GlobFs = realFs,
): Promise<boolean> {
  if (discover.fileName !== '') {
    const pattern = path.join(appPath, discover.fileName);
    try {
      return (await goGlob(pattern, fs)).length > 0;
    } catch (err) {
      throw wrap(`match repository error: error finding filename match for pattern ${goQuote(pattern)}`, err);
    }
  }
  const pattern = path.join(appPath, discover.find.glob);
  try {
    return (await zglob(pattern, fs)).length > 0;
  } catch (err) {
    throw wrap(`match repository error: error finding glob match for pattern ${goQuote(pattern)}`, err);
  }
}
