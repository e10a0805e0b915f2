/* SPDX-License-Identifier: MIT */
/* The Redis layer's schema, checked by a script the tests run on a
 * partition's keys (KEYS: its due index, lease set and task hash, as the
 * layer's scripts name them; ARGV[1]: the bucket width in ms). */
#ifndef TWHEEL_TEST_SCHEMA_LUA_H
#define TWHEEL_TEST_SCHEMA_LUA_H

/* Checks every invariant of partition {q:p}'s keys: each index member names
 * a non-empty bucket, each bucket is in the index, each bucket element is a
 * task not in the lease set (no member key:token) whose recorded due time
 * falls in its bucket's [base, base + W), each task not in the lease set
 * sits in a bucket, every lease member is a task's key and the token its
 * record holds, and every task holds a token of its own (not 0, no two
 * alike: tokens are taken when a task is armed and never reused).
 * -> {violations, tasks waiting in buckets, buckets}, as reply. */
static const char schema_lua[] =
    "local W = tonumber(ARGV[1]) local bad, waiting = 0, 0\n"
    "local idx = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')\n"
    "for i = 1, #idx, 2 do local b = idx[i]\n"
    "  if tonumber(idx[i + 1]) ~= tonumber(b) then bad = bad + 1 end\n"
    "  local m = redis.call('LRANGE', KEYS[1] .. ':' .. b, 0, -1)\n"
    "  if #m == 0 then bad = bad + 1 end\n"
    "  for j = 1, #m do waiting = waiting + 1\n"
    "    local v = redis.call('HGET', KEYS[3], m[j])\n"
    "    local tok, att, due = string.match(v or '', '^(%d+) (%d+) (%d+) ')\n"
    "    if not v or redis.call('ZSCORE', KEYS[2], m[j] .. ':' .. tok) or\n"
    "      math.floor(tonumber(due) / W) ~= tonumber(b)\n"
    "      then bad = bad + 1 end\n"
    "  end\n"
    "end\n"
    "if #redis.call('KEYS', KEYS[1] .. ':*') ~= #idx / 2 then bad = bad + 1 end\n"
    "local all = redis.call('HGETALL', KEYS[3]) local free, seen = 0, {}\n"
    "for j = 1, #all, 2 do local tok = string.match(all[j + 1], '^(%d+) ')\n"
    "  if not tok or tonumber(tok) == 0 or seen[tok] then bad = bad + 1 end\n"
    "  if tok then seen[tok] = true end\n"
    "  if not redis.call('ZSCORE', KEYS[2], all[j] .. ':' .. (tok or '')) then free = free + 1 end\n"
    "end\n"
    "if free ~= waiting then bad = bad + 1 end\n"
    /* each leased task has one member: no other member */
    "if redis.call('ZCARD', KEYS[2]) ~= #all / 2 - free then bad = bad + 1 end\n"
    "return {bad, waiting, #idx / 2}\n";

#endif
