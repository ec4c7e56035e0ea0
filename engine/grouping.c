/* GSSP grouping: EMA of iteration times, Fisher-Jenks, hysteresis. */
#include "engine/grouping.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tracker.h"
#include "util/alloc.h"
#include "util/log.h"

/* GVFs this close to the target count as reaching it (exact fits such as
 * 0.8 computed as 0.7999999999999999). */
#define GRP_GVF_SLACK 1e-12

struct eng_grouping {
    uint32_t workers;
    uint32_t fixed_k; /* 0: automatic */
    uint32_t max_groups;
    double gvf_target;
    bool manual;

    double *ema;
    bool *reported;
    bool *dead;
    uint32_t *group_of;
    uint32_t k;
    double *rank; /* [capacity] */
    double gvf;
    uint64_t generation;
    bool classified;
    bool *changed_before; /* class differed from group at the last epoch */

    /* scratch for a classification */
    uint32_t *order; /* live workers by EMA */
    double *sorted;
    uint32_t *cand;
    uint32_t *start;
};

/* ---- Fisher-Jenks ---- */

double eng_ssd(const double *x, uint32_t n)
{
    if (n == 0)
        return 0;
    double mean = 0, ss = 0;
    for (uint32_t i = 0; i < n; i++)
        mean += x[i];
    mean /= n;
    for (uint32_t i = 0; i < n; i++)
        ss += (x[i] - mean) * (x[i] - mean);
    return ss;
}

typedef struct grp_dp {
    uint32_t n, kmax;
    double *s1, *s2; /* prefix sums of the centred values and squares */
    double *cost;    /* [(kmax+1) * (n+1)]: least SDCM of x[0..j) in c */
    uint32_t *from;  /* start of the last class in that optimum */
} grp_dp_t;

static double grp_ssd_range(const grp_dp_t *dp, uint32_t i, uint32_t j)
{
    double s = dp->s1[j] - dp->s1[i];
    double v = dp->s2[j] - dp->s2[i] - s * s / (double)(j - i);
    return v > 0 ? v : 0;
}

/* The exact programme: cost[c][j] = min over i of cost[c-1][i] + SSD(i, j).
 * O(kmax n^2) time; centring first keeps the prefix sums accurate when the
 * times are large next to their spread. */
static strata_status_t grp_dp_run(grp_dp_t *dp, const double *x)
{
    uint32_t n = dp->n, w = n + 1;
    dp->s1 = util_calloc(w, sizeof(double));
    dp->s2 = util_calloc(w, sizeof(double));
    dp->cost = util_calloc((size_t)(dp->kmax + 1) * w, sizeof(double));
    dp->from = util_calloc((size_t)(dp->kmax + 1) * w, sizeof(uint32_t));
    if (!dp->s1 || !dp->s2 || !dp->cost || !dp->from) {
        util_error("grouping: out of memory for Jenks over %" PRIu32
                   " values and %" PRIu32 " classes",
                   n, dp->kmax);
        return STRATA_ERR_NOMEM;
    }
    double mean = 0;
    for (uint32_t i = 0; i < n; i++)
        mean += x[i] / n;
    for (uint32_t i = 0; i < n; i++) {
        double c = x[i] - mean;
        dp->s1[i + 1] = dp->s1[i] + c;
        dp->s2[i + 1] = dp->s2[i] + c * c;
    }
    for (uint32_t j = 1; j <= n; j++)
        dp->cost[w + j] = grp_ssd_range(dp, 0, j);
    for (uint32_t c = 2; c <= dp->kmax; c++)
        for (uint32_t j = c; j <= n; j++) {
            double best = INFINITY;
            uint32_t arg = c - 1;
            for (uint32_t i = c - 1; i < j; i++) {
                double v = dp->cost[(c - 1) * w + i] + grp_ssd_range(dp, i, j);
                if (v < best) {
                    best = v;
                    arg = i;
                }
            }
            dp->cost[c * w + j] = best;
            dp->from[c * w + j] = arg;
        }
    return STRATA_OK;
}

