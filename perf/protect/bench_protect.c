/*
 * strata-bench-protect: what Reed-Solomon protection of aggregator shards
 * costs one aggregator, per shard size (engine/protect.h), all aggregators
 * simulated in this process (no network: the exchange is not counted):
 *   protect   the snapshot of its shard at the protected clock (a copy),
 *             the CRC32C of its k pieces, and its m parity fragments built
 *             from the k data fragments of each of their stripes, sealed
 *   rebuild   a lost shard from k surviving fragments of each of its k
 *             stripes, every fragment's CRC32C checked
 * Median of --reps runs, in ms of this thread's CPU time (on a shared
 * machine wall time measures the neighbours), and the shard bytes per
 * second of it.
 *   strata-bench-protect [--aggs N] [--parity M] [--sizes MiB,...]
 *                        [--reps R]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/strata_agg.h>

#include "engine/protect.h"

#define MAX_SIZES 8
#define MAX_REPS 32
#define MAXN 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return v[n / 2];
}

typedef struct bench {
    eng_protect_t p;
    uint64_t bytes;
    unsigned char *shard[MAXN]; /* k * frag each, zero past bytes */
    unsigned char *snap;        /* aggregator 0's snapshot */
    eng_frag_t dat[MAXN][MAXN]; /* [a][i]: piece i of shard a */
    eng_frag_t par[MAXN][MAXN]; /* [a][j] */
} bench_t;

/* Aggregator 0's share of a protection. */
static void protect_one(bench_t *b, int64_t clock)
{
    const eng_protect_t *p = &b->p;
    memcpy(b->snap, b->shard[0], b->bytes);
    for (uint32_t i = 0; i < p->k; i++)
        eng_protect_seal(p, &b->dat[0][i]);
    for (uint32_t j = 0; j < p->m; j++) {
        eng_frag_t *f = &b->par[0][j];
        uint32_t s = eng_protect_parity_stripe(p, 0, j);
        eng_protect_parity_reset(p, f, s, p->k + j, clock);
        for (uint32_t i = 0; i < p->k; i++) {
            uint32_t h = eng_protect_holder(p, s, i);
            eng_protect_parity_add(p, f, i, b->dat[h][i].bytes);
        }
        eng_protect_seal(p, f);
    }
}

/* Every aggregator's protection, so that rebuilding has its fragments. */
static void protect_all(bench_t *b, int64_t clock)
{
    const eng_protect_t *p = &b->p;
    for (uint32_t a = 0; a < p->n; a++) {
        for (uint32_t i = 0; i < p->k; i++) {
            b->dat[a][i] =
                (eng_frag_t){.stripe = eng_protect_data_stripe(p, a, i),
                             .index = i,
                             .clock = clock,
                             .bytes = b->shard[a] + (size_t)i * p->frag};
            eng_protect_seal(p, &b->dat[a][i]);
        }
    }
    for (uint32_t a = 0; a < p->n; a++)
        for (uint32_t j = 0; j < p->m; j++) {
            eng_frag_t *f = &b->par[a][j];
            uint32_t s = eng_protect_parity_stripe(p, a, j);
            eng_protect_parity_reset(p, f, s, p->k + j, clock);
            for (uint32_t i = 0; i < p->k; i++)
                eng_protect_parity_add(
                    p, f, i, b->dat[eng_protect_holder(p, s, i)][i].bytes);
            eng_protect_seal(p, f);
        }
}

/* Shard 0 rebuilt from the others into out. */
static int rebuild_zero(bench_t *b, int64_t clock, unsigned char *out)
{
    const eng_protect_t *p = &b->p;
    for (uint32_t i = 0; i < p->k; i++) {
        uint32_t s = eng_protect_data_stripe(p, 0, i);
        eng_frag_t have[MAXN];
        uint32_t nhave = 0;
        for (uint32_t f = 0; f < p->n; f++) {
            uint32_t h = eng_protect_holder(p, s, f);
            if (h != 0)
                have[nhave++] = f < p->k ? b->dat[h][f] : b->par[h][f - p->k];
        }
        if (eng_protect_rebuild(p, s, clock, have, nhave, i,
                                out + (size_t)i * p->frag) != STRATA_OK)
            return -1;
    }
    return 0;
}

