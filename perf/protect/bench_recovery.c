/*
 * strata-bench-recovery: how long a bsp job takes to get over the loss of
 * an aggregator (issue 16), per shard size. For each size a real job runs
 * on this host (the ranks are this program's children: W workers, S
 * aggregators, STRATA_PROTECT_EVERY=K, STRATA_PROTECT_PARITY=M); once
 * worker 0 completed clock --kill-at and a clock of every shard is
 * protected, it SIGKILLs aggregator --victim. The survivors rebuild its
 * shard and one takes it over (docs/engine.md, "the takeover"). Printed
 * per size, from the ranks' takeover metrics (strata_metrics_t, one
 * CLOCK_MONOTONIC for every rank of the host), in ms:
 *   detect     the kill -> the coordinator saw the loss
 *   rebuild    -> the shard rebuilt by the taker (fragments gathered,
 *                 decoded, its CRC32C checked)
 *   agree      -> TAKEOVER sent (every worker said LOST; R decided)
 *   install    -> the taker installed the shard, every worker given slots
 *   round      -> every worker completed its first round with the taker's
 *                 model (the model of clock R or later)
 *   total      the kill -> that round; beside it the steady round time
 *                 before the kill (median), P, R and the clocks lost.
 * The model is shard x aggregators bytes of fp32, one tensor, sgd.
 *
 *   strata-bench-recovery [--aggregators S] [--parity M] [--workers W]
 *       [--sizes MiB,...] [--every K] [--kill-at C] [--victim A]
 *       [--after N] [--transport tcp|shm] [--timeout-ms T] [--keep]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <strata/strata.h>

#define MAX_RANKS 64
#define MAX_SIZES 8
#define MAX_STEPS 4096

typedef struct opts {
    int aggs, parity, workers, every, kill_at, victim, after, timeout_ms;
    int nsizes;
    uint64_t mib[MAX_SIZES];
    const char *transport;
    bool keep;
} opts_t;

/* One rank's results, in memory shared with the parent. */
typedef struct rank_rec {
    strata_metrics_t m; /* at the end of its job */
    int done;           /* 1: its job ended well */
    int nsteps;         /* worker: steps timed */
    uint64_t step_end_ns[MAX_STEPS];
} rank_rec_t;

/* The job's shared state: the parent writes the pids, rank 0 the clock
 * every shard is protected at, worker 0 the kill. */
typedef struct shared {
    _Atomic pid_t pid[MAX_RANKS];
    _Atomic int64_t protected_clock;
    _Atomic int stop_after; /* steps every worker runs; 0: not decided */
    _Atomic uint64_t kill_ns;
    _Atomic int kill_step;
    rank_rec_t rec[MAX_RANKS];
} shared_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: strata-bench-recovery [--aggregators S] [--parity M] "
           "[--workers W]\n"
           "         [--sizes MiB,...] [--every K] [--kill-at C] [--victim A]\n"
           "         [--after N] [--transport tcp|shm] [--timeout-ms T] "
           "[--keep]\n"
           "Runs a bsp job per shard size on this host (S aggregators, "
           "default 3, protected\nevery K clocks, default 2, by M parity "
           "fragments, default 1; W workers,\ndefault 2; shards of 1, 16 "
           "and 256 MiB by default), SIGKILLs aggregator A\n(default S - 1) "
           "once worker 0 completed clock C (default 6) and a clock is\n"
           "protected, runs N more rounds (default 4), and prints the time "
           "from the kill to\nthe next completed round, split into its "
           "stages (ms). T: STRATA_TIMEOUT_MS\n(default 60000; the rebuild "
           "and the agreement must end within half of it).\n--keep: keep "
           "the ranks' logs.\n");
}

