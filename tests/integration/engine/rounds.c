/*
 * One rank of an integer-exact job of rounds (STRATA_POLICY=esync or fedavg,
 * run under strata-run or by hand). Aggregator ranks serve. Each worker's
 * local step sets its parameters to the round's global model plus an integer
 * delta that does not depend on how many local steps it takes, so after
 * every strata_round_sync the new global model is known exactly:
 *   --check distinct  worker w's delta is (w + 1)(r + 1) + j mod 3 in round
 *                     r: the mean over W workers (W odd) is an integer
 *   --check equal     every worker's delta is (r + 1) + j mod 3: the mean
 *                     is that whoever takes part (a worker dropped or not,
 *                     weighted by steps or not)
 * Worker w sleeps (w + 1)^2 * --sleep-ms per local step, so under esync the
 * fast ones take more local steps per round; each prints its step counts.
 * --die-in N: the last worker kills itself in round N after a local step.
 * --hang-in N: the last worker falls silent (sleeps --hang-s seconds, still
 * connected) in round N; the State Server drops it, the others go on.
 * --stop-in N: the last worker stops (SIGSTOP, its progress thread too) in
 * round N; it is dropped for its silence, the others go on, and it learns
 * why once continued (SIGCONT).
 * --tolerance X: relative (absolute below 1), for deltas weighted by steps,
 *               which are not exact.
 * --rejoin PATH (with --die-in, --check equal): the last worker, killed,
 * is started again (strata-run --restart) and rejoins at a round J
 * (strata_clock() after strata_commit): its initial model must be the
 * global model after J rounds, exactly; it creates PATH and syncs rounds J
 * to the last. The others wait for PATH before their last round (at most
 * 60 s), so the job still runs when it comes back.
 * --takeover: an aggregator may be lost and its shard taken over by a
 * survivor from the shard's protected round P, resumed at round R (a round
 * is a clock; the worker's takeover line says P and R). The aggregators'
 * rounds P..R-1 of that shard are lost: its elements hold the global model
 * without those rounds' mean deltas once the taker served them, and the
 * workers' next deltas start from that model. The model's layout (fp32
 * and fp64 tensors) is the engine's, so each element is checked alone:
 * after round r it holds the global model of every round, or that model
 * without rounds P..min(R, r + 1) - 1 (a switch made once, never back);
 * at the end the takeover was seen and some elements were without.
 * Exit codes: 0 ok, 1 wrong values, 2 usage, 3 an error status from Strata.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/strata.h>

#include "job.h"

#define NT 3
static const size_t sizes[NT] = {1000, 77, 5000};
static const strata_dtype_t dtypes[NT] = {STRATA_FP32, STRATA_FP64,
                                          STRATA_FP32};

typedef struct opts {
    int rounds, die_in, sleep_ms, hang_in, hang_s, stop_in;
    bool rejoined; /* this process rejoined the running job */
    bool distinct;
    const char *rejoin; /* --rejoin PATH */
    double tol;         /* relative: deltas weighted by steps are not exact */
    bool takeover;      /* --takeover: a shard may resume from P */
} opts_t;

static void *param[NT], *grad[NT];
static double *expect[NT]; /* the global model the test expects */

/* --takeover: the takeover line's clocks; each round's mean delta but
 * j % 3; each element's global model of every round, and whether it was
 * seen without rounds P..R-1. */
static struct {
    _Atomic int lost, taker;
    _Atomic long long p, r;
} said = {.lost = -1, .taker = -1, .p = -1, .r = -1};
static struct {
    double *mean;
    double *full[NT];
    char *without[NT];
    size_t nwithout;
} taken;

