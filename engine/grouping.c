/* GSSP grouping: measured step times, the cost model, hysteresis. */
#include "engine/grouping.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/group_cost.h"
#include "engine/tracker.h"
#include "util/alloc.h"
#include "util/log.h"

struct eng_grouping {
    uint32_t workers;
    uint32_t fixed_k;  /* 0: automatic */
    uint32_t capacity; /* group slots: the probe's, or the manual groups */
    uint32_t probe_steps;
    double gain;
    bool manual;
    eng_cost_t *cost;

    double *time;    /* [workers]: latest step time */
    uint64_t *steps; /* [workers]: steps measured */
    bool *dead;
    uint32_t *group_of;
    double *rank;   /* [capacity] */
    uint32_t count; /* groups with a live member */
    uint64_t generation, rank_generation;
    bool classified;
    double rate, rate_bsp;
    bool pending;            /* a better grouping waits for confirmation */
    uint64_t *pending_steps; /* [workers]: steps when it was first found */

    /* scratch of an evaluation */
    uint32_t *order; /* live workers by time */
    double *sorted;
    uint32_t *cand;  /* [workers]: the candidate's group of each */
    uint32_t *start; /* [capacity]: class starts */
    uint32_t *id_of; /* [capacity]: group id of each class */
    uint32_t *tally; /* [capacity]: overlap of a class with each id */
    bool *id_taken;  /* [capacity] */
};

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
        .max_groups = (uint32_t)eng_config_int(cfg, ENG_CFG_MAX_GROUPS),
        .probe_steps = (uint32_t)eng_config_int(cfg, ENG_CFG_GSSP_PROBE_STEPS),
        .staleness_cost = eng_config_double(cfg, ENG_CFG_STALENESS_COST),
        .gain = eng_config_double(cfg, ENG_CFG_REGROUP_GAIN),
        .spec = eng_config_str(cfg, ENG_CFG_GROUPING),
    };
}

