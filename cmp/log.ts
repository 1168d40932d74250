import { pino, type Logger } from 'pino';
import { formatGoTime, RFC3339, textLine } from './logrus-text.js';

export type { Logger };
// Re-exported: the logger's callers and tests import them from here.
export { formatGoTime, RFC3339, textLine };

/** pino's level labels as logrus prints them (`warn` is `warning` there). */
const LOGRUS_LEVEL: Record<string, string> = {
  trace: 'trace',
  debug: 'debug',
  info: 'info',
  warn: 'warning',
  error: 'error',
  fatal: 'fatal',
};

/** logrus.ParseLevel's names for the pino levels (`warning` and `warn` both parse, `panic` is fatal). */
const PARSE_LEVEL: Record<string, string> = { ...Object.fromEntries(Object.keys(LOGRUS_LEVEL).map(l => [l, l])), warning: 'warn', panic: 'fatal' };

/**
 * The process logger, shaped like Argo CD's logrus output so that the pipelines that already parse
 * Argo's components parse ours. ARGOCD_CMP_SERVER_LOGLEVEL / _LOGFORMAT keep Argo's names and
 * defaults (info, json); ARGOCD_LOG_FORMAT_TIMESTAMP is Argo's Go time layout of `time` (default
 * RFC3339, as logrus). JSON: `{"level":"info","time":"2026-01-02T15:04:05Z",…fields,"msg":"…"}`
 * with logrus's level names (`warning`); text: logrus's `time="…" level=info msg="…" key=value`.
 */
export function createLogger(env: Record<string, string | undefined>, name: string): Logger {
  const level = PARSE_LEVEL[(env.ARGOCD_CMP_SERVER_LOGLEVEL || 'info').toLowerCase()] ?? 'info';
  const text = (env.ARGOCD_CMP_SERVER_LOGFORMAT || 'json').toLowerCase() === 'text';
  const layout = env.ARGOCD_LOG_FORMAT_TIMESTAMP || RFC3339;
  return pino(
    {
      name,
      level,
      base: { service: name },
      formatters: { level: label => ({ level: LOGRUS_LEVEL[label] ?? label }) },
      timestamp: () => `,"time":${JSON.stringify(formatGoTime(new Date(), layout))}`,
    },
    text ? textDestination() : pino.destination({ fd: 2, sync: false }),
  );
}

/** A `.catch` handler for an error that changes nothing but is worth a line: "<what> failed" at `level`. */
export function logFailed(log: Logger, what: string, level: 'debug' | 'info' | 'warn' = 'debug', fields: Record<string, unknown> = {}): (err: unknown) => void {
  return err => log[level]({ ...fields, err: err instanceof Error ? err.message : String(err) }, `${what} failed`);
}

function textDestination() {
  return {
    write(line: string) {
      process.stderr.write(textLine(line));
    },
  };
}
