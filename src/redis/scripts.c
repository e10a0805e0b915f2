/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the Lua scripts (schema and costs: see redis.c).
 *
 * Every script but START takes the same five keys of one partition (one
 * cluster slot; START names the lease and task keys of its partitions in
 * ARGV, below):
 *   KEYS[1] index  ZSET  bucket number b -> b (the non-empty due buckets;
 *                        bucket b is the LIST KEYS[1] .. ':' .. b, below)
 *   KEYS[2] leases ZSET  key .. ':' .. token -> lease end ms  (tasks claimed by
 *                        a worker, each under the token its record holds)
 *   KEYS[3] task   HASH  key -> "token attempt due " .. payload
 *   KEYS[4] seq    STRING token counter
 *   KEYS[5] hold   STRING latest window end claimed by any worker (ms, with a TTL)
 * A task is in exactly one of its due bucket and lease (the lease member,
 * its key and the token its record holds, says which). Its token is taken
 * from seq whenever a script puts it in a bucket (arm(): set, set_opts,
 * move, CLAIM's recovery, FAIL, RELEASE, requeue, a schedule's
 * occurrence), never reused, so a token names one arming and at most one
 * lease of it: CLAIM leases a task under the token its record holds and
 * writes the lease member only. A worker learns a token only from the
 * claim that leased it; every script that removes a member gives the
 * record a new token or deletes it, and no script adds a member but
 * CLAIM's (and the conversion of an earlier version's leases, upgrade.c,
 * under the token the record holds). So the member key:token exists
 * exactly while the record holds that token and the lease runs or waits
 * to be recovered: START and the acknowledgement check the member, not
 * the record. One exception: a failover that loses a claim's writes
 * (replication is asynchronous) leaves the record with its token and the
 * task in its bucket, while the worker holds the token;
 * START then finds no lease member and refuses (below), but a later claim
 * of the task leases it under that same token (redis.h, "Replication and
 * failover"); a lease member whose token its record does not hold (none
 * should exist: a failover keeps a prefix of the writes) is dropped by the
 * recovery that finds it, the task untouched. A record a version that took tokens at claim
 * wrote while waiting holds token 0; CLAIM gives it one (and writes it).
 * Earlier versions kept the leases in {q:p}:lease, members the bare keys:
 * upgrade.c converts them when a client opens the queue.
 * attempt counts the starts of earlier leases; the start of the
 * current lease is marked in its lease score instead (started(): a lease
 * START lengthened ends at a whole ms + 0.5, a claim's hold at a whole ms),
 * so that START writes one ZSET member per task, not the record with its
 * payload. Whoever ends a lease without deleting the task (CLAIM's
 * recovery, FAIL, RELEASE) folds that mark into the record's attempt.
 * Times come from redis.call('TIME') (Redis 7 replicates scripts by effects,
 * so TIME is allowed). Due times are whole ms, rounded up from the server's
 * microseconds, so that a task is never due before set's instant + delay.
 * The paths every task takes (SET of a new task, CLAIM's leasing loop,
 * START's starts and acknowledgements, the TIME of every call) turn a
 * string of digits into a number by arithmetic (x + 0: one strtod), not
 * tonumber(x): Lua 5.1's tonumber tests the string, then converts it, two
 * strtod calls of some 500 instructions each. The rarer paths (a replaced
 * task, a recovered lease, FAIL, RELEASE) keep tonumber.
 */
#define _POSIX_C_SOURCE 200809L /* internal.h: clock_gettime, condvar clocks */
#include "redis/internal.h"

#define PRELUDE                                                                            \
    "local function now_us() local t = redis.call('TIME') "                                \
    "return t[1] * 1000000 + t[2] end\n"                                                   \
    "local function parse(v) local tok, att, due, pos = "                                  \
    "string.match(v, '^(%d+) (%d+) (%d+) ()') "                                            \
    "return tonumber(tok), tonumber(att), tonumber(due), pos end\n"                        \
    "local function rec(tok, att, due, p) "                                                \
    "return string.format('%d %d %d ', tok, att, due) .. p end\n"                          \
    "local function hold() return tonumber(redis.call('GET', KEYS[5]) or '0') end\n"     \
    /* the token of a new arming (the record's first field) */                             \
    "local function arm() return redis.call('INCRBY', KEYS[4], 1) end\n"                      \
    "local function due_at(now, d) return math.floor((now + 999) / 1000) + d end\n"        \
    /* the lease member of key `k` under token `t` (a number or its digits) */             \
    "local function lm(k, t) return k .. ':' .. (type(t) == 'number' and "                 \
    "string.format('%d', t) or t) end\n"                                                   \
    /* the lease of `k` is held by token `t` and still running at `now` */                 \
    "local function held(k, tok, t, now) if tok ~= t then return false end "               \
    "local ls = redis.call('ZSCORE', KEYS[2], lm(k, t)) "                                  \
    "return ls and tonumber(ls) * 1000 > now and ls end\n"                                  \
    /* 1 when lease score `ls` (a string or number) carries START's mark, else 0 */        \
    "local function started(ls) ls = tonumber(ls) "                                         \
    "return ls and ls % 1 ~= 0 and 1 or 0 end\n"

/* The due-time buckets (the Redis-side timing wheel; why: redis.c). A
 * waiting task (not leased) due at `due` ms is an element, its key, of the
 * bucket LIST KEYS[1] .. ':' .. b, b = floor(due / W), in the order it was
 * put there (the due time is in the record: the worker orders what it
 * claims), and b is a member (score b) of the index ZSET KEYS[1] while that
 * bucket is not empty. Every script keeps the two together: badd adds both
 * (RPUSH answers the new length: 1 = the bucket is new), bdel drops the
 * index member with the bucket's last task (Redis deletes an emptied list).
 * A LIST is compact (a quicklist of 8 KB listpacks) at any length, where a
 * ZSET past 128 members becomes a skiplist of ~120 B a task.
 * Buckets are not declared keys: they share KEYS[1]'s hash tag (one slot),
 * which Redis 7.0 Cluster accepts from a script on the node serving that
 * slot. While the slot migrates (a bucket may then sit on the other node),
 * stable() fails and the script answers TRYAGAIN before it writes anything
 * (the router retries); see redis.c and tests/redis/test_redis_cluster.c. */
#define BUCKETS                                                                            \
    "local W = " TW_RR_BUCKET_MS_STR "\n"                                                  \
    /* numbers reach Redis as integer strings: string.format('%d') is cheaper */          \
    /* than Lua's own number-to-string ('%.14g')                               */          \
    "local function I(x) return string.format('%d', x) end\n"                                \
    "local function bkey(b) return KEYS[1] .. ':' .. b end\n"                              \
    /* EXISTS of two absent keys of the slot errors (ASK or TRYAGAIN) on a     */          \
    /* migrating or importing node, and nowhere else                           */          \
    "local function stable() return type(redis.pcall('EXISTS', KEYS[1] .. ':-', "         \
    "KEYS[1] .. ':+')) == 'number' end\n"                                                  \
    "local TRY = 'TRYAGAIN twheel: the slot of ' .. KEYS[1] .. ' is migrating'\n"          \
    /* the index is touched only when a bucket appears or empties: in a        */          \
    /* listpack, finding a member scans the whole index                        */          \
    "local function badd(k, due) local s = I(math.floor(due / W)) "                        \
    "if redis.call('RPUSH', bkey(s), k) == 1 then redis.call('ZADD', KEYS[1], s, s) end end\n" \
    "local function bdel(k, due) local b = I(math.floor(due / W)) local bk = bkey(b) "     \
    "if redis.call('LREM', bk, 1, k) == 1 and redis.call('EXISTS', bk) == 0 then "         \
    "redis.call('ZREM', KEYS[1], b) end end\n"                                             \
    /* a task (record token tok) out of its lease if it is leased, else out */             \
    /* of its bucket */                                                                    \
    "local function unarm(k, tok, due) if redis.call('ZREM', KEYS[2], lm(k, tok)) == 0 then " \
    "bdel(k, due) end end\n"

/* The retry limit and the dead letters (dead.c; schema in redis.c). A
 * record's attempt field holds the starts counted in its low 32 bits and a
 * per-task max_attempts above them (0: the queue's, which the worker sends
 * in ARGV; 0 there: unlimited). spent(att, qmax): the attempts are used up.
 * bury moves a task's record into the partition's dead-letter HASH
 * {q:p}:dead (an undeclared key of the slot, as the buckets: the script
 * checked stable() first), key -> "attempt dead_ms due errlen " .. error ..
 * payload, and deletes it from the task HASH: one script, nothing lost on
 * the way. The caller has taken the task out of its bucket or lease. */
#define DEAD                                                                               \
    "local M32 = 4294967296\n"                                                              \
    "local DK = string.sub(KEYS[3], 1, -5) .. 'dead'\n"                                     \
    "local function spent(att, qmax) local mx = math.floor(att / M32) "                     \
    "if mx == 0 then mx = qmax end return mx > 0 and att % M32 >= mx end\n"                \
    "local function bury(k, att, now_ms, due, err, p) redis.call('HSET', DK, k, "            \
    "string.format('%d %d %d %d ', att, now_ms, due, #err) .. err .. p) "                    \
    "redis.call('HDEL', KEYS[3], k) end\n"

/* ARGV: channel, n, then n keys, n payloads, and one string of the n
 * delays in ms as 8-byte little-endian integers (one partition; the keys
 * distinct: set_many keeps the last item of a key; any order, set_many
 * sends them by delay so that each bucket is one run of tasks: one RPUSH)
 * -> number of ARGV. One PUBLISH at most, with the earliest due time that
 * falls before hold. A replaced task leaves its old bucket (LREM) or the
 * lease set (the replaced ones' ZMSCORE says which). Each command takes the
 * batch at once: HMGET (of ARGV's keys as they are), INCRBY (the tokens),
 * HSET, RPUSH per run of tasks in one new bucket (a slice of
 * one table of keys), and one index ZADD for the buckets that appeared:
 * those whose RPUSH answered the run's own length (a bucket met in two runs
 * is found new by the first). The loop is written for the Lua 5.1 VM:
 * locals for globals, counters instead of #t, no per-call tables of keys,
 * no table per bucket, the delays read by one C call.
 * A partition's task HASH is created hashtable-encoded (HSET of a 513-byte
 * field name with the records, HDEL of it: Redis never converts back): as
 * a listpack (its first 128 tasks under the default
 * hash-max-listpack-entries) every HMGET and HSET of a call would scan all
 * of it per key. */
#define SET_LUA                                                                            \
    PRELUDE BUCKETS "if not stable() then return redis.error_reply(TRY) end\n"             \
    "local A, fmt, floor, call = ARGV, string.format, math.floor, redis.call\n"             \
    "local t = call('TIME')\n"                                                              \
    "local now = floor((t[1] * 1000000 + t[2] + 999) / 1000)\n"                            \
    "local h = tonumber(call('GET', KEYS[5]) or '0')\n"                                     \
    "local nk = tonumber(A[2]) local first\n"                                               \
    /* a new task HASH is made a hashtable (a field name over 64 bytes      */              \
    /* converts it; no task key is 513 bytes long), not a listpack          */              \
    "local big = call('EXISTS', KEYS[3]) == 0 and string.rep('-', 513)\n"                    \
    "local old = call('HMGET', KEYS[3], unpack(A, 3, 2 + nk))\n"                            \
    "local D = {struct.unpack('<' .. string.rep('I8', nk), A[3 + 2 * nk])}\n"               \
    "local hs, lz, lk, ld, nl, rb, rs, nr, cb = {}, {}, {}, {}, 0, {}, {}, 0, -1\n"        \
    /* the tasks' tokens: tk0 + 1 .. tk0 + nk */                                            \
    "local tk0 = call('INCRBY', KEYS[4], nk) - nk\n"                                        \
    "for j = 1, nk do local k = A[2 + j] local j2 = 2 * j\n"                                \
    "  local due = now + D[j]\n"                                                            \
    "  hs[j2 - 1] = k hs[j2] = fmt('%d 0 %d ', tk0 + j, due) .. A[2 + nk + j]\n"            \
    "  local o = old[j]\n"                                                                  \
    "  if o then local tok, att, od = parse(o) nl = nl + 1 lz[nl] = lm(k, tok) lk[nl] = k " \
    "ld[nl] = od end\n"                                                                    \
    "  local b = floor(due / W)\n"                                                          \
    "  if b ~= cb then nr = nr + 1 rb[nr] = b rs[nr] = j cb = b end\n"                      \
    "  if due < h and (not first or due < first) then first = due end\n"                    \
    "end\n"                                                                                 \
    "rs[nr + 1] = nk + 1\n"                                                                 \
    /* a replaced task leaves its lease, or else its bucket */                               \
    "if nl > 0 then local ls, lr, n2 = call('ZMSCORE', KEYS[2], unpack(lz, 1, nl)), {}, 0\n" \
    "  for x = 1, nl do\n"                                                                   \
    "    if ls[x] then n2 = n2 + 1 lr[n2] = lz[x] else bdel(lk[x], ld[x]) end end\n"       \
    "  if n2 > 0 then call('ZREM', KEYS[2], unpack(lr, 1, n2)) end end\n"                  \
    "if big then hs[2 * nk + 1] = big hs[2 * nk + 2] = '' end\n"                             \
    "call('HSET', KEYS[3], unpack(hs))\n"                                                   \
    "if big then call('HDEL', KEYS[3], big) end\n"                                           \
    "local idx, c, k1 = {}, 0, KEYS[1] .. ':'\n"                                            \
    "for x = 1, nr do local s, lo, hi = fmt('%d', rb[x]), rs[x], rs[x + 1] - 1\n"           \
    "  if call('RPUSH', k1 .. s, unpack(A, 2 + lo, 2 + hi)) == hi - lo + 1 then\n"          \
    "    idx[c + 1] = s idx[c + 2] = s c = c + 2 end\n"                                      \
    "end\n"                                                                                 \
    "if c > 0 then call('ZADD', KEYS[1], unpack(idx, 1, c)) end\n"                           \
    "if first then call('PUBLISH', A[1], first) end\n"                                      \
    "return #A\n"

/* ARGV: key, delay_ms, channel, marker key, marker ms -> due ms, or -1 (absent).
 * The marker (the call's request id, client.c: a retry after a lost reply
 * sends the same) holds the due time of a move already made by this call:
 * the retry answers it and moves nothing again. Set only by a move that
 * happened, for marker ms; in the partition's slot, read once stable(). */
#define MOVE_LUA                                                                           \
    PRELUDE BUCKETS "if not stable() then return redis.error_reply(TRY) end\n"             \
    "local m = redis.call('GET', ARGV[4]) if m then return tonumber(m) end\n"              \
    "local v = redis.call('HGET', KEYS[3], ARGV[1])\n"                                     \
    "if not v then return -1 end\n"                                                        \
    "local tok, att, due, pos = parse(v)\n"                                                \
    "unarm(ARGV[1], tok, due)\n"                                                           \
    "due = due_at(now_us(), tonumber(ARGV[2]))\n"                                          \
    "redis.call('HSET', KEYS[3], ARGV[1], rec(arm(), 0, due, string.sub(v, pos)))\n"       \
    "badd(ARGV[1], due)\n"                                                                 \
    "if due < hold() then redis.call('PUBLISH', ARGV[3], due) end\n"                       \
    "redis.call('SET', ARGV[4], I(due), 'PX', ARGV[5])\n"                                  \
    "return due\n"

/* ARGV: key, marker key, marker ms -> 0, or -1 (absent). The marker, as
 * MOVE's: a removal this call made already answers 0 again on a retry. */
#define REMOVE_LUA                                                                         \
    PRELUDE BUCKETS "if not stable() then return redis.error_reply(TRY) end\n"             \
    "if redis.call('EXISTS', ARGV[2]) == 1 then return 0 end\n"                            \
    "local v = redis.call('HGET', KEYS[3], ARGV[1])\n"                                     \
    "if not v then return -1 end\n"                                                        \
    "local tok, att, due = parse(v)\n"                                                     \
    "redis.call('HDEL', KEYS[3], ARGV[1]) unarm(ARGV[1], tok, due)\n"                      \
    "redis.call('SET', ARGV[2], '0', 'PX', ARGV[3])\n"                                     \
    "return 0\n"

/* ARGV: window_ms, n, lease_ms, max_bytes, hold_ms (absent: lease_ms),
 * max_attempts (0: none), share (absent or 0: none), taken ("bucket:count
 * ..."), shares_only ('1' or absent), zone_ms (absent: window_ms)
 * -> {now_us, recovered, key1, record1, key2, record2, ..., earliest}
 * (record: the task's as it is in the task HASH, "token attempt due "
 * payload, claim.c parses it; attempt: the starts counted so far, the
 * start of this lease makes it attempt + 1; earliest: the earliest lease end left in the partition, ms,
 * or -1 when nothing is leased: the claimer claims again then, to recover
 * it should it run out)
 * First moves up to n expired leases back to their bucket (their due time
 * kept), then leases the buckets that begin by now + window: it walks the
 * index from its lowest bucket (8 index members per read), takes each
 * bucket whole (LRANGE, DEL), drops it from the index, and stops once it
 * has n tasks or more (n bounds where it stops, not the reply: at most one
 * bucket over), or mid-bucket once the records pass max_bytes (the rest
 * stays: LTRIM). A bucket that begins window/4 or more ahead is split
 * instead once n are taken (LTRIM): its tasks all go to the worker's wheel,
 * which orders them, and a dense one (a burst set with one delay, or one
 * partition at high density) would otherwise make one long call that
 * holds single-threaded Redis while STARTs wait. So a task may be leased
 * up to one bucket (W) past the window, every bucket a full claim leaves
 * untouched is due after the last task it took (a claim that reaches the
 * share zone, below, is never full), and the tasks of one
 * bucket come in the order they were put there: the worker orders what it
 * claims by due time (claim.c; only what is due within window/4, taken
 * from whole buckets, needs that order before the wheel). A claimed task's
 * lease is a hold: it ends hold_ms after the later of now and the task's
 * due time, so a task whose holder died (or whose claim's answer was lost)
 * is free again about hold_ms after it was due; START lengthens it to
 * lease_ms when the task starts. Per slice of up to 1000 keys of a bucket,
 * each command takes what it leases at once: HMGET of the records (each
 * holds its token, taken when it was armed: the record is not written),
 * lease ZADD of the members key:token; then the bucket's LTRIM or DEL: not HGET and ZADD per
 * task. Slices, because Lua's unpack
 * passes at most ~8000 values to a command, and a bucket holds whatever was
 * set due within its W ms (a burst of tasks set with one delay).
 * A recovered lease whose attempts are spent (its start mark folded in:
 * DEAD) goes to the dead letters instead of its bucket; the reply's
 * recovered is then {recovered, key1, attempt1, ...} of those (claim.c).
 * With a share (claim.c: a worker's executors' pace over W), a claim that
 * took every bucket of its window goes on to the buckets that begin up to
 * zone_ms past it and takes of each what this worker's share has room
 * for (share less what taken says it took there: LTRIM keeps the rest), in
 * all fewer than n (so such a claim is never full). shares_only ('1'):
 * only that (a worker at its fill): no recovery, the window's buckets and
 * the hold untouched. */
#define CLAIM_LUA                                                                           \
    PRELUDE BUCKETS DEAD "if not stable() then return redis.error_reply(TRY) end\n"         \
    /* paused (inspect.c: {q:p}:pause): nothing claimed, nothing recovered */               \
    "if redis.call('EXISTS', string.sub(KEYS[1], 1, -3) .. ':pause') == 1 then "            \
    "return {now_us(), 0, -1} end\n"                                                        \
    "local now = now_us() local now_ms = math.floor(now / 1000)\n"                          \
    "local n = tonumber(ARGV[2])\n"                                                         \
    "local maxb = tonumber(ARGV[4]) local recovered = 0\n"                                  \
    /* hms: a claimed task's hold (hold() reads the window end) */                          \
    "local hms = tonumber(ARGV[5] or ARGV[3])\n"                                            \
    /* a worker at its fill (shares only, below) recovers nothing: the others do */         \
    "local only = ARGV[9] == '1'\n"                                                          \
    "local exp = only and {} or redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', "              \
    "now_ms, 'WITHSCORES', 'LIMIT', 0, n)\n"                                                 \
    "local qmax, dl = tonumber(ARGV[6] or '0'), {}\n"                                       \
    /* a member whose token its record does not hold is stale (above): */                  \
    /* dropped, the task untouched */                                                      \
    "for i = 1, #exp, 2 do local k, mt = string.match(exp[i], '^(.*):(%d+)$')\n"           \
    " redis.call('ZREM', KEYS[2], exp[i])\n"                                               \
    " local v = k and redis.call('HGET', KEYS[3], k)\n"                                    \
    " local tok, att, due, pos if v then tok, att, due, pos = parse(v) end\n"              \
    " if v and tok == tonumber(mt) then att = att + started(exp[i + 1])\n"                 \
    "  if spent(att, qmax) then bury(k, att, now_ms, due, 'lease lost', string.sub(v, pos))\n" \
    "   dl[#dl + 1] = k dl[#dl + 1] = att else\n"                                           \
    "  redis.call('HSET', KEYS[3], k, rec(arm(), att, due, string.sub(v, pos)))\n"          \
    "  badd(k, due) recovered = recovered + 1 end end\n"                                    \
    "end\n"                                                                                 \
    "local hi = now_ms + tonumber(ARGV[1]) local hb = math.floor(hi / W)\n"                 \
    /* a bucket's keys go to HMGET, HSET and ZADD in slices: Lua's unpack */                \
    /* gives at most ~8000 values, and a bucket may hold any number of tasks */             \
    "local SLICE = 1000\n"                                                                  \
    /* a bucket that begins window/4 or more ahead may be split at n (above) */             \
    "local split_at = now_ms + math.floor(tonumber(ARGV[1]) / 4)\n"                        \
    "local out, no = {now, #dl > 0 and {recovered, unpack(dl)} or recovered}, 2\n"          \
    "local bytes, left, from, done = 0, n, '-inf', false\n"                                 \
    "local match, sub, fmt = string.match, string.sub, string.format\n"                     \
    /* lease keys m[1..card] of a bucket: how many it took (done: past max_bytes) */       \
    "local function lease(m, card) local nt = 0\n"                                          \
    " for s = 1, card, SLICE do local e = s + SLICE - 1 if e > card then e = card end\n"    \
    "  local hs, lz, nh, nz = {}, {}, 0, 0\n"                                               \
    "  local vs = redis.call('HMGET', KEYS[3], unpack(m, s, e))\n"                          \
    "  for j = s, e do local k = m[j]\n"                                                    \
    "   if bytes > maxb then done = true break end\n"                                       \
    "   nt = nt + 1 left = left - 1\n"                                                      \
    "   local v = vs[j - s + 1]\n"                                                          \
    /* the record goes back whole: the worker parses it (fewer Lua strings) */             \
    "   if v then local tk, due = match(v, '^(%d+) %d+ (%d+) ')\n"                          \
    "    due = due + 0\n"                                                                    \
    /* token 0: written by a version that took tokens at claim; one now, */                 \
    /* its digits in place of the 0 */                                                      \
    "    if tk == '0' then tk = fmt('%d', redis.call('INCRBY', KEYS[4], 1)) v = tk .. sub(v, 2)\n" \
    "     hs[nh + 1] = k hs[nh + 2] = v nh = nh + 2 end\n"                                  \
    "    lz[nz + 1] = fmt('%d', (due > now_ms and due or now_ms) + hms)\n"                  \
    "    lz[nz + 2] = k .. ':' .. tk nz = nz + 2\n"                                        \
    "    out[no + 1] = k out[no + 2] = v no = no + 2\n"                                     \
    "    bytes = bytes + #v + #k end\n"                                                     \
    "  end\n"                                                                               \
    "  if nh > 0 then redis.call('HSET', KEYS[3], unpack(hs, 1, nh)) end\n"                 \
    "  if nz > 0 then redis.call('ZADD', KEYS[2], unpack(lz, 1, nz)) end\n"                 \
    "  if done then break end\n"                                                            \
    " end\n"                                                                                \
    " return nt end\n"                                                                      \
    /* the first upto keys of bucket b leased (0: all); the rest left, the */               \
    /* bucket and its index entry dropped once empty; true when it kept some */             \
    "local function take(b, upto) local bk = KEYS[1] .. ':' .. b\n"                         \
    " local m = redis.call('LRANGE', bk, 0, upto - 1) local card = #m\n"                    \
    " local nt = lease(m, card)\n"                                                          \
    /* read up to upto: whether the bucket holds more is not known */                      \
    " if nt == card and (upto == 0 or card < upto) then\n"                                  \
    "  redis.call('DEL', bk) redis.call('ZREM', KEYS[1], b) return false end\n"             \
    " redis.call('LTRIM', bk, nt, -1)\n"                                                    \
    " if redis.call('EXISTS', bk) == 0 then redis.call('ZREM', KEYS[1], b) return false end\n" \
    " return true end\n"                                                                    \
    /* shares only (a worker at its fill, claim.c): nothing of the window */                \
    "while not done and not only do\n"                                                      \
    " local bs = redis.call('ZRANGEBYSCORE', KEYS[1], from, hb, 'LIMIT', 0, 8)\n"           \
    " if #bs == 0 then break end\n"                                                         \
    " for i = 1, #bs do local b = bs[i]\n"                                                  \
    /* upto: the most of the bucket read, all a split one takes (0: all of it) */          \
    "  local upto = tonumber(b) * W >= split_at and left or 0\n"                            \
    "  local kept = take(b, upto)\n"                                                        \
    "  if kept or done or left <= 0 then done = true break end\n"                           \
    " end\n"                                                                                \
    " from = '(' .. bs[#bs]\n"                                                              \
    "end\n"                                                                                 \
    /* the share (claim.c): beyond the window, up to zone_ms past it, a */                  \
    /* bucket gives this worker at most ARGV[7] tasks in all (ARGV[8]: */                    \
    /* "bucket:taken ..." of what it took there already), so that workers */                \
    /* split it; the rest stays for the next claims. Only once the window */                \
    /* is claimed, and fewer than n in all: such a claim is never full. */                  \
    "local share = tonumber(ARGV[7] or '0')\n"                                              \
    "if share > 0 and not done and left > 1 then\n"                                         \
    " local taken = {}\n"                                                                   \
    " for b, c in string.gmatch(ARGV[8] or '', '(%d+):(%d+)') do taken[b] = tonumber(c) end\n" \
    " local hz = math.floor((hi + tonumber(ARGV[10] or ARGV[1])) / W)\n"                    \
    " from = hb + 1\n"                                                                      \
    " while not done do\n"                                                                  \
    "  local bs = redis.call('ZRANGEBYSCORE', KEYS[1], from, hz, 'LIMIT', 0, 8)\n"          \
    "  if #bs == 0 then break end\n"                                                        \
    "  for i = 1, #bs do local room = share - (taken[bs[i]] or 0)\n"                        \
    "   if room > 0 then take(bs[i], math.min(room, left - 1)) end\n"                       \
    "   if done or left <= 1 then done = true break end\n"                                  \
    "  end\n"                                                                               \
    "  from = '(' .. bs[#bs]\n"                                                             \
    " end\n"                                                                                \
    "end\n"                                                                                 \
    "if hi > hold() and not only then redis.call('SET', KEYS[5], hi, 'PX', 2 * tonumber(ARGV[1]) + 1000) end\n" \
    "local e = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '+inf', "                       \
    "'WITHSCORES', 'LIMIT', 0, 1)\n"                                                        \
    "out[no + 1] = e[2] and tonumber(e[2]) or -1\n"                                         \
    "return out\n"

/* START: the gate of every delivery, and the worker's batched
 * acknowledgements (ack.c), for one or more partitions at once: one
 * partition group in a Redis Cluster (its lease ZSET and task HASH declared
 * as KEYS: one slot), on a standalone server the groups of any partitions
 * (no keys declared: one call per executor round instead of one per
 * partition). The groups name their keys in ARGV either way. The worker
 * sends starts (an executor's round) and acknowledgements (the
 * acknowledger's) in separate calls; the script takes both in one group.
 * ARGV: lease_ms, ahead_us, then per group: its lease key, its task key,
 * nack, nstart, until (ms: the earliest lease end among the group's
 * acknowledgements as the worker knows it, 0 when it has none), nack
 * lease member (key:token), key pairs to acknowledge, nstart lease member,
 * due pairs to start (the due time the claim returned: a token names one
 * arming, whose due time never changes)
 * -> {now_us, then per group: r per acknowledgement (1 deleted, 0 stale:
 *    not our lease any more, nothing deleted; 2 absent: deleted already, by
 *    a lost earlier try of this acknowledgement or by someone else, ack.c),
 *    then s, a per start:
 *    s = 1 started (a = 0; the lease lengthened to max(due, now) + lease_ms
 *    and marked started, + 0.5 ms: the record is not written, and a start
 *    redone after a lost reply finds the mark, so the attempt counts once:
 *    the claim's attempt + 1, which the worker knows);
 *    s = 0 not due within ahead_us by the server's clock (a = us until due);
 *    s = -1 lease gone: its member key:token is not in the lease set (a set
 *    or move, a claim that recovered it, FAIL or RELEASE removed it with
 *    the token; removed, acknowledged) (a = 0)}. A start not yet due
 *    answers 0 without looking: the worker asks again when it is.
 * A lease that has run out but is still this token's (no claim has recovered
 * it yet) starts like a running one: no one else was given the task, so the
 * start keeps one holder at a time; a worker that was slow to start a held
 * task loses it only to a claim that took it back first.
 * A start is granted once now + ahead_us >= due: the worker then waits
 * due - now (from the reply's arrival, on its monotonic clock) before it
 * runs the task, so it never runs early by the server's clock (redis.c).
 * The lease it grants ends at max(due, now) + lease_ms (ms): the worker
 * computes the same from the reply's clock and its due time, and calls
 * execute only while that end surely lies ahead on the server's clock
 * (fencing: execute.c).
 * A start reads and writes no record: its lease member key:token is the
 * check. Its write is ZADD XX GT CH of the lengthened end + 0.5: it marks
 * a claim's hold (which ends before: hold_ms <= lease_ms, and the server's
 * clock has moved on since the claim) and lengthens a start's mark only
 * forwards (a redone start), never adding a member. When it changed fewer
 * members than it started, one ZMSCORE reads them, and a start whose
 * member is absent answers -1: a redone start leaves its mark as it was,
 * while an absent member is a lease gone (above), or one a failover lost
 * with a claim's writes (the record kept the token set gave it; the task
 * is in its bucket again), which must not run without a lease.
 * An acknowledgement deletes only while its lease runs. The worker knows
 * a lower bound of each lease's end (the end its START's answer granted; a
 * redone start only lengthened it), so when the group's until lies ahead
 * of TIME every member of the group that exists names a running lease: one
 * ZREM of the members, and when it removed them all (the common case),
 * one HDEL of the keys (a member means its record holds that token: the
 * top of this file). When it removed fewer, one HMGET tells which records
 * hold the acknowledged token (those are deleted: their members were
 * there, or a failover lost them, below) from the stale and the absent.
 * When until is not ahead (an acknowledgement delayed past a lease's end:
 * rare) the members are read first (ZMSCORE, with the records' HMGET), and
 * those that ended delete nothing. Should a failover lose a START's
 * write, until may lie past the hold left in the lease; a matching token
 * still means no claim took the task back, no one else holds it, and the
 * acknowledgement deletes it. The leases' scores come back as doubles that
 * Redis formats with printf and Lua parses back: the read costs more than
 * the deletes.
 * Each command takes the group's tasks at once: one ZREM and one HDEL for
 * the acknowledged (with [HMGET] [ZMSCORE] as above), one ZADD for the
 * started, whatever their number. An acknowledgement and a start of one
 * key in one group cannot both name the current lease (the worker
 * acknowledges a lease only after its START answered), so at most one of
 * them acts on it. Numbers go to Redis as strings made by
 * string.format (not Lua's '%.14g'), strings become numbers by arithmetic
 * (the top of this file). */
#define START_LUA                                                                          \
    "local call, unpack, match, floor, fmt = redis.call, unpack, string.match, math.floor, string.format\n" \
    "local t = call('TIME') local now = t[1] * 1000000 + t[2]\n"                           \
    "local now_ms = floor(now / 1000) local L = ARGV[1] + 0\n"                             \
    "local ahead = ARGV[2] + 0 local out, o, i = {now}, 1, 3\n"                            \
    "while i <= #ARGV do local LK, TK = ARGV[i], ARGV[i + 1]\n"                            \
    "  local na, ns, U = ARGV[i + 2] + 0, ARGV[i + 3] + 0, ARGV[i + 4] * 1000 i = i + 5\n" \
    "  if na > 0 then local ms, ks = {}, {}\n"                                             \
    "    for j = 1, na do ms[j] = ARGV[i] ks[j] = ARGV[i + 1] i = i + 2 end\n"             \
    /* every lease surely runs (until ahead): the members out at once, and */              \
    /* when all were there, every record is this lease's */                                \
    "    if U > now and call('ZREM', LK, unpack(ms, 1, na)) == na then\n"                  \
    "      call('HDEL', TK, unpack(ks, 1, na)) for j = 1, na do o = o + 1 out[o] = 1 end\n" \
    "    else local vs = call('HMGET', TK, unpack(ks, 1, na))\n"                           \
    /* the leases are read only when one may have ended (until not ahead) */               \
    "      local ls = U <= now and call('ZMSCORE', LK, unpack(ms, 1, na))\n"               \
    "      local del, dm, nd = {}, {}, 0\n"                                                \
    /* the record's token against the member's, as the decimal strings both */             \
    /* sides write */                                                                      \
    "      for j = 1, na do local r, v = 0, vs[j]\n"                                       \
    "        if v and (not ls or ls[j] and ls[j] * 1000 > now) and\n"                      \
    "          match(v, '^%d+') == string.sub(ms[j], #ks[j] + 2) then\n"                   \
    "          nd = nd + 1 del[nd] = ks[j] dm[nd] = ms[j] r = 1 elseif not v then r = 2 end\n" \
    "        o = o + 1 out[o] = r\n"                                                       \
    "      end\n"                                                                          \
    "      if nd > 0 then call('HDEL', TK, unpack(del, 1, nd))\n"                          \
    "        if ls then call('ZREM', LK, unpack(dm, 1, nd)) end end\n"                     \
    "    end\n"                                                                            \
    "  end\n"                                                                              \
    "  local lz, nz, at = {}, 0, {}\n"                                                     \
    "  for j = 1, ns do local due, s, a = ARGV[i + 1] + 0, 1, 0\n"                         \
    "    if now + ahead < due * 1000 then s = 0 a = due * 1000 - now\n"                    \
    "    else lz[nz + 1] = fmt('%d.5', (due > now_ms and due or now_ms) + L)\n"            \
    "      lz[nz + 2] = ARGV[i] nz = nz + 2 at[nz / 2] = o + 1 end\n"                      \
    "    out[o + 1] = s out[o + 2] = a o = o + 2 i = i + 2\n"                              \
    "  end\n"                                                                              \
    /* fewer changed than started: a redone start's mark, or a lease gone */               \
    /* (another token's now, removed, acknowledged, or lost by a failover) */              \
    "  if nz > 0 and call('ZADD', LK, 'XX', 'GT', 'CH', unpack(lz, 1, nz)) < nz / 2 then\n" \
    "    local gk = {} for x = 1, nz / 2 do gk[x] = lz[2 * x] end\n"                       \
    "    local ls = call('ZMSCORE', LK, unpack(gk))\n"                                     \
    "    for x = 1, nz / 2 do if not ls[x] then out[at[x]] = -1 out[at[x] + 1] = 0 end end\n" \
    "  end\n"                                                                              \
    "end\n"                                                                                \
    "return out\n"

/* ARGV: key, token, retry_base_ms, retry_max_ms, channel, max_attempts, error
 * text -> 1 rescheduled, 0 stale, 2 moved to the dead letters (its attempts
 * spent: DEAD) */
#define FAIL_LUA                                                                           \
    PRELUDE BUCKETS DEAD "local v = redis.call('HGET', KEYS[3], ARGV[1])\n"                \
    "if not v then return 0 end\n"                                                         \
    "local tok, att, due, pos = parse(v) local now = now_us()\n"                           \
    "local ls = held(ARGV[1], tok, tonumber(ARGV[2]), now)\n"                               \
    "if not ls then return 0 end\n"                                                         \
    "if not stable() then return redis.error_reply(TRY) end\n"                             \
    /* the attempt of this lease: its start mark folded in (DEAD counts it) */             \
    "att = att + started(ls)\n"                                                             \
    "if spent(att, tonumber(ARGV[6] or '0')) then redis.call('ZREM', KEYS[2], lm(ARGV[1], tok))\n" \
    "  bury(ARGV[1], att, math.floor(now / 1000), due, ARGV[7] or '', string.sub(v, pos))\n" \
    "  return 2 end\n"                                                                     \
    "local d = tonumber(ARGV[3]) * 2 ^ math.max(att % M32 - 1, 0)\n"                       \
    "if d > tonumber(ARGV[4]) then d = tonumber(ARGV[4]) end\n"                            \
    "due = due_at(now, d)\n"                                                               \
    "redis.call('HSET', KEYS[3], ARGV[1], rec(arm(), att, due, string.sub(v, pos)))\n"     \
    "redis.call('ZREM', KEYS[2], lm(ARGV[1], tok)) badd(ARGV[1], due)\n"                   \
    "if due < hold() then redis.call('PUBLISH', ARGV[5], due) end\n"                       \
    "return 1\n"

/* ARGV: key, token, channel -> 1 released (due again at its due time), 0 stale */
#define RELEASE_LUA                                                                        \
    PRELUDE BUCKETS "local v = redis.call('HGET', KEYS[3], ARGV[1])\n"                     \
    "if not v then return 0 end\n"                                                         \
    "local tok, att, due, pos = parse(v)\n"                                                \
    "if tok ~= tonumber(ARGV[2]) then return 0 end\n"                                      \
    "if not stable() then return redis.error_reply(TRY) end\n"                             \
    /* no member: a failover lost the claim's writes, the task is in its bucket */          \
    "local ls = redis.call('ZSCORE', KEYS[2], lm(ARGV[1], tok))\n"                          \
    "if not ls then return 0 end\n"                                                         \
    "att = att + started(ls)\n"                                                             \
    "redis.call('HSET', KEYS[3], ARGV[1], rec(arm(), att, due, string.sub(v, pos)))\n"     \
    "redis.call('ZREM', KEYS[2], lm(ARGV[1], tok)) badd(ARGV[1], due)\n"                   \
    "if due <= hold() then redis.call('PUBLISH', ARGV[3], due) end\n"                      \
    "return 1\n"

/* ---- the dead letters' and the schedules' scripts (dead.c, schedule.c) ---- */

/* A task record written whole by one script (SETX, requeue, a schedule's
 * occurrence): the task HASH is created hashtable-encoded as SET does. */
#define PUT                                                                                \
    "local function put(k, v) if redis.call('EXISTS', KEYS[3]) == 0 then "                  \
    "local b = string.rep('-', 513) redis.call('HSET', KEYS[3], k, v, b, '') "              \
    "redis.call('HDEL', KEYS[3], b) else redis.call('HSET', KEYS[3], k, v) end end\n"

/* tw_redis_set_opts: one task whose record starts with the attempt field
 * ARGV[5] (a per-task max_attempts above bit 32). ARGV: key, payload,
 * delay_ms, channel, attempt field -> due ms. As SET of one task. */
#define SETX_LUA                                                                           \
    PRELUDE BUCKETS PUT "if not stable() then return redis.error_reply(TRY) end\n"         \
    "local k = ARGV[1] local o = redis.call('HGET', KEYS[3], k)\n"                         \
    "if o then local tok, att, od = parse(o)\n"                                            \
    "  unarm(k, tok, od) end\n"                                                            \
    "local due = due_at(now_us(), tonumber(ARGV[3]))\n"                                    \
    "put(k, rec(arm(), tonumber(ARGV[5]), due, ARGV[2])) badd(k, due)\n"                   \
    "if due < hold() then redis.call('PUBLISH', ARGV[4], due) end\n"                       \
    "return due\n"

/* A dead letter back into the queue, due at now + d, its attempts reset (a
 * per-task max_attempts kept); not while a live task holds the key (-2),
 * -1 when there is no such dead letter; else its new due time. */
#define REQUEUE                                                                            \
    "local DK = string.sub(KEYS[3], 1, -5) .. 'dead'\n"                                    \
    "local function requeue(k, now, d) local v = redis.call('HGET', DK, k)\n"              \
    "  if not v then return -1 end\n"                                                      \
    "  if redis.call('HEXISTS', KEYS[3], k) == 1 then return -2 end\n"                     \
    "  local att, t, due, el, pos = string.match(v, '^(%d+) (%d+) (%d+) (%d+) ()')\n"      \
    "  local nd = due_at(now, d) local a0 = math.floor(tonumber(att) / 4294967296) * 4294967296\n" \
    "  put(k, rec(arm(), a0, nd, string.sub(v, pos + tonumber(el)))) redis.call('HDEL', DK, k)\n" \
    "  badd(k, nd) return nd end\n"

/* ARGV: key, delay_ms, channel -> due ms, -1 (no dead letter), -2 (a live
 * task holds the key: the dead letter stays). */
#define REQUEUE_LUA                                                                        \
    PRELUDE BUCKETS PUT REQUEUE "if not stable() then return redis.error_reply(TRY) end\n" \
    "local due = requeue(ARGV[1], now_us(), tonumber(ARGV[2]))\n"                          \
    "if due >= 0 and due < hold() then redis.call('PUBLISH', ARGV[3], due) end\n"          \
    "return due\n"

/* ARGV: HSCAN cursor, count, delay_ms, channel -> {next cursor, requeued,
 * kept (a live task holds the key)}: one HSCAN step of the partition's dead
 * letters (the caller iterates to cursor "0"). */
#define REQUEUE_ALL_LUA                                                                    \
    PRELUDE BUCKETS PUT REQUEUE "if not stable() then return redis.error_reply(TRY) end\n" \
    "local now, d = now_us(), tonumber(ARGV[3])\n"                                         \
    "local sc = redis.call('HSCAN', DK, ARGV[1], 'COUNT', ARGV[2])\n"                      \
    "local moved, kept, first, f = 0, 0, nil, sc[2]\n"                                     \
    "for i = 1, #f, 2 do local due = requeue(f[i], now, d)\n"                              \
    "  if due >= 0 then moved = moved + 1 if not first or due < first then first = due end\n" \
    "  elseif due == -2 then kept = kept + 1 end end\n"                                    \
    "if first and first < hold() then redis.call('PUBLISH', ARGV[4], first) end\n"         \
    "return {sc[1], moved, kept}\n"

/* Schedules (schedule.c). {q:p}:sched HASH key -> "next policy anchor
 * speclen " .. spec .. payload, {q:p}:sched:n ZSET key -> next (ms, the
 * next occurrence not yet made a task). spec: "every N A" (every N ms from
 * A) or "cron " .. a 5-field expression (universal time). */
#define SCHED                                                                              \
    "local SK = string.sub(KEYS[3], 1, -5) .. 'sched' local SN = SK .. ':n'\n"             \
    "local function sparse(o) local nx, pol, an, sl, pos = "                               \
    "string.match(o, '^(%d+) (%d+) (%d+) (%d+) ()') sl = tonumber(sl) "                    \
    "return tonumber(nx), tonumber(pol), tonumber(an), string.sub(o, pos, pos + sl - 1), "  \
    "string.sub(o, pos + sl) end\n"                                                        \
    "local function swrite(k, nx, pol, an, spec, p) redis.call('HSET', SK, k, "            \
    "string.format('%d %d %d %d ', nx, pol, an, #spec) .. spec .. p) "                     \
    "redis.call('ZADD', SN, string.format('%d', nx), k) end\n"

/* ARGV: key, spec, policy, payload, c1, c2 (a cron spec's first two
 * occurrences after the caller's TIME), channel -> next ms. An upsert with
 * the same spec keeps the next occurrence (and an every-schedule's anchor);
 * another spec starts anew: the first occurrence at or after now (anchor 0:
 * now). "sched" is published on the partition's channel: the workers'
 * schedule threads, which ask a partition again only when its next
 * occurrence nears, ask it now (schedule.c). */
#define SCHED_SET_LUA                                                                      \
    PRELUDE BUCKETS SCHED "if not stable() then return redis.error_reply(TRY) end\n"       \
    "local k, spec = ARGV[1], ARGV[2]\n"                                     \
    "local now = math.floor((now_us() + 999) / 1000) local nx, an\n"                       \
    "local o = redis.call('HGET', SK, k)\n"                                                \
    "if o then local onx, opol, oan, ospec = sparse(o)\n"                                  \
    "  if ospec == spec then nx = onx an = oan end end\n"                                  \
    "if not nx then local ev, a = string.match(spec, '^every (%d+) (%d+)$')\n"             \
    "  if ev then ev = tonumber(ev) an = tonumber(a) if an == 0 then an = now end\n"       \
    "    if an >= now then nx = an else nx = an + math.ceil((now - an) / ev) * ev end\n"   \
    "  else an = 0 nx = tonumber(ARGV[5]) if nx < now then nx = tonumber(ARGV[6]) end end\n" \
    "end\n"                                                                                \
    "swrite(k, nx, tonumber(ARGV[3]), an, spec, ARGV[4])\n"                                \
    "if ARGV[7] then redis.call('PUBLISH', ARGV[7], 'sched') end\n"                          \
    "return nx\n"

/* ARGV: key -> 1 removed, 0 absent. */
#define SCHED_DEL_LUA                                                                      \
    PRELUDE BUCKETS SCHED "if not stable() then return redis.error_reply(TRY) end\n"       \
    "redis.call('ZREM', SN, ARGV[1]) return redis.call('HDEL', SK, ARGV[1])\n"

/* ARGV: ahead_ms, n -> {now_ms, later, key1, record1, ...}: the schedules
 * whose next occurrence is due by now + ahead, earliest first, n at most;
 * later: the first next occurrence after now + ahead (-1: none), when the
 * schedule thread asks again (schedule.c). */
#define SCHED_DUE_LUA                                                                      \
    PRELUDE BUCKETS SCHED "if not stable() then return redis.error_reply(TRY) end\n"       \
    "local now = math.floor(now_us() / 1000) local lim = now + tonumber(ARGV[1])\n"        \
    "local ks = redis.call('ZRANGEBYSCORE', SN, '-inf', lim, "                              \
    "'LIMIT', 0, tonumber(ARGV[2]))\n"                                                     \
    "local nx = redis.call('ZRANGEBYSCORE', SN, '(' .. lim, '+inf', 'WITHSCORES', "        \
    "'LIMIT', 0, 1)\n"                                                                     \
    "local out = {now, nx[2] and tonumber(nx[2]) or -1}\n"                                 \
    "if #ks > 0 then local vs = redis.call('HMGET', SK, unpack(ks))\n"                     \
    "  for i = 1, #ks do if vs[i] then out[#out + 1] = ks[i] out[#out + 1] = vs[i]\n"      \
    "    else redis.call('ZREM', SN, ks[i]) end end end\n"                                 \
    "return out\n"

/* ARGV: key, expected next, spec, grace_ms, channel, then the occurrences
 * o1 (= expected next) < o2 < ... (the caller's list; for skip and once it
 * leaves out what lies between o1 and the present)
 * -> tasks made, or -1 (the schedule changed or another worker fired it:
 * nothing done). Compare-and-set on next: of the workers that read the same
 * next, one fires. Each listed occurrence up to now + grace becomes the task
 * key .. '@' .. o, due at o, in the schedule's partition (unless that task
 * exists already); one more than grace past now is missed and follows the
 * policy (0 skip, 1 once: the first missed only, 2 every one). The first
 * occurrence not taken becomes next (the last listed at least). */
#define SCHED_FIRE_LUA                                                                     \
    PRELUDE BUCKETS PUT SCHED "if not stable() then return redis.error_reply(TRY) end\n"   \
    "local k = ARGV[1] local o = redis.call('HGET', SK, k) if not o then return -1 end\n"  \
    "local nx, pol, an, spec, pl = sparse(o)\n"                                            \
    "if nx ~= tonumber(ARGV[2]) or spec ~= ARGV[3] then return -1 end\n"                   \
    "local now = math.floor(now_us() / 1000) local g = tonumber(ARGV[4])\n"                \
    "local made, first, once, i = 0, nil, false, 6\n"                                      \
    "while i < #ARGV do local t = tonumber(ARGV[i])\n"                                     \
    "  if t > now + g then break end\n"                                                    \
    "  local make = true\n"                                                                \
    "  if t < now - g then if pol == 0 then make = false\n"                                \
    "    elseif pol == 1 then make = not once once = true end end\n"                       \
    "  local dk = k .. '@' .. ARGV[i]\n"                                                   \
    "  if make and redis.call('HEXISTS', KEYS[3], dk) == 0 then\n"                         \
    "    put(dk, rec(arm(), 0, t, pl)) badd(dk, t) made = made + 1\n"                      \
    "    if not first then first = t end end\n"                                            \
    "  i = i + 1\n"                                                                        \
    "end\n"                                                                                \
    "swrite(k, tonumber(ARGV[i]), pol, an, spec, pl)\n"                                    \
    "if first and first < hold() then redis.call('PUBLISH', ARGV[5], first) end\n"         \
    "return made\n"

/* First lines: Redis 7 script flags (a shebang; why: redis.c, "Memory
 * pressure"). Without one a script runs in Redis's compatibility mode,
 * where at maxmemory its first write that may grow memory fails, unless
 * another write came before it: CLAIM fails at its first lease ZADD (a
 * full queue never drains), while a SET that replaces a task gets through.
 * With one, Redis decides before the script runs: DENY_OOM refuses it at maxmemory (OOM,
 * nothing written: set and move, which add work), ALLOW_OOM runs it
 * whatever the memory (what frees memory or keeps it flat: claim, start
 * with the acknowledgements, fail, release, remove). Declaring flags also
 * makes Redis 7 check that every key a script touches is in one slot (no
 * allow-cross-slot-keys): the buckets share the declared keys' slot, and a
 * cluster START call declares the keys of its one partition; a standalone
 * server checks no slots (START declares no keys there). */
#define DENY_OOM "#!lua\n"
#define ALLOW_OOM "#!lua flags=allow-oom\n"

/* CLAIM with the dead letters' branch is longer than the 4095 bytes C99
 * promises every compiler takes in one string literal; gcc and clang take
 * any length. */
#pragma GCC diagnostic ignored "-Woverlength-strings"
const char *const tw_rr_scripts[TW_RR_NSCRIPTS] = {
    [TW_RR_SET] = DENY_OOM SET_LUA,          [TW_RR_MOVE] = DENY_OOM MOVE_LUA,
    [TW_RR_REMOVE] = ALLOW_OOM REMOVE_LUA,   [TW_RR_CLAIM] = ALLOW_OOM CLAIM_LUA,
    [TW_RR_START] = ALLOW_OOM START_LUA,     [TW_RR_FAIL] = ALLOW_OOM FAIL_LUA,
    [TW_RR_RELEASE] = ALLOW_OOM RELEASE_LUA,
    [TW_RR_SETX] = DENY_OOM SETX_LUA,         [TW_RR_REQUEUE] = DENY_OOM REQUEUE_LUA,
    [TW_RR_REQUEUE_ALL] = DENY_OOM REQUEUE_ALL_LUA,
    [TW_RR_SCHED_SET] = DENY_OOM SCHED_SET_LUA, [TW_RR_SCHED_DEL] = ALLOW_OOM SCHED_DEL_LUA,
    [TW_RR_SCHED_DUE] = ALLOW_OOM SCHED_DUE_LUA, [TW_RR_SCHED_FIRE] = DENY_OOM SCHED_FIRE_LUA,
};
