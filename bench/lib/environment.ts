import { execFileSync } from 'node:child_process';
import os from 'node:os';

export interface Environment {
  date: string;
  cpu: string;
  cores: number;
  memory: string;
  os: string;
  node: string;
  redis: string;
  gnuTar: string;
  /** 1-minute load average when the run ended: other work on a shared machine skews absolute times. */
  loadAverage: number;
}

function firstLine(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8' }).split('\n')[0]!.trim();
  } catch {
    return 'not found'; // not installed (or failed): the report says so
  }
}

/** What the figures were measured on: they only mean something next to this. */
export function environment(): Environment {
  const redis = /v=(\S+)/.exec(firstLine('redis-server', ['--version']))?.[1] ?? 'not found';
  return {
    date: new Date().toISOString(),
    cpu: os.cpus()[0]?.model.trim() ?? 'unknown',
    cores: os.availableParallelism(),
    memory: `${(os.totalmem() / 1024 ** 3).toFixed(0)} GiB`,
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    redis,
    gnuTar: firstLine('tar', ['--version']),
    loadAverage: Math.round(os.loadavg()[0]! * 10) / 10,
  };
}
