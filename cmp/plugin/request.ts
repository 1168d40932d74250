import type { ParameterAnnouncement } from '../../proto/generated/reposerver/repository/repository.js';
import type { GitCredentials } from '../askpass/askpass-error.js';

/** The three streaming RPCs, by what they do. */
export type RpcKind = 'generate' | 'match' | 'parameters';

export interface EnvEntry {
  name: string;
  value: string;
}

/** What a request asks of the plugin once its tarball is verified: the job contract's core. */
export interface PluginRequest {
  kind: RpcKind;
  appRelPath: string;
  env: EnvEntry[];
  /**
   * provideGitCreds where the plugin runs away from the repo-server (a worker's job, distributed
   * mode): the run gets an askpass of its own and copies of the credential files, see
   * askpass/run-askpass.ts. Absent in standalone mode, where the env points at the repo-server's.
   */
  gitCreds?: GitCredsSource;
}

/** Where a run's git credentials come from when the repo-server's askpass socket and files are not at hand. */
export interface GitCredsSource {
  /** The request's askpass nonce: the run's askpass answers this one only. Absent: no askpass (SSH keys). */
  nonce?: string;
  /** The contents of the files the request env points to, by their path there. */
  files: ReadonlyMap<string, Buffer>;
  /** Asked when git asks (through the proxy, of the repo-server); throws AskpassError. */
  credentials(): Promise<GitCredentials>;
}

export type PluginResult =
  | { kind: 'generate'; manifests: string[] }
  | { kind: 'match'; isSupported: boolean; isDiscoveryEnabled: boolean }
  | { kind: 'parameters'; parameterAnnouncements: ParameterAnnouncement[] };

/**
 * The wrapping texts of each RPC (docs/argo-contract.md#generatemanifest, #matchrepository, #getparametersannouncement). `command` is how Go words a
 * command that fails, including one that cannot start because the context is already done.
 */
export const RPC_TEXT: Record<RpcKind, { workdir: string; receive: string; command: string }> = {
  generate: {
    workdir: 'error creating workdir for manifest generation',
    receive: 'generate manifest error receiving stream',
    command: 'error generating manifests',
  },
  match: {
    workdir: 'error creating workdir for repository matching',
    receive: 'match repository error receiving stream',
    command: 'match repository error: error running find command',
  },
  parameters: {
    workdir: 'error creating workdir for generating parameter announcements',
    receive: 'parameters announcement error receiving stream',
    command: 'get parameters announcement error: error executing dynamic parameter output command',
  },
};
