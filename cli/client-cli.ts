import { status as Status } from '@grpc/grpc-js';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { compileOptions } from '../cmp/config/options.js';
import { readPluginConfig } from '../cmp/config/plugin-config.js';
import { contextWithDeadline } from '../cmp/context.js';
import { codeOf, messageOf } from '../cmp/errors.js';
import { executeRequest, type Engine } from '../cmp/plugin/execute.js';
import { pluginBaseEnv } from '../cmp/exec/env.js';
import type { PluginResult, RpcKind } from '../cmp/plugin/request.js';
import { packDirectory } from '../cmp/tar/pack.js';
import type { EnvEntry } from '../proto/generated/cmpserver/plugin/plugin.js';
import { CLIENT_USAGE, parseClientArgs, UsageError, type ClientArgs, type ClientKind } from './client-args.js';
import { announceReceivableHeaders, connectPlugin, grpcMaxMessageBytes, RECEIVABLE_HEADER_LIST_BYTES } from './connect.js';
import { announcementsAsJson, manifestsAsJson, manifestsAsYaml, matchLine } from './print-result.js';
import { buildRepoServerEnv } from './repo-server-env.js';
import { formatRpcError, type RpcOutcome } from '../cmp/rpc-status.js';
import { cmpChunkSize, sendRepoStream, type RepoStreamPayload } from './send.js';

export interface ClientIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  /** The environment ARGOCD_CMP_CHUNK_SIZE / ARGOCD_GRPC_MAX_SIZE_MB are read from (default process.env). */
  env?: Record<string, string | undefined>;
}

const REQUEST_KIND: Record<ClientKind, RpcKind> = { generate: 'generate', match: 'match', params: 'parameters' };

/**
 * `cmp-offload generate|match|params DIR ...`: pack DIR as the repo-server packs a repository,
 * call the plugin (over its socket, or in-process with --local) and print the result. Exit codes:
 * 0 success, 1 error status or local failure (printed as the repo-server prints it), 2 bad usage.
 */
export async function runClientCommand(kind: ClientKind, argv: string[], io: ClientIo): Promise<number> {
  const env = io.env ?? process.env;
  let args: ClientArgs;
  let request: { root: string; appPath: string; appRelPath: string; env: EnvEntry[]; chunkSize: number };
  try {
    args = parseClientArgs(kind, argv);
    request = await prepareRequest(args, env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.stderr.write(`cmp-offload ${kind}: ${err.message}\n${CLIENT_USAGE}`);
    return 2;
  }
  if ('socket' in args.target) {
    const problem = await socketProblem(args.target.socket);
    if (problem) {
      io.stderr.write(`cmp-offload ${kind}: cannot connect to ${args.target.socket}: ${problem} (check --socket)\n`);
      return 1;
    }
  }
  const deadline = args.timeoutMs > 0 ? Date.now() + args.timeoutMs : undefined;
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'cmp-offload-client-'));
  try {
    const tgzPath = path.join(tmp, 'repo.tgz');
    const packed = await packDirectory(request.root, { exclusions: args.tarExclusions, out: tgzPath });
    const payload: RepoStreamPayload = {
      tgzPath,
      checksum: packed.sha256,
      size: packed.size,
      appRelPath: request.appRelPath,
      appName: path.basename(request.appPath),
      env: request.env,
    };
    const outcome =
      'socket' in args.target
        ? await callSocket(kind, args.target.socket, payload, request.chunkSize, deadline, env)
        : await callLocal(kind, args.target.configDirPath, payload, deadline, { ...env, ARGOCD_CMP_WORKDIR: tmp });
    if ('code' in outcome && 'socket' in args.target && outcome.code === Status.UNAVAILABLE && outcome.details.startsWith(NO_CONNECTION)) {
      // grpc-js's wording of a failed connect ("... Last error: Error: connect ECONNREFUSED ...
      // Resolution note: "): the system error alone, with the socket and the flag to check.
      const cause = /Error: connect (\w+)/.exec(outcome.details)?.[1] ?? outcome.details;
      io.stderr.write(`cmp-offload ${kind}: cannot connect to ${args.target.socket}: ${cause} (check --socket; is the proxy running?)\n`);
      return 1;
    }
    if ('code' in outcome) {
      io.stderr.write(`${formatRpcError(outcome.code, outcome.details)}\n`);
      if (outcome.code === Status.INTERNAL && outcome.details.startsWith('Received RST_STREAM with code 2')) {
        io.stderr.write(
          `cmp-offload ${kind}: the server reset the call; it does so when the call's status does not fit the ` +
            `${RECEIVABLE_HEADER_LIST_BYTES} bytes of headers this client can receive (a long plugin stderr, say); ` +
            `Argo's repo-server receives such a status whole\n`,
        );
      }
      return 1;
    }
    io.stdout.write(render(outcome.value, args.output));
    return 0;
  } catch (err) {
    io.stderr.write(`cmp-offload ${kind}: ${messageOf(err)}\n`);
    return 1;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Everything decided before packing: paths as the repo-server resolves them, the env, the chunk size. */
async function prepareRequest(args: ClientArgs, env: Record<string, string | undefined>) {
  const root = path.resolve(args.dir);
  const rootInfo = await stat(root).catch(() => undefined); // reported as not a directory below
  if (!rootInfo?.isDirectory()) throw new UsageError(`${args.dir}: not a directory`);
  const appPath = await argoAppPath(root, args.appPath);
  const appRelPath = path.relative(root, appPath) || '.';
  let chunkSize: number;
  let requestEnv: EnvEntry[];
  try {
    chunkSize = cmpChunkSize(env);
    requestEnv = buildRepoServerEnv({
      variant: args.kind === 'params' ? 'parameters' : 'manifest',
      appName: args.appName ?? path.basename(appPath),
      appNamespace: args.appNamespace,
      project: args.project,
      revision: args.revision,
      repoUrl: args.repoUrl,
      sourcePath: appRelPath,
      targetRevision: args.targetRevision,
      destNamespace: args.destNamespace,
      kubeVersion: args.kubeVersion,
      apiVersions: args.apiVersions,
      hasPluginBlock: args.hasPluginBlock,
      pluginEnv: args.pluginEnv,
      parameters: args.parameters,
      extraEnv: args.extraEnv,
    });
  } catch (err) {
    throw new UsageError(messageOf(err));
  }
  return { root, appPath, appRelPath, env: requestEnv, chunkSize };
}

/** Argo's util/app/path.Path: the app directory inside the repository root, with its error texts. */
async function argoAppPath(root: string, rel: string): Promise<string> {
  if (path.isAbsolute(rel)) throw new UsageError(`${rel}: app path is absolute`);
  const appPath = path.join(root, rel);
  if (!appPath.startsWith(root)) throw new UsageError(`${rel}: app path outside root`);
  const info = await stat(appPath).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') throw new UsageError(`${rel}: app path does not exist`);
    throw err;
  });
  if (!info.isDirectory()) throw new UsageError(`${rel}: app path is not a directory`);
  return appPath;
}

