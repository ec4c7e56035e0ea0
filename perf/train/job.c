/* strata-train --job: a rank of a job any launcher started. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf/train/job.h"
#include "perf/train/log.h"
#include "perf/train/pace.h"
#include "perf/train/report.h"
#include "perf/train/run.h"
#include "perf/train/worker.h"

#define EVAL_BATCH 1000
#define REPORT_KEY "\"report\": {\"strata_train\": 1"

typedef struct job {
    const perf_cli_t *cli;
    perf_scenario_t sc;
    perf_dataset_t train, test;
    perf_mlp_dims_t dims;
    perf_snaps_t snaps;
    char tmp[PATH_MAX];     /* this rank's board, then removed */
    char metrics[PATH_MAX]; /* STRATA_METRICS, when we chose it */
} job_t;

/* The data every rank reads from the shared file system, prepared as the
 * driver prepares it, so that a worker cuts the driver's shard. */
static strata_status_t load_data(job_t *j)
{
    const perf_scenario_t *sc = &j->sc;
    strata_status_t st = perf_dataset_load(j->cli->data_dir, "t10k", &j->test);
    if (st == STRATA_OK)
        st = perf_dataset_load(j->cli->data_dir, "train", &j->train);
    if (st == STRATA_OK && sc->train_size > 0 &&
        (size_t)sc->train_size < j->train.count) {
        perf_dataset_t sub;
        st = perf_dataset_sample(&j->train, (size_t)sc->train_size, sc->seed,
                                 &sub);
        perf_dataset_free(&j->train);
        j->train = sub;
    }
    if (st != STRATA_OK)
        return st;
    perf_dataset_standardize(&j->train, &j->train);
    j->test.scale = j->train.scale;
    j->test.shift = j->train.shift;
    j->dims = (perf_mlp_dims_t){j->train.dim, (size_t)sc->hidden, PERF_CLASSES};
    return STRATA_OK;
}

/* A file of our own in TMPDIR (or /tmp); path_out names it. */
static int make_temp(const char *what, char *path_out, size_t len)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path_out, len, "%s/strata-train-%s-XXXXXX", dir, what);
    int fd = mkstemp(path_out);
    if (fd < 0)
        perf_error("cannot create %s: %s", path_out, strerror(errno));
    return fd;
}

/* Rank 0 learns every worker's results from the metrics it writes. */
static strata_status_t ask_metrics(job_t *j)
{
    if (getenv("STRATA_METRICS"))
        return STRATA_OK;
    int fd = make_temp("metrics", j->metrics, sizeof(j->metrics));
    if (fd < 0)
        return STRATA_ERR_IO;
    close(fd);
    setenv("STRATA_METRICS", j->metrics, 1);
    return STRATA_OK;
}

/* This rank's board: the driver's fields, in memory only this process
 * maps (the file is removed at once). */
static strata_status_t make_board(job_t *j, perf_board_t **board_out)
{
    int fd = make_temp("board", j->tmp, sizeof(j->tmp));
    if (fd < 0)
        return STRATA_ERR_IO;
    close(fd);
    unlink(j->tmp); /* perf_board_create makes it anew */
    strata_status_t st =
        perf_board_create(j->tmp, perf_mlp_param_count(&j->dims), board_out);
    unlink(j->tmp);
    if (st != STRATA_OK)
        return st;
    perf_board_t *b = *board_out;
    b->scenario = j->sc;
    b->policy = 0;
    b->workers = j->sc.workers;
    b->input_scale = j->train.scale;
    b->input_shift = j->train.shift;
    return STRATA_OK;
}

static strata_status_t make_snaps(job_t *j)
{
    perf_snaps_t *s = &j->snaps;
    s->params = perf_mlp_param_count(&j->dims);
    s->every_s = j->sc.eval_s;
    s->cap = (size_t)(j->sc.budget_s / j->sc.eval_s) + 2;
    s->t_s = calloc(s->cap, sizeof(*s->t_s));
    s->model = malloc(s->cap * s->params * sizeof(float));
    if (!s->t_s || !s->model) {
        perf_error("cannot keep %zu models of %zu parameters", s->cap,
                   s->params);
        return STRATA_ERR_NOMEM;
    }
    return STRATA_OK;
}

