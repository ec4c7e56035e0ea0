/*
 * strata-bench-reduce: how fast Strata sums N gradient buffers, next to what
 * an aggregator would otherwise use, and next to what the memory allows.
 *
 * For every element type, number of sources and buffer size it times, in
 * interleaved rounds (so that a noisy neighbour hurts every candidate
 * alike), and reports the median GB/s, counting (sources + 1) x buffer bytes
 * per reduction:
 *   strata        each kernel table this CPU runs, one thread; and the best
 *                 one through the reduce pool of all threads
 *   scalar        a plain C loop (element by element, all sources)
 *   pairwise      two buffers at a time with Strata's best kernel, as
 *                 BytePS does (fp16/bf16 then round at every step)
 *   mpi-pairwise  Open MPI's MPI_Reduce_local, two buffers at a time
 *   roofline      memcpy (2 x bytes) and a[i] += b[i] (3 x bytes), with
 *                 one thread and with the pool's threads
 *   read          the read-only kernel: loads the N sources as a reduction
 *                 does and stores nothing (N x bytes), one thread and the
 *                 pool's; a reduction's time is reported against it ("x
 *                 read": 1.00 would be a reduction that writes for free)
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "agg/agg.h"
#include "agg/convert.h"
#include "perf/reduce/bench_reduce.h"
#include "util/parse.h"

#define MAX_LIST 16
#define MAX_REPS 64
#define MAX_CANDS 16
#define SAMPLE_SECONDS 0.002 /* a sample times this long at least */
#define SLOW_SECONDS 0.15    /* slower candidates get fewer samples */

typedef struct opts {
    strata_dtype_t dtypes[MAX_LIST];
    size_t ndtypes;
    size_t sources[MAX_LIST], nsources;
    size_t sizes[MAX_LIST], nsizes;
    unsigned reps, slow_reps, threads;
    bool mpi;
    const char *json;
} opts_t;

typedef enum kind {
    K_TABLE,    /* one kernel table, one thread */
    K_POOL,     /* strata_reduce_mt over the pool */
    K_LOOP,     /* plain C loop */
    K_PAIRWISE, /* Strata, two buffers at a time */
    K_MPI,      /* MPI_Reduce_local, two buffers at a time */
    K_COPY,     /* roofline: memcpy */
    K_ADD,      /* roofline: a += b */
    K_READ,     /* read-only: load the N sources, store nothing */
} kind_t;

typedef struct cand {
    kind_t kind;
    const char *impl;
    const char *isa;
    unsigned threads;
    const agg_ops_t *ops;
    unsigned iters, nsamples;
    double round[MAX_REPS]; /* GB/s of each round, in time order */
    double gbps;            /* median */
    double of_roof;         /* median over rounds of GB/s / roofline */
    double x_read; /* median over rounds of time / the read kernel's time */
} cand_t;

/* One configuration: element type, sources, bytes per buffer. */
typedef struct cfg {
    strata_dtype_t dtype;
    size_t nsrc, bytes, count;
} cfg_t;

typedef struct bench {
    opts_t o;
    void *buf[STRATA_REDUCE_MAX_SOURCES + 1]; /* sources, then dst */
    const void *srcs[STRATA_REDUCE_MAX_SOURCES];
    void *dst;
    size_t buf_bytes;
    strata_reduce_pool_t *pool;
    const agg_ops_t *best;
    bool have_mpi;
    FILE *json;
    unsigned nresults;
    double roofline; /* JSON roofline_gbps, see run() */
} bench_t;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the candidates ---- */

