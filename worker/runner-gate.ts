import type { Logger } from '../cmp/log.js';
import { InfraError, RunnerUnreachable, type Execute } from './execute.js';
import type { RecordingWorker } from './recorded-runs.js';
import { runnerAccepts } from './runner-client.js';

/** How often a starting worker tries the runner's socket: starting containers are fast, and a try costs a failed connect. */
const RUNNER_RETRY_MS = 10;
/** How often a worker whose runner went away tries its socket again (a restarted container takes a while). */
const RUNNER_RECOVERY_RETRY_MS = 100;

/**
 * The runner containers of the pod, as the worker's fetching sees them. They start with the
 * worker: a job fetched before they listen would fail and wait for its retry, so fetching starts
 * once every one accepts a connection. One that stops accepting (dead, restarting) pauses
 * fetching, so that jobs go to workers whose runner works instead of failing here one after the
 * other; fetching resumes when it accepts again.
 */
export class RunnerGate {
  private worker: RecordingWorker | undefined;
  private runnerDown = false;
  private stopping = false;
  private readonly wait = new AbortController();

  constructor(
    private readonly sockets: readonly string[],
    /** After this long, say once that jobs wait for the runner. */
    private readonly warnAfterMs: number,
    private readonly log: Logger,
  ) {}

  /** Whether every runner of the pod accepts a connection within `timeoutMs`. */
  async accept(timeoutMs: number): Promise<boolean> {
    return (await Promise.all(this.sockets.map(p => runnerAccepts(p, timeoutMs)))).every(Boolean);
  }

  /** True while fetching is paused for a runner that went away. */
  get down(): boolean {
    return this.runnerDown;
  }

  /**
   * `execute`, noticing a runner that went away mid-run (that run counts: it may be what killed
   * it): fetching stops if it is gone for good, rather than fail the next jobs at once.
   */
  watch(execute: Execute): Execute {
    return async (req, tgzPath, ctx, sink) => {
      try {
        return await execute(req, tgzPath, ctx, sink);
      } catch (err) {
        if (err instanceof InfraError && !(err instanceof RunnerUnreachable)) {
          void this.accept(1_000).then(up => up || this.unreachable());
        }
        throw err;
      }
    };
  }

  /** Start `worker` fetching once every runner accepts; false if stopped before. */
  async start(worker: RecordingWorker): Promise<boolean> {
    this.worker = worker;
    const up = await untilRunnerAccepts(this.sockets, this.warnAfterMs, this.wait.signal, this.log, RUNNER_RETRY_MS);
    if (!up || this.stopping) return false;
    worker.run().catch(err => this.log.warn({ err: (err as Error).message }, 'worker error'));
    return true;
  }

  /** A runner does not accept connections: pause fetching until it does again. */
  unreachable(): void {
    const worker = this.worker;
    if (!worker || this.runnerDown || this.stopping) return;
    this.runnerDown = true;
    // Not waiting for the running jobs: they end on their own.
    void worker.pause(true).catch(err => this.log.warn({ err: (err as Error).message }, 'worker error'));
    const runner = this.sockets.join(',');
    this.log.warn({ runner }, 'the runner does not accept connections: fetching no jobs until it does (CMP_OFFLOAD_RUNNER_SOCKET)');
    void untilRunnerAccepts(this.sockets, Number.POSITIVE_INFINITY, this.wait.signal, this.log, RUNNER_RECOVERY_RETRY_MS).then(async up => {
      if (!up || this.stopping) return;
      this.runnerDown = false;
      await worker.resume();
      this.log.info({ runner }, 'the runner accepts connections again: fetching jobs');
    });
  }

  /** Shutdown: stop waiting for runners, start nothing more. */
  stop(): void {
    this.stopping = true;
    this.wait.abort();
  }
}

/**
 * Resolve true once the runner at each of `socketPaths` accepts a connection, false if `signal`
 * aborts first. Says once, after `warnAfterMs`, that jobs wait for the runner.
 */
async function untilRunnerAccepts(socketPaths: readonly string[], warnAfterMs: number, signal: AbortSignal, log: Logger, retryMs: number): Promise<boolean> {
  const warnAt = Date.now() + warnAfterMs;
  let warned = false;
  const waiting = new Set(socketPaths);
  while (!signal.aborted) {
    for (const p of [...waiting]) if (await runnerAccepts(p, 1_000)) waiting.delete(p);
    if (waiting.size === 0) return !signal.aborted;
    if (!warned && Date.now() >= warnAt) {
      warned = true;
      log.warn({ runner: [...waiting].join(',') }, 'the runner does not accept connections yet (CMP_OFFLOAD_RUNNER_SOCKET); jobs are fetched once it does');
    }
    await new Promise(resolve => setTimeout(resolve, retryMs));
  }
  return false;
}
