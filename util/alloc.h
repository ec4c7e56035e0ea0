/*
 * The engine's allocator, on jemalloc. Ordinary allocations use jemalloc's
 * own arenas; an eng_arena_t is a separate jemalloc arena whose memory comes
 * from chunks announced to hooks (the verbs provider registers each chunk with
 * the NIC once, so every allocation from the arena is already registered).
 */
#ifndef STRATA_UTIL_ALLOC_H
#define STRATA_UTIL_ALLOC_H

#include <stddef.h>

#include <strata/strata.h>

/* malloc-like; NULL on failure (not logged: the caller knows what failed).
 * A size of 0 returns a unique pointer. */
void *eng_malloc(size_t size);
void *eng_calloc(size_t count, size_t size);
void *eng_realloc(void *ptr, size_t size);
/* align: a power of two. */
void *eng_aligned_alloc(size_t align, size_t size);
void eng_free(void *ptr);
char *eng_strdup(const char *s);

/* Told about every chunk an arena maps and unmaps. chunk_added may refuse a
 * chunk (e.g. registration failed): the allocation that needed it fails. */
typedef struct eng_arena_hooks {
    strata_status_t (*chunk_added)(void *ctx, void *addr, size_t len);
    void (*chunk_removed)(void *ctx, void *addr, size_t len);
    void *ctx;
} eng_arena_hooks_t;

typedef struct eng_arena eng_arena_t;

/* chunk_bytes: the least mapped at a time (rounded up to 2 MiB), so that few,
 * large chunks are registered. hooks may be NULL (plain mmap'd memory). */
strata_status_t eng_arena_create(const eng_arena_hooks_t *hooks,
                                 size_t chunk_bytes, eng_arena_t **arena_out);
void *eng_arena_alloc(eng_arena_t *arena, size_t align, size_t size);
void eng_arena_free(eng_arena_t *arena, void *ptr);
/* Frees everything still allocated and unmaps every chunk (chunk_removed is
 * called for each). */
void eng_arena_destroy(eng_arena_t *arena);

#endif /* STRATA_UTIL_ALLOC_H */