static void grp_dp_breaks(const grp_dp_t *dp, uint32_t k, uint32_t *start)
{
    uint32_t j = dp->n, w = dp->n + 1;
    for (uint32_t c = k; c >= 2; c--) {
        j = dp->from[c * w + j];
        start[c - 1] = j;
    }
    start[0] = 0;
}

static void grp_dp_free(grp_dp_t *dp)
{
    util_free(dp->s1);
    util_free(dp->s2);
    util_free(dp->cost);
    util_free(dp->from);
}

strata_status_t eng_jenks(const double *x, uint32_t n, uint32_t k,
                          uint32_t *start_out, double *sdcm_out)
{
    if (k == 0 || k > n) {
        util_error("grouping: cannot cut %" PRIu32 " values into %" PRIu32
                   " classes",
                   n, k);
        return STRATA_ERR_INVALID;
    }
    for (uint32_t i = 1; i < n; i++)
        if (!(x[i - 1] <= x[i])) {
            util_error("grouping: Jenks needs sorted values; value %" PRIu32
                       " (%g) precedes a smaller one (%g)",
                       i - 1, x[i - 1], x[i]);
            return STRATA_ERR_INVALID;
        }
    grp_dp_t dp = {.n = n, .kmax = k};
    strata_status_t st = grp_dp_run(&dp, x);
    if (st == STRATA_OK) {
        grp_dp_breaks(&dp, k, start_out);
        *sdcm_out = dp.cost[k * (n + 1) + n];
    }
    grp_dp_free(&dp);
    return st;
}

/* ---- manual groups ---- */

strata_status_t eng_grouping_parse_manual(const char *spec, uint32_t workers,
                                          uint32_t *group_of_out,
                                          uint32_t *groups_out)
{
    if (strncmp(spec, "manual:", 7) != 0) {
        util_error("STRATA_GROUPING=%s: expected auto or manual:g0,g1,...",
                   spec);
        return STRATA_ERR_CONFIG;
    }
    const char *p = spec + 7;
    uint32_t n = 0, k = 0;
    for (;;) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || *p == '-' || *p == '+' || errno ||
            v >= ENG_TRACKER_MAX_GROUPS || (*end != ',' && *end != '\0')) {
            util_error("STRATA_GROUPING=%s: item %" PRIu32
                       " is not a group number in [0, %d)",
                       spec, n + 1, ENG_TRACKER_MAX_GROUPS);
            return STRATA_ERR_CONFIG;
        }
        if (n < workers)
            group_of_out[n] = (uint32_t)v;
        n++;
        k = v + 1 > k ? (uint32_t)v + 1 : k;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    if (n != workers) {
        util_error("STRATA_GROUPING=%s lists %" PRIu32 " workers, but there "
                   "are %" PRIu32 ": give one group number per worker",
                   spec, n, workers);
        return STRATA_ERR_CONFIG;
    }
    for (uint32_t g = 0; g < k; g++) {
        uint32_t w = 0;
        while (w < workers && group_of_out[w] != g)
            w++;
        if (w == workers) {
            util_error("STRATA_GROUPING=%s: group %" PRIu32 " has no worker "
                       "(number groups 0 to %" PRIu32 " without gaps)",
                       spec, g, k - 1);
            return STRATA_ERR_CONFIG;
        }
    }
    *groups_out = k;
    return STRATA_OK;
}

/* ---- creation ---- */

void eng_grouping_params_from_config(const eng_config_t *cfg, uint32_t workers,
                                     eng_grouping_params_t *params_out)
{
    *params_out = (eng_grouping_params_t){
        .workers = workers,
        .groups = (uint32_t)eng_config_int(cfg, ENG_CFG_GROUPS),
        .gvf = eng_config_double(cfg, ENG_CFG_GVF),
        .max_groups = (uint32_t)eng_config_int(cfg, ENG_CFG_MAX_GROUPS),
        .spec = eng_config_str(cfg, ENG_CFG_GROUPING),
    };
}

