/*
 * One rank of an integer-exact job (run under strata-run, mpirun, or by
 * hand). Aggregator ranks serve. Workers register tensors of several sizes,
 * push integer-valued gradients and check, after every step, that their
 * parameters hold exactly what the policy promises:
 *   --check bsp    the model after T steps: init - sum of every gradient
 *                  (STRATA_LR = number of workers, so the step is the sum);
 *                  with --resume C the job started from a checkpoint of
 *                  clock C, taken by a job that pushed the same gradients
 *   --check sum    (STRATA_OPTIMIZER=sum) the sum of the clock's gradients
 *   --check momentum  (STRATA_MOMENTUM=m, STRATA_LR=lr) the SGD recurrence
 *                  of strata_sgd_update, replayed in fp32 in its order
 *                  (exact when the number of workers is a power of two)
 *   --check stale  each worker owns the elements j = w (mod W) and pushes -1
 *                  there: after its step c it must see exactly c + 1 of its
 *                  own updates and, from every other worker, at least
 *                  c + 1 - s (the staleness bound) and at most c + 2 + s
 * With --victim V, worker V may be lost (SIGKILLed from outside) and the
 * others go on; every step must still be exact:
 *   --check sum    each clock's sum is that of every worker, or (from one
 *                  clock on, the same in every tensor) of all but V
 *   --check stale  run with STRATA_LR = W (W - 1): an update of the own
 *                  elements adds W - 1 while W workers are live, W from
 *                  one clock on (the same in every tensor, every own update
 *                  after it); V's elements stop, the same everywhere
 * and V must have been dropped by the last step.
 * With --rejoin as well, V is started again once dropped (the same rank, a
 * new process) and rejoins: the others must see it dropped and then back
 * (sum: each clock's sum with every worker again; stale: the own updates
 * at the old scale again); V's new process trains from the clock it is
 * given (strata_clock() after strata_commit) to the end, and under stale
 * sees its own counted updates, each of the old scale. With --die-again
 * N,PATH (sum) the first process of V that rejoined kills itself after N
 * of its steps (it creates PATH; a process that finds PATH trains on), so
 * V is dropped and back twice: with N > 0 the others see it back, out
 * again, and back. --out-optional: the others may never see V out (no
 * clock lost while they were held up). --counted FILE: at the end FILE
 * holds N, the coordinator's count of V's first process's clocks; each
 * step before N must have been with V (none of its counted pushes lost).
 * V's new process, given --counted FILE under stale (FILE holds N when it
 * starts), checks its own elements exactly after each step c: N + c + 1 -
 * J updates (J its first clock), each of the old scale W - 1 or, in one
 * run of consecutive steps, the new W (under gssp the live count is one
 * per clock of every group, so its group's first clocks may still count
 * it out), so that one of its pushes lost or applied twice, before or
 * after the gap, shows at once.
 * --slow-start N: V's first process sleeps 50 ms more in each of its first N
 * steps (under gssp it is then frozen for the probe's regroup well behind
 * the others, and its clocks map to its group's with an offset).
 * Memory: --alloc puts the parameters in strata_alloc memory, --alloc-grad
 * the gradients (over shm, aggregators then read them in place: zero copy);
 * --scribble waits for each push to complete, then overwrites the gradients
 * before pulling: a push that completed before the aggregators read its
 * gradients shows as a wrong model. --try-free: strata_free of the
 * gradients' block, read in place, after the commit (it must be refused:
 * freed, the next step's writes into it would fault).
 * --split K (with --scribble): tensors 0..K-1 are pushed, waited on and
 * overwritten before the others are pushed.
 * Failure injection: --mismatch (worker 1 registers a different layout),
 * --die-at N (worker 1 kills itself at step N), --stop-at N (worker 1 stops,
 * SIGSTOP, at step N: connected, but silent until continued),
 * --die-after-push N (worker 1 pushes step N and, once its writes or
 * notices are all posted and a moment more for its PUSHED, kills itself;
 * the others push step N half a second later, so that the aggregators
 * reduce the push of a dead worker).
 * --takeover (bsp): aggregators may be lost and each shard taken over by a
 * survivor from the shard's protected clock P, resumed at clock R (the
 * worker's info line says so, read through the log handler). exact.c lays
 * the model out itself (partitions of strata_partition_bytes(), shards by
 * the layout's rule: biggest first, each to the lightest shard) and checks
 * after each step c that every element of a lost aggregator's shard holds
 * the bsp model, or, once its partition was served by the taker (a switch
 * made once, never back), that model without every worker's gradients of
 * its shard's clocks P..min(R, c + 1) - 1; every other element the bsp
 * model exactly;
 * at the end the takeover was seen and the last step without the lost
 * clocks.
 * --takeover --check stale (ssp, asp): the snapshot at P holds every
 * worker's clocks before P and, a worker's own, those it was ahead by when
 * the slowest reached P (up to the staleness bound; under asp any below
 * R), partition by partition. So a worker's own elements of the lost
 * shard hold exactly c + 1 updates, or, once its partition was served by
 * the taker (never back), c + 1 - (min(R, c + 1) - K) for one K in
 * [P, R) per partition, the clocks of its own the snapshot held, the same
 * at every later step; the others' elements keep their staleness bounds,
 * the lower one R - P clocks less on the lost shard. Under gssp with
 * manual groups (no regroup: a worker's clock is its group's) the same
 * holds, R the worker's own resume clock (its takeover line).
 * --spares N (with --takeover): the last N aggregators are spares
 * (strata-agg --spare), whose shards the layout gives no partition.
 * Exit codes: 0 ok, 1 wrong values, 2 usage, 3 an error status from Strata.
 */
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/strata.h>

