/* SPDX-License-Identifier: MIT */
/* twheel keyed layer: tw_tasks, go-zero's key -> task API over the core wheel.
 *
 * Threads and locks: none. An instance belongs to one thread at a time;
 * tw_runner (src/runner) is the thread-safe service around it.
 *
 * Layout
 * ------
 *   entries  a pool of 48-byte entries in chunks of TW_TASKS_CHUNK, addressed
 *            by a 32-bit index (chunk = idx / CHUNK). Chunks never move, so the
 *            wheel node embedded in each entry can stay linked in the wheel.
 *            Free entries form a LIFO list through the entry itself. An entry
 *            holds its key: an integer, a string of up to KEY_INLINE bytes in
 *            place (zero-padded, its length in the last byte: a lookup builds
 *            that form once, see tasks_inline_form, then compares, copies and
 *            hashes two words), or a pointer to a block (u16 length, then
 *            the bytes) for a longer string.
 *            After a chunk's entries come their home words (4 bytes each:
 *            the key's hash >> 32), all that a rehash reads of a task (see
 *            tw_tasks_rehash_): 52 bytes of pool per task.
 *   index    open addressing with linear probing over 32-bit slots:
 *                0 = empty, 1 = tombstone,
 *                else (tag << bits) | (entry index + 2),
 *            where `bits` is just wide enough for the pool and the tag is the
 *            hash's low 32 bits above `bits` (12 bits at 10^6 tasks). A probe
 *            compares tags first and touches an entry only on a tag match
 *            (false match rate 2^-(32-bits)), so a miss costs no entry load.
 *            Slot positions come from the hash's high 32 bits by fast range
 *            reduction, so the capacity need not be a power of two. The
 *            index is rehashed past a load of 0.75, counting tombstones (near
 *            0.8 an insert scans 13 slots on average for the empty one), to
 *            a load of 0.4 (a shrink: 0.55): 5.3..10 bytes per task. Growing
 *            to 0.4 rather than 0.55 trades bytes for fewer rehashes of a
 *            fill (see Memory).
 *            Deletion writes a tombstone, or an empty slot (clearing the
 *            tombstones before it too) when the next slot is empty. The
 *            entry field is sized at each rehash for the largest pool the new
 *            index can hold before it grows again, so the pool's growth never
 *            forces a rehash of its own.
 *   wheel    the core wheel holding bare 24-byte nodes (no callback), driven
 *            through its pull interface (tw_wheel_expire_next_node); each due
 *            entry is taken out of the index before execute runs, so execute
 *            sees a table in which its task is gone.
 *   keys     hashed with the instance's seed (config.seed, else
 *            tw_random_seed_: getrandom, /dev/urandom, at worst the clock
 *            and an address): SipHash-1-3 for strings, tw_hash_int for
 *            integers. A call hashes its key once; after that only the
 *            firing of a task hashes it again, to find its slot.
 *
 * Memory: 48 bytes of entry, 4 of home word and 5.3..10 of index a task, so
 * at most 62 (1% more past 39 chunks: the unused tail of each 2 MB group;
 * tests/test_tasks_rules.c holds it under 64), plus the block of a string
 * key longer than 15 bytes, plus, with the default allocator past 195
 * chunks (199,680 tasks), the unfilled rest of the newest 2 MB group of
 * entries (tasks/pool.c). Three of those are bytes traded for speed
 * (bench/README.md, "Bytes per task, and what they buy", measures each
 * against a build without it):
 *  - the home word lets a rehash read it instead of every entry and key:
 *    batched removes and fills from empty are faster, a single set of an
 *    integer key a little slower (one line more written);
 *  - growing the index to a load of 0.4, not 0.55, costs up to 2.5 bytes a
 *    task: a fill rehashes each task 1.3-2 times instead of about 3;
 *  - pool groups past the fourth are huge pages from their first touch,
 *    not collapsed when full (a 2 MB copy each): up to 2 MB not yet filled.
 * With the default allocator an index of TW_BIG_MIN bytes or more and the
 * groups of entries are 2 MB aligned and advised huge (common/bigmem.c), so
 * that the TLB covers them; with config.allocator everything comes from it
 * and nothing is madvised.
 *
 * Memory returned: the index shrinks (rehash) when under 1/8 full. When fewer
 * than a quarter of the pool's entries are live, outside callbacks, the next
 * set, advance or drain moves the live entries above the first
 * ceil(2 * live / CHUNK) chunks into free entries below (cancel + re-arm at
 * the same deadline, one index slot rewritten), and frees the emptied
 * chunks: O(pool + index) after at least pool/2 removals, amortised O(1).
 * Remove itself never compacts: a run of removals (every key, say) would
 * relocate a quarter of its tasks on the way down, step by step, four or
 * five cache misses each; deferred, only what is left when the run ends
 * moves, once. The pool thus holds at most four times the live entries,
 * plus what a run of removals freed since the last set, advance or drain.
 *
 * config.capacity (a hint): the index starts at tasks_cap_for(capacity) slots
 * (a load of 0.55 when that many are pending) with an entry field wide enough
 * for them, and neither shrinking (floor_cap) nor compaction (floor_chunks)
 * goes below it; pool groups the hint will fill are advised huge at once.
 *
 * The keyed calls: a public call checks its key and hashes it once (struct
 * tasks_keyref), checks its delay and works out, once, the absolute deadline
 * (now + delay, saturating) and the slack (the *_slack call's, else delay >>
 * config.slack_shift). A set hands them, as arguments, to tasks_set_at (every
 * set, batched ones too); a move to tasks_arm(), after its lookup. No
 * per-call value passes through the instance. tasks_set_at checks the limits
 * (max_pending, the pool's size) and makes room (index, chunk, key block)
 * before it inserts anything, each step leaving a valid instance if a later
 * one fails, so a failing set changes nothing.
 *
 * Slack and eager re-arm: `not_lazy` (set by tw_tasks_new, never changed)
 * says whether the instance has a slack_shift or config.eager_rearm. A call
 * of the default instance without a slack of its own arms exact and lazy
 * (tw_tasks_set_lazy_at_, tasks_arm with lazy = 1): the core's exact lazy
 * arm, no test. The others test for slack or eager in tasks_arm() and call
 * tw_tasks_arm_other_(): with slack, the core's slack arm; with slack 0, its
 * eager exact arm (a slack arm relocates at once already). So the default
 * path pays one test (of not_lazy) for both. Compaction re-arms a relocated
 * task exactly at its planned tick, which is inside its window (a fresh node:
 * lazy and eager are the same arm there).
 *
 * Re-entrancy: `depth` counts the callbacks running. Everything a callback
 * may do keeps the invariants between two calls of it: the firing loop holds
 * no index position across a callback, and drain detaches its whole batch
 * before the first call. Only compaction (which moves entries) waits for
 * depth 0.
 *
 * Files
 * -----
 *   internal.h  the structs; inline: keys and hashes, the probes, the paths
 *               of set, move, remove and get up to their seams, the arm
 *   tasks.c     this design; new and free
 *   keyed.c     the calls of one key: set, move, remove, get; the set seam
 *   batch.c     the batched keyed calls: a prefetch pipeline
 *   run.c       advance (runs the due tasks) and drain
 *   index.c     the index's rebuilds: grow, widen, shrink
 *   pool.c      entry memory: chunks, and groups of them
 *   compact.c   live entries moved down, emptied chunks freed
 *   stats.c     the figures
 */