static strata_status_t grp_check(const eng_grouping_params_t *p)
{
    if (p->workers == 0 || p->workers > UINT32_MAX / 2) {
        util_error("grouping: %" PRIu32 " workers", p->workers);
        return STRATA_ERR_INVALID;
    }
    if (!(p->gvf >= 0 && p->gvf <= 1) || p->max_groups == 0) {
        util_error("grouping: STRATA_GVF=%g must be in [0, 1] and "
                   "STRATA_MAX_GROUPS=%" PRIu32 " at least 1",
                   p->gvf, p->max_groups);
        return STRATA_ERR_CONFIG;
    }
    if (p->groups > p->workers || p->groups > ENG_TRACKER_MAX_GROUPS) {
        util_error("grouping: STRATA_GROUPS=%" PRIu32 " is more groups than "
                   "the %" PRIu32 " workers",
                   p->groups, p->workers);
        return STRATA_ERR_CONFIG;
    }
    return STRATA_OK;
}

static strata_status_t grp_alloc(eng_grouping_t *g)
{
    uint32_t n = g->workers;
    g->ema = util_calloc(n, sizeof(double));
    g->reported = util_calloc(n, sizeof(bool));
    g->dead = util_calloc(n, sizeof(bool));
    g->changed_before = util_calloc(n, sizeof(bool));
    g->group_of = util_calloc(n, sizeof(uint32_t));
    g->rank = util_calloc(n, sizeof(double));
    g->order = util_calloc(n, sizeof(uint32_t));
    g->sorted = util_calloc(n, sizeof(double));
    g->cand = util_calloc(n, sizeof(uint32_t));
    g->start = util_calloc(n, sizeof(uint32_t));
    if (g->ema && g->reported && g->dead && g->changed_before && g->group_of &&
        g->rank && g->order && g->sorted && g->cand && g->start)
        return STRATA_OK;
    util_error("grouping: out of memory for %" PRIu32 " workers", n);
    return STRATA_ERR_NOMEM;
}

static void grp_rank_by_id(eng_grouping_t *g)
{
    for (uint32_t c = 0; c < g->k; c++)
        g->rank[c] = g->k > 1 ? (double)c / (g->k - 1) : 0;
}

strata_status_t eng_grouping_create(const eng_grouping_params_t *params,
                                    eng_grouping_t **grouping_out)
{
    strata_status_t st = grp_check(params);
    if (st != STRATA_OK)
        return st;
    eng_grouping_t *g = util_calloc(1, sizeof(*g));
    if (!g) {
        util_error("grouping: out of memory");
        return STRATA_ERR_NOMEM;
    }
    g->workers = params->workers;
    g->fixed_k = params->groups;
    g->max_groups = params->max_groups;
    g->gvf_target = params->gvf;
    g->k = 1;
    st = grp_alloc(g);
    const char *spec = params->spec ? params->spec : "auto";
    if (st == STRATA_OK && strcmp(spec, "auto") != 0) {
        g->manual = true;
        st = eng_grouping_parse_manual(spec, g->workers, g->group_of, &g->k);
        if (st == STRATA_OK && g->fixed_k && g->fixed_k != g->k) {
            util_error("STRATA_GROUPS=%" PRIu32 " contradicts the %" PRIu32
                       " groups of STRATA_GROUPING=%s",
                       g->fixed_k, g->k, spec);
            st = STRATA_ERR_CONFIG;
        }
    }
    if (st != STRATA_OK) {
        eng_grouping_destroy(g);
        return st;
    }
    grp_rank_by_id(g);
    *grouping_out = g;
    return STRATA_OK;
}

void eng_grouping_destroy(eng_grouping_t *g)
{
    if (!g)
        return;
    util_free(g->ema);
    util_free(g->reported);
    util_free(g->dead);
    util_free(g->changed_before);
    util_free(g->group_of);
    util_free(g->rank);
    util_free(g->order);
    util_free(g->sorted);
    util_free(g->cand);
    util_free(g->start);
    util_free(g);
}

/* ---- measurements ---- */

static strata_status_t grp_check_worker(const eng_grouping_t *g, uint32_t w)
{
    if (w < g->workers)
        return STRATA_OK;
    util_error("grouping: worker %" PRIu32 " does not exist (%" PRIu32
               " workers)",
               w, g->workers);
    return STRATA_ERR_INVALID;
}

