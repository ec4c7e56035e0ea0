/* Inside util/alloc: an arena, its chunks, and the ops of its two kinds. */
#ifndef STRATA_UTIL_ARENA_H
#define STRATA_UTIL_ARENA_H

#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>

#include "util/alloc.h"

#define UTIL_ARENA_CHUNK_ALIGN (2u << 20)

typedef struct util_arena_chunk {
    struct util_arena_chunk *next;
    char *base;
    size_t len;
    size_t used; /* jemalloc: carved so far */
} util_arena_chunk_t;

typedef struct util_arena_ops {
    const char *name;
    strata_status_t (*init)(util_arena_t *a);
    void *(*alloc)(util_arena_t *a, size_t align, size_t size);
    void (*free)(util_arena_t *a, void *ptr);
    void (*fini)(util_arena_t *a); /* before the chunks are unmapped */
} util_arena_ops_t;

struct util_arena {
    extent_hooks_t extent_ops; /* first: jemalloc hands this to the hooks */
    const util_arena_ops_t *ops;
    util_arena_hooks_t hooks;
    unsigned index; /* jemalloc's arena */
    size_t chunk_bytes;
    pthread_mutex_t lock; /* the chunk list */
    util_arena_chunk_t *chunks;
};

extern const util_arena_ops_t util_arena_jemalloc_ops;
extern const util_arena_ops_t util_arena_pages_ops;

/* Whether jemalloc 5 is loaded in the process (looked up once). */
bool util_arena_jemalloc_present(void);

/* Maps len bytes (whole pages) at an address aligned to align, announces
 * them to chunk_added and puts them on the list; NULL on failure, logged.
 * Called with the lock held. */
util_arena_chunk_t *util_arena_map_chunk(util_arena_t *a, size_t len,
                                         size_t align);

#endif /* STRATA_UTIL_ARENA_H */
