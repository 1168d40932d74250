/**
 * `--cpu-prof` is not allowed in NODE_OPTIONS on Node 20, so `--profile` preloads this module
 * (`--import`) into the proxy and worker processes instead: it starts the V8 profiler through
 * an in-thread inspector session and writes `<CMP_BENCH_PROFILE_DIR>/<role>-<pid>-<random>.cpuprofile`
 * when the process exits (same-thread sessions answer synchronously, so the exit hook works).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { Session } from 'node:inspector';
import path from 'node:path';

const dir = process.env.CMP_BENCH_PROFILE_DIR;
if (dir) {
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.start');
  process.on('exit', () => {
    session.post('Profiler.stop', (err, res) => {
      if (err) return;
      // The role argument (`proxy`, `worker`), or the bare server's socket file name.
      const role = path.basename(process.argv[2] ?? 'node');
      // The pid alone may repeat: every isolated runner is PID 2 of a namespace of its own.
      fs.writeFileSync(path.join(dir, `${role}-${process.pid}-${randomBytes(3).toString('hex')}.cpuprofile`), JSON.stringify(res.profile));
    });
  });
}
