/* Parsing of strata-train's options into a scenario. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "perf/train/cli.h"
#include "perf/train/data.h"
#include "perf/train/log.h"

enum {
    OPT_SCENARIO = 256,
    OPT_SPEEDS,
    OPT_RANDOM_SPEEDS,
    OPT_SPEED_CHANGE,
    OPT_AGGREGATORS,
    OPT_GROUPS,
    OPT_POLICY,
    OPT_COMPARE,
    OPT_TARGET,
    OPT_BUDGET,
    OPT_BASE_MS,
    OPT_JITTER,
    OPT_NONIID,
    OPT_TRAIN_SIZE,
    OPT_BATCH,
    OPT_HIDDEN,
    OPT_LR,
    OPT_MOMENTUM,
    OPT_STALENESS,
    OPT_FEDAVG_STEPS,
    OPT_EVAL_EVERY,
    OPT_SEED,
    OPT_JSON,
    OPT_PLOT,
    OPT_NO_PLOT,
    OPT_DATA,
    OPT_LAUNCHER,
    OPT_WORKER,
    OPT_JOB,
    OPT_RESTART,
    OPT_HELP,
};

static const struct option options[] = {
    {"scenario", required_argument, NULL, OPT_SCENARIO},
    {"speeds", required_argument, NULL, OPT_SPEEDS},
    {"random-speeds", required_argument, NULL, OPT_RANDOM_SPEEDS},
    {"speed-change", required_argument, NULL, OPT_SPEED_CHANGE},
    {"aggregators", required_argument, NULL, OPT_AGGREGATORS},
    {"groups", required_argument, NULL, OPT_GROUPS},
    {"policy", required_argument, NULL, OPT_POLICY},
    {"compare", required_argument, NULL, OPT_COMPARE},
    {"target-acc", required_argument, NULL, OPT_TARGET},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"base-ms", required_argument, NULL, OPT_BASE_MS},
    {"jitter", required_argument, NULL, OPT_JITTER},
    {"noniid", no_argument, NULL, OPT_NONIID},
    {"train-size", required_argument, NULL, OPT_TRAIN_SIZE},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"staleness", required_argument, NULL, OPT_STALENESS},
    {"fedavg-steps", required_argument, NULL, OPT_FEDAVG_STEPS},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"json", required_argument, NULL, OPT_JSON},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"no-plot", no_argument, NULL, OPT_NO_PLOT},
    {"data", required_argument, NULL, OPT_DATA},
    {"launcher", required_argument, NULL, OPT_LAUNCHER},
    {"worker", required_argument, NULL, OPT_WORKER},
    {"job", no_argument, NULL, OPT_JOB},
    {"restart", required_argument, NULL, OPT_RESTART},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

void perf_cli_usage(FILE *out)
{
    fprintf(
        out,
        "usage: strata-train [--scenario gssp16|slowdown12|esync6] "
        "[--speeds LIST]\n"
        "                    [--policy P | --compare P1,P2,...] [options]\n"
        "Trains an MLP on Fashion-MNIST with one process per worker on this\n"
        "host, once per policy, and reports the time to a test accuracy.\n"
        "  --scenario NAME     gssp16 (16 workers at x1/x2/x4/x8, 4 "
        "aggregators),\n"
        "                      slowdown12 (12 at x1/x2/x8, a x1 worker 8 "
        "times\n"
        "                      slower from 2 s on, 3 aggregators)\n"
        "                      or esync6 (4 workers at x1, 2 at x100)\n"
        "  --speeds LIST       slowdown factor per worker: 1,1,2,2 or 1x4,8x4\n"
        "  --random-speeds N:SEED  N workers, the slowest 3 to 10 times the\n"
        "                      fastest, the rest log-uniform between (seeded)\n"
        "  --speed-change W:T:F  worker W becomes F times slower T s in\n"
        "                      (repeat, or W:T:F,W:T:F)\n"
        "  --aggregators N     aggregator processes (default 1)\n"
        "  --groups N          GSSP's speed groups (0: the engine's cost "
        "model)\n"
        "  --policy P          one of local, bsp, ssp, asp, gssp, "
        "gssp+gdtopk,\n"
        "                      esync, fedavg (local: sequential SGD, no "
        "engine)\n"
        "  --compare LIST      run several policies one after the other\n"
        "  --target-acc X      accuracy whose time is measured (0.80)\n"
        "  --budget S          training seconds per policy\n"
        "  --base-ms MS        step time of a x1 worker (above the compute "
        "time)\n"
        "  --jitter F          scale each step by a uniform 1 +- F (0)\n"
        "  --noniid            shard the training set by class\n"
        "  --train-size N      train on a seeded subset of N samples "
        "(all)\n"
        "  --batch N           minibatch per worker (32)\n"
        "  --hidden N          hidden units (256)\n"
        "  --lr X              learning rate (0.1)\n"
        "  --momentum X        SGD momentum of the aggregators (0)\n"
        "  --staleness N       bound of ssp (3)\n"
        "  --fedavg-steps N    local steps per FedAvg round (8)\n"
        "  --eval-every S      seconds between test evaluations (0.25)\n"
        "  --seed N            initial model and data order (1)\n"
        "  --json FILE         write the results as JSON\n"
        "  --plot FILE.png     draw accuracy against time with gnuplot\n"
        "                      (default strata-train-SCENARIO.png)\n"
        "  --no-plot           draw nothing\n"
        "  --data DIR          IDX files (" PERF_DATA_DIR ")\n"
        "  --launcher PATH     strata-run to use (next to this program)\n"
        "  --restart N         strata-run starts a worker that died again,\n"
        "                      N times in all: it rejoins the job (every\n"
        "                      policy but local); a line per failure and\n"
        "                      recovery\n"
        "  --job               be one rank of a job another launcher started\n"
        "                      (mpirun, srun, torchrun, strata-run) with one\n"
        "                      --policy and as many worker ranks as the\n"
        "                      scenario has workers, on any hosts: rank 0\n"
        "                      prints the result (and --json)\n"
        "Engine settings not chosen here pass through as STRATA_* variables\n"
        "(see strata-config --list).\n");
}

static strata_status_t parse_double(const char *opt, const char *text,
                                    double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || v < lo || v > hi) {
        perf_error("--%s %s: expected a number from %g to %g", opt, text, lo,
                   hi);
        return STRATA_ERR_INVALID;
    }
    *out = v;
    return STRATA_OK;
}

static strata_status_t parse_int(const char *opt, const char *text, long lo,
                                 long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi) {
        perf_error("--%s %s: expected an integer from %ld to %ld", opt, text,
                   lo, hi);
        return STRATA_ERR_INVALID;
    }
    *out = v;
    return STRATA_OK;
}

/* Options whose value is a number, in one table. */
typedef struct number_opt {
    int id;
    double lo, hi;
    size_t offset; /* into perf_scenario_t */
    char kind;     /* 'd' double, 'i' int, 'u' uint64_t */
    double scale;  /* applied to doubles: --base-ms is stored in seconds */
} number_opt_t;

