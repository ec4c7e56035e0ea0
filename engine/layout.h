/*
 * Model layout and sharding. The tensors a worker registers are laid out in
 * registration order and cut into partitions of at most STRATA_PARTITION_BYTES
 * (large tensors split, small ones packed; a partition holds one dtype, so a
 * change of dtype starts a new one). Partitions are assigned to the S
 * aggregator shards balancing bytes. Every worker must register the same
 * tensors: the coordinator compares the layout hashes and names the first
 * tensor that differs.
 *
 * A partition is a contiguous array of elements on its shard; on a worker it
 * is made of pieces, each a byte range of one tensor.
 *
 * Shards are held by aggregators (eng_layout_hold): by default one each, or
 * (STRATA_SHARDS) shard s by aggregator s mod the aggregators. An
 * aggregator's partitions are those of its shards, one shard after the
 * other: the receive slots, the model and the immediates towards it are
 * numbered by them (held_index, held_off), so one shard per aggregator
 * numbers them as its shard does.
 *
 * A shard whose aggregator was lost moves to another at run time
 * (eng_layout_move). What the taker and the workers sized at the commit
 * for it stays as it was: its arrays are cut in regions, region 0 the
 * shards it held from the start, and each shard it takes over a region of
 * its own after them (slots, model and staged model of that region
 * allocated then). A partition's held_off counts within its region; its
 * held_index goes on after the taker's, so immediates keep naming it.
 */
#ifndef STRATA_ENGINE_LAYOUT_H
#define STRATA_ENGINE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

/* Longest tensor name, in bytes, without the terminating NUL. */
#define ENG_TENSOR_NAME_MAX 255
/* Most partitions a model may have (they are numbered in immediates). */
#define ENG_LAYOUT_MAX_PARTS (1u << 22)
/* A held_parts entry whose partition moved to another aggregator. */
#define ENG_LAYOUT_MOVED UINT32_MAX

/* What identifies a tensor across ranks. */
typedef struct eng_tensor_desc {
    char name[ENG_TENSOR_NAME_MAX + 1];
    strata_dtype_t dtype;
    uint64_t count;
} eng_tensor_desc_t;

/* A byte range of one tensor inside one partition. */
typedef struct eng_piece {
    uint32_t tensor;
    uint32_t part;
    uint64_t tensor_off; /* bytes from the start of the tensor */
    uint64_t part_off;   /* bytes from the start of the partition */
    uint64_t len;        /* bytes */
} eng_piece_t;

typedef struct eng_partition {
    strata_dtype_t dtype;
    uint64_t bytes;
    uint64_t count; /* elements */
    uint32_t shard;
    uint32_t shard_index;  /* position among the partitions of its shard */
    uint64_t shard_off;    /* bytes before it in its shard's arrays */
    uint32_t holder;       /* the aggregator holding its shard */
    uint32_t held_index;   /* position among the holder's partitions */
    uint32_t region;       /* of the holder's arrays: 0, or a shard taken */
    uint64_t held_off;     /* bytes before it in that region */
    uint64_t region_bytes; /* of that region (one slot parity) */
    uint32_t first_piece, npieces;
} eng_partition_t;

typedef struct eng_layout {
    uint32_t ntensors, nparts, npieces, nshards;
    uint32_t shards_used; /* shards holding a partition */
    eng_tensor_desc_t *tensors;
    uint64_t *tensor_bytes;
    uint32_t *tensor_first_piece; /* a tensor's pieces are consecutive */
    uint32_t *tensor_npieces;
    eng_partition_t *parts;
    eng_piece_t *pieces;
    uint64_t *shard_bytes;   /* [nshards] */
    uint32_t *shard_nparts;  /* [nshards] */
    uint32_t **shard_parts;  /* [nshards][shard_nparts]: partition indices */
    uint32_t nholders;       /* aggregators holding the shards */
    uint32_t holders_used;   /* ... that hold a partition */
    uint64_t *held_bytes;    /* [nholders]: of its region 0 */
    uint32_t *held_nparts;   /* [nholders] */
    uint32_t **held_parts;   /* [nholders][held_nparts]: partition indices,
                                ENG_LAYOUT_MOVED where one moved away */
    uint32_t *held_nregions; /* [nholders]: 1 + the shards it took over */
    uint64_t partition_bytes;
    uint64_t hash;
} eng_layout_t;

/* Check one tensor description: a non-empty name of at most
 * ENG_TENSOR_NAME_MAX bytes, a known dtype, a non-zero count whose byte size
 * fits in 63 bits. Logs what is wrong. */
strata_status_t eng_tensor_desc_check(const eng_tensor_desc_t *desc);

/* A name's key in a util_keymap (a hash, never 0): registering checks
 * for a name twice in constant time. */
uint64_t eng_tensor_name_key(const char *name);

/* The hash every rank computes over the tensor descriptions (and the
 * partition size, which shapes the layout). */
uint64_t eng_layout_hash(const eng_tensor_desc_t *tensors, uint32_t ntensors,
                         uint64_t partition_bytes);

/* Bounds of the partition size the engine picks (STRATA_PARTITION_BYTES=auto).
 * Below the floor a message's fixed cost outweighs what splitting overlaps;
 * above the ceiling a partition no longer fits in the caches while it is
 * reduced, and reduce no longer overlaps the arrival of the next. */
