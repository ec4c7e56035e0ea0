/*
 * A small seeded generator (xoshiro256**, seeded through splitmix64) so that
 * every worker draws the same initial model and the same data split from the
 * same seed, independently of the C library.
 */
#ifndef STRATA_PERF_TRAIN_RNG_H
#define STRATA_PERF_TRAIN_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct perf_rng {
    uint64_t s[4];
} perf_rng_t;

static inline uint64_t perf_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void perf_rng_seed(perf_rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = perf_splitmix64(&seed);
}

static inline uint64_t perf_rng_next(perf_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1). */
static inline double perf_rng_uniform(perf_rng_t *r)
{
    return (double)(perf_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n); the bias of the modulo is below 2^-32 for n < 2^32. */
static inline uint32_t perf_rng_below(perf_rng_t *r, uint32_t n)
{
    return (uint32_t)(perf_rng_next(r) % n);
}

/* Standard normal (Box-Muller; one of the pair is dropped for simplicity). */
static inline double perf_rng_normal(perf_rng_t *r)
{
    double u = 1.0 - perf_rng_uniform(r); /* (0, 1]: log() stays finite */
    double v = perf_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif /* STRATA_PERF_TRAIN_RNG_H */