#include "job.h"

#define NT 5
static const size_t sizes[NT] = {1000, 3, 5000, 77, 2500};

typedef struct opts {
    int steps;
    const char *check;
    long staleness;     /* -1: unbounded */
    float lr, momentum; /* for --check momentum */
    bool alloc, alloc_grad, scribble, mismatch, sleep, try_free;
    int die_at, stop_at, die_after_push;
    int split;      /* --split K: tensors 0..K-1 pushed and waited on first */
    int slow_start; /* V's first steps 50 ms longer (--slow-start N) */
    int resume;     /* clocks the model had when the job started */
    int victim;     /* -1: none */
    bool rejoin;
    bool out_optional;      /* --out-optional: V may never be seen out */
    const char *counted;    /* --counted FILE: V's first N clocks count */
    int again_n;            /* --die-again: steps after rejoining; -1 none */
    const char *again_path; /* ... made by the process that dies */
    bool takeover;          /* --takeover: a shard may resume from P */
    int spares;             /* --spares: the last aggregators hold none */
} opts_t;

/* --takeover: what the worker's takeover lines said, per shard (taker -1
 * until its line came; r is stored last), and the model laid out as the
 * engine does: each partition's shard, and whether it was seen without its
 * lost clocks. */
#define TAKEN_MAX 16
static struct {
    _Atomic int taker[TAKEN_MAX];
    _Atomic long long p[TAKEN_MAX], r[TAKEN_MAX];
    size_t part_elems, nparts, nshards;
    int *shard;
    char *without;
    float *model;    /* the bsp model after the last step, kept step by step
                        (bsp_value's sums at every step would be quadratic) */
    long long *kept; /* --check stale: K of each partition, -1 unknown */
} taken;

/* Every line goes to stderr as usual; the takeover's gives its clocks. The
 * progress thread logs it before the taker's model of the shard can land,
 * so every step that shows it comes after. */
static void takeover_log(void *arg, strata_log_level_t level, const char *line)
{
    (void)arg;
    (void)level;
    int lost, shard, taker;
    long long r, p;
    const char *at = strstr(line, "aggregator rank ");
    if (at &&
        sscanf(at,
               "aggregator rank %d lost: shard %d taken over by aggregator "
               "rank %d, resumed at clock %lld (protected at %lld",
               &lost, &shard, &taker, &r, &p) == 5 &&
        shard >= 0 && shard < TAKEN_MAX) {
        atomic_store(&taken.p[shard], p);
        atomic_store(&taken.taker[shard], taker);
        atomic_store(&taken.r[shard], r);
    } else if (strstr(line, " taken over by aggregator rank ")) {
        fprintf(stderr, "exact: a takeover line not understood: %s\n", line);
    }
    fprintf(stderr, "%s\n", line);
}

/* What the steps showed of the victim's loss (--victim). `mode` is the
 * current step's verdict, -1 until an element decides it: sum, 0 with the
 * victim, 1 without; stale, the own updates at the new scale. `last` is the
 * previous step's; `victim_value` the victim's elements at the last step. */
static struct {
    int mode, last;
    bool have_victim_value;
    double victim_value;
    bool out, back; /* --rejoin: the victim seen out, and back after */
    int agains;     /* --die-again: seen out once more after back */
    char *without;  /* [steps]: step c was without the victim (--counted) */
    int counted;    /* V's new process under stale: its old one's N, -1 */
    int first;      /* ... and its own first clock */
} seen = {.mode = -1, .last = 0, .counted = -1};

/* One element's verdict for the step; false if it contradicts another's. */
static bool seen_mode(int mode)
{
    if (seen.mode < 0)
        seen.mode = mode;
    return seen.mode == mode;
}

/* The step's verdict against the previous: the victim never comes back
 * (sum), the new scale once begun goes on at every own update (stale). */
static int seen_step_end(const opts_t *o, int w, int c)
{
    int mode = seen.mode < 0 ? seen.last : seen.mode;
    if (seen.without && seen.mode >= 0)
        seen.without[c] = (char)seen.mode;
    bool sum = strcmp(o->check, "sum") == 0;
    bool ok = sum ? mode >= seen.last
                  : mode == seen.last + (seen.last > 0) ||
                        (seen.last == 0 && mode <= 1);
    if (o->rejoin) { /* out, then back: sum 1 then 0, stale stops growing */
        bool back =
            sum ? seen.out && mode == 0 : seen.last > 0 && mode == seen.last;
        if (sum && seen.back && mode == 1 && o->again_n > 0 &&
            seen.agains == 0) { /* its second process dropped */
            seen.agains++;
            seen.back = false;
        }
        ok = (sum || mode == seen.last || mode == seen.last + 1) &&
             !(seen.back && !back);
        seen.back |= back;
        seen.out |= sum ? mode == 1 : mode > 0;
    }
    if (!ok) {
        fprintf(stderr,
                "exact: worker %d after step %d: the victim's loss went "
                "from %d to %d\n",
                w, c, seen.last, mode);
        return 1;
    }
    seen.last = mode;
    seen.mode = -1;
    return 0;
}

