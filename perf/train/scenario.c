/* Named scenarios, and parsing of speed profiles and policy lists. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/train/log.h"
#include "perf/train/rng.h"
#include "perf/train/scenario.h"

static const perf_policy_t known_policies[] = {
    {"local", NULL, false, PERF_DRIVE_LOCAL},
    {"bsp", "bsp", false, PERF_DRIVE_GRADIENT},
    {"ssp", "ssp", false, PERF_DRIVE_GRADIENT},
    {"asp", "asp", false, PERF_DRIVE_GRADIENT},
    {"gssp", "gssp", false, PERF_DRIVE_GRADIENT},
    {"gssp+gdtopk", "gssp", true, PERF_DRIVE_GRADIENT},
    {"esync", "esync", false, PERF_DRIVE_ROUNDS},
    {"fedavg", "fedavg", false, PERF_DRIVE_ROUNDS},
};
#define NKNOWN (sizeof(known_policies) / sizeof(known_policies[0]))

typedef struct named_scenario {
    const char *name;
    const char *speeds;
    int aggregators;
    int groups;
    double base_step_s;
    double budget_s;
    double eval_s;
    int train_size;
    const char *policies;
    const char *changes; /* --speed-change's list, or NULL */
} named_scenario_t;

/*
 * gssp16: the GSSP paper's 16 workers and 4 servers, in four speed tiers,
 * grouped as four. Steps of 15 to 120 ms, well above the ~0.5 ms a
 * minibatch of 32 costs here, so that 20 processes on two cores are paced
 * by sleeping, not by the CPU. GSSP groups workers by the step times they
 * report at the end of an epoch, and runs as BSP until then: 9,600
 * training samples make an epoch 19 steps, so that happens within the
 * first 2-3 s rather than after 117 steps of the slowest (14 s); the engine
 * now groups after a probe of a few steps, and the subset stays so that
 * figures compare with earlier ones.
 * slowdown12: three tiers x1/x2/x8, and a x1 worker that becomes 8 times
 * slower 2 s in (a neighbour job, a throttled CPU): GSSP must move it to
 * the x8 group, or its group waits for it.
 * esync6: the ESync paper's 4 GPUs and 2 CPUs, whose steps took 0.03 s and
 * 3.5 s, scaled down to 5 ms and 0.5 s.
 */
static const named_scenario_t named[] = {
    {"gssp16", "1x4,2x4,4x4,8x4", 4, 0, 0.015, 20.0, 0.5, 9600, "bsp,gssp",
     NULL},
    {"slowdown12", "1x4,2x4,8x4", 3, 0, 0.015, 20.0, 0.5, 9600, "bsp,gssp",
     "0:2:8"},
    {"esync6", "1x4,100x2", 1, 0, 0.005, 60.0, 0.25, 0, "bsp,esync", NULL},
};
#define NNAMED (sizeof(named) / sizeof(named[0]))

void perf_scenario_defaults(perf_scenario_t *sc)
{
    memset(sc, 0, sizeof(*sc));
    snprintf(sc->name, sizeof(sc->name), "custom");
    sc->workers = 4;
    for (int i = 0; i < sc->workers; i++)
        sc->speeds[i] = 1.0;
    sc->aggregators = 1;
    sc->base_step_s = 0.010;
    sc->budget_s = 30.0;
    sc->target_acc = 0.80;
    sc->eval_s = 0.25;
    sc->batch = 32;
    sc->hidden = 256;
    sc->lr = 0.1;
    sc->staleness = 3;
    sc->fedavg_steps = 8;
    sc->seed = 1;
    sc->npolicies = 1;
    sc->policies[0] = known_policies[1];
}

strata_status_t perf_scenario_named(const char *name, perf_scenario_t *sc)
{
    for (size_t i = 0; i < NNAMED; i++) {
        const named_scenario_t *n = &named[i];
        if (strcmp(name, n->name) != 0)
            continue;
        snprintf(sc->name, sizeof(sc->name), "%s", n->name);
        sc->aggregators = n->aggregators;
        sc->groups = n->groups;
        sc->base_step_s = n->base_step_s;
        sc->budget_s = n->budget_s;
        sc->eval_s = n->eval_s;
        sc->train_size = n->train_size;
        sc->nchanges = 0;
        strata_status_t st =
            perf_speeds_parse(n->speeds, sc->speeds, &sc->workers);
        if (st == STRATA_OK)
            st = perf_policies_parse(n->policies, sc->policies, &sc->npolicies);
        if (st == STRATA_OK && n->changes)
            st = perf_speed_changes_parse(n->changes, sc);
        return st;
    }
    char list[256] = "";
    for (size_t i = 0; i < NNAMED; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                 i ? ", " : "", named[i].name);
    perf_error("unknown scenario '%s': expected one of %s", name, list);
    return STRATA_ERR_INVALID;
}