#define SC_OFF(field) offsetof(perf_scenario_t, field)
static const number_opt_t numbers[] = {
    {OPT_AGGREGATORS, 1, PERF_MAX_AGGREGATORS, SC_OFF(aggregators), 'i', 1},
    {OPT_GROUPS, 0, PERF_MAX_WORKERS, SC_OFF(groups), 'i', 1},
    {OPT_TARGET, 0.01, 0.99, SC_OFF(target_acc), 'd', 1},
    {OPT_BUDGET, 0.1, 86400, SC_OFF(budget_s), 'd', 1},
    {OPT_BASE_MS, 0.01, 60000, SC_OFF(base_step_s), 'd', 1e-3},
    {OPT_JITTER, 0, 0.9, SC_OFF(jitter), 'd', 1},
    {OPT_TRAIN_SIZE, 0, 60000, SC_OFF(train_size), 'i', 1},
    {OPT_BATCH, 1, 65536, SC_OFF(batch), 'i', 1},
    {OPT_HIDDEN, 1, 65536, SC_OFF(hidden), 'i', 1},
    {OPT_LR, 0, 1e3, SC_OFF(lr), 'd', 1},
    {OPT_MOMENTUM, 0, 0.999, SC_OFF(momentum), 'd', 1},
    {OPT_STALENESS, 0, 1000000, SC_OFF(staleness), 'i', 1},
    {OPT_FEDAVG_STEPS, 1, 1000000, SC_OFF(fedavg_steps), 'i', 1},
    {OPT_EVAL_EVERY, 0.01, 3600, SC_OFF(eval_s), 'd', 1},
    {OPT_SEED, 0, 2147483647, SC_OFF(seed), 'u', 1},
};

