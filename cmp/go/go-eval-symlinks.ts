import fs from 'node:fs';
import { goClean } from './go-path.js';
import { errnoCode, errnoText, goPathErrorText } from './go-errno.js';

/** An error from {@link goEvalSymlinks}, with Go's text and whether `os.IsNotExist` holds. */
export class EvalSymlinksError extends Error {
  constructor(
    message: string,
    readonly notExist: boolean,
  ) {
    super(message);
    this.name = 'EvalSymlinksError';
  }
}

const MAX_LINKS = 255;

/**
 * Go's `filepath.EvalSymlinks` (unix `walkSymlinks`) for an absolute path, with its error texts:
 * `lstat <p>: <errno>` (a missing component is `notExist`), a bare `not a directory` when a
 * non-final component is not a directory, `EvalSymlinks: too many links`.
 *
 * With `tolerateMissing`, a missing component ends the walk and the rest of the path is
 * appended lexically instead (the physical place a create at `p` would land).
 */
export function goEvalSymlinks(p: string, tolerateMissing = false): string {
  let path = p;
  let dest = '/';
  let links = 0;
  let start = 1;
  while (start < path.length) {
    while (start < path.length && path[start] === '/') start++;
    let end = start;
    while (end < path.length && path[end] !== '/') end++;
    if (end === start) break;
    const comp = path.slice(start, end);
    start = end;
    if (comp === '.') continue;
    if (comp === '..') {
      const r = dest.lastIndexOf('/');
      dest = r <= 0 ? '/' : dest.slice(0, r);
      continue;
    }
    dest = dest === '/' ? `/${comp}` : `${dest}/${comp}`;
    let st: fs.Stats;
    try {
      st = fs.lstatSync(dest);
    } catch (err) {
      if (tolerateMissing && errnoCode(err) === 'ENOENT') return goClean(`${dest}/${path.slice(end)}`);
      throw new EvalSymlinksError(goPathErrorText('lstat', dest, err), errnoCode(err) === 'ENOENT');
    }
    if (!st.isSymbolicLink()) {
      if (!st.isDirectory() && end < path.length) throw new EvalSymlinksError(errnoText({ code: 'ENOTDIR' }), false);
      continue;
    }
    if (++links > MAX_LINKS) throw new EvalSymlinksError('EvalSymlinks: too many links', false);
    let link: string;
    try {
      link = fs.readlinkSync(dest);
    } catch (err) {
      throw new EvalSymlinksError(goPathErrorText('readlink', dest, err), errnoCode(err) === 'ENOENT');
    }
    path = link + path.slice(end);
    if (link.startsWith('/')) {
      dest = '/';
      start = 1;
    } else {
      const r = dest.lastIndexOf('/');
      dest = r <= 0 ? '/' : dest.slice(0, r);
      start = 0;
    }
  }
  return goClean(dest);
}