static strata_status_t grp_check(const eng_grouping_params_t *p)
{
    if (p->workers == 0 || p->workers > UINT32_MAX / 2) {
        util_error("grouping: %" PRIu32 " workers", p->workers);
        return STRATA_ERR_INVALID;
    }
    if (p->max_groups == 0 || p->probe_steps == 0 || !(p->gain >= 0) ||
        !isfinite(p->gain)) {
        util_error("grouping: STRATA_MAX_GROUPS=%" PRIu32
                   " and STRATA_GSSP_PROBE_STEPS=%" PRIu32
                   " must be at least 1, STRATA_REGROUP_GAIN=%g at least 0",
                   p->max_groups, p->probe_steps, p->gain);
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
    uint32_t n = g->workers, k = g->capacity;
    g->time = util_calloc(n, sizeof(double));
    g->steps = util_calloc(n, sizeof(uint64_t));
    g->dead = util_calloc(n, sizeof(bool));
    g->group_of = util_calloc(n, sizeof(uint32_t));
    g->pending_steps = util_calloc(n, sizeof(uint64_t));
    g->order = util_calloc(n, sizeof(uint32_t));
    g->sorted = util_calloc(n, sizeof(double));
    g->cand = util_calloc(n, sizeof(uint32_t));
    g->rank = util_calloc(k, sizeof(double));
    g->start = util_calloc(k, sizeof(uint32_t));
    g->id_of = util_calloc(k, sizeof(uint32_t));
    g->tally = util_calloc(k, sizeof(uint32_t));
    g->id_taken = util_calloc(k, sizeof(bool));
    if (g->time && g->steps && g->dead && g->group_of && g->pending_steps &&
        g->order && g->sorted && g->cand && g->rank && g->start && g->id_of &&
        g->tally && g->id_taken)
        return STRATA_OK;
    util_error("grouping: out of memory for %" PRIu32 " workers", n);
    return STRATA_ERR_NOMEM;
}

static void grp_rank_by_id(eng_grouping_t *g)
{
    for (uint32_t c = 0; c < g->capacity; c++)
        g->rank[c] =
            g->count > 1 && c < g->count ? (double)c / (g->count - 1) : 0;
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
    g->probe_steps = params->probe_steps;
    g->gain = params->gain;
    g->count = 1;
    const char *spec = params->spec ? params->spec : "auto";
    g->manual = strcmp(spec, "auto") != 0;
    uint32_t *manual = NULL;
    if (g->manual) { /* the count sets the capacity */
        manual = util_calloc(g->workers, sizeof(uint32_t));
        st = manual ? eng_grouping_parse_manual(spec, g->workers, manual,
                                                &g->count)
                    : STRATA_ERR_NOMEM;
        if (st == STRATA_OK && g->fixed_k && g->fixed_k != g->count) {
            util_error("STRATA_GROUPS=%" PRIu32 " contradicts the %" PRIu32
                       " groups of STRATA_GROUPING=%s",
                       g->fixed_k, g->count, spec);
            st = STRATA_ERR_CONFIG;
        }
        g->capacity = g->count;
    } else { /* the probe: every worker alone */
        g->capacity = g->workers < ENG_TRACKER_MAX_GROUPS
                          ? g->workers
                          : ENG_TRACKER_MAX_GROUPS;
        g->count = g->capacity;
    }
    uint32_t max_k = g->manual    ? g->capacity
                     : g->fixed_k ? g->fixed_k
                                  : params->max_groups;
    if (st == STRATA_OK)
        st = grp_alloc(g);
    if (st == STRATA_OK)
        st = eng_cost_create(g->workers, max_k, params->staleness_cost,
                             &g->cost);
    for (uint32_t w = 0; st == STRATA_OK && w < g->workers; w++)
        g->group_of[w] = manual ? manual[w] : w % g->capacity;
    util_free(manual);
    if (st != STRATA_OK) {
        eng_grouping_destroy(g);
        return st;
    }
    if (g->manual) /* by id; the probe's all rank 0 */
        grp_rank_by_id(g);
    *grouping_out = g;
    return STRATA_OK;
}

void eng_grouping_destroy(eng_grouping_t *g)
{
    if (!g)
        return;
    eng_cost_destroy(g->cost);
    util_free(g->time);
    util_free(g->steps);
    util_free(g->dead);
    util_free(g->group_of);
    util_free(g->pending_steps);
    util_free(g->order);
    util_free(g->sorted);
    util_free(g->cand);
    util_free(g->rank);
    util_free(g->start);
    util_free(g->id_of);
    util_free(g->tally);
    util_free(g->id_taken);
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

strata_status_t eng_grouping_measure(eng_grouping_t *g, uint32_t worker,
                                     double seconds, uint64_t steps)
{
    strata_status_t st = grp_check_worker(g, worker);
    if (st != STRATA_OK)
        return st;
    if (!(seconds > 0) || !isfinite(seconds) || steps == 0 ||
        steps < g->steps[worker]) {
        util_error("grouping: worker %" PRIu32 " reported a step time of %g s "
                   "after %" PRIu64 " steps (%" PRIu64 " before); expected a "
                   "positive finite time and a growing count",
                   worker, seconds, steps, g->steps[worker]);
        return STRATA_ERR_INVALID;
    }
    g->time[worker] = seconds;
    g->steps[worker] = steps;
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

strata_status_t eng_grouping_rejoin(eng_grouping_t *g, uint32_t worker,
                                    uint32_t group)
{
    strata_status_t st = grp_check_worker(g, worker);
    if (st != STRATA_OK)
        return st;
    if (!g->dead[worker] || group >= g->capacity) {
        util_error("grouping: worker %" PRIu32 " cannot rejoin group %" PRIu32
                   " (%s, %" PRIu32 " group slots)",
                   worker, group, g->dead[worker] ? "dropped" : "not dropped",
                   g->capacity);
        return STRATA_ERR_INVALID;
    }
    g->dead[worker] = false;
    g->group_of[worker] = group;
    g->steps[worker] = 0;
    g->pending_steps[worker] = 0;
    return STRATA_OK;
}

/* ---- evaluation ---- */

static int grp_cmp_time(const void *a, const void *b, void *arg)
{
    const double *time = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (time[x] != time[y])
        return time[x] < time[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Live workers sorted by time (ties by id) into order/sorted; returns how
 * many, or 0 when some live worker has fewer than `least` steps. */
static uint32_t grp_sort_live(eng_grouping_t *g, uint64_t least)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < g->workers; w++) {
        if (g->dead[w])
            continue;
        if (g->steps[w] < least)
            return 0;
        g->order[n++] = w;
    }
    qsort_r(g->order, n, sizeof(*g->order), grp_cmp_time, g->time);
    for (uint32_t i = 0; i < n; i++)
        g->sorted[i] = g->time[g->order[i]];
    return n;
}

/* Group ids for the k classes of the candidate: the first grouping numbers
 * them by speed; later, each class takes the free id sharing most of its
 * members, the largest classes choosing first, and the rest the lowest free
 * ids. Rewrites cand[] from classes to ids. */
static void grp_label(eng_grouping_t *g, uint32_t n, uint32_t k)
{
    for (uint32_t c = 0; c < g->capacity; c++) {
        g->id_of[c] = c;
        g->id_taken[c] = false;
    }
    if (g->classified) {
        uint32_t *size = g->start; /* the starts are no longer needed */
        for (uint32_t c = 0; c < k; c++)
            size[c] = 0;
        for (uint32_t i = 0; i < n; i++)
            size[g->cand[g->order[i]]]++;
        for (uint32_t done = 0; done < k; done++) {
            uint32_t c = UINT32_MAX; /* the largest class not labelled */
            for (uint32_t j = 0; j < k; j++)
                if (size[j] != UINT32_MAX &&
                    (c == UINT32_MAX || size[j] > size[c]))
                    c = j;
            size[c] = UINT32_MAX;
            memset(g->tally, 0, sizeof(uint32_t) * g->capacity);
            for (uint32_t i = 0; i < n; i++) {
                uint32_t w = g->order[i];
                if (g->cand[w] == c && g->group_of[w] < g->capacity)
                    g->tally[g->group_of[w]]++;
            }
            uint32_t id = UINT32_MAX;
            for (uint32_t j = 0; j < g->capacity; j++)
                if (!g->id_taken[j] &&
                    (id == UINT32_MAX || g->tally[j] > g->tally[id]))
                    id = j;
            g->id_of[c] = id;
            g->id_taken[id] = true;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        g->cand[g->order[i]] = g->id_of[g->cand[g->order[i]]];
}

/* The candidate: the cost model's best classes of the live workers, as
 * group ids in cand[]; its rate. */
static strata_status_t grp_candidate(eng_grouping_t *g, uint32_t n,
                                     double *rate_out)
{
    uint32_t k;
    strata_status_t st = eng_cost_best(g->cost, g->sorted, n, g->fixed_k,
                                       g->start, &k, rate_out);
    if (st != STRATA_OK)
        return st;
    for (uint32_t c = 0, i = 0; i < n; i++) {
        while (c + 1 < k && i >= g->start[c + 1])
            c++;
        g->cand[g->order[i]] = c;
    }
    grp_label(g, n, k);
    return STRATA_OK;
}

/* Hysteresis: whether the candidate replaces the current assignment. It
 * must gain more than a tenth of `gain` at every evaluation since it was
 * first found, and every worker it moves must have taken, since then,
 * ENG_GROUPING_CONFIRM_STEPS steps times `gain` over the gain (at least
 * the former): 2 steps for a gain of `gain` or more, 20 for a tenth of it. */
static bool grp_accept(eng_grouping_t *g, uint32_t n, double rate_new)
{
    bool differs = false;
    for (uint32_t i = 0; i < n; i++)
        differs |= g->cand[g->order[i]] != g->group_of[g->order[i]];
    double gain = rate_new / g->rate - 1;
    if (!differs || !(gain > g->gain / 10)) {
        g->pending = false;
        return false;
    }
    if (!g->pending) {
        g->pending = true;
        memcpy(g->pending_steps, g->steps, sizeof(uint64_t) * g->workers);
        return false;
    }
    double ratio = gain < g->gain ? g->gain / gain : 1;
    uint64_t need = (uint64_t)ceil(ENG_GROUPING_CONFIRM_STEPS * ratio);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t w = g->order[i];
        if (g->cand[w] != g->group_of[w] &&
            g->steps[w] < g->pending_steps[w] + need)
            return false;
    }
    return true;
}

/* Ranks groups by the mean time of their live members; counts them. */
static void grp_refresh_ranks(eng_grouping_t *g)
{
    double *mean = g->sorted; /* the scratch is free again */
    uint32_t *members = g->start, *by_speed = g->cand;
    for (uint32_t c = 0; c < g->capacity; c++)
        mean[c] = members[c] = 0;
    for (uint32_t w = 0; w < g->workers; w++)
        if (!g->dead[w]) {
            mean[g->group_of[w]] += g->time[w];
            members[g->group_of[w]]++;
        }
    uint32_t k = 0;
    for (uint32_t c = 0; c < g->capacity; c++)
        if (members[c]) {
            mean[c] /= members[c];
            by_speed[k++] = c;
        }
    qsort_r(by_speed, k, sizeof(*by_speed), grp_cmp_time, mean);
    bool changed = k != g->count;
    for (uint32_t c = 0; c < g->capacity; c++) {
        double r = 0;
        for (uint32_t i = 0; i < k; i++)
            if (by_speed[i] == c && k > 1)
                r = (double)i / (k - 1);
        changed |= r != g->rank[c];
        g->rank[c] = r;
    }
    g->count = k;
    g->rank_generation += changed;
}

static void grp_apply(eng_grouping_t *g, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        g->group_of[g->order[i]] = g->cand[g->order[i]];
    g->pending = false;
    g->classified = true;
    g->generation++;
}

strata_status_t eng_grouping_evaluate(eng_grouping_t *g, bool *changed_out)
{
    *changed_out = false;
    uint32_t n = grp_sort_live(g, g->classified ? 1 : g->probe_steps);
    if (n == 0) {
        util_debug("grouping: probing, not every live worker has reported "
                   "%" PRIu32 " steps yet",
                   g->probe_steps);
        return STRATA_OK;
    }
    if (!g->manual) {
        double rate_new;
        strata_status_t st = grp_candidate(g, n, &rate_new);
        if (st != STRATA_OK)
            return st;
        /* The probe's groups are not the model's (a worker alone each). */
        g->rate = g->classified
                      ? eng_cost_rate(g->cost, g->time, g->group_of, g->workers)
                      : 0;
        if (!g->classified || grp_accept(g, n, rate_new)) {
            grp_apply(g, n);
            *changed_out = true;
            util_debug("grouping: generation %" PRIu64 ", predicted %.3g "
                       "mean gradients/s (was %.3g)",
                       g->generation, rate_new, g->rate);
            g->rate = rate_new;
        }
    }
    g->classified = true;
    for (uint32_t i = 0; i < n; i++) /* BSP: everyone in group 0 */
        g->cand[g->order[i]] = 0;
    g->rate_bsp = eng_cost_rate(g->cost, g->time, g->cand, g->workers);
    grp_refresh_ranks(g);
    return STRATA_OK;
}

/* ---- queries ---- */

bool eng_grouping_probing(const eng_grouping_t *g)
{
    return !g->classified;
}

uint32_t eng_grouping_count(const eng_grouping_t *g)
{
    return g->count;
}

uint32_t eng_grouping_capacity(const eng_grouping_t *g)
{
    return g->capacity;
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
    return group < g->capacity ? g->rank[group] : 0;
}

uint64_t eng_grouping_rank_generation(const eng_grouping_t *g)
{
    return g->rank_generation;
}

uint64_t eng_grouping_generation(const eng_grouping_t *g)
{
    return g->generation;
}

double eng_grouping_time(const eng_grouping_t *g, uint32_t worker)
{
    return worker < g->workers ? g->time[worker] : 0;
}

uint64_t eng_grouping_steps(const eng_grouping_t *g, uint32_t worker)
{
    return worker < g->workers ? g->steps[worker] : 0;
}

double eng_grouping_rate(const eng_grouping_t *g)
{
    return g->rate;
}

double eng_grouping_rate_bsp(const eng_grouping_t *g)
{
    return g->rate_bsp;
}