/* The reporter's accuracy curve, its time to the target and its final
 * figures, appended to json; as many points as fit. */
static void evaluate_curve(job_t *j, const float *final, char *json, size_t *at,
                           size_t len)
{
    perf_mlp_work_t *w;
    if (perf_mlp_work_create(&j->dims, EVAL_BATCH, &w) != STRATA_OK)
        return; /* reported; rank 0 says the accuracy is missing */
    const perf_snaps_t *s = &j->snaps;
    size_t room = (len - *at - 160) / 20, stride = s->n / (room ? room : 1) + 1;
    double acc, loss, target = -1;
    *at += (size_t)snprintf(json + *at, len - *at, ", \"curve\": [");
    for (size_t i = 0; i < s->n; i++) {
        perf_mlp_evaluate(w, s->model + i * s->params, &j->test, &acc, &loss);
        if (target < 0 && acc >= j->sc.target_acc)
            target = s->t_s[i];
        if (i % stride == 0 || i + 1 == s->n)
            *at += (size_t)snprintf(json + *at, len - *at, "%s[%.3f, %.4f]",
                                    i ? ", " : "", s->t_s[i], acc);
    }
    perf_mlp_evaluate(w, final, &j->test, &acc, &loss);
    if (target < 0 && acc >= j->sc.target_acc)
        target = j->sc.budget_s;
    *at += (size_t)snprintf(json + *at, len - *at,
                            "], \"acc\": %.4f, \"loss\": %.4f, "
                            "\"t_target\": %.3f",
                            acc, loss, target);
    perf_mlp_work_free(w);
}

static strata_status_t report_worker(void *arg, perf_dist_t *dist, int index,
                                     const perf_board_slot_t *slot,
                                     const float *final, bool reporter)
{
    job_t *j = arg;
    char json[STRATA_REPORT_MAX];
    size_t at = (size_t)snprintf(
        json, sizeof(json),
        "{\"strata_train\": 1, \"worker\": %d, \"steps\": %llu, "
        "\"overruns\": %llu, \"pushed\": %llu, \"pulled\": %llu",
        index, (unsigned long long)atomic_load(&slot->clock),
        (unsigned long long)atomic_load(&slot->overruns),
        (unsigned long long)atomic_load(&slot->bytes_pushed),
        (unsigned long long)atomic_load(&slot->bytes_pulled));
    if (reporter)
        evaluate_curve(j, final, json, &at, sizeof(json));
    snprintf(json + at, sizeof(json) - at, "}");
    return perf_dist_report(dist, json);
}

