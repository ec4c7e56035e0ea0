/*
 * One rank of an integer-exact GSSP job with regrouping (run under
 * strata-run with STRATA_POLICY=gssp and STRATA_LR = the number of workers).
 * Worker w owns the elements j = w (mod W) and pushes -1 there in every
 * step, 0 elsewhere, so with the 1/N scale each of its steps adds exactly 1
 * to its own elements:
 *   - after its step c it sees exactly c + 1 of its own updates (none lost,
 *     none applied twice, whatever group it is in);
 *   - no element ever exceeds the total steps of its owner;
 *   - at the end it takes steps with zero gradients until every element
 *     holds its owner's total: every push of every worker was applied once.
 * Speeds: workers in the first half sleep --fast-ms per step, the others
 * --slow-ms; with --move-at C1[,C2] worker 0 takes the slow speed from its
 * step C1 on (and the fast one again from C2), so the engine, which measures
 * every worker's steps itself, moves it into the slow group, whose members
 * stay (and back). strata_epoch_end every --epoch steps (GDTopK's epochs).
 * --topk (with STRATA_GDTOPK=1): pushes are sparsified, so a worker's own
 * updates arrive late; the end (after a dense flush) is still exact: what
 * was sent plus the residual is every gradient. --drain N bounds the
 * zero-gradient steps at the end (default 400).
 * Exit codes: 0 ok, 1 wrong values, 2 usage, 3 an error status from Strata.
 */
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/strata.h>

#include "job.h"

#define NT 3
static const size_t sizes[NT] = {1000, 3, 5000};

typedef struct opts {
    int steps, epoch, fast_ms, slow_ms, slow_from, slow_until, drain;
} opts_t;

static float *param[NT], *grad[NT];

static int fail_status(const char *what, strata_status_t st)
{
    return test_job_fail("gssp", what, st);
}

static float init_value(int t, size_t j)
{
    return (float)((int)((t * 31 + j) % 13) - 6);
}

/* Updates of each owner seen: 0 if as expected; prints the first error.
 * own: the worker's own count, exact (at most, with top-k); all: every
 * owner's, exact (else at most that). */
static bool topk_mode;

static int check(int nw, int w, int own, int all, bool exact_all, int c)
{
    for (int t = 0; t < NT; t++)
        for (size_t j = 0; j < sizes[t]; j++) {
            int owner = (int)(j % (size_t)nw);
            float seen = param[t][j] - init_value(t, j);
            bool exact = owner == w ? !topk_mode || exact_all : exact_all;
            float want = owner == w ? (float)own : (float)all;
            bool ok = exact ? seen == want : seen <= want;
            if (!ok) {
                if (c >= 0)
                    fprintf(stderr,
                            "gssp: worker %d after step %d: [%d][%zu] (of "
                            "worker %d) has %g updates, expected %s%d\n",
                            w, c, t, j, owner, seen,
                            owner == w || exact_all ? "" : "at most ",
                            owner == w ? own : all);
                return 1;
            }
        }
    return 0;
}

static int setup(strata_ctx_t *ctx, int nw, int w)
{
    for (int t = 0; t < NT; t++) {
        param[t] = malloc(sizes[t] * sizeof(float));
        grad[t] = malloc(sizes[t] * sizeof(float));
        if (!param[t] || !grad[t])
            return fail_status("allocating", STRATA_ERR_NOMEM);
        for (size_t j = 0; j < sizes[t]; j++) {
            param[t][j] = w == 0 ? init_value(t, j) : 77.0f;
            grad[t][j] = (int)(j % (size_t)nw) == w ? -1.0f : 0.0f;
        }
        char name[32];
        snprintf(name, sizeof(name), "w%d", t);
        strata_status_t st = strata_tensor_register(
            ctx, name, param[t], grad[t], sizes[t], STRATA_FP32, NULL);
        if (st != STRATA_OK)
            return fail_status("registering", st);
    }
    strata_status_t st = strata_commit(ctx);
    return st == STRATA_OK ? 0 : fail_status("commit", st);
}

/* Zero-gradient steps until every owner's total is in (bounded). */
static int drain(strata_ctx_t *ctx, const opts_t *o, int nw, int w)
{
    for (int t = 0; t < NT; t++)
        memset(grad[t], 0, sizes[t] * sizeof(float));
    for (int k = 0; k < o->drain; k++) {
        if (check(nw, w, o->steps, o->steps, true, -1) == 0)
            return 0;
        usleep(2000);
        strata_status_t st = strata_step(ctx);
        if (st != STRATA_OK)
            return fail_status("drain step", st);
    }
    return check(nw, w, o->steps, o->steps, true, o->steps + o->drain);
}

static int run_worker(strata_ctx_t *ctx, const void *arg)
{
    const opts_t *o = arg;
    int nw = strata_num_workers(ctx), w = strata_worker_index(ctx);
    int rc = setup(ctx, nw, w);
    if (rc != 0)
        return rc;
    char groups[1024] = ""; /* its group after every step */
    size_t len = 0;
    for (int c = 0; c < o->steps; c++) {
        bool slowed = w == 0 && c >= o->slow_from && c < o->slow_until;
        bool fast = w < nw / 2 && !slowed;
        usleep((useconds_t)((fast ? o->fast_ms : o->slow_ms) * 1000));
        strata_status_t st = strata_step(ctx);
        if (st != STRATA_OK)
            return fail_status("step", st);
        if (check(nw, w, c + 1, o->steps, false, c))
            return 1;
        if ((c + 1) % o->epoch == 0 &&
            (st = strata_epoch_end(ctx, 0)) != STRATA_OK)
            return fail_status("strata_epoch_end", st);
        if (len < sizeof(groups) - 16)
            len += (size_t)snprintf(groups + len, sizeof(groups) - len, "%s%d",
                                    len ? "," : "", strata_group(ctx));
    }
    if ((rc = drain(ctx, o, nw, w)) != 0)
        return rc;
    strata_metrics_t m = STRATA_METRICS_INIT;
    strata_metrics(ctx, &m);
    printf("worker %d: %d steps exact, every push applied once (%llu bytes "
           "pushed); groups %s\n",
           w, o->steps, (unsigned long long)m.bytes_pushed, groups);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"steps", required_argument, NULL, 's'},
        {"epoch", required_argument, NULL, 'e'},
        {"fast-ms", required_argument, NULL, 'f'},
        {"slow-ms", required_argument, NULL, 'l'},
        {"move-at", required_argument, NULL, 'm'},
        {"topk", no_argument, NULL, 'k'},
        {"drain", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    opts_t o = {.steps = 24,
                .epoch = 4,
                .fast_ms = 1,
                .slow_ms = 10,
                .slow_from = -1,
                .slow_until = -1,
                .drain = 400};
    int c;
    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        int v = optarg ? atoi(optarg) : 0;
        if (c == 's')
            o.steps = v;
        else if (c == 'e')
            o.epoch = v > 0 ? v : 1;
        else if (c == 'f')
            o.fast_ms = v;
        else if (c == 'l')
            o.slow_ms = v;
        else if (c == 'm') {
            int n = sscanf(optarg, "%d,%d", &o.slow_from, &o.slow_until);
            if (n < 1)
                return 2;
            if (n == 1)
                o.slow_until = INT_MAX;
        } else if (c == 'k')
            topk_mode = true;
        else if (c == 'd')
            o.drain = v;
        else
            return 2;
    }
    int rc = test_job_run("gssp", run_worker, &o);
    for (int t = 0; t < NT; t++) {
        free(param[t]);
        free(grad[t]);
    }
    return rc;
}
