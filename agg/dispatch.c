/*
 * Choice of the kernel tables: CPU features from cpuid, STRATA_SIMD and
 * STRATA_REDUCE_THREADS (agg_params_t), strata_simd_*().
 */
#include <cpuid.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "agg/agg.h"
#include "util/log.h"

static const agg_ops_t *const agg_impls[] = {
    &agg_ops_scalar,
    &agg_ops_avx2,
    &agg_ops_avx512,
    &agg_ops_avx512_bf16,
};

static const char *const agg_isa_names[AGG_ISA__COUNT] = {
    [AGG_ISA_SCALAR] = "scalar",
    [AGG_ISA_AVX2] = "avx2",
    [AGG_ISA_AVX512] = "avx512",
};

static _Atomic(const agg_ops_t *) agg_active;
static atomic_uint agg_cpu_masked;
static atomic_uint agg_threads;
static pthread_once_t agg_lazy_once = PTHREAD_ONCE_INIT;

/* ---- CPU features ---- */

static unsigned agg_cpu_probe(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    /* The OS must save the vector state (XCR0) for a path to be usable. */
    bool osxsave = c & bit_OSXSAVE, f16c = c & bit_F16C, avx = c & bit_AVX;
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (unsigned long long)hi << 32 | lo;
    }
    bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    if (ymm && avx && f16c && (b & bit_AVX2))
        f |= AGG_CPU_AVX2;
    unsigned need512 = bit_AVX512F | bit_AVX512BW | bit_AVX512VL;
    if (zmm && (f & AGG_CPU_AVX2) && (b & need512) == need512)
        f |= AGG_CPU_AVX512;
    if ((f & AGG_CPU_AVX512) && (d & bit_AVX512FP16))
        f |= AGG_CPU_AVX512_FP16;
    if ((f & AGG_CPU_AVX512) && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
        (a & bit_AVX512BF16))
        f |= AGG_CPU_AVX512_BF16;
    return f;
}

unsigned agg_cpu_features(void)
{
    static atomic_uint cached; /* bit 31: probed */
    unsigned f = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!(f & 1u << 31)) {
        f = agg_cpu_probe() | 1u << 31;
        atomic_store_explicit(&cached, f, memory_order_relaxed);
    }
    return f & ~(1u << 31) & ~atomic_load(&agg_cpu_masked);
}

void agg_cpu_mask(unsigned features)
{
    atomic_store(&agg_cpu_masked, features);
}

const char *agg_cpu_features_text(void)
{
    static _Thread_local char text[96];
    unsigned f = agg_cpu_features();
    snprintf(text, sizeof(text), "%s%s%s%s",
             f & AGG_CPU_AVX2 ? "avx2 f16c" : "no avx2",
             f & AGG_CPU_AVX512 ? " avx512f/bw/vl" : ", no avx512",
             f & AGG_CPU_AVX512_BF16 ? " avx512_bf16" : "",
             f & AGG_CPU_AVX512_FP16 ? " avx512_fp16" : "");
    return text;
}

/* ---- tables ---- */

size_t agg_impl_count(void)
{
    return sizeof(agg_impls) / sizeof(agg_impls[0]);
}

const agg_ops_t *agg_impl(size_t i)
{
    return i < agg_impl_count() ? agg_impls[i] : NULL;
}

bool agg_impl_supported(const agg_ops_t *ops)
{
    return (ops->requires & ~agg_cpu_features()) == 0;
}

const agg_ops_t *agg_ops_for(agg_isa_t isa)
{
    const agg_ops_t *best = NULL;
    for (size_t i = 0; i < agg_impl_count(); i++)
        if (agg_impls[i]->isa == isa && agg_impl_supported(agg_impls[i]))
            best = agg_impls[i];
    return best;
}

static const agg_ops_t *agg_ops_best(void)
{
    const agg_ops_t *best = &agg_ops_scalar;
    for (size_t i = 0; i < agg_impl_count(); i++)
        if (agg_impl_supported(agg_impls[i]))
            best = agg_impls[i];
    return best;
}

const char *agg_isa_name(agg_isa_t isa)
{
    return (unsigned)isa < AGG_ISA__COUNT ? agg_isa_names[isa] : "?";
}

int agg_isa_parse(const char *name)
{
    for (int i = 0; name && i < AGG_ISA__COUNT; i++)
        if (strcmp(name, agg_isa_names[i]) == 0)
            return i;
    return -1;
}