static float init_value(int t, size_t j)
{
    return (float)((int)((t * 31 + j) % 13) - 6);
}

static float grad_value(const opts_t *o, int nw, int w, int t, size_t j, int c)
{
    if (strcmp(o->check, "stale") == 0)
        return (int)(j % (size_t)nw) == w ? -1.0f : 0.0f;
    return (float)(((w + 1) * (int)((j + (size_t)t) % 5 + 1) + c) % 7 - 3);
}

static int fail_status(const char *what, strata_status_t st)
{
    return test_job_fail("exact", what, st);
}

/* strata_setting gives the effective values a binding checks against: the
 * policy as the environment set it (or the default), never the secret
 * (whose refusal is logged: kept out of the job's log here). The handler
 * is per process, and the progress threads may log meanwhile (a failure
 * the coordinator already announced): those lines go through untouched. */
static void quiet(void *arg, strata_log_level_t level, const char *line)
{
    (void)level;
    if (strstr(line, "STRATA_JOB_SECRET"))
        ++*(int *)arg;
    else
        fprintf(stderr, "%s\n", line);
}

static int check_settings(strata_ctx_t *ctx)
{
    const char *want =
        getenv("STRATA_POLICY") ? getenv("STRATA_POLICY") : "bsp";
    char buf[64], tiny[2];
    size_t need = 0;
    int refusals = 0;
    bool ok =
        strata_setting(ctx, "policy", buf, sizeof(buf), NULL) == STRATA_OK &&
        strcmp(buf, want) == 0 &&
        strata_setting(ctx, "STRATA_POLICY", tiny, sizeof(tiny), &need) ==
            STRATA_ERR_RANGE &&
        need == strlen(want) + 1;
    strata_log_set_handler(quiet, &refusals);
    ok = ok && strata_setting(ctx, "STRATA_JOB_SECRET", buf, sizeof(buf),
                              NULL) == STRATA_ERR_INVALID;
    strata_log_set_handler(NULL, NULL);
    if (!ok || refusals != 1) {
        fprintf(stderr,
                "exact: strata_setting does not give the policy %s "
                "(or gave the secret)\n",
                want);
        return 1;
    }
    return 0;
}

/* Under bsp, element j of tensor t after the job's step c (-1: the
 * initial model). */
static float bsp_value(const opts_t *o, int nw, int t, size_t j, int c)
{
    float want = init_value(t, j);
    for (int k = 0; k < o->resume; k++)
        for (int v = 0; v < nw; v++)
            want -= grad_value(o, nw, v, t, j, k);
    for (int k = 0; k <= c; k++)
        for (int v = 0; v < nw; v++)
            want -= grad_value(o, nw, v, t, j, k);
    return want;
}

/* --check sum with a victim: the sum with every worker or without it. */
static int check_sum_victim(const opts_t *o, int nw, int w, int c, int t,
                            const float *param, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        float all = 0, without = 0;
        for (int v = 0; v < nw; v++) {
            float g = grad_value(o, nw, v, t, j, c);
            all += g;
            without += v == o->victim ? 0 : g;
        }
        bool ok = param[j] == all || param[j] == without;
        if (ok && all != without)
            ok = seen_mode(param[j] == without);
        if (!ok) {
            fprintf(stderr,
                    "exact: worker %d after step %d: tensor %d [%zu] = %g, "
                    "expected %g (with worker %d) or %g (without), as in "
                    "the step's other elements\n",
                    w, c, t, j, param[j], all, o->victim, without);
            return 1;
        }
    }
    return 0;
}

/* --check stale with a victim: see the header. */
static int check_stale_victim(const opts_t *o, int nw, int w, int c, int t,
                              const float *param, size_t n)
{
    double old_unit = nw - 1, new_unit = nw;
    for (size_t j = 0; j < n; j++) {
        double got = param[j] - init_value(t, j);
        int owner = (int)(j % (size_t)nw);
        bool ok;
        if (owner == w && o->rejoin && w == o->victim) {
            ok = true; /* below */
        } else if (owner == w) {
            double at_new = got - (c + 1) * old_unit;
            ok = at_new >= 0 && at_new <= c + 1 && at_new == (int)at_new &&
                 seen_mode((int)at_new);
        } else {
            double lo = o->staleness < 0 || owner == o->victim
                            ? 0
                            : (c + 1 - o->staleness) * old_unit;
            double hi =
                o->staleness < 0 ? 1e9 : (c + 2 + o->staleness) * new_unit;
            ok = got >= lo && got <= hi;
        }
        /* The victim's pushes stopped at one boundary, alike everywhere;
         * after a rejoin, its new process's own: each of the old scale,
         * and with the old one's count known, exactly those counted. */
        if (ok && owner == w && o->rejoin && w == o->victim &&
            seen.counted >= 0) {
            int own = seen.counted + c + 1 - seen.first;
            double at_new = got - own * old_unit;
            ok = at_new >= 0 && at_new <= own && at_new == (int)at_new &&
                 seen_mode((int)at_new);
        } else if (ok && owner == w && o->rejoin && w == o->victim) {
            ok = got >= 0 && got <= (c + 1) * old_unit &&
                 got / old_unit == (int)(got / old_unit);
        } else if (ok && owner == o->victim && c == o->steps - 1 &&
                   !o->rejoin) {
            if (!seen.have_victim_value)
                seen.victim_value = got;
            seen.have_victim_value = true;
            ok = got == seen.victim_value;
        }
        if (!ok) {
            fprintf(stderr,
                    "exact: worker %d after step %d: tensor %d [%zu] (owner "
                    "%d) has %g of updates, not what the steps so far allow "
                    "(own updates %g each, then %g each from one clock on)\n",
                    w, c, t, j, owner, got, old_unit, new_unit);
            return 1;
        }
    }
    return 0;
}

