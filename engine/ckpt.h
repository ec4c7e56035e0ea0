/*
 * Checkpoints of an aggregator's shard on disk (STRATA_CHECKPOINT_DIR), from
 * which a job started again whole resumes.
 *
 * A file per shard and clock, <dir>/strata-shard-<s>-of-<n>.<clock>.ckpt:
 * a header (magic, version, shard, shards, clock, layout hash, payload
 * bytes; little-endian), the payload (the shard's model, then its optimizer
 * state), and the CRC32C of header and payload. A thread of its own writes
 * it as a temporary file, fsyncs it, renames it into place and fsyncs the
 * directory, so a file under its final name is whole unless the disk lied;
 * a shard keeps its newest ENG_CKPT_KEEP files.
 *
 * The checkpoint of clock c is complete when every shard's file of c is
 * present (but those of shards without partitions, which have no model), whole
 * and of the same layout. Every aggregator of a restarted job reads the same
 * directory (one host, or a filesystem they share) and so picks the same
 * checkpoint: the newest complete one. A file refused (torn, corrupt, another
 * layout) is named in the log, with the checkpoint used in its place.
 */
#ifndef STRATA_ENGINE_CKPT_H
#define STRATA_ENGINE_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

/* Files a shard keeps: more than two, so that shards whose newest
 * checkpoints differ (one skipped, one torn) still share one. */
#define ENG_CKPT_KEEP 3

typedef struct eng_ckpt eng_ckpt_t;

/* What a shard's checkpoint must match to be this shard's. */
typedef struct eng_ckpt_shape {
    uint32_t shard, nshards;
    uint64_t layout_hash;
    uint64_t bytes; /* payload: model and optimizer state */
    /* [nshards]: a shard of no partitions writes no file (and has none to
     * wait for) */
    const uint32_t *shard_nparts;
} eng_ckpt_shape_t;

/* Checkpoints of the shard in dir, which must be a writable directory
 * (STRATA_ERR_CONFIG, logged, naming it); a staging buffer of shape->bytes,
 * and the writing thread. Temporary files a killed writer left are
 * removed. */
strata_status_t eng_ckpt_open(const char *dir, const eng_ckpt_shape_t *shape,
                              eng_ckpt_t **ckpt_out);
/* Waits for a write under way, stops the thread. */
void eng_ckpt_close(eng_ckpt_t *ckpt);

/* The staging buffer: filled by the caller while not busy, then handed to
 * the thread by eng_ckpt_write. */
void *eng_ckpt_staging(eng_ckpt_t *ckpt);
bool eng_ckpt_busy(const eng_ckpt_t *ckpt);
/* The thread writes the staging buffer as the checkpoint of clock. Failures
 * are logged, naming the file, and leave the previous checkpoints. */
void eng_ckpt_write(eng_ckpt_t *ckpt, int64_t clock);
/* Waits until no write is under way. */
void eng_ckpt_drain(eng_ckpt_t *ckpt);

/* The newest complete checkpoint, read into the staging buffer, and its
 * clock; -1 when there is none (a shard's files without the other shards'
 * are named in a warning). STRATA_ERR_NOMEM or STRATA_ERR_IO (the
 * directory cannot be read) are logged. */
strata_status_t eng_ckpt_load(eng_ckpt_t *ckpt, int64_t *clock_out);

#endif /* STRATA_ENGINE_CKPT_H */
