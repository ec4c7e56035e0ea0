/* GSSP's cost model: waiting inside groups against staleness between. */
#include "engine/group_cost.h"

#include <inttypes.h>
#include <math.h>

#include "util/alloc.h"
#include "util/log.h"

struct eng_cost {
    uint32_t workers, max_groups;
    double beta;
    double *members, *period; /* [max_groups]: m_g and T_g */
    uint32_t *group;          /* [workers]: scratch assignment */
    double *inv;              /* [workers + 1]: prefix sums of 1/t */
    double *lost;             /* [(max_groups + 1) * (workers + 1)] */
    uint32_t *from;           /* start of the last class of each optimum */
};

strata_status_t eng_cost_create(uint32_t workers, uint32_t max_groups,
                                double staleness_cost, eng_cost_t **cost_out)
{
    if (workers == 0 || max_groups == 0 || workers > UINT32_MAX / 2 ||
        !(staleness_cost >= 0) || !isfinite(staleness_cost)) {
        util_error("cost model: %" PRIu32 " workers, %" PRIu32
                   " groups and staleness cost %g: expected at least one "
                   "of each and a finite cost >= 0",
                   workers, max_groups, staleness_cost);
        return STRATA_ERR_INVALID;
    }
    if (max_groups > workers)
        max_groups = workers;
    eng_cost_t *c = util_calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    c->workers = workers;
    c->max_groups = max_groups;
    c->beta = staleness_cost;
    size_t cells = (size_t)(max_groups + 1) * (workers + 1);
    c->members = util_calloc(max_groups, sizeof(double));
    c->period = util_calloc(max_groups, sizeof(double));
    c->group = util_calloc(workers, sizeof(uint32_t));
    c->inv = util_calloc(workers + 1, sizeof(double));
    c->lost = util_calloc(cells, sizeof(double));
    c->from = util_calloc(cells, sizeof(uint32_t));
    if (c->members && c->period && c->group && c->inv && c->lost && c->from) {
        *cost_out = c;
        return STRATA_OK;
    }
    eng_cost_destroy(c);
nomem:
    util_error("cost model: out of memory for %" PRIu32 " workers", workers);
    return STRATA_ERR_NOMEM;
}

void eng_cost_destroy(eng_cost_t *c)
{
    if (!c)
        return;
    util_free(c->members);
    util_free(c->period);
    util_free(c->group);
    util_free(c->inv);
    util_free(c->lost);
    util_free(c->from);
    util_free(c);
}

double eng_cost_rate(eng_cost_t *c, const double *times,
                     const uint32_t *group_of, uint32_t n)
{
    for (uint32_t g = 0; g < c->max_groups; g++)
        c->members[g] = c->period[g] = 0;
    double nw = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t g = group_of[i];
        if (g >= c->max_groups)
            continue;
        c->members[g] += 1;
        c->period[g] = times[i] > c->period[g] ? times[i] : c->period[g];
        nw += 1;
    }
    /* sigma_g = T_g * S - m_g / N, with S = sum over every h of m_h/(N T_h):
     * one pass for S, one for R. */
    double s = 0, r = 0;
    for (uint32_t g = 0; g < c->max_groups; g++)
        if (c->members[g] > 0)
            s += c->members[g] / (nw * c->period[g]);
    for (uint32_t g = 0; g < c->max_groups; g++) {
        if (c->members[g] == 0)
            continue;
        double share = c->members[g] / (nw * c->period[g]);
        double sigma = c->period[g] * s - c->members[g] / nw;
        r += share / (1 + c->beta * (sigma > 0 ? sigma : 0));
    }
    return r;
}

/* Gradients per second lost to waiting by the class sorted[i..j). */
static double eng_cost_class(const eng_cost_t *c, const double *sorted,
                             uint32_t i, uint32_t j)
{
    double v = c->inv[j] - c->inv[i] - (double)(j - i) / sorted[j - 1];
    return v > 0 ? v : 0;
}

/* lost[k][j]: the least waste of sorted[0..j) in k classes, for every
 * k <= kmax (Fisher's programme, O(kmax n^2)). */