/* --takeover: the model's partitions (one dtype, cut in the order
 * registered, every one full but the last) and their shards as the layout
 * assigns them: the biggest first, each to the shard with the fewest bytes
 * so far (ties: the lowest), which for these partitions is their order.
 * With protection every aggregator holds one shard, its own rank's; the
 * last `spares` shards get no partition. */
static int takeover_layout(strata_ctx_t *ctx, int spares)
{
    size_t total = 0, nshards = (size_t)strata_num_aggregators(ctx);
    nshards =
        spares >= 0 && (size_t)spares < nshards ? nshards - (size_t)spares : 0;
    for (int t = 0; t < NT; t++)
        total += sizes[t];
    taken.part_elems = strata_partition_bytes(ctx) / sizeof(float);
    if (taken.part_elems == 0 || nshards == 0 || nshards > TAKEN_MAX)
        return fail_status("laying the model out", STRATA_ERR_INVALID);
    taken.nshards = nshards;
    for (size_t s = 0; s < TAKEN_MAX; s++) {
        atomic_store(&taken.taker[s], -1);
        atomic_store(&taken.r[s], -1);
    }
    taken.nparts = (total + taken.part_elems - 1) / taken.part_elems;
    taken.shard = calloc(taken.nparts, sizeof(*taken.shard));
    taken.without = calloc(taken.nparts, 1);
    taken.model = calloc(total, sizeof(*taken.model));
    taken.kept = calloc(taken.nparts, sizeof(*taken.kept));
    size_t *load = calloc(nshards, sizeof(*load));
    if (!taken.shard || !taken.without || !taken.model || !taken.kept ||
        !load) {
        free(load);
        return fail_status("laying the model out", STRATA_ERR_NOMEM);
    }
    for (size_t i = 0; i < taken.nparts; i++) {
        size_t best = 0;
        for (size_t s = 1; s < nshards; s++)
            if (load[s] < load[best])
                best = s;
        taken.shard[i] = (int)best;
        load[best] += i + 1 < taken.nparts ? taken.part_elems
                                           : total - i * taken.part_elems;
        taken.kept[i] = -1;
    }
    free(load);
    size_t g = 0;
    for (int t = 0; t < NT; t++)
        for (size_t j = 0; j < sizes[t]; j++)
            taken.model[g++] = init_value(t, j);
    return 0;
}

/* --takeover: element g of the model (tensors back to back): its
 * partition, and whether the lost aggregator's shard held it. */
/* Whether element g's partition (part_out) is of a shard taken over, and
 * that shard's P and R (-1 if not). */
static bool taken_moved(size_t g, size_t *part_out, long long *p_out,
                        long long *r_out)
{
    *part_out = g / taken.part_elems;
    int shard = taken.shard[*part_out];
    *r_out = atomic_load(&taken.r[shard]);
    *p_out = *r_out >= 0 ? atomic_load(&taken.p[shard]) : -1;
    return *r_out >= 0;
}

static size_t tensor_base(int t)
{
    size_t base = 0;
    for (int k = 0; k < t; k++)
        base += sizes[k];
    return base;
}

/* --takeover: see the header. */
static int check_taken(const opts_t *o, int nw, int w, int c, int t,
                       const float *param, size_t n)
{
    size_t base = tensor_base(t), part;
    long long p, r;
    for (size_t j = 0; j < n; j++) {
        bool moved = taken_moved(base + j, &part, &p, &r);
        float want = taken.model[base + j];
        for (int v = 0; v < nw; v++)
            want -= grad_value(o, nw, v, t, j, c);
        taken.model[base + j] = want;
        float without = want;
        for (long long k = p; moved && k < r && k <= c; k++)
            for (int v = 0; v < nw; v++)
                without += grad_value(o, nw, v, t, j, (int)k);
        bool ok = param[j] == want;
        if (moved && without != want && param[j] == without) {
            taken.without[part] = 1;
            ok = true;
        } else if (moved && without != want && ok)
            ok = !taken.without[part] && c < o->steps - 1;
        if (!ok) {
            fprintf(stderr,
                    "exact: worker %d after step %d: tensor %d [%zu] "
                    "(partition %zu, shard %d%s) = %g, expected %g%s",
                    w, c, t, j, part, taken.shard[part],
                    moved ? ", taken over" : "", param[j],
                    moved ? without : want,
                    moved ? " (without clocks P..R-1" : "\n");
            if (moved)
                fprintf(stderr, ", P %lld, R %lld; %g with them%s)\n", p, r,
                        want,
                        taken.without[part]
                            ? ", but the partition was seen without them"
                            : "");
            return 1;
        }
    }
    return 0;
}