/* "auto" or a family name to a table; what names the choice in errors,
 * e.g. "STRATA_SIMD=avx2". */
static strata_status_t agg_choose(const char *isa, const char *what,
                                  strata_status_t unsupported,
                                  const agg_ops_t **ops_out)
{
    if (strcmp(isa, "auto") == 0) {
        *ops_out = agg_ops_best();
        return STRATA_OK;
    }
    int family = agg_isa_parse(isa);
    if (family < 0) {
        util_error("agg: %s: unknown instruction set; expected auto, "
                   "scalar, avx2 or avx512",
                   what);
        return STRATA_ERR_INVALID;
    }
    const agg_ops_t *ops = agg_ops_for((agg_isa_t)family);
    if (!ops) {
        util_error("agg: %s: this CPU cannot run the %s kernels (it has: "
                   "%s); use auto or a path it supports",
                   what, isa, agg_cpu_features_text());
        return unsupported;
    }
    *ops_out = ops;
    return STRATA_OK;
}

/* ---- configuration ---- */

static unsigned agg_cores_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    return 1;
}

strata_status_t agg_init(const agg_params_t *params)
{
    if (!params || !params->simd) {
        util_error("agg: agg_init: NULL %s", params ? "simd" : "params");
        return STRATA_ERR_INVALID;
    }
    const agg_ops_t *ops;
    char what[64];
    snprintf(what, sizeof(what), "STRATA_SIMD=%.40s", params->simd);
    strata_status_t st =
        agg_choose(params->simd, what, STRATA_ERR_CONFIG, &ops);
    if (st)
        return st == STRATA_ERR_INVALID ? STRATA_ERR_CONFIG : st;

    unsigned threads = params->reduce_threads;
    atomic_store(&agg_threads, threads > 0 ? threads : agg_cores_available());
    atomic_store_explicit(&agg_active, ops, memory_order_release);
    util_debug("agg: %s kernels (CPU: %s), %u reduce threads", ops->name,
               agg_cpu_features_text(), atomic_load(&agg_threads));
    return STRATA_OK;
}

/* A plain kernel call before any strata_init: the kernels' own settings, and
 * nothing of the rest of STRATA_* (a bad unrelated variable is not ours to
 * judge). */
static void agg_lazy_init(void)
{
    util_settings_t *s;
    agg_params_t params;
    if (util_settings_load(agg_settings, AGG_SET__COUNT, UTIL_SETTINGS_OWN,
                           &s) != STRATA_OK) {
        util_error("agg: no kernels selected: the configuration is invalid "
                   "(see above)");
        return;
    }
    if (agg_params_read(s, &params) == STRATA_OK)
        (void)agg_init(&params); /* logged by agg_init */
    util_settings_free(s);
}

const agg_ops_t *agg_ops(void)
{
    const agg_ops_t *ops =
        atomic_load_explicit(&agg_active, memory_order_acquire);
    if (ops)
        return ops;
    pthread_once(&agg_lazy_once, agg_lazy_init);
    return atomic_load_explicit(&agg_active, memory_order_acquire);
}

unsigned agg_reduce_threads(void)
{
    if (!agg_ops())
        return 1;
    unsigned n = atomic_load(&agg_threads);
    return n ? n : 1;
}

/* ---- public ---- */

strata_status_t strata_simd_select(const char *isa)
{
    if (!isa) {
        util_error("agg: strata_simd_select: isa is NULL");
        return STRATA_ERR_INVALID;
    }
    if (!agg_ops()) /* settles the lazy configuration first */
        return STRATA_ERR_CONFIG;
    const agg_ops_t *ops;
    char what[96];
    snprintf(what, sizeof(what), "strata_simd_select(\"%.40s\")", isa);
    strata_status_t st = agg_choose(isa, what, STRATA_ERR_UNSUPPORTED, &ops);
    if (st)
        return st;
    atomic_store_explicit(&agg_active, ops, memory_order_release);
    return STRATA_OK;
}

const char *strata_simd_name(void)
{
    const agg_ops_t *ops = agg_ops();
    return ops ? agg_isa_name(ops->isa) : NULL;
}

bool strata_simd_supported(const char *isa)
{
    int family = agg_isa_parse(isa);
    return family >= 0 && agg_ops_for((agg_isa_t)family) != NULL;
}