const NO_CONNECTION = 'No connection established';

/** Why a socket path cannot be dialled, when that shows without dialling it. */
async function socketProblem(socket: string): Promise<string | undefined> {
  try {
    return (await stat(socket)).isSocket() ? undefined : 'not a socket';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message;
  }
}

async function callSocket(
  kind: ClientKind,
  socket: string,
  payload: RepoStreamPayload,
  chunkSize: number,
  deadline: number | undefined,
  env: Record<string, string | undefined>,
): Promise<RpcOutcome<PluginResult>> {
  announceReceivableHeaders();
  const client = connectPlugin(socket, { maxMessageBytes: grpcMaxMessageBytes(env) });
  const options = { chunkSize, deadline };
  try {
    switch (kind) {
      case 'generate': {
        const o = await sendRepoStream(client, 'generateManifest', payload, options);
        return 'code' in o ? o : { value: { kind: 'generate', manifests: o.value.manifests } };
      }
      case 'match': {
        const o = await sendRepoStream(client, 'matchRepository', payload, options);
        return 'code' in o ? o : { value: { kind: 'match', ...o.value } };
      }
      case 'params': {
        const o = await sendRepoStream(client, 'getParametersAnnouncement', payload, options);
        return 'code' in o ? o : { value: { kind: 'parameters', ...o.value } };
      }
    }
  } finally {
    client.close();
  }
}

/**
 * --local: the plugin runs in this process, through the same executor the proxy uses, with its
 * work root in the command's temp dir (`env.ARGOCD_CMP_WORKDIR`), removed with it.
 */
async function callLocal(
  kind: ClientKind,
  configDirPath: string,
  payload: RepoStreamPayload,
  deadline: number | undefined,
  env: Record<string, string | undefined>,
): Promise<RpcOutcome<PluginResult>> {
  const options = compileOptions(env, { configDirPath });
  const engine: Engine = { config: await readPluginConfig(configDirPath), options, baseEnv: pluginBaseEnv(process.env) };
  const ctx = contextWithDeadline(deadline);
  try {
    const req = { kind: REQUEST_KIND[kind], appRelPath: payload.appRelPath, env: payload.env };
    return { value: await executeRequest(engine, req, payload.tgzPath, ctx) };
  } catch (err) {
    return { code: codeOf(err), details: messageOf(err) };
  } finally {
    ctx.dispose();
  }
}

function render(result: PluginResult, output: 'yaml' | 'json'): string {
  switch (result.kind) {
    case 'generate':
      return output === 'json' ? manifestsAsJson(result.manifests) : manifestsAsYaml(result.manifests);
    case 'match':
      return matchLine(result.isSupported, result.isDiscoveryEnabled);
    case 'parameters':
      return announcementsAsJson(result.parameterAnnouncements);
  }
}