#include "tasks/internal.h"
#include "common/random.h"

int tw_tasks_new(struct tw_tasks **out, const struct tw_tasks_config *cfg)
{
    if (!out)
        return TW_EINVAL;
    *out = NULL;
    if (!cfg || !cfg->execute ||
        (cfg->key_kind != TW_TASKS_KEY_BYTES && cfg->key_kind != TW_TASKS_KEY_INT) ||
        (cfg->allocator && !cfg->allocator->fn) || cfg->slack_shift > TW_TASKS_SLACK_SHIFT_MAX)
        return TW_EINVAL;
    struct tw_tasks *t = tw_mem_new_(cfg->allocator, sizeof *t, offsetof(struct tw_tasks, alloc));
    if (!t)
        return TW_ENOMEM;
    t->user_alloc = cfg->allocator != NULL;
    t->bytes = sizeof *t;
    tw_wheel_init(&t->wheel, cfg->now);
    t->execute = cfg->execute;
    t->ctx = cfg->ctx;
    t->int_keys = cfg->key_kind == TW_TASKS_KEY_INT;
    t->max_pending = cfg->max_pending;
    t->slack_shift = cfg->slack_shift;
    t->eager = cfg->eager_rearm != 0;
    t->not_lazy = cfg->slack_shift != 0 || t->eager;
    uint64_t seed[2] = {cfg->seed[0], cfg->seed[1]};
    if (!seed[0] && !seed[1])
        tw_random_seed_(seed);
    t->k0 = seed[0];
    t->k1 = seed[1];
    t->free_head = TASKS_NIL;
    t->bits = 11; /* room for the first two chunks */
    t->floor_cap = TASKS_MIN_CAP;
    if (cfg->capacity) {
        /* Sized so that `capacity` tasks neither grow the index nor widen
         * its entry field (tw_tasks_add_chunk_): bits cover the pool they need. */
        uint64_t want = cfg->capacity < TASKS_MAX_POOL - 1 ? cfg->capacity : TASKS_MAX_POOL - 1;
        uint64_t pool = (want + TASKS_CHUNK - 1) / TASKS_CHUNK * TASKS_CHUNK;
        t->floor_cap = tasks_cap_for(want);
        t->bits = tasks_bits_for(pool > (uint64_t)t->floor_cap * 3 / 4 + TASKS_CHUNK
                                     ? pool
                                     : (uint64_t)t->floor_cap * 3 / 4 + TASKS_CHUNK);
        t->floor_chunks = (uint32_t)(pool / TASKS_CHUNK);
    }
    t->mask = t->bits >= 32 ? UINT32_MAX : (UINT32_C(1) << t->bits) - 1;
    size_t sz = (size_t)t->floor_cap * sizeof *t->slots;
    t->slots = tasks_big(t, NULL, 0, sz);
    if (!t->slots) {
        tw_mem_free_(&t->alloc, t, sizeof *t);
        return TW_ENOMEM;
    }
    if (t->user_alloc || sz < TW_BIG_MIN) /* else a fresh mapping: zero-filled */
        memset(t->slots, 0, sz);
    t->cap = t->floor_cap;
    *out = t;
    return 0;
}

int tw_tasks_free(struct tw_tasks *t)
{
    if (!t)
        return 0;
    if (t->depth) /* inside execute or drain's fn: the caller still uses t */
        return TW_EBUSY;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t s = t->slots[pos];
        if (s > TASKS_SLOT_TOMB)
            tasks_free_key(t, &tasks_entry_at(t, (s & t->mask) - 2)->key);
    }
    tw_tasks_pool_release_(t, 0);
    tasks_mem(t, t->groups, t->groups_cap * sizeof *t->groups, 0);
    tasks_mem(t, t->chunks, t->chunks_cap * sizeof *t->chunks, 0);
    tasks_big(t, t->slots, (size_t)t->cap * sizeof *t->slots, 0);
    tw_mem_free_(&t->alloc, t, sizeof *t);
    return 0;
}
