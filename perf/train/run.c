/* Launching one job per policy, watching it, and evaluating its model. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perf/train/board.h"
#include "perf/train/events.h"
#include "perf/train/log.h"
#include "perf/train/pace.h"
#include "perf/train/run.h"

volatile int perf_driver_stop;

/* Start-up (loading data, connecting every process) gets this long before
 * the budget starts; then the job has the budget and this grace to end. */
#define STARTUP_S 60.0
#define GRACE_S 30.0
#define EVAL_BATCH 1000

static strata_status_t make_tmpdir(perf_driver_t *d)
{
    /* tmpfs when there is one: the data cache is read by every worker. */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
    if (!base)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int n =
        snprintf(d->tmpdir, sizeof(d->tmpdir), "%s/strata-train-XXXXXX", base);
    if (n >= (int)sizeof(d->tmpdir)) {
        perf_error("temporary directory name too long: %s", base);
        d->tmpdir[0] = '\0';
        return STRATA_ERR_INVALID;
    }
    if (!mkdtemp(d->tmpdir)) {
        perf_error("cannot create a directory in %s: %s", base,
                   strerror(errno));
        d->tmpdir[0] = '\0';
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

static strata_status_t find_programs(perf_driver_t *d, const char *launcher)
{
    ssize_t n = readlink("/proc/self/exe", d->self, sizeof(d->self) - 1);
    if (n <= 0) {
        perf_error("cannot find this program through /proc/self/exe: %s",
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    d->self[n] = '\0';
    if (launcher) {
        snprintf(d->launcher, sizeof(d->launcher), "%s", launcher);
        return STRATA_OK;
    }
    const char *slash = strrchr(d->self, '/');
    snprintf(d->launcher, sizeof(d->launcher), "%.*s/strata-run",
             (int)(slash - d->self), d->self);
    return STRATA_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median time of a few minibatches, to check the padding is above it. */
static double measure_compute(perf_driver_t *d, const perf_dataset_t *train)
{
    enum { TRIALS = 15 };
    size_t b = (size_t)d->sc.batch;
    double t[TRIALS] = {0};
    perf_mlp_work_t *w = NULL;
    perf_sampler_t s = {0};
    float *x = malloc(b * d->dims.in * sizeof(float));
    float *g = malloc(perf_mlp_param_count(&d->dims) * sizeof(float));
    uint8_t *y = malloc(b);
    uint32_t *idx = malloc(b * sizeof(uint32_t));
    if (!x || !g || !y || !idx ||
        perf_mlp_work_create(&d->dims, b, &w) != STRATA_OK ||
        perf_sampler_init(&s, train->count, d->sc.seed) != STRATA_OK)
        goto free_all; /* reported; the figure is only informative */
    for (int i = 0; i < TRIALS; i++) {
        int64_t t0 = perf_now_ns();
        perf_sampler_next(&s, b, idx);
        perf_dataset_gather(train, idx, b, x, y);
        perf_mlp_loss_grad(w, d->model, x, y, b, g);
        t[i] = (double)(perf_now_ns() - t0) * 1e-9;
    }
    qsort(t, TRIALS, sizeof(t[0]), cmp_double);
free_all:
    perf_sampler_free(&s);
    perf_mlp_work_free(w);
    free(x);
    free(g);
    free(y);
    free(idx);
    return t[TRIALS / 2];
}

/* Replace ds by a seeded random n of its samples. */
static strata_status_t take_subset(perf_dataset_t *ds, size_t n, uint64_t seed)
{
    perf_dataset_t sub;
    strata_status_t st = perf_dataset_sample(ds, n, seed, &sub);
    if (st != STRATA_OK)
        return st;
    perf_dataset_free(ds);
    *ds = sub;
    return STRATA_OK;
}

strata_status_t perf_driver_prepare(perf_driver_t *d, const perf_scenario_t *sc,
                                    const char *data_dir, const char *launcher)
{
    memset(d, 0, sizeof(*d));
    d->sc = *sc;
    strata_status_t st = find_programs(d, launcher);
    if (st == STRATA_OK)
        st = perf_dataset_load(data_dir, "t10k", &d->test);
    if (st == STRATA_OK)
        st = perf_dataset_load(data_dir, "train", &d->train);
    if (st == STRATA_OK && sc->train_size > 0 &&
        (size_t)sc->train_size < d->train.count)
        st = take_subset(&d->train, (size_t)sc->train_size, sc->seed);
    if (st != STRATA_OK)
        return st;
    if (d->train.dim != d->test.dim) {
        perf_error("%s: training images have %zu pixels, test images %zu",
                   data_dir, d->train.dim, d->test.dim);
        return STRATA_ERR_MISMATCH;
    }
    perf_dataset_standardize(&d->train, &d->train);
    d->test.scale = d->train.scale; /* the training set's statistics */
    d->test.shift = d->train.shift;
    d->dims = (perf_mlp_dims_t){d->train.dim, (size_t)sc->hidden, PERF_CLASSES};
    d->model = malloc(perf_mlp_param_count(&d->dims) * sizeof(float));
    if (!d->model) {
        perf_error("cannot allocate the model");
        return STRATA_ERR_NOMEM;
    }
    perf_mlp_init(&d->dims, sc->seed, d->model);
    st = perf_mlp_work_create(&d->dims, EVAL_BATCH, &d->eval);
    if (st == STRATA_OK)
        st = make_tmpdir(d);
    if (st == STRATA_OK)
        d->compute_s = measure_compute(d, &d->train);
    return st;
}

/* shard-I-of-N files in tmpdir, once for each N: each worker then reads
 * its own 1/N of the data instead of decompressing the whole set. */
static strata_status_t write_shards(perf_driver_t *d, int n)
{
    char split[64], path[2048];
    snprintf(path, sizeof(path), "%s/shard-0-of-%d-labels-idx1-ubyte",
             d->tmpdir, n);
    if (access(path, F_OK) == 0)
        return STRATA_OK; /* written last, so the set is complete */
    for (int i = n - 1; i >= 0; i--) {
        uint32_t *idx;
        size_t count;
        perf_dataset_t shard;
        strata_status_t st = perf_shard_make(&d->train, n, i, d->sc.noniid,
                                             d->sc.seed, &idx, &count);
        if (st != STRATA_OK)
            return st;
        st = perf_dataset_subset(&d->train, idx, count, &shard);
        free(idx);
        if (st != STRATA_OK)
            return st;
        snprintf(split, sizeof(split), "shard-%d-of-%d", i, n);
        st = perf_dataset_save(&shard, d->tmpdir, split);
        perf_dataset_free(&shard);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

static void remove_tmpdir(const char *dir)
{
    DIR *dh = opendir(dir);
    if (!dh)
        return;
    struct dirent *e;
    while ((e = readdir(dh))) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(dh);
    rmdir(dir);
}

void perf_driver_cleanup(perf_driver_t *d)
{
    if (d->tmpdir[0])
        remove_tmpdir(d->tmpdir);
    perf_dataset_free(&d->train);
    perf_dataset_free(&d->test);
    perf_mlp_work_free(d->eval);
    free(d->model);
}

void perf_result_free(perf_result_t *r)
{
    free(r->points);
    r->points = NULL;
}

static void add_point(perf_result_t *r, double t, double acc)
{
    if (r->npoints == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        perf_point_t *p = realloc(r->points, cap * sizeof(*p));
        if (!p)
            return; /* the curve loses a point; the figures stay right */
        r->points = p;
        r->cap = cap;
    }
    r->points[r->npoints++] = (perf_point_t){t, acc};
}

static void setenv_fmt(const char *key, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void setenv_fmt(const char *key, const char *fmt, ...)
{
    char value[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    setenv(key, value, 1);
}

void perf_policy_setenv(const perf_scenario_t *sc, const perf_policy_t *p)
{
    setenv("STRATA_POLICY", p->engine, 1);
    setenv_fmt("STRATA_NUM_AGGREGATORS", "%d", sc->aggregators);
    setenv_fmt("STRATA_LR", "%.17g", sc->lr);
    setenv_fmt("STRATA_MOMENTUM", "%.17g", sc->momentum);
    setenv_fmt("STRATA_STALENESS", "%d", sc->staleness);
    if (sc->groups > 0 && strcmp(p->engine, "gssp") == 0)
        setenv_fmt("STRATA_GROUPS", "%d", sc->groups);
    setenv("STRATA_GDTOPK", p->gdtopk ? "1" : "0", 1);
    setenv_fmt("STRATA_FEDAVG_STEPS", "%d", sc->fedavg_steps);
}

/* The job runs in its own process group, so that it can be stopped whole
 * and a terminal's ^C reaches the driver only. */
/* The job's standard error comes through err_out (events.h). */
static strata_status_t launch(perf_driver_t *d, const perf_policy_t *p,
                              const char *board_path, pid_t *pid_out,
                              int *err_out)
{
    char n[16], a[16], r[16];
    snprintf(n, sizeof(n), "%d", d->sc.workers);
    snprintf(a, sizeof(a), "%d", d->sc.aggregators);
    snprintf(r, sizeof(r), "%d", d->sc.restarts);
    char *local_argv[] = {d->self, "--worker", (char *)board_path, NULL};
    char *job_argv[12] = {d->launcher, "-n", n, "-a", a};
    int k = 5;
    if (d->sc.restarts > 0) {
        job_argv[k++] = "--restart";
        job_argv[k++] = r;
    }
    job_argv[k++] = "--";
    job_argv[k++] = d->self;
    job_argv[k++] = "--worker";
    job_argv[k++] = (char *)board_path;
    char **argv = p->drive == PERF_DRIVE_LOCAL ? local_argv : job_argv;
    int err[2];
    if (pipe2(err, O_CLOEXEC) != 0) {
        perf_error("cannot make a pipe: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perf_error("cannot start a process: %s", strerror(errno));
        close(err[0]);
        close(err[1]);
        return STRATA_ERR_IO;
    }
    if (pid == 0) {
        dup2(err[1], STDERR_FILENO);
        setpgid(0, 0);
        if (p->drive != PERF_DRIVE_LOCAL)
            perf_policy_setenv(&d->sc, p);
        execv(argv[0], argv);
        fprintf(stderr, "strata-train: error: cannot run %s: %s\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* as well, whichever of the two runs first */
    close(err[1]);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    *pid_out = pid;
    *err_out = err[0];
    return STRATA_OK;
}

typedef struct job {
    perf_driver_t *d;
    const perf_policy_t *p;
    perf_board_t *b;
    perf_result_t *r;
    pid_t pid;
    int64_t launched_ns;
    perf_events_t ev; /* the job's failures and recoveries */
} job_t;

/* "g0=120 g1=60": the slowest member's clock in each group, or a range
 * when there are too many groups to list. */
static void format_clocks(const perf_board_t *b, char *buf, size_t len)
{
    int ids[PERF_MAX_WORKERS];
    uint64_t clocks[PERF_MAX_WORKERS];
    int ng = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < b->workers; i++) {
        int g = atomic_load(&b->slots[i].group);
        uint64_t c = atomic_load(&b->slots[i].clock);
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
        int k = 0; /* groups listed in order of their ids */
        while (k < ng && ids[k] < g)
            k++;
        if (k == ng || ids[k] != g) {
            memmove(ids + k + 1, ids + k, (size_t)(ng - k) * sizeof(*ids));
            memmove(clocks + k + 1, clocks + k,
                    (size_t)(ng - k) * sizeof(*clocks));
            ids[k] = g;
            clocks[k] = c;
            ng++;
        } else if (c < clocks[k]) {
            clocks[k] = c;
        }
    }
    if (ng > 8) {
        snprintf(buf, len, "clocks %llu..%llu in %d groups",
                 (unsigned long long)lo, (unsigned long long)hi, ng);
        return;
    }
    size_t at = (size_t)snprintf(buf, len, "clocks");
    for (int k = 0; k < ng && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, " g%d=%llu", ids[k],
                               (unsigned long long)clocks[k]);
}

static void evaluate(job_t *j, const float *model, int64_t at_ns)
{
    const perf_scenario_t *sc = &j->d->sc;
    /* Progress as the snapshot was taken, before evaluating takes time. */
    char clocks[256], round[32] = "";
    format_clocks(j->b, clocks, sizeof(clocks));
    uint64_t rounds = 0;
    for (int i = 0; i < j->b->workers; i++) {
        uint64_t r = atomic_load(&j->b->slots[i].rounds);
        rounds = r > rounds ? r : rounds;
    }
    if (j->p->drive == PERF_DRIVE_ROUNDS)
        snprintf(round, sizeof(round), "  round %llu",
                 (unsigned long long)rounds);
    double acc, loss;
    perf_mlp_evaluate(j->d->eval, model, &j->d->test, &acc, &loss);
    double t = (double)(at_ns - atomic_load(&j->b->t0_ns)) * 1e-9;
    add_point(j->r, t, acc);
    if (isnan(j->r->time_to_target_s) && acc >= sc->target_acc)
        j->r->time_to_target_s = t;
    printf("%-12s %7.2f s  acc %.4f  loss %.3f%s  %s\n", j->p->name, t, acc,
           loss, round, clocks);
    fflush(stdout);
    j->r->final_acc = acc;
    j->r->final_loss = loss;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000};
    nanosleep(&ts, NULL);
}

/* SIGTERM to the whole job, SIGKILL to what is left 5 s later. */
static int stop_job(pid_t pid)
{
    int status = 0;
    kill(-pid, SIGTERM);
    for (int i = 0; i < 500; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return status;
        sleep_ms(10);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

/* Evaluate a snapshot when one is ready; ask for the next on schedule. */
static void poll_model(job_t *j, int64_t *next_eval_ns)
{
    int64_t at;
    if (perf_board_ready(j->b, &at)) {
        memcpy(j->d->model, perf_board_snapshot(j->b),
               j->b->params * sizeof(float));
        perf_board_release(j->b);
        evaluate(j, j->d->model, at);
    }
    int64_t t0 = atomic_load(&j->b->t0_ns), now = perf_now_ns();
    if (t0 == 0)
        return; /* still starting */
    int64_t every = (int64_t)(j->d->sc.eval_s * 1e9);
    if (*next_eval_ns == 0)
        *next_eval_ns = t0;
    if (now >= *next_eval_ns) {
        perf_board_request(j->b);
        while (*next_eval_ns <= now)
            *next_eval_ns += every;
    }
}

/* When each speed change's worker joins another group: as soon as its slot
 * shows it (a worker publishes its group after each of its steps, so this
 * errs late by up to one of its steps). */
static void watch_changes(job_t *j)
{
    const perf_scenario_t *sc = &j->d->sc;
    int64_t t0 = atomic_load(&j->b->t0_ns), now = perf_now_ns();
    for (int i = 0; t0 != 0 && i < sc->nchanges; i++) {
        const perf_speed_change_t *c = &sc->changes[i];
        perf_change_seen_t *s = &j->r->changes[i];
        double t = (double)(now - t0) * 1e-9;
        if (s->moved || t < c->at_s)
            continue;
        int g = atomic_load(&j->b->slots[c->worker].group);
        if (!s->seen) {
            *s = (perf_change_seen_t){.seen = true, .from = g};
        } else if (g != s->from) {
            s->moved = true;
            s->to = g;
            s->after_s = t - c->at_s;
        }
    }
}

/* Seconds of training so far (0 while the job starts). */
static double training_s(const job_t *j)
{
    int64_t t0 = atomic_load(&j->b->t0_ns);
    return t0 ? (double)(perf_now_ns() - t0) * 1e-9 : 0;
}

/* Until the job exits, is stopped by the user, or overstays. */
static strata_status_t watch(job_t *j, int *status_out)
{
    const perf_scenario_t *sc = &j->d->sc;
    int64_t hard =
        j->launched_ns + (int64_t)((STARTUP_S + sc->budget_s + GRACE_S) * 1e9);
    int64_t next_eval = 0;
    for (;;) {
        if (waitpid(j->pid, status_out, WNOHANG) == j->pid)
            return STRATA_OK;
        if (perf_driver_stop) {
            *status_out = stop_job(j->pid);
            return STRATA_ERR_CANCELED;
        }
        if (perf_now_ns() > hard) {
            perf_error("%s: the job did not end within %.0f s; stopping it",
                       j->p->name, STARTUP_S + sc->budget_s + GRACE_S);
            *status_out = stop_job(j->pid);
            return STRATA_ERR_TIMEOUT;
        }
        poll_model(j, &next_eval);
        watch_changes(j);
        perf_events_drain(&j->ev, training_s(j));
        sleep_ms(2);
    }
}

static void collect(job_t *j)
{
    perf_result_t *r = j->r;
    for (int i = 0; i < j->b->workers; i++) {
        perf_board_slot_t *s = &j->b->slots[i];
        r->steps += atomic_load(&s->clock);
        r->overruns += atomic_load(&s->overruns);
        r->bytes_pushed += atomic_load(&s->bytes_pushed);
        r->bytes_pulled += atomic_load(&s->bytes_pulled);
    }
    if (atomic_load_explicit(&j->b->final_set, memory_order_acquire))
        evaluate(j, perf_board_final(j->b), j->b->final_ns);
}

/* Steps whose compute alone outlasted their padding were paced by the CPU,
 * not by their speed factor: worth saying, as it skews the comparison. */
static void warn_overruns(const job_t *j)
{
    const perf_result_t *r = j->r;
    if (r->steps == 0 || r->overruns * 20 <= r->steps)
        return;
    perf_warn("%s: %.0f%% of the steps computed for longer than their "
              "padded time: the CPU, not the speeds, set the pace (raise "
              "--base-ms, or load the machine less)",
              j->p->name, 100.0 * (double)r->overruns / (double)r->steps);
}

/* GDTopK pushes fewer bytes than the model per step; if it did not, the
 * comparison is of plain gssp under another name, and the user should know. */
static void warn_dense(const job_t *j)
{
    const perf_result_t *r = j->r;
    uint64_t model = perf_mlp_param_count(&j->d->dims) * sizeof(float);
    if (!j->p->gdtopk || r->steps == 0 || r->bytes_pushed < r->steps * model)
        return;
    perf_warn("%s: %.0f bytes pushed per step, the whole model: the engine "
              "did not sparsify the pushes",
              j->p->name, (double)r->bytes_pushed / (double)r->steps);
}

static strata_status_t check_exit(const job_t *j, int status)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return STRATA_OK;
    if (WIFEXITED(status))
        perf_error("%s: the job failed with exit status %d (see the messages "
                   "above)",
                   j->p->name, WEXITSTATUS(status));
    else
        perf_error("%s: the job was killed by signal %d", j->p->name,
                   WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return STRATA_ERR_PEER;
}

strata_status_t perf_driver_run(perf_driver_t *d, int p, perf_result_t *out)
{
    job_t j = {.d = d, .p = &d->sc.policies[p], .r = out, .ev.fd = -1};
    j.ev.policy = d->sc.policies[p].name;
    memset(out, 0, sizeof(*out));
    snprintf(out->policy, sizeof(out->policy), "%s", j.p->name);
    out->time_to_target_s = NAN;
    out->final_acc = NAN;
    out->final_loss = NAN;
    char board_path[PATH_MAX + 32];
    snprintf(board_path, sizeof(board_path), "%s/board-%d", d->tmpdir, p);
    int workers = j.p->drive == PERF_DRIVE_LOCAL ? 1 : d->sc.workers;
    strata_status_t st = write_shards(d, workers);
    if (st == STRATA_OK)
        st =
            perf_board_create(board_path, perf_mlp_param_count(&d->dims), &j.b);
    if (st != STRATA_OK)
        return st;
    j.b->scenario = d->sc;
    j.b->policy = p;
    j.b->workers = workers;
    snprintf(j.b->data_dir, sizeof(j.b->data_dir), "%s", d->tmpdir);
    j.b->input_scale = d->train.scale;
    j.b->input_shift = d->train.shift;
    j.launched_ns = perf_now_ns();
    st = launch(d, j.p, board_path, &j.pid, &j.ev.fd);
    if (st == STRATA_OK) {
        int status = 0;
        st = watch(&j, &status);
        perf_events_drain(&j.ev, training_s(&j)); /* its last words */
        close(j.ev.fd);
        if (st == STRATA_OK)
            st = check_exit(&j, status);
        out->job_s = (double)(perf_now_ns() - j.launched_ns) * 1e-9;
        collect(&j);
        warn_overruns(&j);
        warn_dense(&j);
    }
    out->ok = st == STRATA_OK;
    perf_board_close(j.b);
    unlink(board_path);
    return st;
}
