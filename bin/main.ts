import { runProxy } from '../proxy/main.js';
import { runClientCommand } from '../cmp/client/client-cli.js';

const USAGE = `usage: cmp-offload <command> [flags]

commands:
  proxy     serve the CMP gRPC contract on the plugin socket (drop-in for argocd-cmp-server)
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
