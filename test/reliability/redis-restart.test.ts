// `npm test` runs this reliability suite in its reduced form (fewer calls, the same checks), so a
// default run sees it; `npm run test:reliability` runs the full form (see docs/reliability.md).
process.env.CMP_RELIABILITY_REDUCED = '1';
await import('./redis-restart.suite.js');
export {};