static double field(const char *obj, const char *key)
{
    char pat[48];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    const char *p = strstr(obj, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* One worker's report (the text from its "report" on, an object with no
 * object inside) into r. */
static void add_report(const char *from, perf_result_t *r)
{
    char obj[STRATA_REPORT_MAX + 64];
    const char *end = strchr(from, '}');
    size_t len = end ? (size_t)(end - from) : strlen(from);
    snprintf(obj, sizeof(obj), "%.*s", (int)len, from);
    r->steps += (uint64_t)field(obj, "steps");
    r->overruns += (uint64_t)field(obj, "overruns");
    r->bytes_pushed += (uint64_t)field(obj, "pushed");
    r->bytes_pulled += (uint64_t)field(obj, "pulled");
    const char *curve = strstr(obj, "\"curve\": [");
    if (!curve)
        return;
    double t = field(obj, "t_target");
    r->time_to_target_s = t >= 0 ? t : NAN;
    r->final_acc = field(obj, "acc");
    r->final_loss = field(obj, "loss");
    const char *p = curve + strlen("\"curve\": [");
    perf_point_t pt;
    while (sscanf(p, " [%lf, %lf]", &pt.t_s, &pt.acc) == 2) {
        perf_point_t *grown =
            realloc(r->points, (r->npoints + 1) * sizeof(*grown));
        if (!grown)
            return;
        r->points = grown;
        r->points[r->npoints++] = pt;
        p = strchr(p, ']') + 1;
        p += *p == ',';
    }
}

/* Rank 0, after the job: every worker's results, from the metrics file. */
static int summarize(job_t *j, double job_s)
{
    const char *path = getenv("STRATA_METRICS");
    FILE *f = fopen(path, "r");
    char *text = f ? calloc(1, 1 << 22) : NULL;
    size_t n = text ? fread(text, 1, (1 << 22) - 1, f) : 0;
    if (f)
        fclose(f);
    perf_result_t r = {.time_to_target_s = NAN,
                       .final_acc = NAN,
                       .final_loss = NAN,
                       .job_s = job_s};
    snprintf(r.policy, sizeof(r.policy), "%s", j->sc.policies[0].name);
    int workers = 0;
    for (const char *p = text; n && (p = strstr(p, REPORT_KEY)); p++) {
        add_report(p, &r);
        workers++;
    }
    free(text);
    r.ok = workers == j->sc.workers && !isnan(r.final_acc);
    if (!r.ok)
        perf_error("rank 0 has the results of %d of %d workers%s (from %s)",
                   workers, j->sc.workers,
                   isnan(r.final_acc) ? ", none with the accuracy" : "", path);
    perf_report_table(stdout, &j->sc, &r, 1);
    strata_status_t st = STRATA_OK;
    if (j->cli->json)
        st = perf_report_json(j->cli->json, &j->sc, &r, 1);
    perf_result_free(&r);
    return r.ok && st == STRATA_OK ? 0 : 1;
}

static void job_free(job_t *j)
{
    perf_dataset_free(&j->train);
    perf_dataset_free(&j->test);
    free(j->snaps.t_s);
    free(j->snaps.model);
    if (j->metrics[0])
        unlink(j->metrics);
}

/* The launcher shaped the job: its aggregator count, when it gives one,
 * is the scenario's (the partitions are cut for it). */
static strata_status_t take_aggregators(perf_scenario_t *sc)
{
    const char *v = getenv("STRATA_NUM_AGGREGATORS");
    if (!v)
        return STRATA_OK;
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 1 || n > PERF_MAX_AGGREGATORS) {
        perf_error("STRATA_NUM_AGGREGATORS=%s: expected 1 to %d", v,
                   PERF_MAX_AGGREGATORS);
        return STRATA_ERR_INVALID;
    }
    sc->aggregators = (int)n;
    return STRATA_OK;
}

int perf_job_main(const perf_cli_t *cli)
{
    job_t j = {.cli = cli, .sc = cli->sc};
    const perf_policy_t *p = &j.sc.policies[0];
    if (j.sc.npolicies != 1 || p->drive == PERF_DRIVE_LOCAL) {
        perf_error("--job runs one policy through the engine: give --policy "
                   "with one of bsp, ssp, asp, gssp, gssp+gdtopk, esync, "
                   "fedavg");
        return 2;
    }
    int64_t start = perf_now_ns();
    perf_board_t *board = NULL;
    strata_status_t st = take_aggregators(&j.sc);
    if (st == STRATA_OK)
        st = load_data(&j);
    if (st == STRATA_OK)
        st = ask_metrics(&j);
    if (st == STRATA_OK)
        st = make_board(&j, &board);
    if (st == STRATA_OK)
        st = make_snaps(&j);
    int rc = 1;
    if (st == STRATA_OK) {
        perf_policy_setenv(&j.sc, p);
        perf_worker_job_t wj = {.train = &j.train,
                                .snaps = &j.snaps,
                                .report = report_worker,
                                .arg = &j,
                                .rank_out = -1};
        rc = perf_worker_run(board, &wj);
        if (rc == 0 && wj.rank_out == 0)
            rc = summarize(&j, (double)(perf_now_ns() - start) * 1e-9);
    }
    if (board)
        perf_board_close(board);
    job_free(&j);
    return rc;
}
