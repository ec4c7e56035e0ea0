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

uint32_t eng_members_workers(const eng_members_t *m);
uint32_t eng_members_groups(const eng_members_t *m);

#endif /* STRATA_ENGINE_MEMBERS_H */
