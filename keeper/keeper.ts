import { createHash } from 'node:crypto';
import { viewOf, type AppPaths, type AppPathsRecord, type AppPathsStore } from '../cmp/cache/app-paths.js';
import type { KeeperOptions } from '../cmp/config/options.js';
import { messageOf } from '../cmp/errors.js';
import type { Logger } from '../cmp/log.js';
import { metrics } from '../cmp/observe/metrics.js';
import { appRefOf, type AppRef } from './app-ref.js';
import { decide, type Narrowing } from './grace.js';
import { annotationOf, whyNotServed, type Application } from './served.js';

/** The Kubernetes calls the keeper needs (kube-api.ts; a test may count them). */
export interface ApplicationsApi {
  get(ref: AppRef): Promise<Application | undefined>;
  apply(ref: AppRef, value: string | undefined): Promise<Application>;
}

/** Apps waiting to be looked at; beyond it notices are dropped (the next resync finds them). */
const MAX_QUEUED = 10_000;
/** Apps whose last outcome is remembered (to skip them at resync) and narrowings under way. */
const MAX_REMEMBERED = 50_000;

/**
 * Keeps each Application's manifest-generate-paths equal to the value derived from its latest
 * traced generation: told of changes by notices, and comparing every app's record with what
 * it last did at start and every resync period. One app at a time, Kubernetes calls paced to
 * `apiQps`; per app it GETs the Application, checks it is a single-source app of the plugin,
 * repository and path the record comes from, and applies the annotation when it differs
 * (through the grace period of grace.ts when paths are dropped). Apps without a live record
 * are left as they are: an app Argo CD skips thanks to the annotation sends us no request.
 */
export class Keeper {
  private readonly queue = new Set<string>();
  /** app → the view it was last settled for (`settledKey`), so that a resync skips it. */
  private readonly settled = new Map<string, string>();
  private readonly narrowings = new Map<string, Narrowing>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private wake: (() => void) | undefined;
  private stopped = false;
  private nextCall = 0;
  private resyncTimer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;

  constructor(
    private readonly store: AppPathsStore,
    private readonly api: ApplicationsApi,
    private readonly options: KeeperOptions,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** Resync now and every period, and work the queue until stop(). */
  start(): void {
    this.loop = this.work();
    const resync = () => {
      void this.resync().finally(() => {
        if (!this.stopped) this.resyncTimer = setTimeout(resync, this.options.resyncMs);
      });
    };
    resync();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.resyncTimer);
    for (const t of this.timers.values()) clearTimeout(t);
    this.wake?.();
    await this.loop;
  }

  /** A notice named this app: look at it soon. */
  notify(app: string): void {
    if (this.queue.size >= MAX_QUEUED) return;
    this.queue.add(app);
    this.wake?.();
  }

  /** Queue every app whose record differs from what it was last settled for. */
  async resync(): Promise<void> {
    let all: Map<string, AppPathsRecord[]>;
    try {
      all = await this.store.all();
    } catch (err) {
      metrics.keeperErrors.inc({ step: 'redis' });
      this.log.warn({ err: messageOf(err) }, 'keeper: cannot read the manifest-generate-paths records; next resync tries again');
      return;
    }
    for (const [app, records] of all) {
      const view = viewOf(records);
      if (view && (this.settled.get(app) !== settledKey(view) || this.narrowings.has(app))) this.notify(app);
    }
  }

  private async work(): Promise<void> {
    while (!this.stopped) {
      const app = this.queue.values().next().value;
      if (app === undefined) {
        await new Promise<void>(resolve => (this.wake = resolve));
        this.wake = undefined;
        continue;
      }
      this.queue.delete(app);
      await this.reconcile(app);
    }
  }

  /** Wait for our turn at the Kubernetes API (`apiQps` calls per second at most). */
  private async paced(): Promise<void> {
    const now = this.now();
    const at = Math.max(now, this.nextCall);
    this.nextCall = at + 1000 / this.options.apiQps;
    if (at > now) await new Promise(r => setTimeout(r, at - now));
  }