static int fail_status(const char *what, strata_status_t st)
{
    return test_job_fail("rounds", what, st);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double delta(const opts_t *o, int w, int r, size_t j)
{
    return (o->distinct ? (w + 1) * (r + 1) : r + 1) + (double)(j % 3);
}

static double get(int t, size_t j)
{
    return dtypes[t] == STRATA_FP32 ? ((float *)param[t])[j]
                                    : ((double *)param[t])[j];
}

static void set(int t, size_t j, double v)
{
    if (dtypes[t] == STRATA_FP32)
        ((float *)param[t])[j] = (float)v;
    else
        ((double *)param[t])[j] = v;
}

static int setup(strata_ctx_t *ctx, int w)
{
    for (int t = 0; t < NT; t++) {
        size_t n = sizes[t], es = dtypes[t] == STRATA_FP32 ? 4 : 8;
        param[t] = malloc(n * es);
        grad[t] = malloc(n * es);
        expect[t] = malloc(n * sizeof(double));
        taken.full[t] = malloc(n * sizeof(double));
        taken.without[t] = calloc(n, 1);
        if (!param[t] || !grad[t] || !expect[t] || !taken.full[t] ||
            !taken.without[t])
            return fail_status("allocating tensors", STRATA_ERR_NOMEM);
        for (size_t j = 0; j < n; j++) {
            expect[t][j] = (double)((int)((t * 31 + j) % 13) - 6);
            taken.full[t][j] = expect[t][j];
            set(t, j, w == 0 ? expect[t][j] : 999.0);
        }
        char name[32];
        snprintf(name, sizeof(name), "layer%d", t);
        strata_status_t st = strata_tensor_register(
            ctx, name, param[t], grad[t], n, dtypes[t], NULL);
        if (st != STRATA_OK)
            return fail_status("registering", st);
    }
    strata_status_t st = strata_commit(ctx);
    return st == STRATA_OK ? 0 : fail_status("commit", st);
}

static int check(const opts_t *o, int w, int r)
{
    for (int t = 0; t < NT; t++)
        for (size_t j = 0; j < sizes[t]; j++)
            if (fabs(get(t, j) - expect[t][j]) >
                o->tol * fmax(1.0, fabs(expect[t][j]))) {
                fprintf(stderr,
                        "rounds: worker %d after round %d: [%d][%zu] = %.9g, "
                        "expected %.9g\n",
                        w, r, t, j, get(t, j), expect[t][j]);
                return 1;
            }
    return 0;
}

/* --takeover: every line to stderr as usual, the takeover's clocks kept.
 * The progress thread logs it before the taker's model of the shard can
 * land, so every round that shows that model comes after. */
static void takeover_log(void *arg, strata_log_level_t level, const char *line)
{
    int shard, taker;
    long long r, p;
    (void)arg;
    (void)level;
    if (test_job_takeover_line(line, &shard, &taker, &r, &p)) {
        atomic_store(&said.p, p);
        atomic_store(&said.r, r);
        atomic_store(&said.taker, taker);
        atomic_store(&said.lost, shard);
    }
    fprintf(stderr, "%s\n", line);
}

/* --takeover: after round r, each element holds the global model of
 * every round, or (once the taker served it, never back) that model
 * without rounds P..min(R, r + 1) - 1; what it holds is the global model
 * the next round's deltas start from. */
static int check_taken(int w, int r)
{
    long long p = atomic_load(&said.p), rr = atomic_load(&said.r);
    for (int t = 0; t < NT; t++)
        for (size_t j = 0; j < sizes[t]; j++) {
            double full = taken.full[t][j] += taken.mean[r] + (double)(j % 3);
            double without = full, got = get(t, j);
            for (long long k = p < 0 ? 0 : p; p >= 0 && k < rr && k <= r; k++)
                without -= taken.mean[k] + (double)(j % 3);
            bool was = taken.without[t][j];
            if (without != full && got == without && !was) {
                taken.without[t][j] = 1;
                taken.nwithout++;
            } else if (!(got == full && !was) && !(got == without && was)) {
                fprintf(stderr,
                        "rounds: worker %d after round %d: [%d][%zu] = %.9g, "
                        "expected %.9g, or %.9g without rounds %lld..%lld "
                        "(P %lld, R %lld%s)\n",
                        w, r, t, j, got, full, without, p, rr - 1, p, rr,
                        was ? ", seen without them before" : "");
                return 1;
            }
            expect[t][j] = got;
        }
    return 0;
}

/* --takeover: at the end, the takeover came and was seen. */
static int takeover_end(int w)
{
    int lost = atomic_load(&said.lost);
    long long p = atomic_load(&said.p), r = atomic_load(&said.r);
    size_t n = 0;
    for (int t = 0; t < NT; t++)
        n += sizes[t];
    if (lost < 0 || (taken.nwithout == 0 && r > p)) {
        fprintf(stderr, "rounds: worker %d: %s\n", w,
                lost < 0 ? "no shard was taken over"
                         : "no element was seen without the lost rounds");
        return 1;
    }
    printf("worker %d: shard %d taken over by aggregator rank %d, resumed at "
           "clock %lld (protected at %lld): %zu of its %zu elements without "
           "rounds %lld..%lld\n",
           w, lost, atomic_load(&said.taker), r, p, taken.nwithout, n, p,
           r - 1);
    return 0;
}

/* One round: local steps until the policy says the round ends, then sync;
 * how many local steps it took. */
static int one_round(strata_ctx_t *ctx, const opts_t *o, int w, int last, int r,
                     int *steps_out)
{
    strata_status_t st;
    bool ready = false;
    int steps = 0;
    while (!ready) {
        double t0 = now_s();
        for (int t = 0; t < NT; t++)
            for (size_t j = 0; j < sizes[t]; j++)
                set(t, j, expect[t][j] + delta(o, w, r, j));
        usleep((useconds_t)((w + 1) * (w + 1) * o->sleep_ms * 1000));
        steps++;
        if (r == o->die_in && w == last && !o->rejoined)
            raise(SIGKILL);
        if (r == o->stop_in && w == last && steps == 1)
            raise(SIGSTOP);
        if (r == o->hang_in && w == last && steps == 1)
            sleep((unsigned)o->hang_s); /* connected, but silent */
        if ((st = strata_round_ready(ctx, now_s() - t0, &ready)) != STRATA_OK)
            return fail_status("strata_round_ready", st);
    }
    if ((st = strata_round_sync(ctx)) != STRATA_OK)
        return fail_status("strata_round_sync", st);
    *steps_out = steps;
    return 0;
}

/* The global model after `rounds` rounds (--check equal). */
static void expect_after(int rounds)
{
    for (int r = 0; r < rounds; r++)
        for (int t = 0; t < NT; t++)
            for (size_t j = 0; j < sizes[t]; j++)
                expect[t][j] += r + 1 + (double)(j % 3);
}

/* --rejoin: the others wait for the victim back before their last round. */
static int wait_rejoined(const opts_t *o, int w)
{
    for (int i = 0; i < 6000 && access(o->rejoin, F_OK) != 0; i++)
        usleep(10000);
    if (access(o->rejoin, F_OK) == 0)
        return 0;
    fprintf(stderr,
            "rounds: worker %d: the last worker did not rejoin "
            "within 60 s\n",
            w);
    return 1;
}

/* --rejoin, in the new process: back at round J with the model of J. */
static int rejoined(const opts_t *o, int w, int first)
{
    expect_after(first);
    if (check(o, w, first - 1) != 0)
        return 1;
    FILE *f = fopen(o->rejoin, "w");
    if (!f) {
        perror(o->rejoin);
        return 2;
    }
    fclose(f);
    printf("worker %d: rejoined at round %d with its global model\n", w, first);
    return 0;
}

static int run_worker(strata_ctx_t *ctx, const void *arg)
{
    opts_t *o = (opts_t *)arg;
    int nw = strata_num_workers(ctx), w = strata_worker_index(ctx);
    int rc = setup(ctx, w);
    int first = rc == 0 ? (int)strata_clock(ctx) : 0;
    o->rejoined = first > 0;
    if (rc == 0)
        rc = o->rejoined ? rejoined(o, w, first) : check(o, w, -1);
    if (rc != 0)
        return rc;
    char counts[512] = "";
    size_t len = 0;
    for (int r = first; r < o->rounds; r++) {
        int steps;
        if (o->rejoin && !o->rejoined && r == o->rounds - 1 &&
            (rc = wait_rejoined(o, w)) != 0)
            return rc;
        if ((rc = one_round(ctx, o, w, nw - 1, r, &steps)) != 0)
            return rc;
        int n =
            r >= o->die_in || r >= o->hang_in || r >= o->stop_in ? nw - 1 : nw;
        double sum = 0;
        for (int v = 0; v < n; v++)
            sum += o->distinct ? (v + 1) * (r + 1) : r + 1;
        double mean = sum / n;
        if (o->takeover) {
            taken.mean[r] = mean;
            if ((rc = check_taken(w, r)) != 0)
                return rc;
        } else {
            for (int t = 0; t < NT; t++)
                for (size_t j = 0; j < sizes[t]; j++)
                    expect[t][j] += mean + (double)(j % 3);
            if ((rc = check(o, w, r)) != 0)
                return rc;
        }
        if (len < sizeof(counts) - 16)
            len += (size_t)snprintf(counts + len, sizeof(counts) - len, "%s%d",
                                    r > first ? "," : "", steps);
    }
    if (o->takeover && (rc = takeover_end(w)) != 0)
        return rc;
    printf("worker %d: %d rounds exact, local steps %s\n", w, o->rounds,
           counts);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"rounds", required_argument, NULL, 'r'},
        {"check", required_argument, NULL, 'c'},
        {"die-in", required_argument, NULL, 'd'},
        {"sleep-ms", required_argument, NULL, 's'},
        {"tolerance", required_argument, NULL, 't'},
        {"hang-in", required_argument, NULL, 'h'},
        {"hang-s", required_argument, NULL, 'H'},
        {"stop-in", required_argument, NULL, 'S'},
        {"rejoin", required_argument, NULL, 'j'},
        {"takeover", no_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    opts_t o = {.rounds = 4,
                .die_in = 1 << 30,
                .sleep_ms = 1,
                .hang_in = 1 << 30,
                .hang_s = 8,
                .stop_in = 1 << 30};
    int c;
    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        if (c == 'r')
            o.rounds = atoi(optarg);
        else if (c == 'c')
            o.distinct = strcmp(optarg, "distinct") == 0;
        else if (c == 'd')
            o.die_in = atoi(optarg);
        else if (c == 's')
            o.sleep_ms = atoi(optarg);
        else if (c == 't')
            o.tol = atof(optarg);
        else if (c == 'h')
            o.hang_in = atoi(optarg);
        else if (c == 'H')
            o.hang_s = atoi(optarg);
        else if (c == 'S')
            o.stop_in = atoi(optarg);
        else if (c == 'j')
            o.rejoin = optarg;
        else if (c == 'T')
            o.takeover = true;
        else
            return 2;
    }
    taken.mean = calloc((size_t)(o.rounds > 0 ? o.rounds : 1), sizeof(double));
    if (!taken.mean)
        return test_job_fail("rounds", "allocating", STRATA_ERR_NOMEM);
    if (o.takeover)
        strata_log_set_handler(takeover_log, NULL);
    int rc = test_job_run("rounds", run_worker, &o);
    for (int t = 0; t < NT; t++) {
        free(param[t]);
        free(grad[t]);
        free(expect[t]);
        free(taken.full[t]);
        free(taken.without[t]);
    }
    free(taken.mean);
    return rc;
}
