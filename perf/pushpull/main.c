/*
 * strata-bench-pushpull [--aggregators S] [--min-bytes A] [--max-bytes B]
 *                       [--iters N] [--blocks K] [--warmup W]
 *                       [--partition-bytes P] [--optimizer sum|sgd]
 *                       [--alloc-grad] [--breakdown] [--json FILE]
 * One BSP round (every worker pushes B bytes of fp32 gradients, the
 * aggregators reduce them, every worker pulls B bytes back) timed for sizes
 * doubling from A to B, as nccl-tests prints collectives; under mpirun, in
 * the same run, MPI_Allreduce of the same bytes among the same workers.
 *
 * The machines this runs on are often shared, so the two are timed in
 * alternating blocks (a block of Strata rounds, then a block of
 * MPI_Allreduce calls, each started by a barrier among the workers) and each
 * reports the median over the blocks of the slowest worker's time per round
 * (the JSON adds the fastest block, *_min_us).
 * Unless --partition-bytes or STRATA_PARTITION_BYTES says otherwise, the
 * engine picks the partition size (docs/engine.md); each row prints it.
 *
 *   mpirun -np W+S strata-bench-pushpull --aggregators S ...
 *   strata-run --spmd -n W -a S -- strata-bench-pushpull --aggregators S ...
 *
 * Each size is a job of its own (strata_init, one tensor, strata_finalize),
 * so every rank, aggregators too, runs this program.
 *
 * --alloc-grad puts the gradients in strata_alloc memory too: over shm the
 * aggregators then reduce them in place (zero copy, unless
 * STRATA_ZERO_COPY=0), where ordinary memory is copied by every push.
 *
 * --breakdown prints where a round's time goes, from the engine's stage
 * counters (strata_metrics_t): the workers' over their timed blocks, the
 * aggregators' over their whole job (gathered with MPI: under mpirun only).
 */
#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <strata/strata.h>

#include "perf/pushpull/bench.h"
#include "util/parse.h"

#define PP_MAX_BLOCKS 64

/* The stages of --breakdown, summed over the ranks. */
typedef enum stage {
    ST_ROUNDS,   /* workers: rounds timed */
    ST_HANDOFF,  /* workers: push, application -> progress thread */
    ST_POST,     /* workers: posting the push's writes */
    ST_TRIP,     /* workers: last write posted -> whole model landed */
    ST_WAKEUP,   /* workers: model landed -> application awake */
    ST_AGG_RNDS, /* aggregators: rounds of their jobs, summed */
    ST_WAIT,     /* aggregators: last arrival -> reduction starts */
    ST_REDUCE,   /* aggregators: reduce and update */
    ST_SERVE,    /* aggregators: posting the model writes */
    ST__COUNT
} stage_t;

typedef struct opts {
    int aggs;
    size_t min_bytes, max_bytes;
    size_t partition;          /* 0: the engine's */
    int iters, blocks, warmup; /* iters 0: from the size */
    const char *optimizer;
    const char *json;
    bool breakdown;
    bool alloc_grad; /* gradients in strata_alloc memory */
} opts_t;

typedef struct row {
    size_t bytes, partition; /* partition 0: unknown */
    int workers, aggs;
    char transport[32];
    double strata_us, mpi_us;         /* medians; mpi_us < 0: no baseline */
    double strata_min_us, mpi_min_us; /* the fastest blocks */
    double strata_mean_us;            /* the mean of the blocks */
    double stage[ST__COUNT];          /* --breakdown: this rank's, then all */
} row_t;

