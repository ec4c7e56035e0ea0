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

typedef struct perf_scenario {
    char name[32]; /* named scenario, or "custom" */
    int workers;
    int aggregators;
    int groups; /* GSSP's speed groups (STRATA_GROUPS), 0: the engine's */
    double speeds[PERF_MAX_WORKERS]; /* slowdown factor per worker, >= 1 */
    double base_step_s;              /* padded step time of a x1 worker */
    double jitter;     /* each step's padding is scaled by 1 +- jitter */
    double budget_s;   /* training time of each policy */
    double target_acc; /* test accuracy whose time is measured */
    double eval_s;     /* interval between evaluations */
    bool noniid;
    int train_size; /* training samples used (a seeded subset), 0: all */
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

/* Apply a named scenario (gssp16, esync6) over sc; unknown names are an
 * error listing the known ones. */
strata_status_t perf_scenario_named(const char *name, perf_scenario_t *sc);

/* "1,1,2,2,4x4": a factor per worker, "FxN" repeating F N times. Factors are
 * >= 1; at most PERF_MAX_WORKERS workers. */
strata_status_t perf_speeds_parse(const char *text, double *speeds_out,
                                  int *count_out);

/* "bsp,gssp,esync": known policies only, no duplicates. */
strata_status_t perf_policies_parse(const char *text, perf_policy_t *out,
                                    int *count_out);

/* Checks that need every option at once (e.g. workers vs aggregators). */
strata_status_t perf_scenario_check(const perf_scenario_t *sc);

/* Index of the worker that reports the model: the first of the fastest,
 * which pulls the global model most often. */
int perf_scenario_reporter(const perf_scenario_t *sc);

/* Partition size that spreads model_bytes over every aggregator: two
 * partitions each, rounded up to 4 KiB. */
size_t perf_partition_bytes(size_t model_bytes, int aggregators);

#endif /* STRATA_PERF_TRAIN_SCENARIO_H */