/* The plain loop a programmer would write first. */
static void plain_loop(strata_dtype_t dt, void *dst, const void *const *srcs,
                       size_t nsrc, size_t count)
{
    if (dt == STRATA_FP64) {
        for (size_t i = 0; i < count; i++) {
            double acc = 0;
            for (size_t j = 0; j < nsrc; j++)
                acc += ((const double *)srcs[j])[i];
            ((double *)dst)[i] = acc;
        }
        return;
    }
    for (size_t i = 0; i < count; i++) {
        float acc = 0;
        for (size_t j = 0; j < nsrc; j++) {
            const uint16_t *h = srcs[j];
            acc += dt == STRATA_FP32   ? ((const float *)srcs[j])[i]
                   : dt == STRATA_FP16 ? agg_f16_to_f32(h[i])
                                       : agg_bf16_to_f32(h[i]);
        }
        if (dt == STRATA_FP32)
            ((float *)dst)[i] = acc;
        else if (dt == STRATA_FP16)
            ((uint16_t *)dst)[i] = agg_f32_to_f16(acc);
        else
            ((uint16_t *)dst)[i] = agg_f32_to_bf16(acc);
    }
}

static void pairwise(const agg_ops_t *ops, const cfg_t *c, void *dst,
                     const void *const *srcs)
{
    size_t first = c->nsrc < 2 ? 1 : 2;
    ops->reduce[c->dtype](dst, srcs, first, 0, c->count, 1.0, 0);
    for (size_t j = first; j < c->nsrc; j++)
        ops->reduce[c->dtype](dst, &srcs[j], 1, 0, c->count, 1.0,
                              AGG_REDUCE_ACC);
}

static void run_once(bench_t *b, const cand_t *k, const cfg_t *c)
{
    size_t es = strata_dtype_size(c->dtype);
    switch (k->kind) {
    case K_TABLE:
        k->ops->reduce[c->dtype](b->dst, b->srcs, c->nsrc, 0, c->count, 1.0,
                                 agg_reduce_flags(c->count, es, false));
        break;
    case K_POOL:
        strata_reduce_mt(b->pool, c->dtype, b->dst, b->srcs, c->nsrc, c->count,
                         1.0);
        break;
    case K_LOOP:
        plain_loop(c->dtype, b->dst, b->srcs, c->nsrc, c->count);
        break;
    case K_PAIRWISE:
        pairwise(b->best, c, b->dst, b->srcs);
        break;
    case K_MPI:
        perf_mpi_reduce_pairwise(c->dtype, b->dst, b->srcs, c->nsrc, c->count);
        break;
    case K_COPY:
        perf_roofline_copy(k->threads > 1 ? b->pool : NULL, b->dst, b->srcs[0],
                           c->bytes);
        break;
    case K_ADD:
        perf_roofline_add(k->threads > 1 ? b->pool : NULL, b->dst, b->srcs[1],
                          c->bytes);
        break;
    case K_READ:
        perf_roofline_read(k->threads > 1 ? b->pool : NULL, b->srcs, c->nsrc,
                           c->bytes);
        break;
    }
}

static double bytes_moved(const cand_t *k, const cfg_t *c)
{
    double n = k->kind == K_COPY   ? 2
               : k->kind == K_ADD  ? 3
               : k->kind == K_READ ? (double)c->nsrc
                                   : (double)(c->nsrc + 1);
    return n * (double)c->bytes;
}

static size_t add_cand(cand_t *k, size_t n, kind_t kind, const char *impl,
                       const char *isa, unsigned threads, const agg_ops_t *ops)
{
    k[n] = (cand_t){
        .kind = kind, .impl = impl, .isa = isa, .threads = threads, .ops = ops};
    return n + 1;
}