typedef struct bench {
    opts_t o;
    bool mpi;
    char coord_file[256];
    char secret[65];
    row_t *rows;
    int nrows;
} bench_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-bench-pushpull [--aggregators S] [--min-bytes A] "
               "[--max-bytes B]\n"
               "         [--iters N] [--blocks K] [--warmup W] "
               "[--partition-bytes P]\n"
               "         [--optimizer sum|sgd] [--alloc-grad] [--breakdown] "
               "[--json FILE]\n"
               "Times one BSP push-reduce-pull round among the workers and "
               "aggregators for\nsizes doubling from A to B (default 4K:64M), "
               "and MPI_Allreduce of the same\nbytes among the same workers "
               "when launched by mpirun. N rounds (default:\nfrom the size) "
               "in K blocks (default 5), alternating with MPI; the median\n"
               "block is reported. P: the partition size (default: "
               "STRATA_PARTITION_BYTES, or\nthe engine's pick for the size "
               "and S). --breakdown: where a round's time\ngoes, per stage "
               "(the aggregators' stages under mpirun only). --alloc-grad: "
               "gradients in\nstrata_alloc memory (over shm read in place "
               "unless STRATA_ZERO_COPY=0).\n"
               "  mpirun -np W+S strata-bench-pushpull --aggregators S\n"
               "  strata-run --spmd -n W -a S -- strata-bench-pushpull "
               "--aggregators S\n");
}

static bool parse_bytes(const char *s, size_t *out)
{
    uint64_t v;
    if (!util_parse_size(s, &v) || v == 0 || v > (1ull << 34) || (v & 3))
        return false;
    *out = (size_t)v;
    return true;
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option opts[] = {
        {"aggregators", required_argument, NULL, 'a'},
        {"min-bytes", required_argument, NULL, 'b'},
        {"max-bytes", required_argument, NULL, 'e'},
        {"iters", required_argument, NULL, 'n'},
        {"blocks", required_argument, NULL, 'k'},
        {"warmup", required_argument, NULL, 'w'},
        {"partition-bytes", required_argument, NULL, 'p'},
        {"optimizer", required_argument, NULL, 'o'},
        {"json", required_argument, NULL, 'j'},
        {"breakdown", no_argument, NULL, 'B'},
        {"alloc-grad", no_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.aggs = 1,
                  .min_bytes = 4096,
                  .max_bytes = 64 << 20,
                  .blocks = 5,
                  .warmup = 3,
                  .optimizer = "sum"};
    int c;
    while ((c = getopt_long(argc, argv, "a:b:e:n:k:w:p:o:j:h", opts, NULL)) !=
           -1) {
        bool ok = true;
        switch (c) {
        case 'a':
            ok = (o->aggs = atoi(optarg)) > 0;
            break;
        case 'b':
            ok = parse_bytes(optarg, &o->min_bytes);
            break;
        case 'e':
            ok = parse_bytes(optarg, &o->max_bytes);
            break;
        case 'n':
            ok = (o->iters = atoi(optarg)) > 0;
            break;
        case 'k':
            o->blocks = atoi(optarg);
            ok = o->blocks > 0 && o->blocks <= PP_MAX_BLOCKS;
            break;
        case 'w':
            ok = (o->warmup = atoi(optarg)) >= 0;
            break;
        case 'p':
            ok = parse_bytes(optarg, &o->partition) && o->partition >= 4096;
            break;
        case 'o':
            o->optimizer = optarg;
            ok = strcmp(optarg, "sum") == 0 || strcmp(optarg, "sgd") == 0;
            break;
        case 'j':
            o->json = optarg;
            break;
        case 'B':
            o->breakdown = true;
            break;
        case 'G':
            o->alloc_grad = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            ok = false;
        }
        if (!ok) {
            usage(stderr);
            return -1;
        }
    }
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, "strata-bench-pushpull: --min-bytes exceeds "
                        "--max-bytes (sizes are multiples of 4 bytes)\n");
        return -1;
    }
    return 0;
}

/* Under mpirun the bench finds its own coordinator and secret: rank 0
 * chooses, MPI tells the others. Under strata-run they come from it. */
