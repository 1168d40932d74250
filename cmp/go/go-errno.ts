// Linux strerror texts as Go's syscall.Errno prints them (Node's messages differ).
const ERRNO_TEXT: Record<string, string> = {
  EACCES: 'permission denied',
  EBUSY: 'device or resource busy',
  EDQUOT: 'disk quota exceeded',
  EEXIST: 'file exists',
  EFBIG: 'file too large',
  EINVAL: 'invalid argument',
  EIO: 'input/output error',
  EISDIR: 'is a directory',
  ELOOP: 'too many levels of symbolic links',
  EMFILE: 'too many open files',
  EMLINK: 'too many links',
  ENAMETOOLONG: 'file name too long',
  ENFILE: 'too many open files in system',
  ENOENT: 'no such file or directory',
  ENOSPC: 'no space left on device',
  ENOTDIR: 'not a directory',
  EPERM: 'operation not permitted',
  EROFS: 'read-only file system',
  ETXTBSY: 'text file busy',
  EXDEV: 'invalid cross-device link',
};

/** The errno code of a Node fs error (`ENOENT`…), or undefined. */
export function errnoCode(err: unknown): string | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Go's text for a syscall error (`no such file or directory`). */
export function errnoText(err: unknown): string {
  const code = errnoCode(err);
  if (code !== undefined && ERRNO_TEXT[code] !== undefined) return ERRNO_TEXT[code];
  return err instanceof Error ? err.message : String(err);
}

/** Go's `*PathError` text: `<op> <path>: <errno text>`. */
export function goPathErrorText(op: string, p: string, err: unknown): string {
  return `${op} ${p}: ${errnoText(err)}`;
}

/** Go's `*LinkError` text: `<op> <old> <new>: <errno text>`. */
export function goLinkErrorText(op: string, oldname: string, newname: string, err: unknown): string {
  return `${op} ${oldname} ${newname}: ${errnoText(err)}`;
}
