/*
 * Internal API of the agg module, for the engine, the benchmarks and the
 * tests: configuration, and the kernel implementations behind the public
 * functions of <strata/strata_agg.h>.
 *
 * Each instruction set provides one ops table (agg_ops_t). The public
 * functions check their arguments and call the table in use, chosen once
 * from STRATA_SIMD and cpuid; benchmarks and tests may call any table the
 * CPU supports directly.
 */
#ifndef STRATA_AGG_AGG_H
#define STRATA_AGG_AGG_H

#include <stdbool.h>
#include <stddef.h>

#include <strata/strata.h>
#include <strata/strata_agg.h>

#include "util/settings.h"

/* The kernels' settings, the rows of agg/settings.def. */
typedef enum agg_setting {
#define UTIL_SETTING(name, ...) AGG_SET_##name,
#include "agg/settings.def"
#undef UTIL_SETTING
    AGG_SET__COUNT
} agg_setting_t;

extern const util_setting_t agg_settings[AGG_SET__COUNT];

typedef struct agg_params {
    const char *simd;        /* STRATA_SIMD: auto, scalar, avx2 or avx512 */
    unsigned reduce_threads; /* STRATA_REDUCE_THREADS; 0: the cores */
} agg_params_t;

/* The parameters from settings that hold the rows of agg_settings, alone or
 * among other modules' rows. Strings point into s. */
strata_status_t agg_params_read(const util_settings_t *s,
                                agg_params_t *params_out);

/*
 * Select the kernels and the pool size. A forced instruction set the CPU
 * lacks is STRATA_ERR_CONFIG, logged with what the CPU has. The engine calls
 * this at start-up; without it the first public call reads the kernels'
 * settings itself (and no others). May be called again.
 */
strata_status_t agg_init(const agg_params_t *params);

/* Threads of a pool created with nthreads 0 (STRATA_REDUCE_THREADS, or the
 * cores available to the process); at least 1. */
unsigned agg_reduce_threads(void);

/* Runs fn(arg, c) for every chunk c in [0, nchunks) on the pool's threads
 * and the caller (all on the caller when pool is NULL), returning when all
 * are done. For element-wise work the engine or the benchmarks split
 * themselves; the pool's rules of strata_reduce_mt apply. */
typedef void (*agg_task_fn)(void *arg, size_t chunk);
strata_status_t agg_pool_for(strata_reduce_pool_t *pool, size_t nchunks,
                             agg_task_fn fn, void *arg);

/* Instruction-set families, in the order of preference. */
typedef enum agg_isa {
    AGG_ISA_SCALAR,
    AGG_ISA_AVX2,
    AGG_ISA_AVX512,
    AGG_ISA__COUNT,
} agg_isa_t;

/* Number of element types (strata_dtype_t values); tables index by dtype. */
#define AGG_NDTYPES 4

/* agg_reduce_fn flags. */
enum {
    AGG_REDUCE_ACC = 1u << 0,    /* dst += ... instead of dst = ... */
    AGG_REDUCE_STREAM = 1u << 1, /* dst will not be read soon: bypass cache */
};

/* The flags the public functions pass for a reduction of this size
 * (streaming stores once the buffers outgrow the caches). */
unsigned agg_reduce_flags(size_t count, size_t esize, bool acc);

/* Elements [offset, offset + count) of dst and of srcs[0..nsrc-1], with
 * 1 <= nsrc <= STRATA_REDUCE_MAX_SOURCES. */
typedef void (*agg_reduce_fn)(void *dst, const void *const *srcs, size_t nsrc,
                              size_t offset, size_t count, double scale,
                              unsigned flags);
/* y[i] += alpha * x[i], x of the table slot's dtype. */
typedef void (*agg_axpy_fn)(float *y, const void *x, size_t count, float alpha);
/* strata_sgd_update on elements [offset, offset + count) of w and v, with
 * the gradient the sum of grads[0..ngrads-1] (1..64, of the table slot's
 * dtype) in fp32, in that order; v may be NULL when sgd->momentum == 0. */
typedef void (*agg_sgd_fn)(const strata_sgd_t *sgd, float *w, float *v,
                           const void *const *grads, size_t ngrads,
                           size_t offset, size_t count);

typedef struct agg_ops {
    agg_isa_t isa;
    const char *name;  /* e.g. "avx512+bf16" */
    unsigned requires; /* AGG_CPU_* features the table needs */
    agg_reduce_fn reduce[AGG_NDTYPES];
    agg_axpy_fn axpy[AGG_NDTYPES]; /* NULL for fp64 */
    agg_sgd_fn sgd[AGG_NDTYPES];   /* NULL for fp64 */
} agg_ops_t;

/* CPU features the tables need. */
enum {
    AGG_CPU_AVX2 = 1u << 0,   /* with AVX, F16C and the OS saving YMM */
    AGG_CPU_AVX512 = 1u << 1, /* F, BW, VL and the OS saving ZMM */
    AGG_CPU_AVX512_BF16 = 1u << 2,
    AGG_CPU_AVX512_FP16 = 1u << 3,
};

/* The features of this CPU, and as text ("avx2 f16c avx512f ..."). */
unsigned agg_cpu_features(void);
const char *agg_cpu_features_text(void);

/* For tests: from now on pretend the CPU lacks these features (0: none). */
void agg_cpu_mask(unsigned features);

/* Every table compiled in, from the least to the most capable; index i <
 * agg_impl_count(). Tables whose requirements this CPU lacks are listed too:
 * check agg_impl_supported() before calling one. */
size_t agg_impl_count(void);
const agg_ops_t *agg_impl(size_t i);
bool agg_impl_supported(const agg_ops_t *ops);

/* The most capable table of a family this CPU supports; NULL if none. */
const agg_ops_t *agg_ops_for(agg_isa_t isa);

/* The table in use (initialised on first call); NULL when the configuration
 * is invalid (already logged). */
const agg_ops_t *agg_ops(void);

const char *agg_isa_name(agg_isa_t isa);
/* -1 for a name that is not a family ("auto" is not one either). */
int agg_isa_parse(const char *name);

/* The tables, defined by the kernel files. */
extern const agg_ops_t agg_ops_scalar;
extern const agg_ops_t agg_ops_avx2;
extern const agg_ops_t agg_ops_avx512;
extern const agg_ops_t agg_ops_avx512_bf16;

#endif /* STRATA_AGG_AGG_H */
