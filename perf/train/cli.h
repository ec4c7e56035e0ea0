/* The command line of strata-train. */
#ifndef STRATA_PERF_TRAIN_CLI_H
#define STRATA_PERF_TRAIN_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include <strata/strata.h>

#include "perf/train/scenario.h"

typedef struct perf_cli {
    perf_scenario_t sc;
    const char *json;     /* --json FILE */
    const char *plot;     /* --plot FILE.png (NULL: the default name) */
    bool no_plot;         /* --no-plot */
    const char *data_dir; /* --data DIR */
    const char *launcher; /* --launcher PATH */
    const char *worker;   /* --worker BOARD: run as a worker of a job */
    bool job;             /* --job: a rank of a job another launcher ran */
    bool help;
} perf_cli_t;

/* --scenario applies first wherever it stands; every other option then
 * overrides it. Errors are reported naming the option. */
strata_status_t perf_cli_parse(int argc, char **argv, perf_cli_t *cli_out);

void perf_cli_usage(FILE *out);

#endif /* STRATA_PERF_TRAIN_CLI_H */