static int setup_job(bench_t *b)
{
    const char *file = getenv("STRATA_COORD_FILE");
    if (file)
        snprintf(b->coord_file, sizeof(b->coord_file), "%s", file);
    if (!b->mpi)
        return 0;
    bool one_host = perf_pp_mpi_one_host();
    if (perf_pp_mpi_rank() == 0) {
        unsigned char key[32];
        if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
            return -1;
        for (size_t i = 0; i < sizeof(key); i++)
            snprintf(b->secret + 2 * i, 3, "%02x", key[i]);
        if (!file && one_host)
            snprintf(b->coord_file, sizeof(b->coord_file),
                     "/tmp/strata-bench-pushpull.%d.coord", (int)getpid());
    }
    perf_pp_mpi_bcast(b->coord_file, sizeof(b->coord_file));
    perf_pp_mpi_bcast(b->secret, sizeof(b->secret));
    if (!b->coord_file[0] && !getenv("STRATA_COORD")) {
        fprintf(stderr, "strata-bench-pushpull: ranks on several hosts: set "
                        "STRATA_COORD=host:port or STRATA_COORD_FILE on a "
                        "shared filesystem\n");
        return -1;
    }
    if (one_host && !getenv("STRATA_HOST"))
        setenv("STRATA_HOST", "127.0.0.1", 1);
    perf_pp_mpi_split(perf_pp_mpi_rank() >= b->o.aggs); /* ranks 0..S-1 */
    return 0;
}

/* The settings of the job for size index k. */
static void settings(const bench_t *b, int k, char buf[7][320],
                     const char *out[8])
{
    int n = 0;
    snprintf(buf[n++], 320, "NUM_AGGREGATORS=%d", b->o.aggs);
    if (b->o.partition)
        snprintf(buf[n++], 320, "PARTITION_BYTES=%zu", b->o.partition);
    snprintf(buf[n++], 320, "OPTIMIZER=%s", b->o.optimizer);
    snprintf(buf[n++], 320, "LR=1");
    if (b->coord_file[0])
        snprintf(buf[n++], 320, "COORD_FILE=%s.%d", b->coord_file, k);
    if (b->secret[0])
        snprintf(buf[n++], 320, "JOB_SECRET=%s", b->secret);
    for (int i = 0; i < n; i++)
        out[i] = buf[i];
    out[n] = NULL;
}

/* Timed rounds of a size: about 256 MiB moved, between 5 and 200. */
static int iterations(const bench_t *b, size_t bytes)
{
    if (b->o.iters)
        return b->o.iters;
    size_t n = ((size_t)256 << 20) / bytes;
    return n < 5 ? 5 : n > 200 ? 200 : (int)n;
}

