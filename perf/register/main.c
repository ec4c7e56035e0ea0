/*
 * strata-bench-register [--tensors N] [--elements E] [--steps K]
 * How long a worker takes to register N tensors of E fp32 elements each
 * and to commit the layout (the coordinator compares every worker's
 * tensors, the aggregators build their shards), then K steps of the whole
 * model. Models of many small tensors (embeddings cut per row, per-layer
 * biases) reach 10^5 tensors.
 *
 *   strata-run -n W -a S -- strata-bench-register --tensors 100000
 *
 * Each worker prints one line: the seconds registration, commit and the
 * steps took, wall clock and (in parentheses) the CPU time of the calling
 * thread (the progress thread and the aggregators not counted). Exit codes: 0
 * ok, 2 usage, 3 an error status from Strata.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <strata/strata.h>

typedef struct opts {
    long tensors, elements, steps;
} opts_t;

static double secs(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wall and this thread's CPU seconds: on a shared machine the wall clock
 * mostly measures the others. */
typedef struct mark {
    double wall, cpu;
} mark_t;

static mark_t now(void)
{
    return (mark_t){secs(CLOCK_MONOTONIC), secs(CLOCK_THREAD_CPUTIME_ID)};
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"tensors", required_argument, NULL, 't'},
        {"elements", required_argument, NULL, 'e'},
        {"steps", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.tensors = 100000, .elements = 4, .steps = 1};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        bool ok = optarg && *end == '\0';
        if (c == 't' && ok && v > 0 && v <= 10000000)
            o->tensors = v;
        else if (c == 'e' && ok && v > 0 && v <= 1000000)
            o->elements = v;
        else if (c == 's' && ok && v >= 0 && v <= 1000000)
            o->steps = v;
        else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: strata-bench-register [--tensors N (100000)] "
                    "[--elements E (4)] [--steps K (1)]\n"
                    "  strata-run -n W -a S -- strata-bench-register ...\n");
            return c == 'h' ? 1 : -1;
        }
    }
    return 0;
}

static int failed(const strata_ctx_t *ctx, const char *what, strata_status_t st)
{
    char why[512];
    if (strata_last_error(ctx, why, sizeof(why)) == 0)
        snprintf(why, sizeof(why), "%s", strata_strerror(st));
    fprintf(stderr, "strata-bench-register: %s: %s\n", what, why);
    return 3;
}

static int run_worker(strata_ctx_t *ctx, const opts_t *o)
{
    size_t n = (size_t)o->tensors * (size_t)o->elements;
    float *param = calloc(n, sizeof(float)), *grad = calloc(n, sizeof(float));
    if (!param || !grad) {
        fprintf(stderr,
                "strata-bench-register: out of memory for %zu "
                "elements\n",
                n);
        free(param), free(grad);
        return 3;
    }
    int rc = 0;
    strata_status_t st = STRATA_OK;
    char name[32];
    mark_t t0 = now();
    for (long t = 0; t < o->tensors && st == STRATA_OK; t++) {
        snprintf(name, sizeof(name), "layer%ld.bias", t);
        size_t off = (size_t)t * (size_t)o->elements;
        st = strata_tensor_register(ctx, name, param + off, grad + off,
                                    (size_t)o->elements, STRATA_FP32, NULL);
    }
    mark_t t1 = now();
    if (st == STRATA_OK)
        st = strata_commit(ctx);
    mark_t t2 = now();
    for (long k = 0; k < o->steps && st == STRATA_OK; k++)
        st = strata_step(ctx);
    mark_t t3 = now();
    if (st != STRATA_OK)
        rc = failed(ctx, "worker", st);
    else
        printf("worker %d: %ld tensors: registered in %.3f s (%.3f CPU), "
               "committed in %.3f s (%.3f CPU), %ld steps in %.3f s (%.3f "
               "CPU)\n",
               strata_rank(ctx), o->tensors, t1.wall - t0.wall, t1.cpu - t0.cpu,
               t2.wall - t1.wall, t2.cpu - t1.cpu, o->steps, t3.wall - t2.wall,
               t3.cpu - t2.cpu);
    free(param), free(grad);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    int prc = parse(argc, argv, &o);
    if (prc != 0)
        return prc < 0 ? 2 : 0;
    strata_ctx_t *ctx;
    strata_status_t st = strata_init(&ctx);
    if (st != STRATA_OK)
        return failed(NULL, "strata_init", st);
    int rc = 0;
    if (strata_role(ctx) == STRATA_ROLE_WORKER)
        rc = run_worker(ctx, &o);
    else if ((st = strata_serve(ctx)) != STRATA_OK)
        rc = failed(ctx, "strata_serve", st);
    st = strata_finalize(ctx);
    if (st != STRATA_OK && rc == 0)
        rc = failed(NULL, "strata_finalize", st);
    return rc;
}