strata_status_t eng_grouping_report(eng_grouping_t *g, uint32_t worker,
                                    double seconds)
{
    strata_status_t st = grp_check_worker(g, worker);
    if (st != STRATA_OK)
        return st;
    if (!(seconds > 0) || !isfinite(seconds)) {
        util_error("grouping: worker %" PRIu32 " reported an iteration time "
                   "of %g s; expected a positive finite time",
                   worker, seconds);
        return STRATA_ERR_INVALID;
    }
    g->ema[worker] = g->reported[worker]
                         ? (1 - ENG_GROUPING_MOMENTUM) * g->ema[worker] +
                               ENG_GROUPING_MOMENTUM * seconds
                         : seconds;
    g->reported[worker] = true;
    return STRATA_OK;
}

strata_status_t eng_grouping_drop(eng_grouping_t *g, uint32_t worker)
{
    strata_status_t st = grp_check_worker(g, worker);
    if (st != STRATA_OK)
        return st;
    g->dead[worker] = true;
    g->group_of[worker] = ENG_GROUPING_NONE;
    return STRATA_OK;
}

/* ---- classification ---- */

static int grp_cmp_ema(const void *a, const void *b, void *arg)
{
    const double *ema = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (ema[x] != ema[y])
        return ema[x] < ema[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Live workers sorted by EMA (ties by id) into order/sorted; returns how
 * many, or 0 when some live worker has not reported yet. */
static uint32_t grp_sort_live(eng_grouping_t *g)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < g->workers; w++) {
        if (g->dead[w])
            continue;
        if (!g->reported[w])
            return 0;
        g->order[n++] = w;
    }
    qsort_r(g->order, n, sizeof(*g->order), grp_cmp_ema, g->ema);
    for (uint32_t i = 0; i < n; i++)
        g->sorted[i] = g->ema[g->order[i]];
    return n;
}

static uint32_t grp_distinct(const double *sorted, uint32_t n)
{
    uint32_t d = n > 0;
    for (uint32_t i = 1; i < n; i++)
        d += sorted[i] != sorted[i - 1];
    return d;
}

/* The class count: fixed, or the smallest reaching the GVF target. */
static uint32_t grp_choose_k(const eng_grouping_t *g, const grp_dp_t *dp,
                             double sdam)
{
    if (g->fixed_k)
        return g->fixed_k < dp->n ? g->fixed_k : dp->n;
    for (uint32_t k = 1; k < dp->kmax; k++) {
        double sdcm = dp->cost[k * (dp->n + 1) + dp->n];
        double gvf = sdam > 0 ? 1 - sdcm / sdam : 1;
        if (gvf >= g->gvf_target - GRP_GVF_SLACK)
            return k;
    }
    return dp->kmax;
}

/* Classifies the n sorted live workers into cand[]; returns the class
 * count, 0 on error. */
static uint32_t grp_classify(eng_grouping_t *g, uint32_t n)
{
    grp_dp_t dp = {.n = n};
    if (g->fixed_k) {
        dp.kmax = g->fixed_k < n ? g->fixed_k : n;
    } else {
        uint32_t d = grp_distinct(g->sorted, n);
        dp.kmax = g->max_groups < d ? g->max_groups : d;
    }
    uint32_t k = 0;
    if (grp_dp_run(&dp, g->sorted) == STRATA_OK) {
        k = grp_choose_k(g, &dp, eng_ssd(g->sorted, n));
        grp_dp_breaks(&dp, k, g->start);
        for (uint32_t c = 0, i = 0; i < n; i++) {
            while (c + 1 < k && i >= g->start[c + 1])
                c++;
            g->cand[g->order[i]] = c;
        }
    }
    grp_dp_free(&dp);
    return k;
}

/* Ranks groups by the mean EMA of their live members; GVF of the current
 * assignment. Needs every live worker reported. */
