import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

/**
 * Young generation of a thread: small, since a thread's work (a million tiny manifests) is mostly
 * short-lived garbage. V8's default for these heaps (tens of MiB) doubled the splitter's RSS
 * growth on a million documents (+75-85 MiB against +39-45 MiB with 4-8 MiB), no slower.
 */
const YOUNG_GENERATION_MB = 8;

/**
 * A thread running the module `name` (without extension) next to the module `from`
 * (its import.meta.url), with a bounded heap (`heapMb` of old generation, a small young one). Under tsx (development, tests from source) the
 * entry is a .ts file, which a thread cannot load by itself on Node 20: tsx's loader is
 * registered in it first.
 */
export function startModuleThread(from: string, name: string, heapMb: number): Worker {
  const fromSource = fileURLToPath(from).endsWith('.ts');
  const entry = new URL(`./${name}.${fromSource ? 'ts' : 'js'}`, from);
  const resourceLimits = { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: YOUNG_GENERATION_MB };
  if (!fromSource) return new Worker(entry, { resourceLimits });
  const boot = `import('tsx/esm/api').then(m => { m.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(boot, { eval: true, resourceLimits });
}
