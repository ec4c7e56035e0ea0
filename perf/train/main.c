/*
 * strata-train: heterogeneous data-parallel training of an MLP on
 * Fashion-MNIST, one process per worker, to compare Strata's policies.
 * Without --worker it is the driver: it runs one job per policy and reports;
 * with --worker it is one process of such a job.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>

#include "perf/train/cli.h"
#include "perf/train/job.h"
#include "perf/train/log.h"
#include "perf/train/report.h"
#include "perf/train/run.h"
#include "perf/train/worker.h"

static void on_signal(int sig)
{
    (void)sig;
    perf_driver_stop = 1;
}

static void catch_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The figure a run draws unless told not to; the default one is skipped,
 * with a warning, where there is no gnuplot. */
static strata_status_t plot(const perf_cli_t *cli, const perf_result_t *r,
                            int n)
{
    char name[64];
    const char *path = cli->plot;
    if (!path) {
        if (!perf_report_have_gnuplot()) {
            perf_warn("no plot: gnuplot is not installed (gnuplot-nox)");
            return STRATA_OK;
        }
        snprintf(name, sizeof(name), "strata-train-%s.png", cli->sc.name);
        path = name;
    }
    strata_status_t st = perf_report_plot(path, &cli->sc, r, n);
    if (st == STRATA_OK)
        printf("plot: %s\n", path);
    return st;
}

/* The output files named on the command line, before minutes of runs. */
static strata_status_t check_outputs(const perf_cli_t *cli)
{
    if (cli->json && perf_report_check_output(cli->json, "--json"))
        return STRATA_ERR_INVALID;
    if (cli->plot && perf_report_check_plot(cli->plot))
        return STRATA_ERR_INVALID;
    return STRATA_OK;
}

/* Run every policy; 0 when each job completed. */
static int compare(const perf_cli_t *cli)
{
    perf_driver_t d;
    strata_status_t st =
        perf_driver_prepare(&d, &cli->sc, cli->data_dir, cli->launcher);
    if (st != STRATA_OK) {
        perf_driver_cleanup(&d);
        return 1;
    }
    const perf_scenario_t *sc = &cli->sc;
    perf_report_scenario(stdout, sc, d.train.count, d.compute_s);
    if (d.compute_s > 0.5 * sc->base_step_s)
        perf_warn("a minibatch takes %.2f ms, more than half the %.2f ms "
                  "step of a x1 worker: the CPU, not the speeds, will set "
                  "the pace (raise --base-ms)",
                  d.compute_s * 1e3, sc->base_step_s * 1e3);
    perf_result_t results[PERF_MAX_POLICIES] = {0};
    int ran = 0, failed = 0;
    for (int p = 0; p < sc->npolicies && !perf_driver_stop; p++) {
        printf("\n== %s\n", sc->policies[p].name);
        fflush(stdout);
        failed += perf_driver_run(&d, p, &results[p]) != STRATA_OK;
        ran++;
    }
    perf_report_table(stdout, sc, results, ran);
    if (cli->json && perf_report_json(cli->json, sc, results, ran))
        failed++;
    if (!cli->no_plot)
        failed += plot(cli, results, ran) != STRATA_OK;
    for (int p = 0; p < ran; p++)
        perf_result_free(&results[p]);
    perf_driver_cleanup(&d);
    return failed || perf_driver_stop ? 1 : 0;
}

int main(int argc, char **argv)
{
    perf_cli_t cli;
    if (perf_cli_parse(argc, argv, &cli) != STRATA_OK)
        return 2;
    if (cli.help) {
        perf_cli_usage(stdout);
        return 0;
    }
    if (cli.worker)
        return perf_worker_main(cli.worker);
    if (cli.job)
        return perf_job_main(&cli);
    if (check_outputs(&cli) != STRATA_OK)
        return 2;
    openblas_set_num_threads(1);
    catch_signals();
    return compare(&cli);
}
