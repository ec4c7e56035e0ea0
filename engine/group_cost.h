/*
 * GSSP's cost model: how fast an assignment of workers to groups trains,
 * from each worker's own step time (docs/policies.md, "How many groups").
 * Pure logic, no locking: one thread owns an eng_cost_t.
 *
 * A synchronous group g of m_g workers completes a clock every T_g, the
 * step time of its slowest member, and applies m_g / N of a mean gradient
 * (the 1/N scale); its faster members wait T_g - t_i of every step. Between
 * groups updates are asynchronous: while g computes one step, every other
 * group h applies T_g / T_h updates of m_h / N, so g's update is stale by
 *     sigma_g = sum over h != g of (m_h / N) (T_g / T_h)
 * mean gradients. The model's progress rate, in mean gradients per second:
 *     R = sum over g of (m_g / (N T_g)) / (1 + beta sigma_g)
 * where beta (STRATA_STALENESS_COST) is what one mean gradient of staleness
 * costs. One group is BSP (no staleness, everyone waits for the slowest); a
 * group per worker is ASP (no waiting, the most staleness).
 *
 * The best assignment: for each k, the k contiguous classes of the sorted
 * times that waste least to waiting (the most gradients per second,
 * sum m_g / T_g; Fisher's exact 1-D dynamic programme, the one Jenks'
 * natural breaks use, with this cost instead of squared deviations); then
 * the k whose classes give the highest R.
 */
#ifndef STRATA_ENGINE_GROUP_COST_H
#define STRATA_ENGINE_GROUP_COST_H

#include <stdint.h>

#include <strata/strata.h>

/* group_of value of a worker the model leaves out (dropped). */
#define ENG_COST_NONE UINT32_MAX

typedef struct eng_cost eng_cost_t;

/* A workspace for up to `workers` times and `max_groups` groups (>= 1);
 * staleness_cost is beta (>= 0, finite). Errors are logged. */
strata_status_t eng_cost_create(uint32_t workers, uint32_t max_groups,
                                double staleness_cost, eng_cost_t **cost_out);
void eng_cost_destroy(eng_cost_t *c);

/* R of an assignment: times[i] > 0 in seconds, group_of[i] < max_groups or
 * ENG_COST_NONE, for i < n <= workers. 0 when nobody counts. */
double eng_cost_rate(eng_cost_t *c, const double *times,
                     const uint32_t *group_of, uint32_t n);

/* The best assignment of n (1 <= n <= workers) ascending times: k classes
 * (k_fixed of them, capped by n, when k_fixed > 0; else the k <= max_groups
 * of highest R, the fewest on a tie), class c starting at start_out[c] (an
 * array of max_groups; start_out[0] = 0), and its R. */
strata_status_t eng_cost_best(eng_cost_t *c, const double *sorted, uint32_t n,
                              uint32_t k_fixed, uint32_t *start_out,
                              uint32_t *k_out, double *rate_out);

/* The k classes (1 <= k <= n, k <= max_groups) of ascending times that
 * waste least to waiting, and that waste: the gradients per second lost,
 * sum over members of 1/t_i - 1/T_g. */
strata_status_t eng_cost_breaks(eng_cost_t *c, const double *sorted, uint32_t n,
                                uint32_t k, uint32_t *start_out,
                                double *lost_out);

#endif /* STRATA_ENGINE_GROUP_COST_H */