/* One "F" or "FxN" item of a speed list. */
static strata_status_t parse_speed_item(const char *item, double *factor_out,
                                        long *repeat_out)
{
    char *end;
    errno = 0;
    double f = strtod(item, &end);
    long n = 1;
    if (end != item && *end == 'x') {
        const char *rep = end + 1;
        n = strtol(rep, &end, 10);
        if (end == rep)
            n = -1;
    }
    if (end == item || *end != '\0' || errno || !isfinite(f) || f < 1.0 ||
        f > 1e6 || n < 1) {
        perf_error("bad speed '%s': expected a slowdown factor >= 1, "
                   "optionally repeated as FACTORxCOUNT (e.g. 2x4)",
                   item);
        return STRATA_ERR_INVALID;
    }
    *factor_out = f;
    *repeat_out = n;
    return STRATA_OK;
}

#define MAX_ITEMS 256

/* Cut a comma-separated list (copied into buf) into its items; an empty
 * list or item is an error naming `what`. */
static strata_status_t split_list(const char *what, const char *text, char *buf,
                                  size_t size, char **items, int *count_out)
{
    if (snprintf(buf, size, "%s", text) >= (int)size) {
        perf_error("%s list too long (%zu characters)", what, strlen(text));
        return STRATA_ERR_INVALID;
    }
    int n = 0;
    for (char *at = buf;; at++) {
        char *comma = strchr(at, ',');
        if (comma)
            *comma = '\0';
        if (*at == '\0' || n == MAX_ITEMS) {
            perf_error("%s list '%s': %s", what, text,
                       n == MAX_ITEMS ? "too many items" : "empty item");
            return STRATA_ERR_INVALID;
        }
        items[n++] = at;
        if (!comma)
            break;
        at = comma;
    }
    *count_out = n;
    return STRATA_OK;
}

strata_status_t perf_speeds_parse(const char *text, double *speeds_out,
                                  int *count_out)
{
    char buf[4096], *items[MAX_ITEMS];
    double speeds[PERF_MAX_WORKERS];
    int nitems, count = 0;
    strata_status_t st =
        split_list("speed", text, buf, sizeof(buf), items, &nitems);
    for (int k = 0; st == STRATA_OK && k < nitems; k++) {
        double f;
        long n;
        st = parse_speed_item(items[k], &f, &n);
        if (st == STRATA_OK && n > PERF_MAX_WORKERS - count) {
            perf_error("speed list '%s' names more than %d workers", text,
                       PERF_MAX_WORKERS);
            st = STRATA_ERR_INVALID;
        }
        for (long i = 0; st == STRATA_OK && i < n; i++)
            speeds[count++] = f;
    }
    if (st != STRATA_OK)
        return st;
    memcpy(speeds_out, speeds, (size_t)count * sizeof(double));
    *count_out = count;
    return STRATA_OK;
}

/* One "W:T:F" of a speed-change list. */
static strata_status_t parse_change(const char *item, perf_speed_change_t *out)
{
    char *end;
    errno = 0;
    long w = strtol(item, &end, 10);
    double t = NAN, f = NAN;
    if (end != item && *end == ':') {
        const char *at = end + 1;
        t = strtod(at, &end);
        if (end != at && *end == ':') {
            at = end + 1;
            f = strtod(at, &end);
            if (end == at)
                f = NAN;
        } else
            t = NAN;
    }
    if (*end != '\0' || errno || w < 0 || w >= PERF_MAX_WORKERS ||
        !(t >= 0 && t <= 1e6) || !(f > 0 && f <= 1e6)) {
        perf_error("bad speed change '%s': expected WORKER:SECONDS:FACTOR, "
                   "e.g. 0:2:8 (worker 0 becomes 8 times slower 2 s in)",
                   item);
        return STRATA_ERR_INVALID;
    }
    *out = (perf_speed_change_t){(int)w, t, f};
    return STRATA_OK;
}

strata_status_t perf_speed_changes_parse(const char *text, perf_scenario_t *sc)
{
    char buf[1024], *items[MAX_ITEMS];
    int n;
    strata_status_t st =
        split_list("speed change", text, buf, sizeof(buf), items, &n);
    if (st == STRATA_OK && n > PERF_MAX_CHANGES - sc->nchanges) {
        perf_error("more than %d speed changes", PERF_MAX_CHANGES);
        st = STRATA_ERR_INVALID;
    }
    for (int k = 0; st == STRATA_OK && k < n; k++)
        st = parse_change(items[k], &sc->changes[sc->nchanges + k]);
    if (st == STRATA_OK)
        sc->nchanges += n;
    return st;
}

