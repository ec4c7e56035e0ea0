/* IDX files through zlib: good files load, bad headers and bodies are
 * refused with the right status; shards and minibatch sampling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "perf/train/data.h"

typedef struct fixture {
    char dir[64];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/test-train-data-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

/* Write bytes as DIR/NAME, gzip-compressed or not. */
static void write_file(const fixture_t *f, const char *name, const void *data,
                       size_t len, int gz)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", f->dir, name);
    if (gz) {
        gzFile g = gzopen(path, "wb");
        assert_non_null(g);
        assert_int_equal(gzwrite(g, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(g), Z_OK);
    } else {
        FILE *o = fopen(path, "wb");
        assert_non_null(o);
        assert_int_equal(fwrite(data, 1, len, o), len);
        assert_int_equal(fclose(o), 0);
    }
}

/* An IDX header for unsigned bytes, then the body. */
static size_t idx_bytes(uint8_t *out, unsigned ndims, const uint32_t *dims,
                        const uint8_t *body, size_t body_len)
{
    uint8_t *p = out;
    *p++ = 0;
    *p++ = 0;
    *p++ = 0x08;
    *p++ = (uint8_t)ndims;
    for (unsigned i = 0; i < ndims; i++) {
        *p++ = (uint8_t)(dims[i] >> 24);
        *p++ = (uint8_t)(dims[i] >> 16);
        *p++ = (uint8_t)(dims[i] >> 8);
        *p++ = (uint8_t)dims[i];
    }
    if (body_len)
        memcpy(p, body, body_len);
    return (size_t)(p - out) + body_len;
}

/* A valid "x" split of 5 images of 3x3 and their labels. */
static void write_split(const fixture_t *f, const char *split, int gz)
{
    uint8_t pixels[45], labels[5] = {0, 9, 3, 3, 7}, buf[128];
    for (int i = 0; i < 45; i++)
        pixels[i] = (uint8_t)(i * 5);
    char name[64];
    const char *ext = gz ? ".gz" : "";
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte%s", split, ext);
    write_file(f, name, buf,
               idx_bytes(buf, 3, (uint32_t[]){5, 3, 3}, pixels, 45), gz);
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte%s", split, ext);
    write_file(f, name, buf, idx_bytes(buf, 1, (uint32_t[]){5}, labels, 5), gz);
}

static strata_status_t read_idx(const fixture_t *f, const char *name,
                                unsigned ndims)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", f->dir, name);
    perf_idx_t idx;
    strata_status_t st = perf_idx_read(path, ndims, &idx);
    if (st == STRATA_OK)
        perf_idx_free(&idx);
    return st;
}

static void good_split_loads(void **state)
{
    fixture_t *f = *state;
    write_split(f, "x", 1);
    perf_dataset_t ds;
    assert_int_equal(perf_dataset_load(f->dir, "x", &ds), STRATA_OK);
    assert_int_equal(ds.count, 5);
    assert_int_equal(ds.dim, 9);
    assert_int_equal(ds.pixels[44], 220);
    assert_int_equal(ds.labels[1], 9);
    float x[9];
    uint8_t y;
    perf_dataset_gather(&ds, (uint32_t[]){4}, 1, x, &y);
    assert_int_equal(y, 7);
    assert_float_equal(x[8], 220.0f / 255.0f, 1e-6);
    perf_dataset_free(&ds);
}

static void bad_type_byte_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){3}, (uint8_t[]){1, 2, 3}, 3);
    buf[2] = 0x0d; /* float elements */
    write_file(f, "float.gz", buf, n, 1);
    assert_int_equal(read_idx(f, "float.gz", 1), STRATA_ERR_PROTO);
}

static void nonzero_magic_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){3}, (uint8_t[]){1, 2, 3}, 3);
    buf[0] = 0x1f;
    write_file(f, "magic.gz", buf, n, 1);
    assert_int_equal(read_idx(f, "magic.gz", 1), STRATA_ERR_PROTO);
}

static void wrong_dimension_count_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){3}, (uint8_t[]){1, 2, 3}, 3);
    write_file(f, "labels.gz", buf, n, 1);
    /* A labels file where images were expected. */
    assert_int_equal(read_idx(f, "labels.gz", 3), STRATA_ERR_PROTO);
}

