import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseInfoMemory, prefixSlot } from '../../../cmp/observe/redis-memory.js';

test('INFO memory: used_memory and maxmemory in bytes; 0 is "no limit"; a missing field gives nothing', () => {
  const info = '# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:67108864\r\nmaxmemory_human:64.00M\r\nmaxmemory_policy:noeviction\r\n';
  assert.deepEqual(parseInfoMemory(info), { used: 1048576, max: 67108864 });
  assert.deepEqual(parseInfoMemory('used_memory:10\nmaxmemory:0\n'), { used: 10, max: 0 });
  assert.equal(parseInfoMemory('# Memory\r\nused_memory_rss:5\r\nmaxmemory:0\r\n'), undefined);
  assert.equal(parseInfoMemory(''), undefined);
});

test("the Cluster slot of a prefix follows Redis's rule (CRC16 of the hash tag, mod 16384)", () => {
  // Values from the Redis Cluster specification and `CLUSTER KEYSLOT` (the Cluster test asks a real node).
  assert.equal(prefixSlot('123456789'), 0x31c3);
  assert.equal(prefixSlot('somekey'), 11058);
  assert.equal(prefixSlot('foo{hash_tag}'), 2515);
  assert.equal(prefixSlot('{hash_tag}:x'), 2515);
  assert.equal(prefixSlot('{cmp-offload}'), prefixSlot('cmp-offload'));
});
