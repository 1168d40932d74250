import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Status } from '../grpc-status.js';
import type { Ctx } from '../context.js';
import { CmpError, sentMessageTooLarge, wrap } from '../errors.js';
import { commandArgv, discoveryConfigured } from '../config/plugin-config.js';
import { extractTgz } from '../tar/extract.js';
import { commandEnv } from '../exec/env.js';
import { runCommand } from '../exec/run-command.js';
import { ReadRecorder, type RecordedReads } from '../trace/read-recorder.js';
import { ManifestsTooLarge } from '../split/split-manifests.js';
import { splitPool } from '../split/split-pool.js';
import { noteExecFailure, timeStage } from '../observe/request-trace.js';
import { commandName } from '../observe/tracing.js';
import { withRunAskpass } from '../askpass/run-askpass.js';
import { announceParameters, parseDynamicParameters } from './parameters.js';
import { discoverByPattern } from './discover.js';
import { secureJoin } from './secure-join.js';
import type { Engine } from './engine.js';
import { RPC_TEXT, type PluginRequest, type PluginResult } from './request.js';

export type { Engine };


/** Receives what a generate run read (traced cache); left empty for other kinds and failed runs. */
export interface ReadSink {
  reads?: RecordedReads;
}

/**
 * Run one request on a verified tarball, as argocd-cmp-server does after receiving it: a fresh
 * work dir, extraction with the contract's rules, the RPC's steps, and removal of the work dir
 * whatever happens. This is the one code path of both modes: the standalone proxy calls it
 * in-process, the worker calls it for each job.
 */
export async function executeRequest(
  engine: Engine,
  req: PluginRequest,
  tgzPath: string,
  ctx: Ctx,
  sink?: ReadSink,
  /** Verify the file against it while extracting (see UntgzOptions.sha256). */
  sha256?: string,
): Promise<PluginResult> {
  const text = RPC_TEXT[req.kind];
  const dir = path.join(engine.options.workRoot, randomUUID());
  try {
    await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  } catch (err) {
    throw wrap(`${text.workdir}: error creating temp dir`, err);
  }
  try {
    try {
      await timeStage(
        'extract',
        () =>
          extractTgz(tgzPath, dir, {
            preserveFileMode: engine.config.spec.preserveFileMode,
            maxExtractedBytes: engine.options.limits.extractedBytes,
            maxEntries: engine.options.limits.entries,
            sha256,
          }),
        undefined,
        ctx,
      );
    } catch (err) {
      throw wrap(`${text.receive}: error decompressing tgz file`, err);
    }
    switch (req.kind) {
      case 'generate':
        if (!req.gitCreds) return await generate(engine, req, dir, ctx, sink);
        return await withRunAskpass(engine.options.workRoot, req.env, req.gitCreds, env => generate(engine, { ...req, env }, dir, ctx, sink));
      case 'match':
        return await match(engine, req, dir, ctx);
      case 'parameters':
        return await parameters(engine, req, dir, ctx);
    }
  } finally {
    await fs.rm(dir, { recursive: true, force: true, maxRetries: 3 });
  }
}

/** GenerateManifest and GetParametersAnnouncement: a plain string-prefix bound check (docs/argo-contract.md#app-path). */
function boundedAppPath(dir: string, appRelPath: string): string {
  const appPath = path.join(dir, appRelPath);
  if (!appPath.startsWith(dir)) throw new CmpError('illegal appPath: out of workDir bound');
  return appPath;
}

/** One plugin command, timed as the `exec` stage; timeouts and kills are counted from its error. */
function run(engine: Engine, argv: string[], cwd: string, req: PluginRequest, ctx: Ctx, recorder?: ReadRecorder, step?: string): Promise<Buffer> {
  return timeStage(
    'exec',
    () =>
      runMaybeTraced(engine, argv, cwd, req, ctx, recorder).catch((err: unknown) => {
        if (err instanceof CmpError) noteExecFailure(err.message, ctx.signal.aborted, err.code === Status.RESOURCE_EXHAUSTED);
        throw err;
      }),
    // Tracing: the command's name and its step, never its arguments or env (secrets).
    { 'cmp.command': commandName(argv[0]), ...(step ? { 'cmp.step': step } : {}) },
    ctx,
  );
}