#define ENG_PARTITION_AUTO_MIN (64u << 10)
#define ENG_PARTITION_AUTO_MAX (4u << 20)
/* The ceiling when the job spans hosts: there the links, not the cores,
 * bound a round, and smaller partitions overlap a clock's pulls with its
 * pushes better (1 MiB beat 2-4 MiB from 4 to 16 MiB at 1 Gbit/s;
 * docs/engine.md). */
#define ENG_PARTITION_AUTO_MAX_HOSTS (1u << 20)
/* Partitions per shard when the job spans hosts. A link carries a shard's
 * model writes while its pushes still arrive, all but the last partition's:
 * that one goes out after the last push landed, so a round takes at least
 * (1 + 1 / parts) times what its busiest link must carry. At 4 MiB on one
 * aggregator the former two per shard (1 MiB, the ceiling: four) kept a
 * round at 0.73 of the link bound at 1 Gbit/s; sixteen leave 6 %
 * (docs/engine.md). */
#define ENG_PARTITION_AUTO_PARTS_HOSTS 16u
/* The floor when the job runs on one host: there a push lands as it is
 * posted (a copy), so splitting overlaps no arrival with a reduction, and
 * every partition costs a message, an arrival and a wake-up per worker on
 * the cores the job shares. Models of 256 KiB to 1 MiB in one partition on
 * one aggregator took 22-29 % less CPU per job of 600 rounds than in the
 * former rule's four (4 workers, 2 aggregators over shm), 2 MiB in two
 * 7-28 % less (docs/engine.md). */
#define ENG_PARTITION_AUTO_MIN_HOST (1u << 20)

/* The partition size for the tensors on nshards shards when none is set:
 * the model cut in 2 * nshards on one host, so that every shard holds two
 * partitions and reduces the first while the second arrives, and in
 * ENG_PARTITION_AUTO_PARTS_HOSTS * nshards when the job spans hosts; rounded
 * up to 64 bytes (whole elements of every dtype, whole cache lines) and kept
 * within [ENG_PARTITION_AUTO_MIN_HOST, ENG_PARTITION_AUTO_MAX] on one host,
 * within [ENG_PARTITION_AUTO_MIN, ENG_PARTITION_AUTO_MAX_HOSTS] across
 * hosts. */
uint64_t eng_layout_auto_partition(const eng_tensor_desc_t *tensors,
                                   uint32_t ntensors, uint32_t nshards,
                                   bool spans_hosts);

/* Lay out ntensors (copied) for nshards shards, each held by an aggregator
 * of its own (eng_layout_hold with nshards). */
strata_status_t eng_layout_build(const eng_tensor_desc_t *tensors,
                                 uint32_t ntensors, uint64_t partition_bytes,
                                 uint32_t nshards, eng_layout_t **layout_out);

/* eng_layout_build without the copy: the layout takes tensors (from
 * util_malloc), freed with it, or at once on an error. With 10^5 tensors a
 * copy of the descriptions is 27 MB of fresh pages. spare (NULL: none;
 * else [nshards]) names the shards given no partition: those of spare
 * aggregators, which hold none until they take a lost one over; not every
 * shard may be spare. */
strata_status_t eng_layout_adopt(eng_tensor_desc_t *tensors, uint32_t ntensors,
                                 uint64_t partition_bytes, uint32_t nshards,
                                 const bool *spare, eng_layout_t **layout_out);
void eng_layout_free(eng_layout_t *layout);

/* Shard s held by aggregator s mod nholders (1 <= nholders <= nshards),
 * its partitions after those of the holder's lower shards. */
strata_status_t eng_layout_hold(eng_layout_t *layout, uint32_t nholders);

/* Shard `shard` moves to aggregator `taker` (its holder was lost): its
 * partitions follow the taker's (held_index from held_nparts[taker] on) in
 * a region of the taker's own (*region_out: held_nregions[taker] before
 * the move; UINT32_MAX for a shard without partitions, which moves without
 * one), held_off from 0 in it. Every other partition keeps its holder,
 * index, region and offsets; the old holder's entries of the shard become
 * ENG_LAYOUT_MOVED (its held_nparts, the next index, stays); held_bytes,
 * the size of region 0, stays too. holders_used follows. STRATA_ERR_INVALID
 * (logged) for a shard or aggregator out of range or a shard the taker holds
 * already; nothing changes on an error. */
strata_status_t eng_layout_move(eng_layout_t *layout, uint32_t shard,
                                uint32_t taker, uint32_t *region_out);

/* Where partition p's push of `clock` lands in its region's receive slots:
 * two copies of the region, one per clock parity. */
static inline uint64_t eng_layout_slot_off(const eng_partition_t *p,
                                           int64_t clock)
{
    return (uint64_t)(clock & 1) * p->region_bytes + p->held_off;
}

/* Compare the tensors of rank `rank` with the reference (rank `ref_rank`).
 * Returns 0 when they match; otherwise writes one sentence naming the first
 * tensor that differs (or the partition size) to msg and returns -1. */
int eng_layout_compare(const eng_tensor_desc_t *ref, uint32_t nref,
                       uint64_t ref_partition_bytes, int ref_rank,
                       const eng_tensor_desc_t *got, uint32_t ngot,
                       uint64_t got_partition_bytes, int rank, char *msg,
                       size_t msg_len);

#endif /* STRATA_ENGINE_LAYOUT_H */
