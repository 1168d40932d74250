import assert from 'node:assert/strict';

/** A process's /metrics on 127.0.0.1:`port`, parsed from the text exposition: `name{labels}` → value. */
export async function scrape(port: number): Promise<Map<string, number>> {
  const res = await fetchListening(`http://127.0.0.1:${port}/metrics`);
  assert.equal(res.status, 200);
  const out = new Map<string, number>();
  for (const line of (await res.text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

/**
 * `fetch`, retrying a refused connection for up to 30 s: a process starts its ops HTTP server in
 * the background once its socket listens, which on a loaded machine, and with several proxy
 * processes to fork first, can come after a test's first requests are answered.
 */
export async function fetchListening(url: string, init?: RequestInit): Promise<Response> {
  const end = Date.now() + 30_000;
  for (;;) {
    try {
      return await fetch(url, init);
    } catch (err) {
      if ((err as { cause?: { code?: string } }).cause?.code !== 'ECONNREFUSED' || Date.now() > end) throw err;
      await new Promise(r => setTimeout(r, 50));
    }
  }
}
