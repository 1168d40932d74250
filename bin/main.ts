import { runProxy } from '../proxy/main.js';
import { runClientCommand } from '../cmp/client/client-cli.js';
import { runCacheCommand } from '../cmp/queue/cache-cli.js';
import { runWorker } from '../worker/main.js';

const USAGE = `usage: cmp-offload <command> [flags]

commands:
  proxy     serve the CMP gRPC contract on the plugin socket (drop-in for argocd-cmp-server)
  worker    run plugin jobs from the Redis queue (distributed mode, CMP_OFFLOAD_REDIS_URL)
  cache     stats | purge [--app NAME | --plugin NAME | --all]: the shared output cache in Redis
  generate  pack a directory like the repo-server and call GenerateManifest
  match     ... MatchRepository
  params    ... GetParametersAnnouncement
`;

/** `cmp-offload <command>`: one executable, one subcommand per role (architecture §8). */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'proxy':
        return await runProxy(rest);
      case 'worker':
        return await runWorker(rest);
      case 'cache':
        return await runCacheCommand(rest, { stdout: process.stdout, stderr: process.stderr });
      case 'generate':
      case 'match':
      case 'params':
        return await runClientCommand(command, rest, { stdout: process.stdout, stderr: process.stderr });
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
