// `npm test` runs the fault matrix (3 Redis topologies × 5 faults, and a lossy failover for Sentinel) in its reduced form (fewer calls, the same checks), so a
// default run sees it; `npm run test:reliability` runs the full form (see docs/reliability.md).
process.env.CMP_RELIABILITY_REDUCED = '1';
await import('./fault-matrix.suite.js');
export {};
