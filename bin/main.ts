import { asksHelp, helpOf, isCommand, versionLine } from '../cli/help.js';

const USAGE = `usage: cmp-offload <command> [flags]

commands:
  proxy     serve the CMP gRPC contract on the plugin socket (drop-in for argocd-cmp-server)
  worker    run plugin jobs from the Redis queue (distributed mode, CMP_OFFLOAD_REDIS_URL)
  runner    run a worker's plugin commands, without credentials, on CMP_OFFLOAD_RUNNER_SOCKET
  cache     stats | purge [--app NAME | --plugin NAME | --all]: the shared output cache in Redis
  paths     --app NAME | --all [--json] [--proxy URL]: manifest-generate-paths derived from traced reads
  keeper    [--dry-run]: keep Applications' manifest-generate-paths equal to the derived value (distributed mode)
  generate  pack a directory like the repo-server and call GenerateManifest
  match     ... MatchRepository
  params    ... GetParametersAnnouncement

cmp-offload <command> --help shows a command's flags, settings and an example; --version the version.
`;

/**
 * `cmp-offload <command>`: one executable, one subcommand per role (docs/architecture.md#code-layout). Each role's
 * modules are loaded only when it runs: a worker scaled from zero should not pay for the proxy's.
 */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === '--version' || (command !== undefined && isCommand(command) && rest[0] === '--version')) {
      process.stdout.write(versionLine());
      return 0;
    }
    if (command !== undefined && isCommand(command) && asksHelp(rest)) {
      process.stdout.write(await helpOf(command));
      return 0;
    }
    switch (command) {
      case 'proxy':
        return await (await import('../proxy/main.js')).runProxy(rest);
      case 'worker':
        return await (await import('../worker/main.js')).runWorker(rest);
      case 'runner':
        return await (await import('../runner/main.js')).runRunner(rest);
      case 'cache':
        return await (await import('../cli/cache-cli.js')).runCacheCommand(rest, { stdout: process.stdout, stderr: process.stderr });
      case 'paths':
        return await (await import('../cli/paths-cli.js')).runPathsCommand(rest, { stdout: process.stdout, stderr: process.stderr });
      case 'keeper':
        return await (await import('../keeper/main.js')).runKeeper(rest);
      case 'generate':
      case 'match':
      case 'params':
        return await (await import('../cli/client-cli.js')).runClientCommand(command, rest, { stdout: process.stdout, stderr: process.stderr });
      case undefined:
      case '-h':
      case '--help':
      case 'help':
        process.stdout.write(USAGE);
        return command === undefined ? 2 : 0;
      default:
        process.stderr.write(`cmp-offload: unknown command ${JSON.stringify(command)}\n${USAGE}`);
        return 2;
    }
  } catch (err) {
    process.stderr.write(`cmp-offload ${command}: ${(err as Error).message}\n`);
    return 1;
  }
}
