/*
 * GSSP grouping: workers of similar speed form groups (docs/algorithms.md
 * §1.2, §4.2). Pure logic, run by the coordinator; the engine carries the
 * reports and applies the assignment (tracker moves, aggregator membership).
 *
 *  - Measure: per worker, an EMA of its iteration time with momentum 0.7 on
 *    the new sample (T = 0.3 T + 0.7 t; the first sample is taken as is).
 *  - Method: 1-D Fisher-Jenks natural breaks, the exact dynamic programme
 *    over the sorted EMAs.
 *  - Number of groups: STRATA_GROUPS, or the smallest k whose goodness of
 *    variance fit reaches STRATA_GVF, capped by STRATA_MAX_GROUPS.
 *  - Or manual groups: STRATA_GROUPING=manual:0,0,1,1,... (never regrouped).
 *  - Regrouping: only at epoch boundaries, and only when some worker's class
 *    differed from its group in two consecutive classifications.
 *  - Group ids are ordered by speed: group 0 is the fastest; a group's rank
 *    r in [0, 1] (0 fastest, 1 slowest) drives GDTopK's ratios.
 *
 * Until every live worker has reported, automatic grouping keeps everyone in
 * group 0; the first complete classification is applied at once.
 * Not thread-safe: one thread (the coordinator's) owns a grouping.
 */
#ifndef STRATA_ENGINE_GROUPING_H
#define STRATA_ENGINE_GROUPING_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "engine/config.h"

/* Momentum of the EMA on the new sample (the GDTopK code's time_momentum). */
#define ENG_GROUPING_MOMENTUM 0.7
/* Group of a dropped worker. */
#define ENG_GROUPING_NONE UINT32_MAX

typedef struct eng_grouping eng_grouping_t;

typedef struct eng_grouping_params {
    uint32_t workers;
    uint32_t groups;     /* 0: automatic */
    double gvf;          /* goodness of variance fit to reach, in [0, 1] */
    uint32_t max_groups; /* cap of the automatic choice, >= 1 */
    const char *spec;    /* "auto" or "manual:g0,g1,..." */
} eng_grouping_params_t;

/* STRATA_GROUPS, STRATA_GVF, STRATA_MAX_GROUPS, STRATA_GROUPING for this
 * many workers. The spec string stays owned by cfg. */
void eng_grouping_params_from_config(const eng_config_t *cfg, uint32_t workers,
                                     eng_grouping_params_t *params_out);

/* Checks the parameters, including a manual list against the worker count
 * (every worker listed once, group ids 0..k-1 each used). */
strata_status_t eng_grouping_create(const eng_grouping_params_t *params,
                                    eng_grouping_t **grouping_out);
void eng_grouping_destroy(eng_grouping_t *g);

/* A measured iteration time of the worker, in seconds (> 0, finite). */
strata_status_t eng_grouping_report(eng_grouping_t *g, uint32_t worker,
                                    double seconds);

/* The worker died: it no longer takes part in classifications, and its
 * group becomes ENG_GROUPING_NONE. */
strata_status_t eng_grouping_drop(eng_grouping_t *g, uint32_t worker);

/* An epoch boundary: classify the live workers by their EMAs and regroup if
 * the rule above says so. *changed_out tells whether the assignment changed
 * (the engine then moves the workers whose group differs). */
strata_status_t eng_grouping_epoch(eng_grouping_t *g, bool *changed_out);

/* ---- the current assignment ---- */

uint32_t eng_grouping_count(const eng_grouping_t *g);
/* The most groups this grouping can ever have (the tracker's group slots):
 * the fixed or manual count, else min(max_groups, workers). */
uint32_t eng_grouping_capacity(const eng_grouping_t *g);
/* Group of each worker: an array of `workers` ids, valid until the next
 * eng_grouping_epoch. */
const uint32_t *eng_grouping_assignment(const eng_grouping_t *g);
uint32_t eng_grouping_group_of(const eng_grouping_t *g, uint32_t worker);
/* Speed rank of a group, in [0, 1]: 0 the fastest, 1 the slowest (0 when
 * there is one group). By measured group mean once all have reported, by id
 * before. */
double eng_grouping_rank(const eng_grouping_t *g, uint32_t group);
/* How many times the assignment changed. */
uint64_t eng_grouping_generation(const eng_grouping_t *g);
/* The worker's EMA in seconds (0 before its first report). */
double eng_grouping_ema(const eng_grouping_t *g, uint32_t worker);
/* Goodness of variance fit of the current assignment (1 when exact or when
 * every time is equal; 0 before any classification). */
double eng_grouping_gvf(const eng_grouping_t *g);

/* ---- the algorithms, exposed for tests and tools ---- */

/* Fisher-Jenks: the partition of sorted x[0..n) into k contiguous classes
 * (1 <= k <= n) with the least sum of squared deviations from the class
 * means. start_out[c] receives the index of class c's first element
 * (start_out[0] = 0); *sdcm_out that least sum. */
strata_status_t eng_jenks(const double *x, uint32_t n, uint32_t k,
                          uint32_t *start_out, double *sdcm_out);

/* Sum of squared deviations of x[0..n) from their mean. */
double eng_ssd(const double *x, uint32_t n);

/* Parses "manual:g0,g1,..." for `workers` workers into group_of_out (an array
 * of `workers`) and the group count. Errors name what is wrong. */
strata_status_t eng_grouping_parse_manual(const char *spec, uint32_t workers,
                                          uint32_t *group_of_out,
                                          uint32_t *groups_out);

#endif /* STRATA_ENGINE_GROUPING_H */
