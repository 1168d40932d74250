import type { Scenario } from '../lib/types.js';
import { cacheHit } from './cache-hit.js';
import { coldStart } from './cold-start.js';
import { extract } from './extract.js';
import { generatePathsSkip } from './generate-paths-skip.js';
import { ingest } from './ingest.js';
import { knownTarball } from './known-tarball.js';
import { memory } from './memory.js';
import { monorepoStorm } from './monorepo-storm.js';
import { queueOverhead } from './queue-overhead.js';
import { runnerIsolation } from './runner-isolation.js';
import { scaleOut } from './scale-out.js';
import { split } from './split.js';
import { stormLarge } from './storm-large.js';
import { stormWholeRepo } from './storm-whole-repo.js';
import { traceOverhead } from './trace-overhead.js';
import { traceOverheadReal } from './trace-overhead-real.js';

/** Every scenario, in the order they run. Add a scenario by adding its module here. */
export const SCENARIOS: Scenario[] = [ingest, knownTarball, extract, split, queueOverhead, cacheHit, scaleOut, coldStart, memory, monorepoStorm, stormWholeRepo, generatePathsSkip, stormLarge, traceOverhead, traceOverheadReal, runnerIsolation];
