import fs from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { CACHE_ANNOTATION, cacheMode, compileOptions, DEFAULT_CONFIG_DIR, forPlugin } from './config/options.js';
import { readPluginConfig } from './config/plugin-config.js';
import { pluginBaseEnv } from './exec/env.js';
import { createLogger, type Logger } from './log.js';
import type { Engine } from './plugin/execute.js';
import { chooseInflater } from './go/go-gunzip.js';

export interface Started {
  log: Logger;
  engine: Engine;
}

/**
 * What `proxy`, `worker` and `runner` all do first, like argocd-cmp-server: parse the flags
 * (`--config-dir-path`, `--loglevel`, `--logformat`, `--otlp-*`), compile the options once, read and
 * validate plugin.yaml. `check` adds the role's own refusals. Throws with the message to print.
 */
export async function startProcess(
  argv: string[],
  role: 'proxy' | 'worker' | 'runner',
  check: (options: Engine['options']) => void,
  /** An ingest process of a proxy: what it would log at start, its coordinator said already. */
  quiet = false,
): Promise<Started> {
  const env = { ...process.env };
  // argocd-cmp-server's `--otlp-insecure` is a Go bool flag: alone it means true, `=false` turns it off.
  const args = argv.filter(a => {
    const m = /^--otlp-insecure(?:=(.*))?$/.exec(a);
    if (m) env.ARGOCD_CMP_SERVER_OTLP_INSECURE = m[1] ?? 'true';
    return !m;
  });
  const { values } = parseArgs({
    args,
    options: {
      'config-dir-path': { type: 'string', default: DEFAULT_CONFIG_DIR },
      loglevel: { type: 'string' },
      logformat: { type: 'string' },
      // Tracing, as argocd-cmp-server: the flags win over ARGOCD_CMP_SERVER_OTLP_*; repeatable lists.
      'otlp-address': { type: 'string' },
      'otlp-headers': { type: 'string', multiple: true },
      'otlp-attrs': { type: 'string', multiple: true },
    },
    strict: true,
  });
  if (values.loglevel) env.ARGOCD_CMP_SERVER_LOGLEVEL = values.loglevel;
  if (values.logformat) env.ARGOCD_CMP_SERVER_LOGFORMAT = values.logformat;
  if (values['otlp-address'] !== undefined) env.ARGOCD_CMP_SERVER_OTLP_ADDRESS = values['otlp-address'];
  if (values['otlp-headers']) env.ARGOCD_CMP_SERVER_OTLP_HEADERS = values['otlp-headers'].join(',');
  if (values['otlp-attrs']) env.ARGOCD_CMP_SERVER_OTLP_ATTRS = values['otlp-attrs'].join(',');
  const log = createLogger(env, `cmp-offload-${role}`);
  if (chooseInflater() === 'portable') {
    log.warn({ node: process.version }, "this Node.js has no native zlib handle for synchronous inflate: tarballs are inflated by pako (about 1.5x slower ingest)");
  }
  const options = compileOptions(env, { configDirPath: values['config-dir-path'].replace(/\/+$/, ''), role });
  check(options);
  const config = await readPluginConfig(options.configDirPath);
  const own = forPlugin(options, config.metadata.annotations);
  if (own !== options && !quiet) log.info({ annotation: CACHE_ANNOTATION, value: config.metadata.annotations[CACHE_ANNOTATION] }, `cache: ${cacheMode(own)} for this plugin (its plugin.yaml annotation ${CACHE_ANNOTATION})`);
  return { log, engine: { config, options: own, baseEnv: pluginBaseEnv(process.env) } };
}

/**
 * Install the SIGTERM/SIGINT handlers now and resolve at the first signal, logging `what` (e.g.
 * "no new jobs") with `fields()`. Call it as soon as the process has its logger and await it once
 * it serves: a handler installed only after the ready line leaves a moment in which a signal that
 * the ready line prompted kills the process with the default action (seen in CI); a signal during
 * start-up is kept, and the process shuts down as soon as it is up.
 */
export function untilStopSignal(log: Logger, what: string, fields: () => Record<string, unknown> = () => ({})): Promise<void> {
  return new Promise<void>(resolve => {
    const onSignal = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      log.info({ signal, ...fields() }, what ? `shutting down: ${what}` : 'shutting down');
      resolve();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}

/** Argo wipes `_cmp_server` at start and recreates it 0700 (docs/argo-contract.md#start-up). */
export async function resetWorkRoot(workRoot: string): Promise<void> {
  try {
    await fs.rm(workRoot, { recursive: true, force: true });
  } catch (err) {
    throw new Error(`error removing workdir ${JSON.stringify(workRoot)}: ${(err as Error).message}`);
  }
  try {
    await fs.mkdir(workRoot, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new Error(`error creating workdir ${JSON.stringify(workRoot)}: ${(err as Error).message}`);
  }
}
