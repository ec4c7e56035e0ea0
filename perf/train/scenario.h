/*
 * What a training run compares: the heterogeneity profile (a slowdown factor
 * per worker), the number of aggregators, the policies, and the training and
 * measurement settings. Named scenarios preset the profile and its pacing.
 */
#ifndef STRATA_PERF_TRAIN_SCENARIO_H
#define STRATA_PERF_TRAIN_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#define PERF_MAX_WORKERS 256
#define PERF_MAX_POLICIES 16
#define PERF_MAX_AGGREGATORS 64
#define PERF_MAX_CHANGES 16

/* How each worker process drives its policy through the API. */
typedef enum perf_drive {
    PERF_DRIVE_LOCAL,    /* no engine: sequential SGD in the driver */
    PERF_DRIVE_GRADIENT, /* strata_step every minibatch */
    PERF_DRIVE_ROUNDS,   /* local SGD steps, then a synchronous round */
} perf_drive_t;

typedef struct perf_policy {
    char name[32];      /* as the user wrote it: "gssp+gdtopk" */
    const char *engine; /* STRATA_POLICY, NULL for local */
    bool gdtopk;        /* STRATA_GDTOPK=1 */
    perf_drive_t drive;
} perf_policy_t;

/* Worker `worker` becomes `factor` times slower `at_s` seconds into
 * training (--speed-change W:T:F). */
typedef struct perf_speed_change {
    int worker;
    double at_s;
    double factor;
} perf_speed_change_t;

typedef struct perf_scenario {
    char name[32]; /* named scenario, or "custom" */
    int workers;
    int aggregators;
    int groups; /* GSSP's speed groups (STRATA_GROUPS), 0: the engine's */
    double speeds[PERF_MAX_WORKERS]; /* slowdown factor per worker, >= 1 */
    double base_step_s;              /* padded step time of a x1 worker */
    int nchanges;
    perf_speed_change_t changes[PERF_MAX_CHANGES];
    double jitter;     /* each step's padding is scaled by 1 +- jitter */
    double budget_s;   /* training time of each policy */
    double target_acc; /* test accuracy whose time is measured */
    double eval_s;     /* interval between evaluations */
    bool noniid;
    int train_size; /* training samples used (a seeded subset), 0: all */
    int restarts;   /* --restart: workers strata-run starts again */
    int batch;
    int hidden; /* units of the MLP's hidden layer */
    double lr;
    double momentum;
    int staleness;    /* ssp's bound */
    int fedavg_steps; /* local steps per FedAvg round */
    uint64_t seed;
    int npolicies;
    perf_policy_t policies[PERF_MAX_POLICIES];
} perf_scenario_t;

/* Defaults of a custom run: 4 workers at x1, 1 aggregator, bsp. */
void perf_scenario_defaults(perf_scenario_t *sc);

/* Apply a named scenario (gssp16, slowdown12, esync6) over sc; unknown names
 * are an error listing the known ones. */
strata_status_t perf_scenario_named(const char *name, perf_scenario_t *sc);

/* "1,1,2,2,4x4": a factor per worker, "FxN" repeating F N times. Factors are
 * >= 1; at most PERF_MAX_WORKERS workers. */
strata_status_t perf_speeds_parse(const char *text, double *speeds_out,
                                  int *count_out);

/* "W:T:F[,W:T:F...]", appended to sc's changes: worker W (>= 0) becomes F
 * (> 0) times slower at T (>= 0) seconds. The worker is checked against the
 * worker count by perf_scenario_check. */
strata_status_t perf_speed_changes_parse(const char *text, perf_scenario_t *sc);

/* "N:SEED": N (2..PERF_MAX_WORKERS) factors drawn from SEED: the fastest is
 * 1, the slowest R = 3 + 7u (u uniform in [0, 1)), the others log-uniform in
 * [1, R], in random order, rounded to hundredths so that printing them gives
 * the same profile back through --speeds. */
strata_status_t perf_speeds_random(const char *text, double *speeds_out,
                                   int *count_out);

/* "bsp,gssp,esync": known policies only, no duplicates. */
strata_status_t perf_policies_parse(const char *text, perf_policy_t *out,
                                    int *count_out);

/* Checks that need every option at once (e.g. workers vs aggregators). */
strata_status_t perf_scenario_check(const perf_scenario_t *sc);

/* Index of the worker that reports the model: the first of the fastest,
 * which pulls the global model most often, among those whose speed does not
 * change if there are any. */
int perf_scenario_reporter(const perf_scenario_t *sc);

#endif /* STRATA_PERF_TRAIN_SCENARIO_H */
