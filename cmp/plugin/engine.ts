import type { Options } from '../config/options.js';
import type { PluginConfig } from '../config/plugin-config.js';

/** What executing a request needs: the plugin, the options, and the env plugin commands inherit. */
export interface Engine {
  readonly config: PluginConfig;
  readonly options: Options;
  /** The sidecar/worker process env that every command inherits (Argo: os.Environ()). */
  readonly baseEnv: NodeJS.ProcessEnv;
}