static int parse_sizes(const char *s, opts_t *o)
{
    o->nsizes = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && o->nsizes < MAX_SIZES;
         t = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long long v = strtoull(t, &end, 10);
        if (*end || v == 0 || v > 4096) {
            free(copy);
            return -1;
        }
        o->mib[o->nsizes++] = v;
    }
    free(copy);
    return o->nsizes > 0 ? 0 : -1;
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option opts[] = {
        {"aggregators", required_argument, NULL, 'a'},
        {"parity", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'w'},
        {"sizes", required_argument, NULL, 's'},
        {"every", required_argument, NULL, 'k'},
        {"kill-at", required_argument, NULL, 'c'},
        {"victim", required_argument, NULL, 'v'},
        {"after", required_argument, NULL, 'n'},
        {"transport", required_argument, NULL, 't'},
        {"timeout-ms", required_argument, NULL, 'T'},
        {"keep", no_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.aggs = 3,
                  .parity = 1,
                  .workers = 2,
                  .every = 2,
                  .kill_at = 6,
                  .victim = -1,
                  .after = 4,
                  .timeout_ms = 60000,
                  .nsizes = 3,
                  .mib = {1, 16, 256},
                  .transport = "tcp"};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'a':
            ok = (o->aggs = atoi(optarg)) >= 2;
            break;
        case 'm':
            ok = (o->parity = atoi(optarg)) >= 1;
            break;
        case 'w':
            ok = (o->workers = atoi(optarg)) >= 1;
            break;
        case 's':
            ok = parse_sizes(optarg, o) == 0;
            break;
        case 'k':
            ok = (o->every = atoi(optarg)) >= 1;
            break;
        case 'c':
            ok = (o->kill_at = atoi(optarg)) >= 1;
            break;
        case 'v':
            ok = (o->victim = atoi(optarg)) >= 1;
            break;
        case 'n':
            ok = (o->after = atoi(optarg)) >= 3;
            break;
        case 't':
            o->transport = optarg;
            ok = strcmp(optarg, "tcp") == 0 || strcmp(optarg, "shm") == 0;
            break;
        case 'T':
            ok = (o->timeout_ms = atoi(optarg)) >= 1000;
            break;
        case 'K':
            o->keep = true;
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
    if (o->victim < 0)
        o->victim = o->aggs - 1;
    if (o->parity >= o->aggs || o->victim >= o->aggs ||
        o->aggs + o->workers > MAX_RANKS || optind < argc) {
        fprintf(stderr,
                "strata-bench-recovery: need 1 <= parity < "
                "aggregators, 1 <= victim < aggregators (rank 0 "
                "coordinates) and at most %d ranks; --after at "
                "least 3\n",
                MAX_RANKS);
        return -1;
    }
    return 0;
}

/* Rank 0 watches the clock every shard is protected at, for worker 0. */
typedef struct watch {
    strata_ctx_t *ctx;
    shared_t *sh;
    _Atomic bool stop;
} watch_t;

static void *watch_protected(void *arg)
{
    watch_t *w = arg;
    while (!atomic_load(&w->stop)) {
        strata_metrics_t m = STRATA_METRICS_INIT;
        if (strata_metrics(w->ctx, &m) == STRATA_OK)
            atomic_store(&w->sh->protected_clock, m.protected_clock);
        usleep(1000);
    }
    return NULL;
}

static int run_aggregator(strata_ctx_t *ctx, shared_t *sh, rank_rec_t *rec)
{
    watch_t w = {.ctx = ctx, .sh = sh};
    pthread_t th;
    bool watching = strata_rank(ctx) == 0 &&
                    pthread_create(&th, NULL, watch_protected, &w) == 0;
    strata_status_t st = strata_serve(ctx);
    if (watching) {
        atomic_store(&w.stop, true);
        pthread_join(th, NULL);
    }
    rec->m = (strata_metrics_t)STRATA_METRICS_INIT;
    strata_metrics(ctx, &rec->m);
    return st == STRATA_OK ? 0 : -1;
}

