/*
 * GSSP grouping: workers of similar speed form groups (docs/policies.md).
 * Pure logic, run by the coordinator; the engine carries the measurements
 * and applies the assignment (tracker moves, aggregator membership).
 *
 *  - Measure: each worker's own step time, as its engine measures it (the
 *    median of its last steps, engine/steptime.h), reported with the count
 *    of steps measured so far.
 *  - Probe: every worker starts in a group of its own (asynchronous, as
 *    under ASP: nobody waits for a worker not yet measured, and each
 *    reports at its own pace); once every live worker has reported
 *    probe_steps steps the first grouping is applied at once.
 *  - Grouping: the cost model (engine/group_cost.h) picks the classes and
 *    their number (or `groups` of them when fixed).
 *  - Revision: every evaluation recomputes the best grouping; the
 *    assignment changes when the best one is predicted to train faster
 *    than the current one at every evaluation for long enough: until every
 *    worker it moves took ENG_GROUPING_CONFIRM_STEPS new steps for a gain
 *    of `gain` or more, proportionally more for smaller gains (20 for a
 *    tenth of `gain`; below that, never). Hysteresis: one slow step moves
 *    nobody, and noise does not trade small gains back and forth.
 *  - Or manual groups: STRATA_GROUPING=manual:0,0,1,1,... (never changed).
 *  - Group ids: the first grouping numbers groups by speed (0 fastest);
 *    later ones keep each group's id for the class that shares most of its
 *    members, so a worker that changes speed is the only one that moves. A
 *    group's rank r in [0, 1] (0 fastest, 1 slowest) drives GDTopK.
 *
 * Not thread-safe: one thread (the coordinator's) owns a grouping.
 */
#ifndef STRATA_ENGINE_GROUPING_H
#define STRATA_ENGINE_GROUPING_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "engine/config.h"

/* Group of a dropped worker. */
#define ENG_GROUPING_NONE UINT32_MAX
/* New steps of each worker a regroup moves, between the evaluation that
 * first found the better grouping and the one that applies it, for a gain
 * of at least STRATA_REGROUP_GAIN. */
#define ENG_GROUPING_CONFIRM_STEPS 2

typedef struct eng_grouping eng_grouping_t;

typedef struct eng_grouping_params {
    uint32_t workers;
    uint32_t groups;       /* fixed count; 0: the cost model's choice */
    uint32_t max_groups;   /* cap of the automatic choice, >= 1 */
    uint32_t probe_steps;  /* steps of every worker before grouping, >= 1 */
    double staleness_cost; /* the cost model's beta, >= 0 */
    double gain;           /* predicted gain a regroup needs, >= 0 */
    const char *spec;      /* "auto" or "manual:g0,g1,..." */
} eng_grouping_params_t;

/* STRATA_GROUPS, STRATA_MAX_GROUPS, STRATA_GSSP_PROBE_STEPS,
 * STRATA_STALENESS_COST, STRATA_REGROUP_GAIN, STRATA_GROUPING for this many
 * workers. The spec string stays owned by cfg. */
void eng_grouping_params_from_config(const eng_config_t *cfg, uint32_t workers,
                                     eng_grouping_params_t *params_out);

/* Checks the parameters, including a manual list against the worker count
 * (every worker listed once, group ids 0..k-1 each used). */
strata_status_t eng_grouping_create(const eng_grouping_params_t *params,
                                    eng_grouping_t **grouping_out);
void eng_grouping_destroy(eng_grouping_t *g);

/* The worker's step time in seconds (> 0, finite), after `steps` steps
 * measured since it started (they only grow). */
strata_status_t eng_grouping_measure(eng_grouping_t *g, uint32_t worker,
                                     double seconds, uint64_t steps);

/* The worker died: it no longer takes part in groupings, and its group
 * becomes ENG_GROUPING_NONE. */
strata_status_t eng_grouping_drop(eng_grouping_t *g, uint32_t worker);
/* A dropped worker is back (a new process) in `group`: live again, its
 * steps counted afresh (nothing is regrouped until it reported some), its
 * last step time kept meanwhile. */
strata_status_t eng_grouping_rejoin(eng_grouping_t *g, uint32_t worker,
                                    uint32_t group);

/* Recompute the grouping from the latest measurements and change the
 * assignment if the rules above say so; *changed_out tells whether it did
 * (the engine then moves the workers whose group differs). Ranks are
 * refreshed either way. */
strata_status_t eng_grouping_evaluate(eng_grouping_t *g, bool *changed_out);

/* ---- the current assignment ---- */

/* Before the first grouping (automatic, or manual before every worker
 * reported). */
bool eng_grouping_probing(const eng_grouping_t *g);
/* Groups with a live member. */
uint32_t eng_grouping_count(const eng_grouping_t *g);
/* The most groups this grouping can ever have (the tracker's group slots):
 * the manual count, else one per worker (the probe's; at most
 * ENG_TRACKER_MAX_GROUPS, beyond which the probe's groups hold several). */
uint32_t eng_grouping_capacity(const eng_grouping_t *g);
/* Group of each worker: an array of `workers` ids, valid until the next
 * eng_grouping_evaluate. */
const uint32_t *eng_grouping_assignment(const eng_grouping_t *g);
uint32_t eng_grouping_group_of(const eng_grouping_t *g, uint32_t worker);
/* Speed rank of a group, in [0, 1]: 0 the fastest, 1 the slowest (0 when
 * there is one group, or for an id without members). By measured group mean
 * once all have reported; before, by id for manual groups, 0 in the
 * probe. */
double eng_grouping_rank(const eng_grouping_t *g, uint32_t group);
/* Counts the changes of the ranks (GDTopK's ratios follow them). */
uint64_t eng_grouping_rank_generation(const eng_grouping_t *g);
/* How many times the assignment changed. */
uint64_t eng_grouping_generation(const eng_grouping_t *g);
/* The worker's step time in seconds (0 before its first report) and its
 * steps measured. */
double eng_grouping_time(const eng_grouping_t *g, uint32_t worker);
uint64_t eng_grouping_steps(const eng_grouping_t *g, uint32_t worker);
/* The cost model's rate of the current assignment and of one group (BSP),
 * at the last evaluation: what the grouping gains. */
double eng_grouping_rate(const eng_grouping_t *g);
double eng_grouping_rate_bsp(const eng_grouping_t *g);

/* Parses "manual:g0,g1,..." for `workers` workers into group_of_out (an array
 * of `workers`) and the group count. Errors name what is wrong. */
strata_status_t eng_grouping_parse_manual(const char *spec, uint32_t workers,
                                          uint32_t *group_of_out,
                                          uint32_t *groups_out);

#endif /* STRATA_ENGINE_GROUPING_H */