/* Everything timed for one configuration; returns how many. */
static size_t candidates(const bench_t *b, const cfg_t *c, cand_t *k)
{
    unsigned t = b->o.threads;
    size_t n = 0;
    for (size_t i = 0; i < agg_impl_count(); i++)
        if (agg_impl_supported(agg_impl(i)))
            n = add_cand(k, n, K_TABLE, "strata", agg_impl(i)->name, 1,
                         agg_impl(i));
    if (t > 1)
        n = add_cand(k, n, K_POOL, "strata", b->best->name, t, b->best);
    n = add_cand(k, n, K_LOOP, "scalar", "c", 1, NULL);
    n = add_cand(k, n, K_PAIRWISE, "pairwise", b->best->name, 1, b->best);
    if (b->have_mpi && perf_mpi_supports(c->dtype))
        n = add_cand(k, n, K_MPI, "mpi-pairwise", "ompi", 1, NULL);
    for (unsigned th = 1; th <= t; th += t > 1 ? t - 1 : 1) {
        n = add_cand(k, n, K_COPY, "roofline-memcpy", "libc", th, NULL);
        n = add_cand(k, n, K_ADD, "roofline-add", "c", th, NULL);
        n = add_cand(k, n, K_READ, "read-only", "c", th, NULL);
    }
    return n;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* The roofline with k's threads in round r. */
static double roofline_round(const cand_t *all, size_t n, const cand_t *k,
                             unsigned r)
{
    double roof = 0;
    for (size_t i = 0; i < n; i++)
        if ((all[i].kind == K_COPY || all[i].kind == K_ADD) &&
            all[i].threads == k->threads)
            roof = fmax(roof, all[i].round[r]);
    return roof;
}

/* The read-only kernel with t threads; NULL if none. */
static const cand_t *read_cand(const cand_t *all, size_t n, unsigned t)
{
    for (size_t i = 0; i < n; i++)
        if (all[i].kind == K_READ && all[i].threads == t)
            return &all[i];
    return NULL;
}

/* Medians of k's rounds: GB/s, its share of the roofline measured in the
 * same round, and its time over the read-only kernel's in the same round
 * (robust to a neighbour who comes and goes). */
static void summarise(const cand_t *all, size_t n, const cfg_t *c, cand_t *k)
{
    double v[MAX_REPS], f[MAX_REPS], x[MAX_REPS];
    const cand_t *rd = read_cand(all, n, k->threads);
    unsigned nx = 0;
    for (unsigned r = 0; r < k->nsamples; r++) {
        v[r] = k->round[r];
        f[r] = k->round[r] / roofline_round(all, n, k, r);
        if (rd && r < rd->nsamples)
            x[nx++] = (bytes_moved(k, c) / k->round[r]) /
                      (bytes_moved(rd, c) / rd->round[r]);
    }
    k->gbps = median(v, k->nsamples);
    k->of_roof = median(f, k->nsamples);
    k->x_read = nx ? median(x, nx) : 0;
}

/* Calibrates each candidate, then samples all of them in rounds. A slow
 * candidate (the plain loops on large buffers) keeps its calibration run as
 * its first sample and takes fewer rounds. */
static void measure(bench_t *b, const cfg_t *c, cand_t *k, size_t n)
{
    unsigned first[MAX_CANDS];
    for (size_t i = 0; i < n; i++) {
        double t0 = now();
        run_once(b, &k[i], c); /* warms caches and pages up too */
        double t1 = now() - t0;
        k[i].iters =
            t1 >= SAMPLE_SECONDS ? 1 : (unsigned)(SAMPLE_SECONDS / t1) + 1;
        k[i].nsamples = b->o.reps;
        first[i] = 0;
        if (t1 > SLOW_SECONDS && b->o.reps > b->o.slow_reps) {
            k[i].nsamples = b->o.slow_reps;
            k[i].round[0] = bytes_moved(&k[i], c) / t1 / 1e9;
            first[i] = 1;
        }
    }
    for (unsigned r = 0; r < b->o.reps; r++) {
        for (size_t i = 0; i < n; i++) {
            if (r < first[i] || r >= k[i].nsamples)
                continue;
            double t0 = now();
            for (unsigned it = 0; it < k[i].iters; it++)
                run_once(b, &k[i], c);
            double t = now() - t0;
            k[i].round[r] = bytes_moved(&k[i], c) * k[i].iters / t / 1e9;
        }
    }
    for (size_t i = 0; i < n; i++)
        summarise(k, n, c, &k[i]);
}

/* ---- output ---- */

static void fmt_size(size_t bytes, char *buf, size_t cap)
{
    if (bytes >= 1u << 20 && bytes % (1u << 20) == 0)
        snprintf(buf, cap, "%zuMiB", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, cap, "%zuKiB", bytes >> 10);
    else
        snprintf(buf, cap, "%zuB", bytes);
}

static const char *cand_label(const cand_t *k, char *buf, size_t cap)
{
    switch (k->kind) {
    case K_TABLE:
        return k->isa;
    case K_POOL:
        snprintf(buf, cap, "best,%ut", k->threads);
        return buf;
    case K_LOOP:
        return "loop";
    case K_PAIRWISE:
        return "pairwise";
    case K_MPI:
        return "mpi-pw";
    case K_COPY:
        snprintf(buf, cap, "memcpy,%ut", k->threads);
        return buf;
    case K_ADD:
        snprintf(buf, cap, "a+=b,%ut", k->threads);
        return buf;
    case K_READ:
        snprintf(buf, cap, "read,%ut", k->threads);
        return buf;
    }
    return "?";
}

/* The roofline with t threads in this configuration's rounds. */
static double roofline_of(const cand_t *k, size_t n, unsigned t)
{
    double r = 0;
    for (size_t i = 0; i < n; i++)
        if ((k[i].kind == K_COPY || k[i].kind == K_ADD) && k[i].threads == t)
            r = fmax(r, k[i].gbps);
    return r;
}

/* Strata's fastest candidate with t threads. */
static const cand_t *strata_best(const cand_t *k, size_t n, unsigned t)
{
    const cand_t *best = NULL;
    for (size_t i = 0; i < n; i++)
        if ((k[i].kind == K_TABLE || k[i].kind == K_POOL) &&
            k[i].threads == t && (!best || k[i].gbps > best->gbps))
            best = &k[i];
    return best;
}

static void print_header(const cand_t *k, size_t n, unsigned threads)
{
    char buf[32];
    printf("\n%-5s %3s %7s", "dtype", "src", "size");
    for (size_t i = 0; i < n; i++)
        printf(" %11s", cand_label(&k[i], buf, sizeof(buf)));
    printf("  %7s", "%roof1t");
    if (threads > 1)
        printf(" %6s%u%s", "%roof", threads, "t");
    printf(" %7s", "xread1t");
    if (threads > 1)
        printf(" %6s%u%s", "xread", threads, "t");
    printf("\n");
}

static void print_row(const bench_t *b, const cfg_t *c, const cand_t *k,
                      size_t n)
{
    char size[32];
    fmt_size(c->bytes, size, sizeof(size));
    printf("%-5s %3zu %7s", strata_dtype_name(c->dtype), c->nsrc, size);
    for (size_t i = 0; i < n; i++)
        printf(" %11.1f", k[i].gbps);
    unsigned t = b->o.threads;
    printf("  %6.0f%%", 100 * strata_best(k, n, 1)->of_roof);
    if (t > 1)
        printf(" %7.0f%%", 100 * strata_best(k, n, t)->of_roof);
    printf(" %7.2f", strata_best(k, n, 1)->x_read);
    if (t > 1)
        printf(" %8.2f", strata_best(k, n, t)->x_read);
    printf("\n");
    fflush(stdout);
}

/* One result per timed implementation; the roofline measured in the same
 * rounds (with as many threads) rides along. */
static void json_row(bench_t *b, const cfg_t *c, const cand_t *k, size_t n)
{
    for (size_t i = 0; b->json && i < n; i++) {
        if (k[i].kind == K_COPY || k[i].kind == K_ADD || k[i].kind == K_READ)
            continue;
        const cand_t *rd = read_cand(k, n, k[i].threads);
        fprintf(b->json,
                "%s\n    {\"impl\": \"%s\", \"isa\": \"%s\", \"dtype\": "
                "\"%s\", \"sources\": %zu, \"bytes\": %zu, \"gbps\": %.3f, "
                "\"threads\": %u, \"roofline_gbps\": %.3f, "
                "\"of_roofline\": %.3f, \"read_only_gbps\": %.3f, "
                "\"time_vs_read_only\": %.3f}",
                b->nresults++ ? "," : "", k[i].impl, k[i].isa,
                strata_dtype_name(c->dtype), c->nsrc, c->bytes, k[i].gbps,
                k[i].threads, roofline_of(k, n, k[i].threads), k[i].of_roof,
                rd ? rd->gbps : 0, k[i].x_read);
    }
}

/* ---- buffers ---- */

/* A 1 MiB pattern of ordinary values (no NaN, Inf or denormal, which some
 * CPUs slow down on), copied into every buffer at a different phase. */
static void fill_buffers(bench_t *b, strata_dtype_t dt, size_t nbuf)
{
    static uint16_t pat16[1 << 19];
    static float pat32[1 << 18];
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < 1 << 19; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float v = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
        if (i < 1 << 18)
            pat32[i] = v;
        pat16[i] = dt == STRATA_FP16 ? agg_f32_to_f16(v) : agg_f32_to_bf16(v);
    }
    const char *pat =
        dt == STRATA_FP32 ? (const char *)pat32 : (const char *)pat16;
    for (size_t j = 0; j < nbuf; j++) {
        size_t phase = (j * 4096 * 7) % (1 << 20);
        for (size_t off = 0; off < b->buf_bytes; off += 1 << 20) {
            size_t len =
                b->buf_bytes - off < 1 << 20 ? b->buf_bytes - off : 1 << 20;
            for (size_t p = 0; p < len; p += 4096)
                memcpy((char *)b->buf[j] + off + p,
                       pat + (phase + p) % (1 << 20),
                       len - p < 4096 ? len - p : 4096);
        }
    }
}