/* Worker 0 kills the victim once it completed clock kill_at and a clock is
 * protected, and decides how many steps every worker runs: one worker is
 * at most a step ahead of another under bsp, so the others still see it. */
static void maybe_kill(const opts_t *o, shared_t *sh, int step)
{
    if (atomic_load(&sh->kill_ns) || step + 1 < o->kill_at ||
        atomic_load(&sh->protected_clock) <= 0)
        return;
    atomic_store(&sh->kill_step, step + 1);
    atomic_store(&sh->kill_ns, now_ns());
    kill(atomic_load(&sh->pid[o->victim]), SIGKILL);
    atomic_store(&sh->stop_after, step + 1 + o->after);
}

static int run_worker(strata_ctx_t *ctx, const opts_t *o, uint64_t bytes,
                      shared_t *sh, rank_rec_t *rec)
{
    size_t count = bytes / sizeof(float);
    float *param = NULL, *grad = NULL;
    int rc = -1;
    if (strata_alloc(ctx, bytes, (void **)&param) != STRATA_OK ||
        strata_alloc(ctx, bytes, (void **)&grad) != STRATA_OK)
        goto out;
    for (size_t i = 0; i < count; i++) {
        param[i] = 0.0f;
        grad[i] = 1.0f;
    }
    if (strata_tensor_register(ctx, "model", param, grad, count, STRATA_FP32,
                               NULL) != STRATA_OK ||
        strata_commit(ctx) != STRATA_OK)
        goto out;
    bool first = strata_worker_index(ctx) == 0;
    int step = 0;
    for (; step < MAX_STEPS; step++) {
        int stop = atomic_load(&sh->stop_after);
        if (stop && step >= stop)
            break;
        if (strata_step(ctx) != STRATA_OK)
            goto out;
        rec->step_end_ns[step] = now_ns();
        if (first)
            maybe_kill(o, sh, step);
    }
    rec->nsteps = step;
    rec->m = (strata_metrics_t)STRATA_METRICS_INIT;
    if (strata_metrics(ctx, &rec->m) == STRATA_OK && step < MAX_STEPS)
        rc = 0;
    else if (step >= MAX_STEPS)
        fprintf(stderr,
                "strata-bench-recovery: no clock protected in %d steps\n",
                MAX_STEPS);
out:
    if (param)
        strata_free(ctx, param);
    return rc; /* grad may be read in place (shm): freed with the context */
}