static int run(uint32_t n, uint32_t m, uint64_t mib, unsigned reps)
{
    bench_t *b = calloc(1, sizeof(*b));
    b->bytes = mib << 20;
    if (eng_protect_init(n, m, b->bytes, &b->p) != STRATA_OK)
        return 1;
    const eng_protect_t *p = &b->p;
    size_t padded = (size_t)p->frag * p->k;
    for (uint32_t a = 0; a < n; a++) {
        b->shard[a] = aligned_alloc(64, padded);
        if (!b->shard[a])
            return 1;
        for (size_t x = 0; x < padded; x++)
            b->shard[a][x] = x < b->bytes ? (unsigned char)(x * 31 + a) : 0;
        for (uint32_t j = 0; j < m; j++)
            b->par[a][j].bytes = aligned_alloc(64, p->frag);
    }
    b->snap = aligned_alloc(64, b->bytes);
    unsigned char *out = aligned_alloc(64, padded);
    protect_all(b, 1);
    double tp[MAX_REPS], tr[MAX_REPS];
    for (unsigned r = 0; r < reps; r++) {
        double t0 = now_s();
        protect_one(b, 1);
        double t1 = now_s();
        if (rebuild_zero(b, 1, out) != 0)
            return 1;
        tr[r] = now_s() - t1;
        tp[r] = t1 - t0;
    }
    if (memcmp(out, b->shard[0], b->bytes) != 0) {
        fprintf(stderr, "strata-bench-protect: the rebuilt shard differs\n");
        return 1;
    }
    double mp = median(tp, reps), mr = median(tr, reps);
    printf("%6u %6u %8llu %12.2f %9.2f %12.2f %9.2f\n", n, m,
           (unsigned long long)mib, mp * 1e3, (double)b->bytes / mp * 1e-9,
           mr * 1e3, (double)b->bytes / mr * 1e-9);
    for (uint32_t a = 0; a < n; a++) {
        free(b->shard[a]);
        for (uint32_t j = 0; j < m; j++)
            free(b->par[a][j].bytes);
    }
    free(b->snap);
    free(out);
    eng_protect_fini(&b->p);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"aggs", required_argument, NULL, 'n'},
        {"parity", required_argument, NULL, 'm'},
        {"sizes", required_argument, NULL, 's'},
        {"reps", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    unsigned n = 4, m = 1, reps = 5, nsizes = 3;
    uint64_t sizes[MAX_SIZES] = {1, 16, 256};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        char *end, *tok;
        switch (c) {
        case 'n':
            n = (unsigned)strtoul(optarg, &end, 10);
            break;
        case 'm':
            m = (unsigned)strtoul(optarg, &end, 10);
            break;
        case 'r':
            reps = (unsigned)strtoul(optarg, &end, 10);
            break;
        case 's':
            nsizes = 0;
            for (tok = strtok(optarg, ","); tok && nsizes < MAX_SIZES;
                 tok = strtok(NULL, ","))
                sizes[nsizes++] = strtoull(tok, &end, 10);
            break;
        default:
            return 2;
        }
    }
    if (n < 2 || n > MAXN || m < 1 || m >= n || reps < 1 || reps > MAX_REPS ||
        nsizes == 0) {
        fprintf(stderr,
                "strata-bench-protect: --aggs 2..%d, --parity "
                "1..aggs-1, --reps 1..%d, --sizes MiB,...\n",
                MAXN, MAX_REPS);
        return 2;
    }
    printf("# one aggregator's compute; no network. protect: snapshot, "
           "CRC32C, m parity fragments; rebuild: a lost shard\n");
    printf("%6s %6s %8s %12s %9s %12s %9s\n", "aggs", "parity", "MiB",
           "protect_ms", "GB/s", "rebuild_ms", "GB/s");
    for (unsigned i = 0; i < nsizes; i++)
        if (run(n, m, sizes[i], reps) != 0) {
            fprintf(stderr, "strata-bench-protect: %llu MiB failed\n",
                    (unsigned long long)sizes[i]);
            return 1;
        }
    return 0;
}