/* --takeover --check stale: one own element of a partition of the lost
 * shard after step c, `got` its updates; see the header. */
static bool taken_own(size_t part, long long p, long long r, int c, double got)
{
    long long upto = c + 1 < r ? c + 1 : r, kept = taken.kept[part];
    double missing = c + 1 - got;
    if (kept >= 0)
        return missing == (double)(upto > kept ? upto - kept : 0);
    if (missing == 0)
        return true;
    kept = upto - (long long)missing;
    if (missing != (long long)missing || kept < p || kept >= upto)
        return false;
    taken.kept[part] = kept;
    taken.without[part] = 1;
    return true;
}

/* --takeover --check stale: see the header. */
static int check_taken_stale(const opts_t *o, int nw, int w, int c, int t,
                             const float *param, size_t n)
{
    size_t base = tensor_base(t), part;
    long long p, r;
    for (size_t j = 0; j < n; j++) {
        bool moved = taken_moved(base + j, &part, &p, &r);
        double got = param[j] - init_value(t, j);
        bool ok;
        if ((int)(j % (size_t)nw) == w) {
            ok = moved ? taken_own(part, p, r, c, got) : got == c + 1;
        } else {
            double lo = o->staleness < 0 ? 0 : c + 1 - o->staleness;
            double hi = o->staleness < 0 ? 1e9 : c + 2 + o->staleness;
            ok = got >= lo - (moved ? (double)(r - p) : 0) && got <= hi;
        }
        if (!ok) {
            fprintf(stderr,
                    "exact: worker %d after step %d: tensor %d [%zu] "
                    "(owner %zu, partition %zu, shard %d%s, P %lld, R %lld, "
                    "its own clocks kept %lld) has %g updates\n",
                    w, c, t, j, j % (size_t)nw, part, taken.shard[part],
                    moved ? ", taken over" : "", p, r, taken.kept[part], got);
            return 1;
        }
    }
    return 0;
}

/* --takeover: at the end, a takeover came and was seen; one line per
 * shard taken over. */
static int takeover_end(const opts_t *o, int w)
{
    int ntaken = 0;
    for (size_t s = 0; s < taken.nshards; s++) {
        long long r = atomic_load(&taken.r[s]);
        if (r < 0)
            continue;
        long long p = atomic_load(&taken.p[s]);
        size_t nmoved = 0, nwithout = 0;
        for (size_t i = 0; i < taken.nparts; i++) {
            nmoved += taken.shard[i] == (int)s;
            nwithout += taken.shard[i] == (int)s && taken.without[i];
        }
        printf("worker %d: shard %zu taken over by aggregator rank %d, "
               "resumed at clock %lld (protected at %lld): %zu of its %zu "
               "partitions without clocks %lld..%lld\n",
               w, s, atomic_load(&taken.taker[s]), r, p, nwithout, nmoved, p,
               r - 1);
        ntaken++;
    }
    if (ntaken == 0) {
        fprintf(stderr,
                "exact: worker %d: %d steps, and no shard was taken over\n", w,
                o->steps);
        return 1;
    }
    return 0;
}

static int check_model(const opts_t *o, int nw, int w, int c, int t,
                       const float *param, size_t n)
{
    if (o->victim >= 0 && strcmp(o->check, "sum") == 0)
        return check_sum_victim(o, nw, w, c, t, param, n);
    if (o->victim >= 0 && strcmp(o->check, "stale") == 0)
        return check_stale_victim(o, nw, w, c, t, param, n);
    if (o->takeover && strcmp(o->check, "stale") == 0)
        return check_taken_stale(o, nw, w, c, t, param, n);
    if (o->takeover)
        return check_taken(o, nw, w, c, t, param, n);
    for (size_t j = 0; j < n; j++) {
        float want = init_value(t, j);
        double lo, hi;
        if (strcmp(o->check, "sum") == 0) {
            want = 0;
            for (int v = 0; v < nw; v++)
                want += grad_value(o, nw, v, t, j, c);
        } else if (strcmp(o->check, "bsp") == 0) {
            want = bsp_value(o, nw, t, j, c);
        } else if (strcmp(o->check, "momentum") == 0) {
            float mom = 0, scale = (float)(1.0 / nw);
            for (int k = 0; k <= c; k++) {
                float sum = 0;
                for (int v = 0; v < nw; v++)
                    sum += grad_value(o, nw, v, t, j, k);
                float g = scale * sum + 0.0f * want;
                mom = o->momentum * mom + g;
                want = want - o->lr * mom;
            }
        }
        if (strcmp(o->check, "stale") != 0) {
            if (param[j] != want) {
                fprintf(stderr,
                        "exact: worker %d after step %d: tensor %d [%zu] = "
                        "%g, expected %g\n",
                        w, c, t, j, param[j], want);
                return 1;
            }
            continue;
        }
        double seen = param[j] - want;
        bool own = (int)(j % (size_t)nw) == w;
        lo = own ? c + 1 : (o->staleness < 0 ? 0 : c + 1 - o->staleness);
        hi = own ? c + 1 : (o->staleness < 0 ? 1e9 : c + 2 + o->staleness);
        if (seen < lo || seen > hi) {
            fprintf(stderr,
                    "exact: worker %d after step %d: tensor %d [%zu] "
                    "(owner %zu) has %g updates, outside [%g, %g]\n",
                    w, c, t, j, j % (size_t)nw, seen, lo, hi);
            return 1;
        }
    }
    return 0;
}