/* A rank of the job (a child process): its settings, its role. */
static int run_rank(const opts_t *o, int rank, uint64_t bytes, const char *dir,
                    const char *secret, shared_t *sh)
{
    char set[14][320];
    const char *settings[15];
    int n = 0;
    snprintf(set[n++], 320, "RANK=%d", rank);
    snprintf(set[n++], 320, "SIZE=%d", o->aggs + o->workers);
    snprintf(set[n++], 320, "NUM_AGGREGATORS=%d", o->aggs);
    snprintf(set[n++], 320, "COORD_FILE=%s/coord", dir);
    snprintf(set[n++], 320, "HOST=127.0.0.1");
    snprintf(set[n++], 320, "JOB_SECRET=%s", secret);
    snprintf(set[n++], 320, "TRANSPORT=%s", o->transport);
    snprintf(set[n++], 320, "PROTECT_EVERY=%d", o->every);
    snprintf(set[n++], 320, "PROTECT_PARITY=%d", o->parity);
    snprintf(set[n++], 320, "TIMEOUT_MS=%d", o->timeout_ms);
    snprintf(set[n++], 320, "OPTIMIZER=sgd");
    snprintf(set[n++], 320, "LR=0.001");
    snprintf(set[n++], 320, "LOG=info");
    for (int i = 0; i < n; i++)
        settings[i] = set[i];
    settings[n] = NULL;
    strata_ctx_t *ctx;
    if (strata_init_with(settings, &ctx) != STRATA_OK)
        return 1;
    rank_rec_t *rec = &sh->rec[rank];
    int rc = strata_role(ctx) == STRATA_ROLE_WORKER
                 ? run_worker(ctx, o, bytes, sh, rec)
                 : run_aggregator(ctx, sh, rec);
    if (strata_finalize(ctx) != STRATA_OK)
        rc = -1;
    rec->done = rc == 0;
    return rc == 0 ? 0 : 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double ms(uint64_t from, uint64_t to)
{
    return from && to ? ((double)to - (double)from) / 1e6 : -1;
}

/* The row of a job that went well: -1 if a stage is missing. */
static int report(const opts_t *o, uint64_t mib, const shared_t *sh)
{
    const rank_rec_t *w0 = &sh->rec[o->aggs];
    const strata_metrics_t *c = &sh->rec[0].m;
    uint64_t kill_ns = atomic_load(&sh->kill_ns);
    int kill_step = atomic_load(&sh->kill_step);
    if (!kill_ns || c->takeovers != 1 || c->takeover_taker_rank < 0 ||
        c->takeover_taker_rank >= o->aggs) {
        fprintf(stderr,
                "strata-bench-recovery: %" PRIu64 " MiB: no takeover "
                "in the metrics of rank 0\n",
                mib);
        return -1;
    }
    const strata_metrics_t *t = &sh->rec[c->takeover_taker_rank].m;
    /* The steady round: steps 2.. up to the kill, the median. */
    uint64_t d[MAX_STEPS];
    int nd = 0;
    for (int s = 2; s < kill_step && s < w0->nsteps; s++)
        d[nd++] = w0->step_end_ns[s] - w0->step_end_ns[s - 1];
    qsort(d, (size_t)nd, sizeof(*d), cmp_u64);
    double steady = nd ? (double)d[nd / 2] / 1e6 : -1;
    /* Every worker's first round with the taker's model. */
    uint64_t round_ns = 0;
    for (int w = 0; w < o->workers; w++) {
        const rank_rec_t *r = &sh->rec[o->aggs + w];
        uint64_t at = r->m.takeover_resumed_ns, first = 0;
        for (int s = 0; s < r->nsteps && !first && at; s++)
            first = r->step_end_ns[s] >= at ? r->step_end_ns[s] : 0;
        if (!first) {
            fprintf(stderr,
                    "strata-bench-recovery: %" PRIu64 " MiB: worker "
                    "%d completed no round with the taker's model\n",
                    mib, w);
            return -1;
        }
        round_ns = first > round_ns ? first : round_ns;
    }
    printf("%8" PRIu64 " %5d %3d %9s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f "
           "%9.1f %5" PRId64 " %5" PRId64 " %5" PRId64 "\n",
           mib, o->aggs, o->parity, o->transport,
           ms(kill_ns, c->takeover_loss_ns),
           ms(c->takeover_loss_ns, c->takeover_rebuilt_ns),
           ms(c->takeover_rebuilt_ns, c->takeover_told_ns),
           ms(c->takeover_told_ns, t->takeover_installed_ns),
           ms(t->takeover_installed_ns, round_ns), ms(kill_ns, round_ns),
           steady, c->takeover_protected_clock, c->takeover_resume_clock,
           c->takeover_lost_clocks);
    fflush(stdout);
    return 0;
}

/* The last lines of a rank's log, for a job that failed. */
static void show_log(const char *dir, int rank)
{
    char path[4096 + 16], line[1024];
    snprintf(path, sizeof(path), "%s/%d.log", dir, rank);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char last[8][1024] = {{0}};
    int n = 0;
    while (fgets(line, sizeof(line), f))
        snprintf(last[n++ % 8], sizeof(last[0]), "%s", line);
    fclose(f);
    for (int i = n > 8 ? n - 8 : 0; i < n; i++)
        fprintf(stderr, "  rank %d: %s", rank, last[i % 8]);
}

/* One job: fork its ranks, wait for them, print its row. */
static int run_job(const opts_t *o, uint64_t mib, shared_t *sh)
{
    uint64_t bytes = mib * (uint64_t)o->aggs << 20;
    int size = o->aggs + o->workers;
    char dir[] = "/tmp/strata-bench-recovery.XXXXXX";
    unsigned char key[16];
    char secret[33];
    if (!mkdtemp(dir) || getrandom(key, sizeof(key), 0) != sizeof(key)) {
        fprintf(stderr, "strata-bench-recovery: %s\n", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof(key); i++)
        snprintf(secret + 2 * i, 3, "%02x", key[i]);
    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    for (int r = 0; r < size; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            char path[sizeof(dir) + 16];
            snprintf(path, sizeof(path), "%s/%d.log", dir, r);
            if (!freopen(path, "w", stderr))
                _exit(1);
            _exit(run_rank(o, r, bytes, dir, secret, sh));
        }
        if (pid < 0) {
            fprintf(stderr, "strata-bench-recovery: fork: %s\n",
                    strerror(errno));
            for (int k = 0; k < r; k++)
                kill(atomic_load(&sh->pid[k]), SIGKILL);
            return -1;
        }
        atomic_store(&sh->pid[r], pid);
    }
    int rc = 0;
    bool running[MAX_RANKS];
    for (int r = 0; r < size; r++)
        running[r] = true;
    for (int left = size; left > 0; left--) {
        int status, r = 0;
        pid_t pid = wait(&status);
        if (pid < 0 && errno != EINTR)
            break;
        while (r < size && atomic_load(&sh->pid[r]) != pid)
            r++;
        if (r == size) {
            left++;
            continue;
        }
        running[r] = false;
        bool want_kill = r == o->victim;
        bool ok = want_kill ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                            : WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                                  sh->rec[r].done;
        if (!ok) {
            fprintf(stderr,
                    "strata-bench-recovery: %" PRIu64 " MiB: rank %d "
                    "%s\n",
                    mib, r, want_kill ? "was not killed" : "did not end well");
            show_log(dir, r);
            /* The job failed: what still runs would wait for its timeout. */
            for (int k = 0; rc == 0 && k < size; k++)
                if (running[k] && k != o->victim)
                    kill(atomic_load(&sh->pid[k]), SIGKILL);
            rc = -1;
        }
    }
    if (rc == 0)
        rc = report(o, mib, sh);
    if (o->keep || rc != 0) {
        fprintf(stderr, "# logs of the %" PRIu64 " MiB job in %s\n", mib, dir);
    } else {
        char path[sizeof(dir) + 16];
        for (int r = 0; r < size; r++) {
            snprintf(path, sizeof(path), "%s/%d.log", dir, r);
            unlink(path);
        }
        snprintf(path, sizeof(path), "%s/coord", dir);
        unlink(path);
        rmdir(dir);
    }
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse(argc, argv, &o) != 0)
        return 2;
    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "strata-bench-recovery: mmap: %s\n", strerror(errno));
        return 1;
    }
    printf("# strata-bench-recovery: bsp, %d workers, aggregator %d of %d "
           "SIGKILLed once clock %d completed and protected (every %d, %d "
           "parity)\n"
           "# ms from the kill: detect -> rebuild -> agree -> install -> "
           "first round; steady = a round before the kill (median)\n"
           "#%7s %5s %3s %9s %8s %8s %8s %8s %8s %8s %9s %5s %5s %5s\n",
           o.workers, o.victim, o.aggs, o.kill_at, o.every, o.parity,
           "shardMiB", "aggs", "m", "transport", "detect", "rebuild", "agree",
           "install", "round", "total", "steady", "P", "R", "lost");
    int rc = 0;
    for (int i = 0; i < o.nsizes; i++)
        if (run_job(&o, o.mib[i], sh) != 0)
            rc = 1;
    munmap(sh, sizeof(*sh));
    return rc;
}
