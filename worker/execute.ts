import type { Ctx } from '../cmp/context.js';
import type { ReadSink } from '../cmp/plugin/execute.js';
import type { PluginRequest, PluginResult } from '../cmp/plugin/request.js';
import type { EncodedResult } from '../cmp/queue/result-store.js';

/**
 * Runs a verified request on its tarball (the path of a fetched blob, or the bytes a job
 * carried inline): the runner client (plugin code in its own container, runner/; its
 * results come already encoded) or, where configured, the in-process executor.
 */
export type Execute = (req: PluginRequest, tgz: string | Buffer, ctx: Ctx, sink?: ReadSink) => Promise<PluginResult | EncodedResult>;

/**
 * What an `Execute` throws for trouble that is not the plugin's (the runner unreachable, dead,
 * or answering nonsense): the job is retried like any infrastructure failure. Its text is
 * ours, never the plugin's or the runner's. Anything else it throws is the plugin's failure.
 */
export class InfraError extends Error {}

/**
 * The runner did not accept the connection (not listening, dead, restarting): nothing of the
 * request reached it, so the run never started. The job goes back to the queue for another
 * worker without using one of its attempts, and this worker stops fetching until its runner
 * accepts connections again.
 */
export class RunnerUnreachable extends InfraError {}

/**
 * The runner refused the request because another one runs there (an isolated runner runs one at
 * a time): nothing ran. The runner client sends it again once a runner is free; after a few
 * refusals the job goes back to the queue without using an attempt, and fetching goes on (the
 * runner is up).
 */
export class RunnerBusy extends InfraError {}