static void eng_cost_programme(eng_cost_t *c, const double *sorted, uint32_t n,
                               uint32_t kmax)
{
    uint32_t w = n + 1;
    c->inv[0] = 0;
    for (uint32_t i = 0; i < n; i++)
        c->inv[i + 1] = c->inv[i] + 1 / sorted[i];
    for (uint32_t j = 1; j <= n; j++)
        c->lost[w + j] = eng_cost_class(c, sorted, 0, j);
    for (uint32_t k = 2; k <= kmax; k++)
        for (uint32_t j = k; j <= n; j++) {
            double best = INFINITY;
            uint32_t arg = k - 1;
            for (uint32_t i = k - 1; i < j; i++) {
                double v =
                    c->lost[(k - 1) * w + i] + eng_cost_class(c, sorted, i, j);
                if (v < best) {
                    best = v;
                    arg = i;
                }
            }
            c->lost[k * w + j] = best;
            c->from[k * w + j] = arg;
        }
}

static void eng_cost_starts(const eng_cost_t *c, uint32_t n, uint32_t k,
                            uint32_t *start)
{
    uint32_t j = n, w = n + 1;
    for (uint32_t cl = k; cl >= 2; cl--) {
        j = c->from[cl * w + j];
        start[cl - 1] = j;
    }
    start[0] = 0;
}

static strata_status_t eng_cost_check(const eng_cost_t *c, const double *sorted,
                                      uint32_t n, uint32_t k)
{
    if (n == 0 || n > c->workers || k > n || k > c->max_groups) {
        util_error("cost model: cannot cut %" PRIu32 " times into %" PRIu32
                   " classes (room for %" PRIu32 " times, %" PRIu32 " groups)",
                   n, k, c->workers, c->max_groups);
        return STRATA_ERR_INVALID;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!(sorted[i] > 0) || !isfinite(sorted[i]) ||
            (i > 0 && sorted[i] < sorted[i - 1])) {
            util_error("cost model: time %" PRIu32 " (%g s) is not positive, "
                       "finite and ascending",
                       i, sorted[i]);
            return STRATA_ERR_INVALID;
        }
    return STRATA_OK;
}

strata_status_t eng_cost_breaks(eng_cost_t *c, const double *sorted, uint32_t n,
                                uint32_t k, uint32_t *start_out,
                                double *lost_out)
{
    strata_status_t st = eng_cost_check(c, sorted, n, k ? k : 1);
    if (st != STRATA_OK || k == 0)
        return st != STRATA_OK ? st : STRATA_ERR_INVALID;
    eng_cost_programme(c, sorted, n, k);
    eng_cost_starts(c, n, k, start_out);
    *lost_out = c->lost[k * (n + 1) + n];
    return STRATA_OK;
}

/* R of sorted cut at start[0..k). */
static double eng_cost_rate_of(eng_cost_t *c, const double *sorted, uint32_t n,
                               const uint32_t *start, uint32_t k)
{
    for (uint32_t cl = 0, i = 0; i < n; i++) {
        while (cl + 1 < k && i >= start[cl + 1])
            cl++;
        c->group[i] = cl;
    }
    return eng_cost_rate(c, sorted, c->group, n);
}

strata_status_t eng_cost_best(eng_cost_t *c, const double *sorted, uint32_t n,
                              uint32_t k_fixed, uint32_t *start_out,
                              uint32_t *k_out, double *rate_out)
{
    uint32_t kmax = c->max_groups < n ? c->max_groups : n;
    if (k_fixed)
        kmax = k_fixed < n ? k_fixed : n;
    strata_status_t st = eng_cost_check(c, sorted, n, kmax);
    if (st != STRATA_OK)
        return st;
    eng_cost_programme(c, sorted, n, kmax);
    uint32_t best_k = 0;
    double best = -1;
    for (uint32_t k = k_fixed ? kmax : 1; k <= kmax; k++) {
        eng_cost_starts(c, n, k, start_out);
        double r = eng_cost_rate_of(c, sorted, n, start_out, k);
        if (r > best * (1 + 1e-12)) {
            best = r;
            best_k = k;
        }
    }
    eng_cost_starts(c, n, best_k, start_out); /* the table still holds it */
    *k_out = best_k;
    *rate_out = best;
    return STRATA_OK;
}
