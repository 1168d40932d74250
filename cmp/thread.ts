import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

/**
 * A thread running the module `name` (without extension) next to the module `from`
 * (its import.meta.url), with a bounded heap. Under tsx (development, tests from source) the
 * entry is a .ts file, which a thread cannot load by itself on Node 20: tsx's loader is
 * registered in it first.
 */
export function startModuleThread(from: string, name: string, heapMb: number): Worker {
  const fromSource = fileURLToPath(from).endsWith('.ts');
  const entry = new URL(`./${name}.${fromSource ? 'ts' : 'js'}`, from);
  const resourceLimits = { maxOldGenerationSizeMb: heapMb };
  if (!fromSource) return new Worker(entry, { resourceLimits });
  const boot = `import('tsx/esm/api').then(m => { m.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(boot, { eval: true, resourceLimits });
}