static strata_status_t set_number(const number_opt_t *n, const char *name,
                                  const char *text, perf_scenario_t *sc)
{
    char *field = (char *)sc + n->offset;
    if (n->kind == 'd') {
        double v;
        strata_status_t st = parse_double(name, text, n->lo, n->hi, &v);
        if (st == STRATA_OK)
            *(double *)field = v * n->scale;
        return st;
    }
    long v;
    strata_status_t st = parse_int(name, text, (long)n->lo, (long)n->hi, &v);
    if (st == STRATA_OK && n->kind == 'i')
        *(int *)field = (int)v;
    else if (st == STRATA_OK)
        *(uint64_t *)field = (uint64_t)v;
    return st;
}

static strata_status_t apply_option(int id, const char *name, const char *arg,
                                    perf_cli_t *cli)
{
    perf_scenario_t *sc = &cli->sc;
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++)
        if (numbers[i].id == id)
            return set_number(&numbers[i], name, arg, sc);
    switch (id) {
    case OPT_SCENARIO: /* applied before every other option */
        return STRATA_OK;
    case OPT_SPEEDS:
        snprintf(sc->name, sizeof(sc->name), "custom");
        return perf_speeds_parse(arg, sc->speeds, &sc->workers);
    case OPT_RANDOM_SPEEDS:
        snprintf(sc->name, sizeof(sc->name), "random-%.20s", arg);
        for (char *c = sc->name; *c; c++) /* a file name: random-12-7 */
            *c = *c == ':' ? '-' : *c;
        return perf_speeds_random(arg, sc->speeds, &sc->workers);
    case OPT_SPEED_CHANGE:
        return perf_speed_changes_parse(arg, sc);
    case OPT_POLICY:
    case OPT_COMPARE:
        return perf_policies_parse(arg, sc->policies, &sc->npolicies);
    case OPT_NONIID:
        sc->noniid = true;
        return STRATA_OK;
    case OPT_JSON:
        cli->json = arg;
        return STRATA_OK;
    case OPT_PLOT:
        cli->plot = arg;
        cli->no_plot = false;
        return STRATA_OK;
    case OPT_NO_PLOT:
        cli->plot = NULL;
        cli->no_plot = true;
        return STRATA_OK;
    case OPT_DATA:
        cli->data_dir = arg;
        return STRATA_OK;
    case OPT_LAUNCHER:
        cli->launcher = arg;
        return STRATA_OK;
    case OPT_RESTART:
        sc->restarts = atoi(arg);
        if (sc->restarts < 0 || sc->restarts > 4096) {
            perf_error("--restart %s: not a number of restarts in [0, 4096]",
                       arg);
            return STRATA_ERR_INVALID;
        }
        return STRATA_OK;
    case OPT_WORKER:
        cli->worker = arg;
        return STRATA_OK;
    case OPT_JOB:
        cli->job = true;
        cli->no_plot = true;
        return STRATA_OK;
    case OPT_HELP:
        cli->help = true;
        return STRATA_OK;
    }
    perf_cli_usage(stderr);
    return STRATA_ERR_INVALID;
}

/* First pass: only --scenario, so that it is the base the rest overrides. */
static strata_status_t apply_scenario(int argc, char **argv, perf_cli_t *cli)
{
    optind = 0; /* glibc: a full reset, as parsing may run more than once */
    opterr = 0; /* the second pass reports unknown options */
    int id;
    while ((id = getopt_long(argc, argv, "", options, NULL)) != -1)
        if (id == OPT_SCENARIO)
            return perf_scenario_named(optarg, &cli->sc);
    return STRATA_OK;
}

strata_status_t perf_cli_parse(int argc, char **argv, perf_cli_t *cli_out)
{
    perf_cli_t cli = {.data_dir = PERF_DATA_DIR};
    perf_scenario_defaults(&cli.sc);
    strata_status_t st = apply_scenario(argc, argv, &cli);
    if (st != STRATA_OK)
        return st;
    optind = 0;
    opterr = 1;
    int id, index = -1;
    while ((id = getopt_long(argc, argv, "", options, &index)) != -1) {
        const char *name = index >= 0 ? options[index].name : "?";
        st = apply_option(id, name, optarg, &cli);
        if (st != STRATA_OK)
            return st;
        index = -1;
    }
    if (optind < argc) {
        perf_error("unexpected argument '%s'", argv[optind]);
        return STRATA_ERR_INVALID;
    }
    if (!cli.help && !cli.worker) {
        st = perf_scenario_check(&cli.sc);
        if (st != STRATA_OK)
            return st;
    }
    *cli_out = cli;
    return STRATA_OK;
}
