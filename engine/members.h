/*
 * Group membership over time, for regrouping (GSSP). A worker numbers its
 * pushes with its own clock (0, 1, 2, ...); a group numbers its clocks too,
 * and a fast group's clock runs ahead of a slow one's. A worker's history is
 * a list of segments: from worker clock `start` on (until the next segment's
 * start), its pushes belong to `group`, whose clock is the worker clock plus
 * `offset`. Every worker starts with one segment, {0, its first group, 0}.
 *
 * Moving worker w into group g so that its push of worker clock S is g's
 * clock J appends {S, g, J - S}. Since every aggregator and the coordinator
 * append the same segments, all agree which pushes make up group g's clock c
 * whatever order their partitions progress in: nothing is lost or applied
 * twice across a regroup.
 *
 * A regroup (eng_members_regroup) plans those moves for workers stopped at
 * known clocks: each group that gains workers starts afresh at a clock J
 * past every clock of it anyone ever pushed into, and every worker in it
 * after the regroup, newcomer or not, continues at J (a member that stays is
 * rebased onto J too, or a newcomer would wait for it to catch up).
 *
 * Pure bookkeeping, no locking: one thread owns an eng_members_t.
 */
#ifndef STRATA_ENGINE_MEMBERS_H
#define STRATA_ENGINE_MEMBERS_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

typedef struct eng_segment {
    int64_t start;  /* first worker clock of the segment */
    int64_t offset; /* group clock = worker clock + offset */
    uint32_t group;
} eng_segment_t;

typedef struct eng_members eng_members_t;

/* One appended segment: worker's pushes from `start` on are `group`'s
 * clocks from `group_clock` on. */
typedef struct eng_move {
    uint32_t worker;
    int64_t start;
    uint32_t group;
    int64_t group_clock;
} eng_move_t;

/* group_of[w] is each worker's first group (< groups). */
strata_status_t eng_members_create(uint32_t workers, uint32_t groups,
                                   const uint32_t *group_of,
                                   eng_members_t **members_out);
void eng_members_destroy(eng_members_t *m);

/* From worker clock `start` on, w's pushes are `group`'s clocks from
 * `group_clock` on. start must not precede the last segment's start (an
 * equal one leaves the last segment empty). Errors are logged. */
strata_status_t eng_members_move(eng_members_t *m, uint32_t worker,
                                 int64_t start, uint32_t group,
                                 int64_t group_clock);

/* The worker pushes nothing from its clock `end` on (it left): the clocks of
 * its group it reached are never reused by a regroup. */
void eng_members_retire(eng_members_t *m, uint32_t worker, int64_t end);

/*
 * Plan a regroup and append its segments. frozen_at[w] >= 0: worker w
 * pushes nothing from that clock of its own until the plan is everywhere,
 * and then belongs to target[w]; frozen_at[w] < 0: it takes no part (gone).
 * Every group gaining a worker starts at J past every clock of it anyone
 * pushed into (its frozen members', its newcomers' and those that left it)
 * and no lower than the clocks its newcomers reached in their groups (a
 * tracker's least clock is below those); each frozen worker ending up in
 * it continues there at J. moves_out (room for every worker) receives the
 * segments appended, *nmoves_out their count; workers whose segment would
 * not change are left out.
 */
strata_status_t eng_members_regroup(eng_members_t *m, const int64_t *frozen_at,
                                    const uint32_t *target,
                                    eng_move_t *moves_out,
                                    uint32_t *nmoves_out);

uint32_t eng_members_nsegments(const eng_members_t *m, uint32_t worker);
const eng_segment_t *eng_members_segment(const eng_members_t *m,
                                         uint32_t worker, uint32_t index);
/* The last segment: where the worker is now. */
const eng_segment_t *eng_members_current(const eng_members_t *m,
                                         uint32_t worker);

/* The segment holding the worker's push of worker_clock (>= 0). */
uint32_t eng_members_find(const eng_members_t *m, uint32_t worker,
                          int64_t worker_clock);

/* Whether the worker contributes to clock `group_clock` of `group`: if so,
 * the segment index and the worker clock of that push. */
bool eng_members_at(const eng_members_t *m, uint32_t worker, uint32_t group,
                    int64_t group_clock, uint32_t *index_out,
                    int64_t *worker_clock_out);

/* Workers that have ever been in the group (in increasing order): the only
 * candidates of eng_members_at for it. */
const uint32_t *eng_members_of(const eng_members_t *m, uint32_t group,
                               uint32_t *count_out);

/*
 * A lost aggregator's shard taken over (engine/agg_takeover.c): the clock
 * each worker resumes it at, alike on the coordinator and the taker. From
 * `from` (no earlier than any worker's first clock without the shard) on,
 * resume_out[w] = J - offset, J = the clock its group resumes at: `from`,
 * no earlier than any last segment's start, plus the largest offset of a
 * worker whose last segment is in the group. So every worker resumes at
 * or after `from`, in its last segment, and every member of a group at the
 * same clock of it (room for every worker in resume_out).
 */
void eng_members_resume(const eng_members_t *m, int64_t from,
                        int64_t *resume_out);

uint32_t eng_members_workers(const eng_members_t *m);
uint32_t eng_members_groups(const eng_members_t *m);

#endif /* STRATA_ENGINE_MEMBERS_H */
