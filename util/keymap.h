/*
 * A map from non-zero 64-bit keys to pointers (open addressing, linear
 * probing, backward-shift deletion). Providers keep per endpoint the regions
 * exported to it, so that checking an incoming write is one lookup.
 */
#ifndef STRATA_UTIL_KEYMAP_H
#define STRATA_UTIL_KEYMAP_H

#include <stdint.h>

#include <strata/strata.h>

typedef struct util_keymap {
    uint64_t *keys; /* 0: empty */
    void **vals;
    uint32_t cap; /* a power of two, or 0 before the first put */
    uint32_t n;
} util_keymap_t;

void util_keymap_init(util_keymap_t *m);
void util_keymap_fini(util_keymap_t *m);

/* Inserts or replaces; grows as needed. key must not be 0. */
strata_status_t util_keymap_put(util_keymap_t *m, uint64_t key, void *val);
/* The value, or NULL. */
void *util_keymap_get(const util_keymap_t *m, uint64_t key);
/* Removes key; returns its value, or NULL if it was absent. */
void *util_keymap_del(util_keymap_t *m, uint64_t key);

/* Iteration: for (uint32_t i = 0; util_keymap_next(m, &i, &k, &v);) */
int util_keymap_next(const util_keymap_t *m, uint32_t *iter, uint64_t *key_out,
                     void **val_out);

#endif /* STRATA_UTIL_KEYMAP_H */