static void truncated_header_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    idx_bytes(buf, 3, (uint32_t[]){2, 2, 2}, NULL, 0);
    write_file(f, "short.gz", buf, 10, 1); /* 2 of 3 dimensions */
    assert_int_equal(read_idx(f, "short.gz", 3), STRATA_ERR_PROTO);
    write_file(f, "tiny.gz", buf, 3, 1);
    assert_int_equal(read_idx(f, "tiny.gz", 3), STRATA_ERR_PROTO);
}

static void zero_dimension_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 3, (uint32_t[]){4, 0, 3}, NULL, 0);
    write_file(f, "empty.gz", buf, n, 1);
    assert_int_equal(read_idx(f, "empty.gz", 3), STRATA_ERR_PROTO);
}

static void truncated_body_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){4}, (uint8_t[]){1, 2, 3}, 3);
    write_file(f, "trunc.gz", buf, n, 1);
    assert_int_equal(read_idx(f, "trunc.gz", 1), STRATA_ERR_PROTO);
}

static void trailing_data_is_refused(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){2}, (uint8_t[]){1, 2, 3}, 3);
    write_file(f, "long.gz", buf, n, 1);
    assert_int_equal(read_idx(f, "long.gz", 1), STRATA_ERR_PROTO);
}

static void corrupt_gzip_is_an_io_error(void **state)
{
    fixture_t *f = *state;
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){8}, (uint8_t[8]){0}, 8);
    write_file(f, "ok.gz", buf, n, 1);
    char path[128];
    snprintf(path, sizeof(path), "%s/ok.gz", f->dir);
    FILE *g = fopen(path, "r+b");
    assert_non_null(g);
    fseek(g, 12, SEEK_SET); /* inside the deflate stream */
    fwrite("\xff\xff\xff\xff\xff\xff", 1, 6, g);
    fclose(g);
    assert_int_equal(read_idx(f, "ok.gz", 1), STRATA_ERR_IO);
}

static void missing_file_is_an_io_error(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(read_idx(f, "absent.gz", 1), STRATA_ERR_IO);
    perf_dataset_t ds;
    assert_int_equal(perf_dataset_load(f->dir, "absent", &ds), STRATA_ERR_IO);
}

static void label_out_of_range_is_refused(void **state)
{
    fixture_t *f = *state;
    write_split(f, "y", 1);
    uint8_t buf[64];
    size_t n =
        idx_bytes(buf, 1, (uint32_t[]){5}, (uint8_t[]){0, 1, 10, 2, 3}, 5);
    write_file(f, "y-labels-idx1-ubyte.gz", buf, n, 1);
    perf_dataset_t ds;
    assert_int_equal(perf_dataset_load(f->dir, "y", &ds), STRATA_ERR_PROTO);
}

static void image_and_label_counts_must_agree(void **state)
{
    fixture_t *f = *state;
    write_split(f, "z", 1);
    uint8_t buf[64];
    size_t n = idx_bytes(buf, 1, (uint32_t[]){4}, (uint8_t[]){0, 1, 2, 3}, 4);
    write_file(f, "z-labels-idx1-ubyte.gz", buf, n, 1);
    perf_dataset_t ds;
    assert_int_equal(perf_dataset_load(f->dir, "z", &ds), STRATA_ERR_MISMATCH);
}

static void saved_copy_round_trips_and_is_preferred(void **state)
{
    fixture_t *f = *state;
    write_split(f, "s", 1);
    perf_dataset_t ds, back;
    assert_int_equal(perf_dataset_load(f->dir, "s", &ds), STRATA_OK);
    ds.pixels[0] = 77; /* so that the copy differs from the gzip file */
    assert_int_equal(perf_dataset_save(&ds, f->dir, "s"), STRATA_OK);
    assert_int_equal(perf_dataset_load(f->dir, "s", &back), STRATA_OK);
    assert_int_equal(back.count, ds.count);
    assert_int_equal(back.dim, ds.dim);
    assert_memory_equal(back.pixels, ds.pixels, ds.count * ds.dim);
    assert_memory_equal(back.labels, ds.labels, ds.count);
    perf_dataset_free(&ds);
    perf_dataset_free(&back);
}

/* 100 samples, 10 per class, one pixel holding the sample's index. */
static perf_dataset_t synthetic(void)
{
    perf_dataset_t ds = {.count = 100, .dim = 1, .scale = 1, .shift = 0};
    ds.pixels = malloc(100);
    ds.labels = malloc(100);
    for (int i = 0; i < 100; i++) {
        ds.pixels[i] = (uint8_t)i;
        ds.labels[i] = (uint8_t)((i * 7) % 10);
    }
    return ds;
}