/* 2 MiB-aligned, transparent huge pages advised: an aggregator's
 * registered slots live in such memory, and TLB misses would otherwise
 * blur what the kernels do. */
static int alloc_buffers(bench_t *b, size_t nbuf, size_t bytes)
{
    size_t round = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    b->buf_bytes = bytes;
    for (size_t j = 0; j < nbuf; j++) {
        b->buf[j] = aligned_alloc(2u << 20, round);
        if (!b->buf[j]) {
            fprintf(stderr,
                    "strata-bench-reduce: cannot allocate %zu buffers of %zu "
                    "bytes (%.1f GiB); use smaller --sizes or fewer "
                    "--sources\n",
                    nbuf, bytes, (double)nbuf * (double)round / (1u << 30));
            return -1;
        }
        madvise(b->buf[j], round, MADV_HUGEPAGE);
    }
    return 0;
}

/* ---- options ---- */

static int parse_size(const char *s, size_t *out)
{
    uint64_t v;
    if (!util_parse_size(s, &v) || v == 0 || v > (64ull << 30))
        return -1;
    *out = (size_t)v;
    return 0;
}

/* A comma-separated list of sizes or counts into out (at most MAX_LIST). */
static int parse_list(const char *s, size_t *out, size_t *n_out)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", s);
    size_t n = 0;
    for (char *save, *tok = strtok_r(tmp, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST || parse_size(tok, &out[n]))
            return -1;
        n++;
    }
    *n_out = n;
    return n ? 0 : -1;
}

