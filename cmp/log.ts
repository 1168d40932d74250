import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * The process logger. ARGOCD_CMP_SERVER_LOGLEVEL / _LOGFORMAT keep Argo's names and defaults
 * (info, json); `text` prints one plain line per record for people reading a terminal.
 */
export function createLogger(env: Record<string, string | undefined>, name: string): Logger {
  const level = (env.ARGOCD_CMP_SERVER_LOGLEVEL || 'info').toLowerCase();
  const text = (env.ARGOCD_CMP_SERVER_LOGFORMAT || 'json').toLowerCase() === 'text';
  return pino(
    {
      name,
      level: ['trace', 'debug', 'info', 'warn', 'error', 'fatal'].includes(level) ? level : 'info',
      base: { service: name },
    },
    text ? textDestination() : pino.destination({ fd: 2, sync: false }),
  );
}

function textDestination() {
  return {
    write(line: string) {
      const { time, level, msg, service: _s, name: _n, pid: _p, hostname: _h, ...rest } = JSON.parse(line);
      const fields = Object.entries(rest)
        .map(([k, v]) => `${k}=${typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v)}`)
        .join(' ');
      process.stderr.write(`${new Date(time).toISOString()} ${pino.levels.labels[level]} ${msg ?? ''} ${fields}\n`);
    },
  };
}
