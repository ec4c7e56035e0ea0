/*
 * The 32-bit immediates of the data path. A worker's gradient write and an
 * aggregator's model write each end with one; it says what landed:
 *   bits 31..29  kind (ENG_IMM_*)
 *   bits 28..22  the clock, modulo 128 (checked against the expected one)
 *   bits 21..0   the partition: its index among the aggregator's (held_index,
 *                layout.h) for writes into an aggregator, its index in the
 *                model for writes into a worker; for ENG_IMM_GRADS a run of
 *                partitions (eng_imm_run)
 */
#ifndef STRATA_ENGINE_IMM_H
#define STRATA_ENGINE_IMM_H

#include <stdint.h>

#include "engine/layout.h"

enum {
    ENG_IMM_GRAD = 1,  /* worker -> aggregator: gradients of a clock */
    ENG_IMM_INIT = 2,  /* first worker -> aggregator: the initial model */
    ENG_IMM_MODEL = 3, /* aggregator -> worker: the model for a clock */
    /* worker -> aggregator: a GDTopK push, (uint32 index, fp32 value)
     * entries as long as the write */
    ENG_IMM_SPARSE = 4,
    /* worker -> aggregator: gradients of a clock for a run of partitions
     * (consecutive held indices), each as ENG_IMM_GRAD would say it: small
     * partitions of one push fused into one immediate */
    ENG_IMM_GRADS = 5,
};

#define ENG_IMM_CLOCK_MASK 0x7fu
#define ENG_IMM_PART_MASK ((1u << 22) - 1)
_Static_assert(ENG_LAYOUT_MAX_PARTS - 1 <= ENG_IMM_PART_MASK,
               "partition indices must fit the immediate");

static inline uint32_t eng_imm(unsigned kind, int64_t clock, uint32_t part)
{
    return (uint32_t)kind << 29 | ((uint32_t)clock & ENG_IMM_CLOCK_MASK) << 22 |
           part;
}

/* ENG_IMM_GRADS: partitions first .. first + n - 1, n in [2, ENG_IMM_RUN_MAX],
 * first below ENG_IMM_RUN_FIRSTS (bits 15..0 first, 21..16 n - 2). */
#define ENG_IMM_RUN_MAX 65u
#define ENG_IMM_RUN_FIRSTS (1u << 16)

static inline uint32_t eng_imm_run(uint32_t first, uint32_t n)
{
    return (n - 2) << 16 | first;
}

static inline uint32_t eng_imm_run_first(uint32_t imm)
{
    return imm & (ENG_IMM_RUN_FIRSTS - 1);
}

static inline uint32_t eng_imm_run_count(uint32_t imm)
{
    return ((imm & ENG_IMM_PART_MASK) >> 16) + 2;
}

static inline unsigned eng_imm_kind(uint32_t imm)
{
    return imm >> 29;
}

static inline uint32_t eng_imm_part(uint32_t imm)
{
    return imm & ENG_IMM_PART_MASK;
}

/* Whether the immediate's clock bits are those of `clock`. */
static inline int eng_imm_clock_is(uint32_t imm, int64_t clock)
{
    return ((imm >> 22) & ENG_IMM_CLOCK_MASK) ==
           ((uint32_t)clock & ENG_IMM_CLOCK_MASK);
}

#endif /* STRATA_ENGINE_IMM_H */
