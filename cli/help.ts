import fs from 'node:fs';

/** The flags `proxy`, `worker` and `runner` share with argocd-cmp-server (cmp/process-start.ts). */
const SERVER_FLAGS = `flags:
  --config-dir-path DIR     directory holding plugin.yaml (default /home/argocd/cmp-server/config)
  --loglevel LEVEL          debug|info|warn|error (ARGOCD_CMP_SERVER_LOGLEVEL; default info)
  --logformat FORMAT        json|text (ARGOCD_CMP_SERVER_LOGFORMAT; default json)
  --otlp-address HOST:PORT  OpenTelemetry collector (ARGOCD_CMP_SERVER_OTLP_ADDRESS; default off)
  --otlp-insecure[=BOOL]    plaintext gRPC to the collector (default true)
  --otlp-headers K=V,...    metadata sent with every export (repeatable)
  --otlp-attrs K:V,...      resource attributes of every span (repeatable)
  -h, --help                this text
`;

const SERVER_ENV = `  ARGOCD_PLUGINSOCKFILEPATH, ARGOCD_CMP_WORKDIR, ARGOCD_GRPC_MAX_SIZE_MB, ARGOCD_EXEC_TIMEOUT,
  ARGOCD_EXEC_FATAL_TIMEOUT, CMP_OFFLOAD_CACHE, CMP_OFFLOAD_CONCURRENCY, CMP_OFFLOAD_HTTP_ADDR`;

/** Per subcommand: what it does, its flags, the settings it reads most, one example. */
const HELP: Record<string, () => Promise<string> | string> = {
  proxy: () => `usage: cmp-offload proxy [flags]

Serves Argo CD's CMP gRPC contract on <ARGOCD_PLUGINSOCKFILEPATH>/<plugin>.sock, a drop-in for
argocd-cmp-server. Without CMP_OFFLOAD_REDIS_URL it runs the plugin itself (standalone); with it,
it queues the work for workers (distributed).

${SERVER_FLAGS}
environment (all settings: docs/configuration.md):
${SERVER_ENV},
  CMP_OFFLOAD_PROXY_PROCESSES, CMP_OFFLOAD_REDIS_URL, CMP_OFFLOAD_SIGNING_KEY(_FILE)

example:
  mkdir -p /tmp/plugins && ARGOCD_PLUGINSOCKFILEPATH=/tmp/plugins cmp-offload proxy --config-dir-path examples/plugin
`,
  worker: () => `usage: cmp-offload worker [flags]

Takes the plugin's jobs from the Redis queue (distributed mode) and has its runner run them.

${SERVER_FLAGS}
environment (all settings: README.md, Configuration):
  CMP_OFFLOAD_REDIS_URL, CMP_OFFLOAD_SIGNING_KEY(_FILE), CMP_OFFLOAD_RUNNER_SOCKET,
  CMP_OFFLOAD_CONCURRENCY, CMP_OFFLOAD_HTTP_ADDR, ARGOCD_EXEC_TIMEOUT, ARGOCD_EXEC_FATAL_TIMEOUT

example:
  CMP_OFFLOAD_REDIS_URL=redis://:pw@redis:6379 CMP_OFFLOAD_SIGNING_KEY_FILE=/secrets/key \\
    CMP_OFFLOAD_RUNNER_SOCKET=/run/cmp/runner.sock cmp-offload worker
`,
  runner: () => `usage: cmp-offload runner [flags]

Runs a worker's plugin commands in a container that holds no credentials; listens on
CMP_OFFLOAD_RUNNER_SOCKET. Refuses to start with a Redis URL or a signing key in its env.

${SERVER_FLAGS}
environment (all settings: README.md, Configuration):
  CMP_OFFLOAD_RUNNER_SOCKET, ARGOCD_CMP_WORKDIR, ARGOCD_EXEC_TIMEOUT, ARGOCD_EXEC_FATAL_TIMEOUT,
  CMP_OFFLOAD_CACHE, CMP_OFFLOAD_TRACE_CPUS

example:
  CMP_OFFLOAD_RUNNER_SOCKET=/run/cmp/runner.sock cmp-offload runner
`,
  keeper: () => `usage: cmp-offload keeper [--dry-run] [--loglevel LEVEL] [--logformat FORMAT]

Keeps each Application's manifest-generate-paths annotation equal to the value derived from its
traced reads (distributed mode, in the cluster).

flags:
  --dry-run                 log the patches it would make, patch nothing (CMP_OFFLOAD_KEEPER_DRY_RUN)
  --loglevel LEVEL          debug|info|warn|error
  --logformat FORMAT        json|text
  -h, --help                this text

environment (all settings: README.md, Configuration):
  CMP_OFFLOAD_REDIS_URL, CMP_OFFLOAD_SIGNING_KEY(_FILE), CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE,
  CMP_OFFLOAD_KEEPER_GRACE, CMP_OFFLOAD_KEEPER_RESYNC, CMP_OFFLOAD_KEEPER_API_URL

example:
  CMP_OFFLOAD_REDIS_URL=redis://:pw@redis:6379 CMP_OFFLOAD_SIGNING_KEY_FILE=/secrets/key cmp-offload keeper --dry-run
`,
  cache: async () => `${(await import('./cache-cli.js')).CACHE_USAGE}
example:
  CMP_OFFLOAD_REDIS_URL=redis://:pw@redis:6379 cmp-offload cache purge --app guestbook
`,
  paths: async () => `${(await import('./paths-cli.js')).PATHS_USAGE}
example:
  cmp-offload paths --all --proxy http://localhost:9101
`,
  generate: clientHelp('generate'),
  match: clientHelp('match'),
  params: clientHelp('params'),
};

function clientHelp(kind: string): () => Promise<string> {
  return async () => `${(await import('./client-args.js')).CLIENT_USAGE}  -h, --help                this text

example:
  cmp-offload ${kind} examples/repo --app-path apps/guestbook --socket .run/example-plugin-v1.0.sock
`;
}

/** Whether `args` ask for help (before any `--`). */
export function asksHelp(args: string[]): boolean {
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).some(a => a === '-h' || a === '--help');
}

/** Whether `command` is one of ours (each has a help text). */
export function isCommand(command: string): boolean {
  return Object.hasOwn(HELP, command);
}

/** The help text of one of our commands. */
export async function helpOf(command: string): Promise<string> {
  return HELP[command]!();
}

/** `cmp-offload --version`: the package's version and the Node.js running it. */
export function versionLine(): string {
  const pkg = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return `cmp-offload ${pkg.version} (Node.js ${process.version})\n`;
}
