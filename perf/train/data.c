/* IDX files through zlib, their validation, and the split across workers. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "perf/train/data.h"
#include "perf/train/log.h"

#define IDX_TYPE_UBYTE 0x08
/* Far above any image data set, far below what would overflow a size_t. */
#define IDX_MAX_ELEMENTS (1ull << 32)

/* Read exactly len bytes; returns how many were read, or -1 on a zlib error
 * (reported). */
static long long gz_read_full(gzFile f, const char *path, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        size_t chunk = len - done;
        if (chunk > INT_MAX)
            chunk = INT_MAX;
        int n = gzread(f, (char *)buf + done, (unsigned)chunk);
        if (n < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            perf_error("%s: cannot decompress: %s", path, msg);
            return -1;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (long long)done;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Check the 4-byte magic and the dimensions; fills ndims, dims and count. */
static strata_status_t idx_parse_header(gzFile f, const char *path,
                                        unsigned ndims, perf_idx_t *idx)
{
    uint8_t magic[4], raw[4 * PERF_IDX_MAX_DIMS];
    long long n = gz_read_full(f, path, magic, sizeof(magic));
    if (n < 0)
        return STRATA_ERR_IO;
    if (n < (long long)sizeof(magic)) {
        perf_error("%s: not an IDX file: only %lld bytes", path, n);
        return STRATA_ERR_PROTO;
    }
    if (magic[0] != 0 || magic[1] != 0 || magic[2] != IDX_TYPE_UBYTE ||
        magic[3] != ndims) {
        perf_error("%s: bad IDX magic %02x %02x %02x %02x: expected 00 00 "
                   "%02x %02x (unsigned bytes in %u dimensions)",
                   path, magic[0], magic[1], magic[2], magic[3], IDX_TYPE_UBYTE,
                   ndims, ndims);
        return STRATA_ERR_PROTO;
    }
    n = gz_read_full(f, path, raw, 4 * (size_t)ndims);
    if (n < 0)
        return STRATA_ERR_IO;
    if (n < 4 * (long long)ndims) {
        perf_error("%s: IDX header truncated: %u dimensions announced, "
                   "%lld bytes of them present",
                   path, ndims, n);
        return STRATA_ERR_PROTO;
    }
    idx->ndims = ndims;
    idx->count = 1;
    for (unsigned i = 0; i < ndims; i++) {
        idx->dims[i] = be32(raw + 4 * i);
        idx->count *= idx->dims[i];
        if (idx->dims[i] == 0 || idx->count > IDX_MAX_ELEMENTS) {
            perf_error("%s: bad IDX dimension %u of size %u: expected "
                       "non-empty data of at most %llu elements",
                       path, i, idx->dims[i], IDX_MAX_ELEMENTS);
            return STRATA_ERR_PROTO;
        }
    }
    return STRATA_OK;
}

/* Read the elements the header announced, and insist there is nothing
 * after them: a longer file is not the file the header describes. */
static strata_status_t idx_read_body(gzFile f, const char *path,
                                     perf_idx_t *idx)
{
    idx->data = malloc(idx->count);
    if (!idx->data) {
        perf_error("%s: cannot allocate %zu bytes", path, idx->count);
        return STRATA_ERR_NOMEM;
    }
    long long n = gz_read_full(f, path, idx->data, idx->count);
    if (n < 0)
        goto free_data;
    if ((size_t)n < idx->count) {
        perf_error("%s: truncated: the header announces %zu elements, the "
                   "file holds %lld",
                   path, idx->count, n);
        goto free_data;
    }
    uint8_t extra;
    n = gz_read_full(f, path, &extra, 1);
    if (n != 0) {
        if (n > 0)
            perf_error("%s: trailing data after the %zu elements the header "
                       "announces",
                       path, idx->count);
        goto free_data;
    }
    return STRATA_OK;

free_data:
    free(idx->data);
    idx->data = NULL;
    return n < 0 ? STRATA_ERR_IO : STRATA_ERR_PROTO;
}

strata_status_t perf_idx_read(const char *path, unsigned ndims,
                              perf_idx_t *idx_out)
{
    if (ndims == 0 || ndims > PERF_IDX_MAX_DIMS) {
        perf_error("%s: cannot read IDX files of %u dimensions", path, ndims);
        return STRATA_ERR_INVALID;
    }
    gzFile f = gzopen(path, "rb");
    if (!f) {
        perf_error("%s: cannot open: %s", path,
                   errno ? strerror(errno) : "out of memory");
        return STRATA_ERR_IO;
    }
    perf_idx_t idx = {0};
    strata_status_t st = idx_parse_header(f, path, ndims, &idx);
    if (st == STRATA_OK)
        st = idx_read_body(f, path, &idx);
    gzclose(f);
    if (st == STRATA_OK)
        *idx_out = idx;
    return st;
}

void perf_idx_free(perf_idx_t *idx)
{
    free(idx->data);
    idx->data = NULL;
}

static strata_status_t check_labels(const char *path, const perf_idx_t *lab)
{
    for (size_t i = 0; i < lab->count; i++) {
        if (lab->data[i] >= PERF_CLASSES) {
            perf_error("%s: label %u of sample %zu is out of range: expected "
                       "0..%d",
                       path, lab->data[i], i, PERF_CLASSES - 1);
            return STRATA_ERR_PROTO;
        }
    }
    return STRATA_OK;
}

/* DIR/SPLIT-KIND-ubyte if it exists (a cache written by perf_dataset_save),
 * else the gzip file. */
static void idx_path(const char *dir, const char *split, const char *kind,
                     char *path, size_t size)
{
    snprintf(path, size, "%s/%s-%s-ubyte", dir, split, kind);
    if (access(path, R_OK) != 0)
        snprintf(path, size, "%s/%s-%s-ubyte.gz", dir, split, kind);
}

strata_status_t perf_dataset_load(const char *dir, const char *split,
                                  perf_dataset_t *ds_out)
{
    char ipath[4096], lpath[4096];
    idx_path(dir, split, "images-idx3", ipath, sizeof(ipath));
    idx_path(dir, split, "labels-idx1", lpath, sizeof(lpath));
    perf_idx_t img, lab;
    strata_status_t st = perf_idx_read(ipath, 3, &img);
    if (st != STRATA_OK)
        return st;
    st = perf_idx_read(lpath, 1, &lab);
    if (st != STRATA_OK)
        goto free_img;
    if (lab.dims[0] != img.dims[0]) {
        perf_error("%s holds %u images but %s holds %u labels", ipath,
                   img.dims[0], lpath, lab.dims[0]);
        st = STRATA_ERR_MISMATCH;
        goto free_lab;
    }
    st = check_labels(lpath, &lab);
    if (st != STRATA_OK)
        goto free_lab;
    ds_out->count = img.dims[0];
    ds_out->dim = (size_t)img.dims[1] * img.dims[2];
    ds_out->pixels = img.data;
    ds_out->labels = lab.data;
    ds_out->scale = 1.0f / 255.0f;
    ds_out->shift = 0.0f;
    return STRATA_OK;

free_lab:
    perf_idx_free(&lab);
free_img:
    perf_idx_free(&img);
    return st;
}

void perf_dataset_free(perf_dataset_t *ds)
{
    free(ds->pixels);
    free(ds->labels);
    ds->pixels = ds->labels = NULL;
}

static strata_status_t idx_write(const char *path, const uint8_t *data,
                                 unsigned ndims, const uint32_t *dims)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perf_error("%s: cannot create: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    uint8_t head[4 + 4 * PERF_IDX_MAX_DIMS] = {0, 0, IDX_TYPE_UBYTE,
                                               (uint8_t)ndims};
    size_t count = 1;
    for (unsigned i = 0; i < ndims; i++) {
        for (int b = 0; b < 4; b++)
            head[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
        count *= dims[i];
    }
    size_t head_len = 4 + 4 * (size_t)ndims;
    int ok = fwrite(head, 1, head_len, f) == head_len &&
             fwrite(data, 1, count, f) == count;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok) {
        perf_error("%s: cannot write: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

strata_status_t perf_dataset_save(const perf_dataset_t *ds, const char *dir,
                                  const char *split)
{
    char path[4096];
    /* Square images, as the IDX file stores rows and columns. */
    uint32_t side = 1;
    while ((size_t)(side + 1) * (side + 1) <= ds->dim)
        side++;
    if ((size_t)side * side != ds->dim || ds->count > UINT32_MAX) {
        perf_error("cannot save %zu samples of %zu pixels as square images",
                   ds->count, ds->dim);
        return STRATA_ERR_INVALID;
    }
    uint32_t idims[3] = {(uint32_t)ds->count, side, side};
    snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte", dir, split);
    strata_status_t st = idx_write(path, ds->pixels, 3, idims);
    if (st != STRATA_OK)
        return st;
    snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte", dir, split);
    return idx_write(path, ds->labels, 1, idims);
}

void perf_dataset_standardize(perf_dataset_t *ds, const perf_dataset_t *ref)
{
    size_t n = ref->count * ref->dim;
    uint64_t hist[256] = {0};
    for (size_t i = 0; i < n; i++)
        hist[ref->pixels[i]]++;
    double sum = 0.0, sq = 0.0;
    for (int v = 0; v < 256; v++) {
        sum += (double)hist[v] * v;
        sq += (double)hist[v] * v * v;
    }
    double mean = sum / (double)n;
    double var = sq / (double)n - mean * mean;
    double sd = var > 0.0 ? sqrt(var) : 1.0;
    ds->scale = (float)(1.0 / sd);
    ds->shift = (float)(-mean / sd);
}

strata_status_t perf_dataset_subset(const perf_dataset_t *ds,
                                    const uint32_t *idx, size_t n,
                                    perf_dataset_t *out)
{
    perf_dataset_t sub = *ds;
    sub.count = n;
    sub.pixels = malloc(n * ds->dim + 1);
    sub.labels = malloc(n + 1);
    if (!sub.pixels || !sub.labels) {
        perf_dataset_free(&sub);
        perf_error("cannot allocate %zu samples", n);
        return STRATA_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(sub.pixels + i * ds->dim, ds->pixels + (size_t)idx[i] * ds->dim,
               ds->dim);
        sub.labels[i] = ds->labels[idx[i]];
    }
    *out = sub;
    return STRATA_OK;
}

void perf_dataset_gather(const perf_dataset_t *ds, const uint32_t *idx,
                         size_t n, float *x_out, uint8_t *y_out)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = ds->pixels + (size_t)idx[i] * ds->dim;
        float *dst = x_out + i * ds->dim;
        for (size_t j = 0; j < ds->dim; j++)
            dst[j] = (float)src[j] * ds->scale + ds->shift;
        y_out[i] = ds->labels[idx[i]];
    }
}

static void shuffle(uint32_t *a, size_t n, perf_rng_t *rng)
{
    for (size_t i = n; i > 1; i--) {
        uint32_t j = perf_rng_below(rng, (uint32_t)i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* A seeded permutation of 0..n-1, in memory the caller frees. */
static uint32_t *permutation(size_t n, uint64_t seed)
{
    uint32_t *all = malloc(n * sizeof(*all));
    if (!all) {
        perf_error("cannot allocate the index of %zu samples", n);
        return NULL;
    }
    perf_rng_t rng;
    perf_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        all[i] = (uint32_t)i;
    shuffle(all, n, &rng);
    return all;
}

strata_status_t perf_dataset_sample(const perf_dataset_t *ds, size_t n,
                                    uint64_t seed, perf_dataset_t *out)
{
    if (n == 0 || n > ds->count) {
        perf_error("cannot take %zu samples from %zu", n, ds->count);
        return STRATA_ERR_INVALID;
    }
    uint32_t *all = permutation(ds->count, seed);
    if (!all)
        return STRATA_ERR_NOMEM;
    strata_status_t st = perf_dataset_subset(ds, all, n, out);
    free(all);
    return st;
}

/* All indices in class order, stable inside a class (counting sort). */
static void order_by_class(const perf_dataset_t *ds, uint32_t *all)
{
    size_t start[PERF_CLASSES + 1] = {0};
    for (size_t i = 0; i < ds->count; i++)
        start[ds->labels[i] + 1]++;
    for (int c = 0; c < PERF_CLASSES; c++)
        start[c + 1] += start[c];
    for (size_t i = 0; i < ds->count; i++)
        all[start[ds->labels[i]]++] = (uint32_t)i;
}

strata_status_t perf_shard_make(const perf_dataset_t *ds, int shards, int index,
                                bool by_class, uint64_t seed,
                                uint32_t **idx_out, size_t *count_out)
{
    if (shards < 1 || index < 0 || index >= shards ||
        (size_t)shards > ds->count) {
        perf_error("cannot take shard %d of %d from %zu samples", index, shards,
                   ds->count);
        return STRATA_ERR_INVALID;
    }
    uint32_t *all = permutation(ds->count, seed);
    if (!all)
        return STRATA_ERR_NOMEM;
    if (by_class)
        order_by_class(ds, all);
    size_t lo = ds->count * (size_t)index / (size_t)shards;
    size_t hi = ds->count * (size_t)(index + 1) / (size_t)shards;
    memmove(all, all + lo, (hi - lo) * sizeof(*all));
    uint32_t *shard = realloc(all, (hi - lo) * sizeof(*all));
    *idx_out = shard ? shard : all; /* shrinking cannot lose the data */
    *count_out = hi - lo;
    return STRATA_OK;
}

strata_status_t perf_sampler_init(perf_sampler_t *s, size_t count,
                                  uint64_t seed)
{
    if (count == 0 || count > UINT32_MAX) {
        perf_error("cannot sample minibatches from %zu samples", count);
        return STRATA_ERR_INVALID;
    }
    s->order = malloc(count * sizeof(*s->order));
    if (!s->order) {
        perf_error("cannot allocate the order of %zu samples", count);
        return STRATA_ERR_NOMEM;
    }
    for (size_t i = 0; i < count; i++)
        s->order[i] = (uint32_t)i;
    s->count = count;
    s->pos = 0;
    s->epoch = 0;
    perf_rng_seed(&s->rng, seed);
    shuffle(s->order, s->count, &s->rng);
    return STRATA_OK;
}

void perf_sampler_next(perf_sampler_t *s, size_t n, uint32_t *batch_out)
{
    for (size_t i = 0; i < n; i++) {
        if (s->pos == s->count) {
            shuffle(s->order, s->count, &s->rng);
            s->pos = 0;
            s->epoch++;
        }
        batch_out[i] = s->order[s->pos++];
    }
}

void perf_sampler_free(perf_sampler_t *s)
{
    free(s->order);
    s->order = NULL;
}