static void grp_refresh_ranks(eng_grouping_t *g, uint32_t n)
{
    double sdcm = 0, sdam = eng_ssd(g->sorted, n);
    /* The classification's scratch is free again. */
    double *mean = g->sorted;
    uint32_t *count = g->start, *by_speed = g->cand;
    for (uint32_t c = 0; c < g->k; c++) {
        mean[c] = 0;
        count[c] = 0;
        by_speed[c] = c;
    }
    for (uint32_t w = 0; w < g->workers; w++)
        if (!g->dead[w]) {
            mean[g->group_of[w]] += g->ema[w];
            count[g->group_of[w]]++;
        }
    for (uint32_t c = 0; c < g->k; c++)
        mean[c] = count[c] ? mean[c] / count[c] : INFINITY;
    for (uint32_t w = 0; w < g->workers; w++)
        if (!g->dead[w]) {
            double d = g->ema[w] - mean[g->group_of[w]];
            sdcm += d * d;
        }
    g->gvf = sdam > 0 ? 1 - sdcm / sdam : 1;
    qsort_r(by_speed, g->k, sizeof(*by_speed), grp_cmp_ema, mean);
    for (uint32_t i = 0; i < g->k; i++)
        g->rank[by_speed[i]] = g->k > 1 ? (double)i / (g->k - 1) : 0;
}

/* Hysteresis: regroup when some worker's class differed from its group in
 * this classification and in the one before. */
static bool grp_should_regroup(eng_grouping_t *g, uint32_t k)
{
    bool regroup = false;
    for (uint32_t w = 0; w < g->workers; w++) {
        if (g->dead[w])
            continue;
        bool changed = k != g->k || g->cand[w] != g->group_of[w];
        regroup |= changed && g->changed_before[w];
        g->changed_before[w] = changed;
    }
    return regroup;
}

static bool grp_apply(eng_grouping_t *g, uint32_t k)
{
    bool changed = k != g->k;
    for (uint32_t w = 0; w < g->workers; w++) {
        if (g->dead[w])
            continue;
        changed |= g->cand[w] != g->group_of[w];
        g->group_of[w] = g->cand[w];
        g->changed_before[w] = false;
    }
    g->k = k;
    g->generation += changed;
    return changed;
}

strata_status_t eng_grouping_epoch(eng_grouping_t *g, bool *changed_out)
{
    *changed_out = false;
    uint32_t n = grp_sort_live(g);
    if (n == 0) {
        util_debug("grouping: not every live worker has reported a time yet");
        return STRATA_OK;
    }
    if (!g->manual) {
        uint32_t k = grp_classify(g, n);
        if (k == 0)
            return STRATA_ERR_NOMEM;
        if (!g->classified || grp_should_regroup(g, k))
            *changed_out = grp_apply(g, k);
        g->classified = true;
        if (*changed_out)
            util_info("grouping: %" PRIu32 " groups (generation %" PRIu64 ")",
                      g->k, g->generation);
    }
    grp_refresh_ranks(g, n);
    return STRATA_OK;
}

/* ---- queries ---- */

uint32_t eng_grouping_count(const eng_grouping_t *g)
{
    return g->k;
}

uint32_t eng_grouping_capacity(const eng_grouping_t *g)
{
    if (g->manual || g->fixed_k)
        return g->manual ? g->k : g->fixed_k;
    return g->max_groups < g->workers ? g->max_groups : g->workers;
}

const uint32_t *eng_grouping_assignment(const eng_grouping_t *g)
{
    return g->group_of;
}

uint32_t eng_grouping_group_of(const eng_grouping_t *g, uint32_t worker)
{
    return worker < g->workers ? g->group_of[worker] : ENG_GROUPING_NONE;
}

double eng_grouping_rank(const eng_grouping_t *g, uint32_t group)
{
    return group < g->k ? g->rank[group] : 0;
}

uint64_t eng_grouping_generation(const eng_grouping_t *g)
{
    return g->generation;
}

double eng_grouping_ema(const eng_grouping_t *g, uint32_t worker)
{
    return worker < g->workers ? g->ema[worker] : 0;
}

double eng_grouping_gvf(const eng_grouping_t *g)
{
    return g->gvf;
}