static void iid_shards_partition_the_set(void **state)
{
    (void)state;
    perf_dataset_t ds = synthetic();
    int seen[100] = {0};
    for (int s = 0; s < 7; s++) {
        uint32_t *idx;
        size_t n;
        assert_int_equal(perf_shard_make(&ds, 7, s, false, 42, &idx, &n),
                         STRATA_OK);
        assert_true(n == 14 || n == 15);
        for (size_t i = 0; i < n; i++)
            seen[idx[i]]++;
        free(idx);
    }
    for (int i = 0; i < 100; i++)
        assert_int_equal(seen[i], 1);
    perf_dataset_free(&ds);
}

static void noniid_shards_hold_few_classes(void **state)
{
    (void)state;
    perf_dataset_t ds = synthetic();
    for (int s = 0; s < 10; s++) {
        uint32_t *idx;
        size_t n;
        assert_int_equal(perf_shard_make(&ds, 10, s, true, 42, &idx, &n),
                         STRATA_OK);
        assert_int_equal(n, 10);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(ds.labels[idx[i]], s);
        free(idx);
    }
    uint32_t *idx;
    size_t n;
    assert_int_equal(perf_shard_make(&ds, 10, 10, true, 42, &idx, &n),
                     STRATA_ERR_INVALID);
    perf_dataset_free(&ds);
}

static void sample_takes_distinct_samples_by_seed(void **state)
{
    (void)state;
    perf_dataset_t ds = synthetic(), a, b;
    assert_int_equal(perf_dataset_sample(&ds, 30, 7, &a), STRATA_OK);
    assert_int_equal(perf_dataset_sample(&ds, 30, 7, &b), STRATA_OK);
    assert_int_equal(a.count, 30);
    int seen[100] = {0};
    for (size_t i = 0; i < a.count; i++) {
        uint8_t k = a.pixels[i]; /* the sample's index in ds */
        assert_int_equal(a.labels[i], ds.labels[k]);
        assert_int_equal(seen[k]++, 0);
        assert_int_equal(b.pixels[i], k); /* the same seed, the same set */
    }
    int first_30 = 1;
    for (int k = 0; k < 30; k++)
        first_30 &= seen[k];
    assert_false(first_30); /* a random subset, not the first ones */
    assert_int_equal(perf_dataset_sample(&ds, 101, 7, &b), STRATA_ERR_INVALID);
    assert_int_equal(perf_dataset_sample(&ds, 0, 7, &b), STRATA_ERR_INVALID);
    perf_dataset_free(&a);
    perf_dataset_free(&b);
    perf_dataset_free(&ds);
}

static void sampler_covers_each_epoch_once(void **state)
{
    (void)state;
    perf_sampler_t s;
    assert_int_equal(perf_sampler_init(&s, 10, 3), STRATA_OK);
    int seen[10] = {0};
    uint32_t batch[4];
    for (int b = 0; b < 5; b++) { /* 20 samples: two epochs */
        perf_sampler_next(&s, 4, batch);
        for (int i = 0; i < 4; i++)
            seen[batch[i]]++;
    }
    for (int i = 0; i < 10; i++)
        assert_int_equal(seen[i], 2);
    assert_int_equal(s.epoch, 1);
    perf_sampler_free(&s);
}

static void standardize_centres_the_inputs(void **state)
{
    (void)state;
    perf_dataset_t ds = synthetic();
    perf_dataset_standardize(&ds, &ds);
    double sum = 0, sq = 0;
    for (uint32_t i = 0; i < 100; i++) {
        float x;
        uint8_t y;
        perf_dataset_gather(&ds, &i, 1, &x, &y);
        sum += x;
        sq += (double)x * x;
    }
    assert_float_equal(sum / 100, 0.0, 1e-4);
    assert_float_equal(sq / 100, 1.0, 1e-4);
    perf_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(good_split_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_type_byte_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(nonzero_magic_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(wrong_dimension_count_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(truncated_header_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(zero_dimension_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(truncated_body_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(trailing_data_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(corrupt_gzip_is_an_io_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(missing_file_is_an_io_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(label_out_of_range_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(image_and_label_counts_must_agree,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(saved_copy_round_trips_and_is_preferred,
                                        setup, teardown),
        cmocka_unit_test(iid_shards_partition_the_set),
        cmocka_unit_test(noniid_shards_hold_few_classes),
        cmocka_unit_test(sample_takes_distinct_samples_by_seed),
        cmocka_unit_test(sampler_covers_each_epoch_once),
        cmocka_unit_test(standardize_centres_the_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