/* --counted: the count in the file, -1 (said) if there is none. */
static int read_counted(const opts_t *o, int w)
{
    FILE *f = fopen(o->counted, "r");
    int n = -1;
    if (!f || fscanf(f, "%d", &n) != 1 || n < 0) {
        fprintf(stderr, "exact: worker %d: no count of clocks in %s\n", w,
                o->counted);
        n = -1;
    }
    if (f)
        fclose(f);
    return n;
}

/* --counted: no step before the count in the file was without V. */
static int check_counted(const opts_t *o, int w)
{
    int n = read_counted(o, w);
    if (n < 0)
        return 1;
    for (int c = 0; c < n && c < o->steps; c++)
        if (seen.without[c] == 1) {
            fprintf(stderr,
                    "exact: worker %d: step %d was without worker %d, whose "
                    "first %d clocks count\n",
                    w, c, o->victim, n);
            return 1;
        }
    return 0;
}

/* The tensors live until after strata_finalize. */
static float *param[NT], *grad[NT];

static void free_tensors(strata_ctx_t *ctx, const opts_t *o)
{
    for (int t = 0; t < NT; t++) {
        if (o->alloc)
            strata_free(ctx, param[t]);
        else
            free(param[t]);
        if (!o->alloc_grad) /* strata_alloc'd: goes with the context */
            free(grad[t]);
    }
}

/* --alloc-grad: the gradients back to back in one strata_alloc block, in
 * the order of the layout, so that a partition spanning tensors lies
 * contiguous too (aggregators read only such partitions in place). */
static strata_status_t alloc_grad(strata_ctx_t *ctx, int t, size_t n)
{
    static float *block;
    static size_t used;
    if (t == 0) {
        size_t total = 1; /* room for --mismatch's extra element */
        for (int k = 0; k < NT; k++)
            total += sizes[k];
        strata_status_t st =
            strata_alloc(ctx, total * sizeof(float), (void **)&block);
        if (st != STRATA_OK)
            return st;
        used = 0;
    }
    grad[t] = block + used;
    used += n;
    return STRATA_OK;
}

/* --die-after-push: worker 1 pushes and dies once the push is out (its
 * request completes only when the aggregators read it, so the metrics
 * tell: its bytes or notices counted); the others push later. */
static void die_after_push(strata_ctx_t *ctx, int w)
{
    if (w != 1) {
        usleep(500 * 1000);
        return;
    }
    strata_metrics_t before = STRATA_METRICS_INIT, m = STRATA_METRICS_INIT;
    strata_metrics(ctx, &before);
    strata_request_t *push;
    if (strata_push(ctx, NULL, 0, &push) != STRATA_OK)
        raise(SIGKILL);
    for (int i = 0; i < 10000; i++) { /* at most 10 s */
        strata_metrics(ctx, &m);
        if (m.in_place_pushes > before.in_place_pushes ||
            m.bytes_pushed > before.bytes_pushed)
            break;
        usleep(1000);
    }
    usleep(100 * 1000);
    raise(SIGKILL);
}

/* Tensors [from, to) pushed, waited on and overwritten at once. */
static strata_status_t push_scribbling(strata_ctx_t *ctx, int from, int to)
{
    int ids[NT];
    for (int t = from; t < to; t++)
        ids[t - from] = t;
    strata_request_t *push;
    strata_status_t st =
        from == 0 && to == NT
            ? strata_push(ctx, NULL, 0, &push)
            : strata_push(ctx, ids, (size_t)(to - from), &push);
    if (st == STRATA_OK)
        st = strata_wait(&push, -1);
    for (int t = from; t < to && st == STRATA_OK; t++)
        for (size_t j = 0; j < sizes[t]; j++)
            grad[t][j] = 1e9f;
    return st;
}

/* A step whose gradients are overwritten as soon as the push completes,
 * before the pull: what the push promised is that they may be. With
 * --split K, tensors 0..K-1 are pushed and waited on before the rest (a
 * framework's hook that waits): that push completes without the rest of
 * its clock. */
static strata_status_t step_scribbling(strata_ctx_t *ctx, int split)
{
    strata_request_t *pull;
    strata_status_t st = split > 0 ? push_scribbling(ctx, 0, split) : STRATA_OK;
    if (st == STRATA_OK)
        st = push_scribbling(ctx, split, NT);
    if (st == STRATA_OK)
        st = strata_pull(ctx, strata_clock(ctx), &pull);
    return st == STRATA_OK ? strata_wait(&pull, -1) : st;
}

