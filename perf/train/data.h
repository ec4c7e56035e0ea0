/*
 * Fashion-MNIST (or MNIST) from IDX files, gzip-compressed as Debian's
 * dataset-fashion-mnist installs them, and the split of the training set
 * across workers.
 */
#ifndef STRATA_PERF_TRAIN_DATA_H
#define STRATA_PERF_TRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#include "perf/train/rng.h"

#define PERF_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define PERF_CLASSES 10
#define PERF_IDX_MAX_DIMS 4

/* One IDX file: big-endian header (0, 0, element type 0x08 = unsigned byte,
 * number of dimensions, each dimension as a uint32), then the elements. */
typedef struct perf_idx {
    unsigned ndims;
    uint32_t dims[PERF_IDX_MAX_DIMS];
    size_t count; /* product of dims */
    uint8_t *data;
} perf_idx_t;

/* Read path (gzip or plain) and check that it holds unsigned bytes in
 * exactly `ndims` dimensions, no more and no fewer elements than the header
 * announces. Every problem is reported naming the file. */
strata_status_t perf_idx_read(const char *path, unsigned ndims,
                              perf_idx_t *idx_out);
void perf_idx_free(perf_idx_t *idx);

typedef struct perf_dataset {
    size_t count;    /* samples */
    size_t dim;      /* pixels per sample */
    uint8_t *pixels; /* count x dim, row-major */
    uint8_t *labels; /* count, each < PERF_CLASSES */
    float scale;     /* a pixel p is fed to the model as p * scale + shift */
    float shift;
} perf_dataset_t;

/* Load DIR/SPLIT-images-idx3-ubyte[.gz] and DIR/SPLIT-labels-idx1-ubyte[.gz]
 * (SPLIT is "train" or "t10k"; the uncompressed file is preferred when both
 * exist) and check that they agree. Pixels map to [0, 1]. */
strata_status_t perf_dataset_load(const char *dir, const char *split,
                                  perf_dataset_t *ds_out);
void perf_dataset_free(perf_dataset_t *ds);

/* Write ds uncompressed as DIR/SPLIT-{images-idx3,labels-idx1}-ubyte, which
 * perf_dataset_load reads back many times faster than the gzip files. */
strata_status_t perf_dataset_save(const perf_dataset_t *ds, const char *dir,
                                  const char *split);

/* Standardise ds with the pixel mean and deviation of ref (the training
 * set): plain SGD on inputs of mean 0 and variance 1 tolerates a larger
 * learning rate. */
void perf_dataset_standardize(perf_dataset_t *ds, const perf_dataset_t *ref);

/* A new data set of samples idx[0..n) of ds, in that order. */
strata_status_t perf_dataset_subset(const perf_dataset_t *ds,
                                    const uint32_t *idx, size_t n,
                                    perf_dataset_t *out);

/* A seeded random n of the samples of ds (n <= ds->count). */
strata_status_t perf_dataset_sample(const perf_dataset_t *ds, size_t n,
                                    uint64_t seed, perf_dataset_t *out);

/* Copy samples idx[0..n) as model inputs into x_out (n x dim) and their
 * labels into y_out. */
void perf_dataset_gather(const perf_dataset_t *ds, const uint32_t *idx,
                         size_t n, float *x_out, uint8_t *y_out);

/* The sample indices of shard `index` of `shards`: a seeded permutation cut
 * into equal parts (iid), or the samples sorted by class and cut into
 * contiguous parts, so each shard holds one or two classes (non-iid, as in
 * the ESync paper). */
strata_status_t perf_shard_make(const perf_dataset_t *ds, int shards, int index,
                                bool by_class, uint64_t seed,
                                uint32_t **idx_out, size_t *count_out);

/* Minibatches drawn without replacement from samples 0..count-1, reshuffled
 * every epoch. */
typedef struct perf_sampler {
    uint32_t *order;
    size_t count;
    size_t pos;
    uint64_t epoch;
    perf_rng_t rng;
} perf_sampler_t;

strata_status_t perf_sampler_init(perf_sampler_t *s, size_t count,
                                  uint64_t seed);
/* The next n indices; crossing the end of an epoch reshuffles. */
void perf_sampler_next(perf_sampler_t *s, size_t n, uint32_t *batch_out);
void perf_sampler_free(perf_sampler_t *s);

#endif /* STRATA_PERF_TRAIN_DATA_H */