/** A command under the read recorder when there is one, else as is. */
async function runMaybeTraced(engine: Engine, argv: string[], cwd: string, req: PluginRequest, ctx: Ctx, recorder?: ReadRecorder): Promise<Buffer> {
  if (recorder) {
    try {
      return await runPluginCommand(engine, argv, cwd, req, ctx, recorder);
    } catch (err) {
      // The tracer could not exec the command: nothing ran, so run it as is for Go's own error text.
      if (!(err instanceof CmpError) || !TRACER_EXEC_FAILED.test(err.message)) throw err;
      recorder.giveUp('the tracer could not start the command');
    }
  }
  return runPluginCommand(engine, argv, cwd, req, ctx);
}

/** cmp-trace's text when its execve of the command fails. */
const TRACER_EXEC_FAILED = /^`[^]*` failed exit status 127: cmp-trace: exec: /;

function runPluginCommand(engine: Engine, argv: string[], cwd: string, req: PluginRequest, ctx: Ctx, recorder?: ReadRecorder): Promise<Buffer> {
  const { options } = engine;
  return runCommand({
    wrap: recorder ? (argv, file, cwd) => recorder.wrap(argv, file, cwd) : undefined,
    argv,
    cwd,
    env: commandEnv(engine.baseEnv, req.env),
    ctx,
    execTimeoutMs: options.execTimeoutMs,
    fatalTimeoutMs: options.execFatalTimeoutMs,
    maxOutputBytes: options.limits.outputBytes,
    pathEnv: engine.baseEnv.PATH,
  });
}

async function generate(engine: Engine, req: PluginRequest, dir: string, ctx: Ctx, sink?: ReadSink): Promise<PluginResult> {
  const appPath = boundedAppPath(dir, req.appRelPath);
  const { spec } = engine.config;
  const recorder = sink ? await ReadRecorder.start(engine.options.cache.trace, dir, engine.baseEnv) : undefined;
  let out: Buffer;
  try {
    try {
      if (spec.init.command.length > 0) await run(engine, commandArgv(spec.init), appPath, req, ctx, recorder, 'init');
      out = await run(engine, commandArgv(spec.generate), appPath, req, ctx, recorder, 'generate');
    } catch (err) {
      throw wrap(RPC_TEXT.generate.command, err);
    }
  } finally {
    // Parsed while the work dir still exists (paths are resolved against it).
    const reads = await recorder?.finish();
    if (sink) sink.reads = reads;
  }
  const max = engine.options.maxMessageBytes;
  try {
    const split = () => splitPool.split(out, max, engine.options.limits.outputBytes, ctx.signal);
    return await timeStage('split', split, undefined, ctx);
  } catch (err) {
    // The answer grpc would refuse to send, refused the same way before its text is built.
    if (err instanceof ManifestsTooLarge) throw sentMessageTooLarge(err.messageBytes, err.maxBytes);
    throw wrap(RPC_TEXT.generate.command, err);
  }
}

async function match(engine: Engine, req: PluginRequest, dir: string, ctx: Ctx): Promise<PluginResult> {
  const appPath = secureJoin(dir, req.appRelPath);
  const { discover } = engine.config.spec;
  if (discover.fileName !== '' || discover.find.glob !== '') {
    return { kind: 'match', isSupported: await discoverByPattern(discover, appPath), isDiscoveryEnabled: true };
  }
  if (discover.find.command.length > 0) {
    try {
      const out = await run(engine, commandArgv(discover.find), appPath, req, ctx);
      return { kind: 'match', isSupported: out.length > 0, isDiscoveryEnabled: true };
    } catch (err) {
      throw wrap(RPC_TEXT.match.command, err);
    }
  }
  return { kind: 'match', isSupported: false, isDiscoveryEnabled: discoveryConfigured(engine.config) };
}

async function parameters(engine: Engine, req: PluginRequest, dir: string, ctx: Ctx): Promise<PluginResult> {
  const appPath = boundedAppPath(dir, req.appRelPath);
  const { dynamic } = engine.config.spec.parameters;
  if (dynamic.command.length === 0) {
    return { kind: 'parameters', parameterAnnouncements: announceParameters(engine.config) };
  }
  let out: Buffer;
  try {
    out = await run(engine, commandArgv(dynamic), appPath, req, ctx);
  } catch (err) {
    throw wrap(RPC_TEXT.parameters.command, err);
  }
  let dynamicParams;
  try {
    dynamicParams = parseDynamicParameters(out.toString('utf8'));
  } catch (err) {
    if (err instanceof CmpError && err.code === Status.INTERNAL) throw err;
    throw wrap(
      'get parameters announcement error: error unmarshaling dynamic parameter output into ParametersAnnouncementResponse',
      err,
    );
  }
  return { kind: 'parameters', parameterAnnouncements: announceParameters(engine.config, dynamicParams) };
}
