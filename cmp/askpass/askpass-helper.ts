import path from 'node:path';
import { formatGoTime, RFC3339, textLine } from '../logrus-text.js';
// No imports of its own beyond a type: cheap on the helper's start-up path.
import { DEFAULT_ASKPASS_SOCKET } from './git-creds-env.js';

/*
 * cmp-offload's `argocd` in git askpass mode (bin/git-askpass/argocd): git runs `$GIT_ASKPASS
 * <prompt>` once for the username and once for the password, and Argo's repo-server sets
 * GIT_ASKPASS=argocd with ARGOCD_BINARY_NAME=argocd-git-ask-pass for plugins with provideGitCreds.
 * Same steps, order and texts as Argo's helper (cmd/argocd-git-ask-pass). Only node builtins and
 * the logrus line are loaded up front; gRPC only once there is a call to make.
 */

/** The ARGOCD_BINARY_NAME (or program name) that selects askpass mode in Argo's `argocd`. */
export const ASKPASS_BINARY_NAME = 'argocd-git-ask-pass';


/**
 * Argo's helper waits as long as the call takes; git then waits on it. A bound, so that a relay
 * that never answers fails the git command instead of hanging it (the plugin's own timeout is
 * usually longer).
 */
const CALL_TIMEOUT_MS = 30_000;

export const NOT_ARGOCD_TEXT =
  `this argocd is cmp-offload's git askpass helper only (ARGOCD_BINARY_NAME=${ASKPASS_BINARY_NAME}), not the Argo CD CLI`;

export interface HelperIo {
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
}

/** logrus's `log.Fatal(msg)` without a terminal: one text line on stderr, exit status 1. */
function fatal(io: HelperIo, msg: string): number {
  io.stderr.write(textLine(JSON.stringify({ time: formatGoTime(new Date(), RFC3339), level: 'fatal', msg })));
  return 1;
}

/**
 * Run the helper. `args` is Go's os.Args (the program path first, then git's prompt); the
 * result is the exit status.
 */
export async function askpassHelper(args: readonly string[], env: Record<string, string | undefined>, io: HelperIo = process): Promise<number> {
  // Go's `argocd` picks its mode by ARGOCD_BINARY_NAME, else by its program name.
  const mode = env.ARGOCD_BINARY_NAME || path.basename(args[0] ?? '');
  if (mode !== ASKPASS_BINARY_NAME) return fatal(io, NOT_ARGOCD_TEXT);
  if (args.length !== 2) return fatal(io, `expected 1 argument, got ${args.length - 1}`);
  const nonce = env.ARGOCD_GIT_ASKPASS_NONCE ?? '';
  if (nonce === '') return fatal(io, 'ARGOCD_GIT_ASKPASS_NONCE is not set');
  const socket = env.ARGOCD_ASK_PASS_SOCK || DEFAULT_ASKPASS_SOCKET;
  const [{ AskpassError, getCredentials }, { formatRpcError }] = await Promise.all([import('./askpass-grpc.js'), import('../rpc-status.js')]);
  let creds;
  try {
    creds = await getCredentials(socket, nonce, CALL_TIMEOUT_MS);
  } catch (err) {
    // grpc-go's status error text, as Argo's helper prints what the call returned.
    return fatal(io, err instanceof AskpassError ? formatRpcError(err.code, err.details) : String(err));
  }
  const prompt = args[1]!;
  if (prompt.startsWith('Username')) io.stdout.write(`${creds.username}\n`);
  else if (prompt.startsWith('Password')) io.stdout.write(`${creds.password}\n`);
  else return fatal(io, `unknown credential type '${prompt}'`);
  return 0;
}