strata_status_t perf_speeds_random(const char *text, double *speeds_out,
                                   int *count_out)
{
    char *end;
    errno = 0;
    long n = strtol(text, &end, 10);
    unsigned long long seed = 0;
    if (end != text && *end == ':') {
        const char *at = end + 1;
        seed = strtoull(at, &end, 10);
        if (end == at || *at == '-')
            end = (char *)text;
    } else
        end = (char *)text;
    if (end == text || *end != '\0' || errno || n < 2 || n > PERF_MAX_WORKERS) {
        perf_error("bad random profile '%s': expected WORKERS:SEED with 2 to "
                   "%d workers, e.g. 12:7",
                   text, PERF_MAX_WORKERS);
        return STRATA_ERR_INVALID;
    }
    perf_rng_t rng;
    perf_rng_seed(&rng, seed);
    double r = 3 + 7 * perf_rng_uniform(&rng);
    for (long i = 0; i < n; i++) /* the fastest, the slowest, the rest */
        speeds_out[i] = i == 0   ? 1
                        : i == 1 ? r
                                 : exp(log(r) * perf_rng_uniform(&rng));
    for (long i = n - 1; i > 0; i--) { /* Fisher-Yates */
        uint32_t j = perf_rng_below(&rng, (uint32_t)i + 1);
        double t = speeds_out[i];
        speeds_out[i] = speeds_out[j];
        speeds_out[j] = t;
    }
    for (long i = 0; i < n; i++) {
        speeds_out[i] = round(speeds_out[i] * 100) / 100;
        speeds_out[i] = speeds_out[i] < 1 ? 1 : speeds_out[i];
    }
    *count_out = (int)n;
    return STRATA_OK;
}

static const perf_policy_t *find_policy(const char *name)
{
    for (size_t i = 0; i < NKNOWN; i++)
        if (strcmp(name, known_policies[i].name) == 0)
            return &known_policies[i];
    return NULL;
}

strata_status_t perf_policies_parse(const char *text, perf_policy_t *out,
                                    int *count_out)
{
    char buf[512], *items[MAX_ITEMS];
    perf_policy_t policies[PERF_MAX_POLICIES];
    int n;
    strata_status_t st =
        split_list("policy", text, buf, sizeof(buf), items, &n);
    if (st == STRATA_OK && n > PERF_MAX_POLICIES) {
        perf_error("policy list '%s': more than %d policies", text,
                   PERF_MAX_POLICIES);
        st = STRATA_ERR_INVALID;
    }
    for (int k = 0; st == STRATA_OK && k < n; k++) {
        const perf_policy_t *p = find_policy(items[k]);
        if (!p) {
            perf_error("unknown policy '%s': expected local, bsp, ssp, asp, "
                       "gssp, gssp+gdtopk, esync or fedavg",
                       items[k]);
            return STRATA_ERR_INVALID;
        }
        for (int i = 0; i < k; i++) {
            if (strcmp(policies[i].name, items[k]) == 0) {
                perf_error("policy '%s' listed twice", items[k]);
                return STRATA_ERR_INVALID;
            }
        }
        policies[k] = *p;
    }
    if (st != STRATA_OK)
        return st;
    memcpy(out, policies, (size_t)n * sizeof(*out));
    *count_out = n;
    return STRATA_OK;
}

strata_status_t perf_scenario_check(const perf_scenario_t *sc)
{
    if (sc->aggregators < 1 || sc->aggregators > PERF_MAX_AGGREGATORS) {
        perf_error("%d aggregators: expected 1 to %d", sc->aggregators,
                   PERF_MAX_AGGREGATORS);
        return STRATA_ERR_INVALID;
    }
    if (sc->groups > sc->workers) {
        perf_error("%d groups of %d workers: expected at most one group per "
                   "worker",
                   sc->groups, sc->workers);
        return STRATA_ERR_INVALID;
    }
    if (sc->target_acc <= 0.0 || sc->target_acc >= 1.0) {
        perf_error("target accuracy %g: expected a fraction in (0, 1)",
                   sc->target_acc);
        return STRATA_ERR_INVALID;
    }
    if (sc->jitter < 0.0 || sc->jitter > 0.9) {
        perf_error("jitter %g: expected a fraction from 0 to 0.9", sc->jitter);
        return STRATA_ERR_INVALID;
    }
    for (int i = 0; i < sc->nchanges; i++)
        if (sc->changes[i].worker >= sc->workers) {
            perf_error("speed change of worker %d: there are %d workers "
                       "(0 to %d)",
                       sc->changes[i].worker, sc->workers, sc->workers - 1);
            return STRATA_ERR_INVALID;
        }
    if (sc->eval_s > sc->budget_s) {
        perf_error("evaluation interval %g s exceeds the budget of %g s",
                   sc->eval_s, sc->budget_s);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

static bool changes_speed(const perf_scenario_t *sc, int w)
{
    for (int i = 0; i < sc->nchanges; i++)
        if (sc->changes[i].worker == w)
            return true;
    return false;
}

int perf_scenario_reporter(const perf_scenario_t *sc)
{
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int i = 0; i < sc->workers; i++)
            if ((pass || !changes_speed(sc, i)) &&
                (best < 0 || sc->speeds[i] < sc->speeds[best]))
                best = i;
    return best;
}
