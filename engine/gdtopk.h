/*
 * GDTopK's schedule: the upload ratio and sample ratio of each group, by its
 * speed rank and the epoch (docs/algorithms.md §1.5, §4.6). The sparsifying
 * kernels themselves are agg's (strata_topk_sparsify); this says which
 * ratios to give them and when to flush the residual densely.
 *
 *  - Steady ratio of a group at rank r in [0, 1] (0 fastest): the geometric
 *    interpolation rho(r) = 0.004^(1-r) * 0.015^r of the paper code's fastest
 *    and slowest classes. Fast groups push often, so each push carries less.
 *  - Warm-up, as the code's warmup(): 0.35 in epoch 1, then base^(e-1) in
 *    epochs e = 2..4 (never below rho(r)), then rho(r) from epoch 5 on. The
 *    code's bases are 0.25 / 0.30 / 0.35 for its fastest / middle / slowest
 *    class; base(r) = 0.25 + 0.10 r interpolates them, so the code's table is
 *    reproduced exactly at r = 0, 0.5 and 1 (except the middle class's steady
 *    ratio: rho(0.5) = 0.00775 where the code has 0.3^4 = 0.0081).
 *  - Sample ratio (the share of elements the threshold is estimated on):
 *    0.01 in epoch 1, then 0.008 + 0.002 r.
 *  - The residual is sent densely at the end of every flush_epochs-th epoch.
 */
#ifndef STRATA_ENGINE_GDTOPK_H
#define STRATA_ENGINE_GDTOPK_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#define ENG_GDTOPK_RATIO_FASTEST 0.004
#define ENG_GDTOPK_RATIO_SLOWEST 0.015
#define ENG_GDTOPK_RATIO_WARMUP 0.35
#define ENG_GDTOPK_BASE_FASTEST 0.25
#define ENG_GDTOPK_BASE_SPAN 0.10
#define ENG_GDTOPK_SAMPLE_FASTEST 0.008
#define ENG_GDTOPK_SAMPLE_SPAN 0.002
#define ENG_GDTOPK_SAMPLE_WARMUP 0.01
/* Epochs of warm-up: the steady ratio applies from the epoch after. */
#define ENG_GDTOPK_WARMUP_EPOCHS 4

typedef struct eng_gdtopk_plan {
    double ratio;        /* share of elements each push sends */
    double sample_ratio; /* share sampled to estimate the threshold */
    bool flush_after;    /* send the residual densely at the epoch's end */
} eng_gdtopk_plan_t;

/* The plan of a group at speed rank `rank` (in [0, 1], 0 fastest) for epoch
 * `epoch` (1 for the first), flushing every `flush_epochs` (>= 1) epochs. */
strata_status_t eng_gdtopk_plan(double rank, uint32_t epoch,
                                uint32_t flush_epochs,
                                eng_gdtopk_plan_t *plan_out);

/* rho(rank), rank clamped to [0, 1]. */
double eng_gdtopk_steady_ratio(double rank);

/* Whether partitions of dtype are sparsified: fp32, fp16 and bf16 (their
 * residuals are fp32, their sparse values fp32); fp64 ones travel densely. */
static inline bool eng_gdtopk_dtype(strata_dtype_t dtype)
{
    return dtype == STRATA_FP32 || dtype == STRATA_FP16 || dtype == STRATA_BF16;
}

#endif /* STRATA_ENGINE_GDTOPK_H */
