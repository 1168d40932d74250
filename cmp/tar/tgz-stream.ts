import { CmpError } from '../errors.js';
import { GoGunzip, GzipError } from '../go/go-gunzip.js';
import { GoTarReader, TarError, type TarVisitor } from '../go/go-tar-reader.js';
import { tarGuard, type TarLimits } from './tar-limits.js';

/**
 * gunzip + tar, push-based and synchronous, with Argo's Untgz error texts: first-header gzip
 * errors read `error reading file: <err>`, stream errors read `error writing tgz file: <err>`
 * inside a file's content (Argo's io.Copy) and `error while iterating on tar reader: <err>`
 * elsewhere. Errors thrown by the visitor and limit errors pass through unchanged.
 */
export class TgzStream {
  private readonly gunzip: GoGunzip;
  private readonly tar: GoTarReader;

  constructor(visitor: TarVisitor, limits: TarLimits) {
    this.tar = new GoTarReader(visitor, tarGuard(limits));
    this.gunzip = new GoGunzip(chunk => {
      if (this.tar.done) return;
      this.tar.push(chunk);
      if (this.tar.done) this.gunzip.stop();
    });
  }

  /** The tar end-of-archive was read: Go stops reading there, so should the caller. */
  get done(): boolean {
    return this.tar.done;
  }

  push(buf: Buffer): void {
    if (this.tar.done) return;
    this.guard(() => this.gunzip.push(buf));
    if (this.tar.done) this.gunzip.close();
  }

  finish(): void {
    if (this.tar.done) return;
    this.guard(() => {
      this.gunzip.finish();
      this.tar.finish();
    });
  }

  /** Release native resources after an error. */
  close(): void {
    this.gunzip.close();
  }

  private guard(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.gunzip.close();
      if (err instanceof GzipError && err.inFirstHeader) throw new CmpError(`error reading file: ${err.message}`);
      if (err instanceof GzipError || err instanceof TarError) {
        const prefix = this.tar.inContent ? 'error writing tgz file' : 'error while iterating on tar reader';
        throw new CmpError(`${prefix}: ${err.message}`);
      }
      throw err;
    }
  }
}