static int parse_dtypes(const char *s, opts_t *o)
{
    char tmp[128];
    snprintf(tmp, sizeof(tmp), "%s", s);
    o->ndtypes = 0;
    for (char *save, *tok = strtok_r(tmp, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int dt = -1;
        for (int d = 0; d < AGG_NDTYPES; d++)
            if (strcmp(tok, strata_dtype_name((strata_dtype_t)d)) == 0)
                dt = d;
        if (dt < 0 || o->ndtypes == MAX_LIST)
            return -1;
        o->dtypes[o->ndtypes++] = (strata_dtype_t)dt;
    }
    return o->ndtypes ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata-bench-reduce [--quick] [--json FILE] "
            "[--dtypes LIST]\n"
            "           [--sources LIST] [--sizes LIST] [--reps N] "
            "[--threads N] [--no-mpi]\n"
            "  --quick        fp32, fp16, bf16 with 8 sources at 4KiB, "
            "256KiB, 4MiB, 64MiB\n"
            "  --dtypes LIST  of fp32,fp64,fp16,bf16 (default "
            "fp32,fp16,bf16)\n"
            "  --sources LIST numbers of sources, 1..%d (default "
            "2,4,8,16)\n"
            "  --sizes LIST   bytes per buffer, K/M/G suffixes (default "
            "4K,16K,64K,256K,1M,4M,16M,64M,256M)\n"
            "  --reps N       interleaved rounds per configuration; the "
            "median is reported (default 7;\n"
            "                 3 for runs slower than 0.15 s, 1 with --quick)\n"
            "  --threads N    threads of the pooled rows (default "
            "STRATA_REDUCE_THREADS: the cores)\n"
            "  --json FILE    also write the results as JSON\n",
            STRATA_REDUCE_MAX_SOURCES);
}