static int run_worker(strata_ctx_t *ctx, const opts_t *o)
{
    int nw = strata_num_workers(ctx), w = strata_worker_index(ctx);
    bool sum = strcmp(o->check, "sum") == 0;
    if (o->counted && o->steps > 0 &&
        !(seen.without = calloc((size_t)o->steps, 1)))
        return fail_status("allocating", STRATA_ERR_NOMEM);
    for (int t = 0; t < NT; t++) {
        size_t n = sizes[t] + (o->mismatch && w == 1 && t == 2);
        size_t bytes = n * sizeof(float);
        strata_status_t st = STRATA_OK;
        if (o->alloc)
            st = strata_alloc(ctx, bytes, (void **)&param[t]);
        else
            param[t] = malloc(bytes);
        if (st == STRATA_OK && o->alloc_grad)
            st = alloc_grad(ctx, t, n);
        else if (st == STRATA_OK)
            grad[t] = malloc(bytes);
        if (st != STRATA_OK || !param[t] || !grad[t])
            return fail_status("allocating tensors", st);
        for (size_t j = 0; j < n; j++)
            param[t][j] = w == 0 ? init_value(t, j) : 12345.0f;
        char name[32];
        snprintf(name, sizeof(name), "layer%d.weight", t);
        st = strata_tensor_register(ctx, name, param[t], grad[t], n,
                                    STRATA_FP32, NULL);
        if (st != STRATA_OK)
            return fail_status("registering", st);
    }
    strata_status_t st = strata_commit(ctx);
    if (st != STRATA_OK)
        return fail_status("commit", st);
    if (o->takeover && takeover_layout(ctx, o->spares))
        return 3;
    if (o->try_free) /* refused (logged): freed, the steps would fault */
        strata_free(ctx, grad[0]);
    int first = (int)strata_clock(ctx); /* > 0: it rejoined */
    bool rejoined = first > 0;
    for (int t = 0; t < NT && !sum && !rejoined; t++)
        for (size_t j = 0; j < sizes[t]; j++)
            if (param[t][j] != bsp_value(o, nw, t, j, -1)) {
                fprintf(stderr,
                        "exact: worker %d: initial model [%d][%zu] "
                        "= %g, expected %g\n",
                        w, t, j, param[t][j], bsp_value(o, nw, t, j, -1));
                return 1;
            }
    if (rejoined)
        printf("worker %d: rejoined at clock %d\n", w, first);
    if (rejoined && o->counted && strcmp(o->check, "stale") == 0) {
        seen.counted = read_counted(o, w);
        seen.first = first;
        if (seen.counted < 0)
            return 2;
    }
    bool dies_again = false; /* --die-again, the first to rejoin */
    if (rejoined && o->again_n >= 0 && access(o->again_path, F_OK) != 0)
        dies_again = true;
    for (int c = first; c < o->steps; c++) {
        if (c == o->die_at && w == 1 && !rejoined)
            raise(SIGKILL);
        if (dies_again && c == first + o->again_n) {
            FILE *f = fopen(o->again_path, "w");
            if (!f) {
                perror(o->again_path);
                return 2;
            }
            fclose(f);
            printf("worker %d: dies again at clock %d\n", w, c);
            fflush(stdout);
            raise(SIGKILL);
        }
        if (c == o->stop_at && w == 1)
            raise(SIGSTOP);
        for (int t = 0; t < NT; t++)
            for (size_t j = 0; j < sizes[t]; j++)
                grad[t][j] = grad_value(o, nw, w, t, j, c);
        if (o->sleep)
            usleep((useconds_t)(((w * 7 + c * 3) % 5) * 1000));
        if (w == o->victim && !rejoined && c < o->slow_start)
            usleep(50 * 1000);
        if (c == o->die_after_push && !rejoined)
            die_after_push(ctx, w);
        st = o->scribble ? step_scribbling(ctx, o->split) : strata_step(ctx);
        if (st != STRATA_OK)
            return fail_status("step", st);
        for (int t = 0; t < NT; t++)
            if (check_model(o, nw, w, c, t, param[t], sizes[t]))
                return 1;
        /* V back: its own updates at the new scale, as the others' */
        if (o->victim >= 0 && (!rejoined || seen.counted >= 0) &&
            seen_step_end(o, w, c))
            return 1;
    }
    if (o->counted && !rejoined && check_counted(o, w))
        return 1;
    if (o->takeover && takeover_end(o, w))
        return 1;
    if (o->rejoin && !rejoined && !(seen.out && seen.back) &&
        !(o->out_optional && !seen.out)) {
        fprintf(stderr,
                "exact: worker %d: %d steps, and worker %d was not seen "
                "%s\n",
                w, o->steps, o->victim,
                seen.out ? "back after it was dropped" : "dropped");
        return 1;
    }
    if (o->again_n > 0 && !rejoined && seen.agains != 1) {
        fprintf(stderr,
                "exact: worker %d: %d steps, and worker %d was not seen "
                "out a second time (--die-again)\n",
                w, o->steps, o->victim);
        return 1;
    }
    if (o->victim >= 0 && !o->rejoin && seen.last == 0) {
        fprintf(stderr,
                "exact: worker %d: %d steps, and worker %d was never "
                "dropped\n",
                w, o->steps, o->victim);
        return 1;
    }
    strata_metrics_t m = STRATA_METRICS_INIT;
    strata_metrics(ctx, &m);
    printf("worker %d: %d steps exact (%llu bytes pushed, %llu pulled, %llu "
           "staging copies, %llu pushes read in place)\n",
           w, o->steps, (unsigned long long)m.bytes_pushed,
           (unsigned long long)m.bytes_pulled,
           (unsigned long long)m.staging_copies,
           (unsigned long long)m.in_place_pushes);
    return 0;
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option opts[] = {
        {"steps", required_argument, NULL, 't'},
        {"check", required_argument, NULL, 'c'},
        {"staleness", required_argument, NULL, 's'},
        {"alloc", no_argument, NULL, 'a'},
        {"alloc-grad", no_argument, NULL, 'G'},
        {"scribble", no_argument, NULL, 'b'},
        {"try-free", no_argument, NULL, 'f'},
        {"split", required_argument, NULL, 'Y'},
        {"mismatch", no_argument, NULL, 'm'},
        {"sleep", no_argument, NULL, 'z'},
        {"slow-start", required_argument, NULL, 'S'},
        {"die-at", required_argument, NULL, 'd'},
        {"stop-at", required_argument, NULL, 'p'},
        {"die-after-push", required_argument, NULL, 'K'},
        {"lr", required_argument, NULL, 'l'},
        {"momentum", required_argument, NULL, 'o'},
        {"resume", required_argument, NULL, 'r'},
        {"victim", required_argument, NULL, 'v'},
        {"rejoin", no_argument, NULL, 'j'},
        {"die-again", required_argument, NULL, 'g'},
        {"out-optional", no_argument, NULL, 'u'},
        {"counted", required_argument, NULL, 'k'},
        {"takeover", no_argument, NULL, 'T'},
        {"spares", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.steps = 5,
                  .check = "bsp",
                  .staleness = 0,
                  .die_at = -1,
                  .stop_at = -1,
                  .die_after_push = -1,
                  .victim = -1,
                  .again_n = -1};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            o->steps = atoi(optarg);
            break;
        case 'c':
            o->check = optarg;
            break;
        case 's':
            o->staleness = strcmp(optarg, "inf") == 0 ? -1 : atol(optarg);
            break;
        case 'a':
            o->alloc = true;
            break;
        case 'G':
            o->alloc_grad = true;
            break;
        case 'b':
            o->scribble = true;
            break;
        case 'f':
            o->try_free = true;
            break;
        case 'Y':
            o->split = atoi(optarg);
            if (o->split < 0 || o->split >= NT)
                return -1;
            break;
        case 'm':
            o->mismatch = true;
            break;
        case 'S':
            o->slow_start = atoi(optarg);
            break;
        case 'z':
            o->sleep = true;
            break;
        case 'd':
            o->die_at = atoi(optarg);
            break;
        case 'p':
            o->stop_at = atoi(optarg);
            break;
        case 'K':
            o->die_after_push = atoi(optarg);
            break;
        case 'l':
            o->lr = strtof(optarg, NULL);
            break;
        case 'o':
            o->momentum = strtof(optarg, NULL);
            break;
        case 'r':
            o->resume = atoi(optarg);
            break;
        case 'v':
            o->victim = atoi(optarg);
            break;
        case 'j':
            o->rejoin = true;
            break;
        case 'u':
            o->out_optional = true;
            break;
        case 'k':
            o->counted = optarg;
            break;
        case 'T':
            o->takeover = true;
            break;
        case 'P':
            o->spares = atoi(optarg);
            break;
        case 'g': { /* N,PATH */
            char *end;
            o->again_n = (int)strtol(optarg, &end, 10);
            if (*end != ',' || !end[1] || o->again_n < 0)
                return -1;
            o->again_path = end + 1;
            break;
        }
        default:
            return -1;
        }
    }
    return o->takeover && strcmp(o->check, "bsp") != 0 &&
                   strcmp(o->check, "stale") != 0
               ? -1
               : 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse(argc, argv, &o) != 0)
        return 2;
    strata_ctx_t *ctx;
    strata_status_t st = strata_init(&ctx);
    if (st != STRATA_OK)
        return fail_status("init", st);
    int rc = check_settings(ctx);
    bool worker = strata_role(ctx) == STRATA_ROLE_WORKER;
    if (rc != 0) {
        strata_finalize(ctx);
        return rc;
    }
    if (!worker) {
        st = strata_serve(ctx);
        rc = st == STRATA_OK ? 0 : fail_status("serve", st);
    } else {
        if (o.takeover)
            strata_log_set_handler(takeover_log, NULL);
        rc = run_worker(ctx, &o);
    }
    free(seen.without);
    free(taken.shard);
    free(taken.without);
    free(taken.model);
    free(taken.kept);
    if (worker && o.alloc) /* strata_alloc'd memory goes with the context */
        free_tensors(ctx, &o);
    st = strata_finalize(ctx);
    if (worker && !o.alloc)
        free_tensors(ctx, &o);
    if (rc == 0 && st != STRATA_OK)
        rc = fail_status("finalize", st);
    return rc;
}
