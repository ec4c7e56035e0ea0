/* What a comparison prints and writes: the table, JSON and an accuracy plot. */
#ifndef STRATA_PERF_TRAIN_REPORT_H
#define STRATA_PERF_TRAIN_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <strata/strata.h>

#include "perf/train/run.h"
#include "perf/train/scenario.h"

/* One line describing the scenario, e.g. "16 workers (x1 x4, ...)". */
void perf_report_scenario(FILE *out, const perf_scenario_t *sc,
                          size_t train_count, double compute_s);

/* Time to target, speed-up over bsp (or over the first policy when bsp did
 * not run), final accuracy and traffic of every policy. */
void perf_report_table(FILE *out, const perf_scenario_t *sc,
                       const perf_result_t *r, int n);

/* For each speed change: how long after it each gssp run moved the worker
 * to another group, and at what share of bsp's evaluations it was as
 * accurate as bsp or more (1: over the whole run). */
void perf_report_changes(FILE *out, const perf_scenario_t *sc,
                         const perf_result_t *r, int n);

/* {"scenario", "target_acc", "budget_s", "results": [{"policy",
 * "time_to_target_s" (null when not reached), "final_acc", "bytes_pushed",
 * "bytes_pulled", "steps", "ok", "speed_changes": [{"worker", "at_s",
 * "factor", "moved_after_s" (null when it never moved)}] (with
 * --speed-change)}]} */
strata_status_t perf_report_json(const char *path, const perf_scenario_t *sc,
                                 const perf_result_t *r, int n);

/* Checked before any run, so that a typo costs no results: PATH (given by
 * OPTION, e.g. "--json") can be opened for writing (a directory, a missing
 * or read-only directory cannot); a file created here is removed again. */
strata_status_t perf_report_check_output(const char *path, const char *option);
/* The same for --plot, whose name must also suit gnuplot. */
strata_status_t perf_report_check_plot(const char *path);

/* Whether gnuplot is on the PATH. */
bool perf_report_have_gnuplot(void);

/* Accuracy against wall time, one curve per policy, through gnuplot. */
strata_status_t perf_report_plot(const char *path, const perf_scenario_t *sc,
                                 const perf_result_t *r, int n);

#endif /* STRATA_PERF_TRAIN_REPORT_H */
