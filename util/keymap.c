/* Open-addressing map from 64-bit keys to pointers. */
#include "util/keymap.h"

#include "util/alloc.h"

#define UTIL_KEYMAP_MIN 16

static uint32_t util_keymap_slot(const util_keymap_t *m, uint64_t key)
{
    /* Fibonacci hashing spreads sequential keys over the table. */
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (m->cap - 1);
}

void util_keymap_init(util_keymap_t *m)
{
    *m = (util_keymap_t){0};
}

void util_keymap_fini(util_keymap_t *m)
{
    util_free(m->keys);
    util_free(m->vals);
    util_keymap_init(m);
}

static void util_keymap_insert(util_keymap_t *m, uint64_t key, void *val)
{
    uint32_t i = util_keymap_slot(m, key);
    while (m->keys[i] != 0 && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == 0)
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

static strata_status_t util_keymap_grow(util_keymap_t *m)
{
    util_keymap_t big = {.cap = m->cap ? 2 * m->cap : UTIL_KEYMAP_MIN};
    big.keys = util_calloc(big.cap, sizeof(*big.keys));
    big.vals = util_calloc(big.cap, sizeof(*big.vals));
    if (!big.keys || !big.vals) {
        util_keymap_fini(&big);
        return STRATA_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->keys[i])
            util_keymap_insert(&big, m->keys[i], m->vals[i]);
    util_keymap_fini(m);
    *m = big;
    return STRATA_OK;
}

strata_status_t util_keymap_put(util_keymap_t *m, uint64_t key, void *val)
{
    if (key == 0)
        return STRATA_ERR_INVALID;
    if (2 * (m->n + 1) > m->cap) { /* keep the load at most one half */
        strata_status_t st = util_keymap_grow(m);
        if (st != STRATA_OK)
            return st;
    }
    util_keymap_insert(m, key, val);
    return STRATA_OK;
}

void *util_keymap_get(const util_keymap_t *m, uint64_t key)
{
    if (m->cap == 0 || key == 0)
        return NULL;
    for (uint32_t i = util_keymap_slot(m, key); m->keys[i];
         i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key)
            return m->vals[i];
    return NULL;
}

void *util_keymap_del(util_keymap_t *m, uint64_t key)
{
    if (m->cap == 0 || key == 0)
        return NULL;
    uint32_t mask = m->cap - 1, i = util_keymap_slot(m, key);
    while (m->keys[i] != key) {
        if (m->keys[i] == 0)
            return NULL;
        i = (i + 1) & mask;
    }
    void *val = m->vals[i];
    /* Shift later members of the probe run back so lookups need no
     * tombstones. */
    for (uint32_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        uint32_t home = util_keymap_slot(m, m->keys[j]);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->n--;
    return val;
}

int util_keymap_next(const util_keymap_t *m, uint32_t *iter, uint64_t *key_out,
                     void **val_out)
{
    for (; *iter < m->cap; (*iter)++)
        if (m->keys[*iter]) {
            *key_out = m->keys[*iter];
            *val_out = m->vals[(*iter)++];
            return 1;
        }
    return 0;
}
