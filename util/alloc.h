/*
 * The engine's allocator, on jemalloc. Ordinary allocations use jemalloc's
 * own arenas; an util_arena_t is a separate jemalloc arena whose memory comes
 * from chunks announced to hooks (the verbs provider registers each chunk with
 * the NIC once, so every allocation from the arena is already registered).
 */
#ifndef STRATA_UTIL_ALLOC_H
#define STRATA_UTIL_ALLOC_H

#include <stddef.h>

#include <strata/strata.h>

/* malloc-like; NULL on failure (not logged: the caller knows what failed).
 * A size of 0 returns a unique pointer. */
void *util_malloc(size_t size);
void *util_calloc(size_t count, size_t size);
void *util_realloc(void *ptr, size_t size);
/* align: a power of two. */
void *util_aligned_alloc(size_t align, size_t size);
void util_free(void *ptr);
char *util_strdup(const char *s);

/* Told about every chunk an arena maps and unmaps. chunk_added may refuse a
 * chunk (e.g. registration failed): the allocation that needed it fails. */
typedef struct util_arena_hooks {
    strata_status_t (*chunk_added)(void *ctx, void *addr, size_t len);
    void (*chunk_removed)(void *ctx, void *addr, size_t len);
    void *ctx;
} util_arena_hooks_t;

typedef struct util_arena util_arena_t;

/* chunk_bytes: the least mapped at a time (rounded up to 2 MiB), so that few,
 * large chunks are registered. hooks may be NULL (plain mmap'd memory). */
strata_status_t util_arena_create(const util_arena_hooks_t *hooks,
                                  size_t chunk_bytes, util_arena_t **arena_out);
void *util_arena_alloc(util_arena_t *arena, size_t align, size_t size);
void util_arena_free(util_arena_t *arena, void *ptr);
/* Frees everything still allocated and unmaps every chunk (chunk_removed is
 * called for each). */
void util_arena_destroy(util_arena_t *arena);

#endif /* STRATA_UTIL_ALLOC_H */