/* Every worker pushes ones, so the sum every worker pulls is W. */
static int check_sum(const float *param, size_t count, int nworkers)
{
    size_t probe[3] = {0, count / 2, count - 1};
    for (int i = 0; i < 3; i++)
        if (param[probe[i]] != (float)nworkers) {
            fprintf(stderr,
                    "strata-bench-pushpull: element %zu is %g after the "
                    "rounds, expected %d\n",
                    probe[i], param[probe[i]], nworkers);
            return -1;
        }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v and returns its median. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Microseconds per round over n Strata rounds, the slowest worker's; every
 * worker comes to the maximum even after an error (then HUGE_VAL), so that
 * none is left waiting in MPI. */
static double strata_block(strata_ctx_t *ctx, int n, bool mpi)
{
    if (mpi)
        perf_pp_mpi_barrier();
    double t0 = now_us(), us = 0;
    for (int i = 0; i < n && us == 0; i++)
        if (strata_step(ctx) != STRATA_OK)
            us = HUGE_VAL;
    if (us == 0)
        us = (now_us() - t0) / n;
    return mpi ? perf_pp_mpi_max(us) : us;
}

/* The buffers of the MPI baseline, filled with ones. */
typedef struct mpi_bufs {
    float *send, *recv;
    size_t count;
} mpi_bufs_t;

static int mpi_bufs_init(mpi_bufs_t *m, size_t bytes)
{
    *m = (mpi_bufs_t){malloc(bytes), malloc(bytes), bytes / sizeof(float)};
    if (!m->send || !m->recv) {
        fprintf(stderr, "strata-bench-pushpull: no memory for %zu bytes\n",
                bytes);
        return -1;
    }
    for (size_t i = 0; i < m->count; i++)
        m->send[i] = 1.0f;
    return 0;
}

/* The timed blocks of one size, alternating Strata and MPI_Allreduce;
 * returns the median of each in row, or -1 after an error. */
static int time_blocks(const bench_t *b, strata_ctx_t *ctx, size_t bytes,
                       row_t *row)
{
    int total = iterations(b, bytes);
    int blocks = b->o.blocks < total ? b->o.blocks : total;
    int per = total / blocks;
    double st[PP_MAX_BLOCKS], mp[PP_MAX_BLOCKS];
    mpi_bufs_t m = {0};
    strata_metrics_t m0 = STRATA_METRICS_INIT, m1 = STRATA_METRICS_INIT;
    int rc = b->mpi ? mpi_bufs_init(&m, bytes) : 0;
    for (int i = 0; i < b->o.warmup && rc == 0; i++)
        rc = strata_step(ctx) == STRATA_OK ? 0 : -1;
    if (rc == 0 && strata_metrics(ctx, &m0) != STRATA_OK)
        rc = -1;
    for (int k = 0; k < blocks && rc == 0; k++) {
        st[k] = strata_block(ctx, per, b->mpi);
        rc = st[k] < HUGE_VAL ? 0 : -1;
        if (rc == 0 && b->mpi)
            mp[k] = perf_pp_mpi_allreduce_us(m.send, m.recv, m.count,
                                             k ? 0 : b->o.warmup, per);
    }
    if (rc == 0 && strata_metrics(ctx, &m1) == STRATA_OK) {
        row->stage[ST_ROUNDS] = (double)(m1.rounds - m0.rounds);
        row->stage[ST_HANDOFF] =
            (double)(m1.push_handoff_ns - m0.push_handoff_ns);
        row->stage[ST_POST] = (double)(m1.push_post_ns - m0.push_post_ns);
        row->stage[ST_TRIP] = (double)(m1.round_trip_ns - m0.round_trip_ns);
        row->stage[ST_WAKEUP] = (double)(m1.pull_wakeup_ns - m0.pull_wakeup_ns);
    }
    if (rc == 0) {
        for (int k = 0; k < blocks; k++)
            row->strata_mean_us += st[k] / blocks;
        row->strata_us = median(st, blocks);
        row->strata_min_us = st[0];
        row->mpi_us = row->mpi_min_us = -1;
        if (b->mpi) {
            row->mpi_us = median(mp, blocks);
            row->mpi_min_us = mp[0];
        }
    }
    free(m.send);
    free(m.recv);
    return rc;
}

/* One size, one job, on a worker: fills row, or returns -1. */
static int run_worker(const bench_t *b, strata_ctx_t *ctx, size_t bytes,
                      row_t *row)
{
    size_t count = bytes / sizeof(float);
    float *param = NULL, *grad = NULL;
    int rc = -1;
    if (b->o.alloc_grad ? strata_alloc(ctx, bytes, (void **)&grad) != STRATA_OK
                        : !(grad = malloc(bytes)))
        goto out;
    if (strata_alloc(ctx, bytes, (void **)&param) != STRATA_OK)
        goto out;
    for (size_t i = 0; i < count; i++)
        grad[i] = 1.0f;
    if (strata_tensor_register(ctx, "model", param, grad, count, STRATA_FP32,
                               NULL) != STRATA_OK ||
        strata_commit(ctx) != STRATA_OK || time_blocks(b, ctx, bytes, row) != 0)
        goto out;
    rc = 0;
    if (strcmp(b->o.optimizer, "sum") == 0 &&
        check_sum(param, count, strata_num_workers(ctx)) != 0)
        rc = -1;
    snprintf(row->transport, sizeof(row->transport), "%s",
             strata_transport(ctx));
    row->partition = strata_partition_bytes(ctx);
out:
    if (param)
        strata_free(ctx, param);
    if (!b->o.alloc_grad) /* else read in place: freed with the context */
        free(grad);
    return rc;
}

/* An aggregator's stages over its whole job: warm-up and timed rounds. */
static void agg_stages(const bench_t *b, strata_ctx_t *ctx, size_t bytes,
                       row_t *row)
{
    strata_metrics_t m = STRATA_METRICS_INIT;
    if (strata_metrics(ctx, &m) != STRATA_OK)
        return;
    int total = iterations(b, bytes);
    int blocks = b->o.blocks < total ? b->o.blocks : total;
    row->stage[ST_AGG_RNDS] = b->o.warmup + blocks * (total / blocks);
    row->stage[ST_WAIT] = (double)m.reduce_wait_ns;
    row->stage[ST_REDUCE] = (double)m.reduce_ns;
    row->stage[ST_SERVE] = (double)m.serve_ns;
}

/* One size on every rank; the first worker keeps the row. */
static int run_size(bench_t *b, int k, size_t bytes, bool *first_worker)
{
    char buf[7][320];
    const char *set[8];
    settings(b, k, buf, set);
    strata_ctx_t *ctx;
    if (strata_init_with(set, &ctx) != STRATA_OK)
        return -1;
    bool worker = strata_role(ctx) == STRATA_ROLE_WORKER;
    *first_worker = strata_worker_index(ctx) == 0;
    row_t row = {.bytes = bytes,
                 .workers = strata_num_workers(ctx),
                 .aggs = strata_num_aggregators(ctx),
                 .mpi_us = -1};
    int rc = worker                           ? run_worker(b, ctx, bytes, &row)
             : strata_serve(ctx) == STRATA_OK ? 0
                                              : -1;
    if (!worker && rc == 0)
        agg_stages(b, ctx, bytes, &row);
    /* Aggregators serve until every worker finalized: gather after. */
    if (strata_finalize(ctx) != STRATA_OK)
        rc = -1;
    if (b->o.breakdown && b->mpi) /* every rank, even after an error */
        perf_pp_mpi_sum_world(row.stage, ST__COUNT);
    if (rc != 0)
        return -1;
    if (*first_worker)
        b->rows[b->nrows++] = row;
    return 0;
}

static void print_row(const row_t *r)
{
    double gb = (double)r->bytes / 1e3;
    printf("%12zu %7d %5d %9s %9zu %11.1f %9.2f", r->bytes, r->workers, r->aggs,
           r->transport, r->partition, r->strata_us, gb / r->strata_us);
    if (r->mpi_us >= 0)
        printf(" %11.1f %9.2f %7.2f\n", r->mpi_us, gb / r->mpi_us,
               r->strata_us / r->mpi_us);
    else
        printf(" %11s %9s %7s\n", "-", "-", "-");
}

/* Microseconds per round of stage s: the workers' mean, or the
 * aggregators' (-1: not known). */
static double stage_us(const row_t *r, stage_t s)
{
    double n = s >= ST_AGG_RNDS ? r->stage[ST_AGG_RNDS] : r->stage[ST_ROUNDS];
    return n > 0 ? r->stage[s] / n / 1e3 : -1;
}

static void print_breakdown(const row_t *r)
{
    double trip = stage_us(r, ST_TRIP);
    printf("#   breakdown, us per round (means): round %.1f = push handoff "
           "%.1f + post %.1f + to the model landed %.1f + wake-up %.1f + "
           "rest %.1f\n",
           r->strata_mean_us, stage_us(r, ST_HANDOFF), stage_us(r, ST_POST),
           trip, stage_us(r, ST_WAKEUP),
           r->strata_mean_us - stage_us(r, ST_HANDOFF) - stage_us(r, ST_POST) -
               trip - stage_us(r, ST_WAKEUP));
    if (stage_us(r, ST_REDUCE) < 0) {
        printf("#     (the first worker's; the aggregators' and the other "
               "workers' are gathered under mpirun)\n");
        return;
    }
    double agg = (stage_us(r, ST_WAIT) + stage_us(r, ST_REDUCE) +
                  stage_us(r, ST_SERVE)) /
                 r->aggs;
    printf("#     to the model landed = aggregators' wait %.1f + reduce "
           "%.1f + serve %.1f + transport and wake-ups %.1f\n",
           stage_us(r, ST_WAIT) / r->aggs, stage_us(r, ST_REDUCE) / r->aggs,
           stage_us(r, ST_SERVE) / r->aggs, trip - agg);
}

static void json_breakdown(FILE *f, const row_t *r)
{
    static const char *const name[ST__COUNT] = {
        [ST_HANDOFF] = "push_handoff_us", [ST_POST] = "push_post_us",
        [ST_TRIP] = "round_trip_us",      [ST_WAKEUP] = "pull_wakeup_us",
        [ST_WAIT] = "agg_reduce_wait_us", [ST_REDUCE] = "agg_reduce_us",
        [ST_SERVE] = "agg_serve_us"};
    fprintf(f, ", \"breakdown\": {\"round_us\": %.2f", r->strata_mean_us);
    const char *sep = ", ";
    for (int s = 0; s < ST__COUNT; s++) {
        if (!name[s] || stage_us(r, (stage_t)s) < 0)
            continue;
        double div = s >= ST_AGG_RNDS ? r->aggs : 1;
        fprintf(f, "%s\"%s\": %.2f", sep, name[s],
                stage_us(r, (stage_t)s) / div);
        sep = ", ";
    }
    fprintf(f, "}");
}

static int write_json(const bench_t *b)
{
    FILE *f = fopen(b->o.json, "w");
    if (!f) {
        fprintf(stderr, "strata-bench-pushpull: %s: %s\n", b->o.json,
                strerror(errno));
        return -1;
    }
    fprintf(f, "{\"results\": [");
    for (int i = 0; i < b->nrows; i++) {
        const row_t *r = &b->rows[i];
        fprintf(f,
                "%s\n  {\"bytes\": %zu, \"workers\": %d, \"aggregators\": %d, "
                "\"transport\": \"%s\", \"partition_bytes\": %zu, "
                "\"strata_us\": %.2f, \"strata_min_us\": %.2f, ",
                i ? "," : "", r->bytes, r->workers, r->aggs, r->transport,
                r->partition, r->strata_us, r->strata_min_us);
        if (r->mpi_us >= 0)
            fprintf(
                f, "\"mpi_allreduce_us\": %.2f, \"mpi_allreduce_min_us\": %.2f",
                r->mpi_us, r->mpi_min_us);
        else
            fprintf(
                f,
                "\"mpi_allreduce_us\": null, \"mpi_allreduce_min_us\": null");
        if (b->o.breakdown)
            json_breakdown(f, r);
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    bench_t b = {0};
    b.mpi = perf_pp_mpi_start(&argc, &argv);
    if (parse(argc, argv, &b.o) != 0 || setup_job(&b) != 0)
        return 2;
    int nsizes = 0;
    for (size_t s = b.o.min_bytes; s <= b.o.max_bytes; s *= 2)
        nsizes++;
    b.rows = calloc((size_t)nsizes, sizeof(*b.rows));
    bool first = false;
    int rc = b.rows ? 0 : 1;
    size_t bytes = b.o.min_bytes;
    for (int k = 0; rc == 0 && k < nsizes; k++, bytes *= 2) {
        rc = run_size(&b, k, bytes, &first) == 0 ? 0 : 1;
        if (rc == 0 && first && k == 0)
            printf("# strata-bench-pushpull: one BSP push-reduce-pull round "
                   "(%s) vs MPI_Allreduce (%s)\n"
                   "# time per round: median of %d blocks, slowest worker\n"
                   "#%11s %7s %5s %9s %9s %11s %9s %11s %9s %7s\n",
                   b.o.optimizer,
                   b.mpi ? perf_pp_mpi_version() : "not under mpirun",
                   b.o.blocks, "bytes", "workers", "aggs", "transport",
                   "partition", "strata_us", "GB/s", "mpi_us", "GB/s", "ratio");
        if (rc == 0 && first) {
            print_row(&b.rows[b.nrows - 1]);
            if (b.o.breakdown)
                print_breakdown(&b.rows[b.nrows - 1]);
            fflush(stdout);
        }
    }
    if (rc == 0 && first && b.o.json && write_json(&b) != 0)
        rc = 1;
    free(b.rows);
    if (b.mpi)
        perf_pp_mpi_end();
    return rc;
}