  private async reconcile(app: string): Promise<void> {
    let view: AppPaths | undefined;
    try {
      view = viewOf(await this.store.get(app));
    } catch (err) {
      metrics.keeperErrors.inc({ step: 'redis' });
      this.log.warn({ app, err: messageOf(err) }, 'keeper: cannot read the records of an app; next resync tries again');
      return;
    }
    if (!view) return;
    const key = settledKey(view);
    const ref = appRefOf(app, this.options.argocdNamespace);
    if (!ref) {
      this.leave(app, key, 'bad_name', 'not an Application instance name');
      return;
    }
    let step: 'get' | 'patch' = 'get';
    try {
      await this.paced();
      const application = await this.api.get(ref);
      if (!application) {
        this.leave(app, key, 'not_found', `no Application ${ref.namespace}/${ref.name}`);
        return;
      }
      const why = whyNotServed(application, view);
      if (why) {
        this.leave(app, key, 'not_served', why);
        return;
      }
      const current = annotationOf(application);
      const decision = decide(view.value, current, this.narrowings.get(app), this.now(), this.options.graceMs);
      this.narrow(app, decision.narrowing);
      if (decision.value !== current) {
        const fields = { app, namespace: ref.namespace, name: ref.name, old: current ?? null, new: decision.value ?? null, reason: view.value === undefined ? `no derived value: ${view.reason}` : decision.reason };
        if (this.options.dryRun) {
          this.log.info(fields, 'keeper: would patch manifest-generate-paths (dry run)');
          metrics.keeperPatches.inc({ action: 'dry_run' });
        } else {
          step = 'patch';
          await this.paced();
          await this.api.apply(ref, decision.value);
          this.log.info(fields, 'keeper: patched manifest-generate-paths');
          metrics.keeperPatches.inc({ action: decision.value === undefined ? 'removed' : 'set' });
        }
      }
      this.remember(app, key);
    } catch (err) {
      metrics.keeperErrors.inc({ step });
      this.log.warn({ app, err: messageOf(err) }, `keeper: ${step === 'get' ? 'cannot read' : 'cannot patch'} the Application; next notice or resync tries again`);
    }
  }

  /** Leave an app alone, saying why once per record. */
  private leave(app: string, key: string, reason: 'not_served' | 'not_found' | 'bad_name', why: string): void {
    if (this.settled.get(app) !== key) {
      metrics.keeperSkipped.inc({ reason });
      this.log.info({ app, reason: why }, 'keeper: leaving the app alone');
    }
    this.remember(app, key);
  }

  private remember(app: string, key: string): void {
    this.settled.delete(app);
    this.settled.set(app, key);
    if (this.settled.size > MAX_REMEMBERED) this.settled.delete(this.settled.keys().next().value!);
  }

  /** Keep a narrowing under way and look at the app again when its grace period ends. */
  private narrow(app: string, n: Narrowing | undefined): void {
    clearTimeout(this.timers.get(app));
    this.timers.delete(app);
    if (!n) {
      this.narrowings.delete(app);
      return;
    }
    if (!this.narrowings.has(app) && this.narrowings.size >= MAX_REMEMBERED) return;
    this.narrowings.set(app, n);
    const t = setTimeout(() => {
      this.timers.delete(app);
      this.notify(app);
    }, Math.max(0, n.since + this.options.graceMs - this.now()) + 10);
    t.unref();
    this.timers.set(app, t);
  }
}

/** What a settled app's outcome depends on (its view's value or reason, plugin and source), hashed: values run to 2 KiB. */
function settledKey(v: AppPaths): string {
  return createHash('sha256')
    .update(JSON.stringify([v.value ?? null, v.value === undefined ? v.reason : null, v.plugin, v.repoUrl, v.sourcePath]))
    .digest('base64');
}