static void set_quick(opts_t *o)
{
    const size_t sizes[] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};
    o->ndtypes = 3;
    o->dtypes[0] = STRATA_FP32, o->dtypes[1] = STRATA_FP16;
    o->dtypes[2] = STRATA_BF16;
    o->nsources = 1, o->sources[0] = 8;
    o->nsizes = 4;
    memcpy(o->sizes, sizes, sizeof(sizes));
    o->reps = 5;
    o->slow_reps = 1; /* the plain loops: tens of times slower anyway */
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"quick", no_argument, NULL, 'q'},
        {"json", required_argument, NULL, 'j'},
        {"dtypes", required_argument, NULL, 'd'},
        {"sources", required_argument, NULL, 's'},
        {"sizes", required_argument, NULL, 'z'},
        {"reps", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},
        {"no-mpi", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opts_t d = {.reps = 7, .slow_reps = 3, .mpi = true};
    parse_dtypes("fp32,fp16,bf16", &d);
    parse_list("2,4,8,16", d.sources, &d.nsources);
    parse_list("4K,16K,64K,256K,1M,4M,16M,64M,256M", d.sizes, &d.nsizes);
    *o = d;
    int c, li = 0;
    size_t v;
    while ((c = getopt_long(argc, argv, "", lo, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case 'q':
            set_quick(o);
            break;
        case 'j':
            o->json = optarg;
            break;
        case 'd':
            bad = parse_dtypes(optarg, o);
            break;
        case 's':
            bad = parse_list(optarg, o->sources, &o->nsources);
            for (size_t i = 0; !bad && i < o->nsources; i++)
                bad = o->sources[i] < 1 ||
                      o->sources[i] > STRATA_REDUCE_MAX_SOURCES;
            break;
        case 'z':
            bad = parse_list(optarg, o->sizes, &o->nsizes);
            break;
        case 'r':
            bad = parse_size(optarg, &v) || v > MAX_REPS;
            o->reps = (unsigned)v;
            break;
        case 't':
            bad = parse_size(optarg, &v) || v > 1024;
            o->threads = (unsigned)v;
            break;
        case 'n':
            o->mpi = false;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "strata-bench-reduce: bad value '%s' for --%s\n",
                    optarg, lo[li].name);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strata-bench-reduce: unexpected argument '%s'\n",
                argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* ---- main ---- */

/* Median over the configurations of the largest size of the per-config
 * rooflines (max of memcpy and a+=b) with t threads. */
typedef struct roof_acc {
    double v[MAX_LIST * MAX_LIST * 4];
    size_t n;
} roof_acc_t;

static double median_of(roof_acc_t *a)
{
    return a->n ? median(a->v, a->n) : 0;
}

/* What the targets are judged on, for one configuration of the largest
 * size: Strata's best with 1 and with all threads, the rooflines of the same
 * rounds, and the baselines. */
typedef struct summary {
    cfg_t c;
    double best[2], of_roof[2], roof[2], x_read[2], pairwise, mpi;
} summary_t;

static summary_t summarise_cfg(const bench_t *b, const cfg_t *c,
                               const cand_t *k, size_t n)
{
    summary_t m = {.c = *c};
    for (int t = 0; t < 2; t++) {
        const cand_t *best = strata_best(k, n, t ? b->o.threads : 1);
        m.best[t] = best ? best->gbps : 0;
        m.of_roof[t] = best ? best->of_roof : 0;
        m.x_read[t] = best ? best->x_read : 0;
        m.roof[t] = roofline_of(k, n, t ? b->o.threads : 1);
    }
    for (size_t i = 0; i < n; i++) {
        if (k[i].kind == K_PAIRWISE)
            m.pairwise = k[i].gbps;
        if (k[i].kind == K_MPI)
            m.mpi = k[i].gbps;
    }
    return m;
}

static void print_summary(const bench_t *b, const summary_t *m)
{
    char size[32];
    unsigned t = b->o.threads;
    fmt_size(m->c.bytes, size, sizeof(size));
    printf("%s, %zu sources, %s: 1 thread %.1f GB/s (%.0f%% of the 1-thread "
           "roofline, %.2fx the read-only kernel's time)",
           strata_dtype_name(m->c.dtype), m->c.nsrc, size, m->best[0],
           100 * m->of_roof[0], m->x_read[0]);
    if (t > 1)
        printf(", %u threads %.1f GB/s (%.0f%% of the %u-thread roofline, "
               "%.0f%% of the 1-thread one, %.2fx the read-only kernel's "
               "time)",
               t, m->best[1], 100 * m->of_roof[1], t,
               100 * m->best[1] / m->roof[0], m->x_read[1]);
    double best = fmax(m->best[0], m->best[1]);
    printf("; %.1fx pairwise", best / m->pairwise);
    if (m->mpi > 0)
        printf(", %.1fx mpi-pairwise", best / m->mpi);
    printf("\n");
}

static void set_buffers(bench_t *b, size_t nsrc)
{
    for (size_t j = 0; j < nsrc; j++)
        b->srcs[j] = b->buf[j];
    b->dst = b->buf[nsrc];
}

/* Every configuration: table rows, JSON, and the summary of the largest
 * size (whose rooflines give the JSON's roofline_gbps). */
static int run(bench_t *b)
{
    size_t maxsrc = 2, maxbytes = 0, nsum = 0; /* a += b needs two buffers */
    for (size_t i = 0; i < b->o.nsources; i++)
        maxsrc = b->o.sources[i] > maxsrc ? b->o.sources[i] : maxsrc;
    for (size_t i = 0; i < b->o.nsizes; i++)
        maxbytes = b->o.sizes[i] > maxbytes ? b->o.sizes[i] : maxbytes;
    if (alloc_buffers(b, maxsrc + 1, maxbytes))
        return -1;
    set_buffers(b, maxsrc);
    static summary_t sums[MAX_LIST * MAX_LIST];
    roof_acc_t roof[2] = {{.n = 0}};
    for (size_t d = 0; d < b->o.ndtypes; d++) {
        fill_buffers(b, b->o.dtypes[d], maxsrc + 1);
        for (size_t z = 0; z < b->o.nsizes; z++) {
            for (size_t s = 0; s < b->o.nsources; s++) {
                size_t es = strata_dtype_size(b->o.dtypes[d]);
                cfg_t c = {.dtype = b->o.dtypes[d],
                           .nsrc = b->o.sources[s],
                           .count = b->o.sizes[z] / es};
                c.bytes = c.count * es;
                cand_t k[MAX_CANDS];
                size_t n = candidates(b, &c, k);
                measure(b, &c, k, n);
                if (z == 0 && s == 0) /* the columns depend on dtype */
                    print_header(k, n, b->o.threads);
                print_row(b, &c, k, n);
                json_row(b, &c, k, n);
                if (b->o.sizes[z] != maxbytes)
                    continue;
                sums[nsum] = summarise_cfg(b, &c, k, n);
                for (int t = 0; t < (b->o.threads > 1 ? 2 : 1); t++)
                    roof[t].v[roof[t].n++] = sums[nsum].roof[t];
                nsum++;
            }
        }
    }
    b->roofline = fmax(median_of(&roof[0]), median_of(&roof[1]));
    printf("\nroofline (max of memcpy and a+=b at %zu bytes, median over "
           "the configurations): %.1f GB/s with 1 thread",
           maxbytes, median_of(&roof[0]));
    if (b->o.threads > 1)
        printf(", %.1f GB/s with %u threads", median_of(&roof[1]),
               b->o.threads);
    printf("\n");
    for (size_t i = 0; i < nsum; i++)
        print_summary(b, &sums[i]);
    return 0;
}

static void print_intro(const bench_t *b)
{
    printf("strata-bench-reduce: GB/s = (sources + 1) x buffer bytes / time, "
           "median of %u interleaved rounds\n",
           b->o.reps);
    printf("CPU: %s; tables:", agg_cpu_features_text());
    for (size_t i = 0; i < agg_impl_count(); i++)
        if (agg_impl_supported(agg_impl(i)))
            printf(" %s", agg_impl(i)->name);
    printf("; best %s; pool of %u threads\n", b->best->name, b->o.threads);
    printf("MPI baseline: %s\n",
           b->have_mpi ? perf_mpi_version()
                       : (b->o.mpi ? perf_mpi_version() : "disabled"));
    printf("columns: strata per table (1 thread), best table over the pool, "
           "plain loop, pairwise (strata), mpi-pw (MPI_Reduce_local), "
           "roofline, read-only kernel (GB/s of N x bytes); xread: Strata's "
           "time / the read-only kernel's, same rounds\n");
}

int main(int argc, char **argv)
{
    bench_t b = {.nresults = 0};
    if (parse_opts(argc, argv, &b.o))
        return 2;
    if (agg_ops() == NULL) /* configuration errors were printed */
        return 1;
    b.best = agg_ops();
    if (!b.o.threads)
        b.o.threads = agg_reduce_threads();
    if (strata_reduce_pool_create(b.o.threads, &b.pool))
        return 1;
    b.have_mpi = b.o.mpi && perf_mpi_init(&argc, &argv);
    if (b.o.json) {
        b.json = fopen(b.o.json, "w");
        if (!b.json) {
            fprintf(stderr, "strata-bench-reduce: %s: %s\n", b.o.json,
                    strerror(errno));
            return 1;
        }
        fprintf(b.json, "{\"results\": [");
    }
    print_intro(&b);
    int rc = run(&b);
    if (b.json) {
        fprintf(b.json, "\n  ],\n  \"roofline_gbps\": %.3f,\n", b.roofline);
        fprintf(b.json,
                "  \"threads\": %u,\n  \"cpu\": \"%s\",\n  \"best\": "
                "\"%s\"\n}\n",
                b.o.threads, agg_cpu_features_text(), b.best->name);
        if (fclose(b.json)) {
            fprintf(stderr, "strata-bench-reduce: %s: %s\n", b.o.json,
                    strerror(errno));
            rc = -1;
        }
    }
    if (b.have_mpi)
        perf_mpi_finalize();
    for (size_t j = 0; j < STRATA_REDUCE_MAX_SOURCES + 1; j++)
        free(b.buf[j]);
    strata_reduce_pool_destroy(b.pool);
    return rc ? 1 : 0;
}
