/* util_file_read: a regular file within the bound is read whole; anything
 * else (a directory, a FIFO, a file too long, one missing) is an error
 * naming the file, and nothing blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/test_log.h"
#include "util/alloc.h"
#include "util/file.h"

static char dir[64];
static char path[128];

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/strata-test-file-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/f", dir);
    return test_log_setup(state);
}

static int teardown(void **state)
{
    unlink(path);
    rmdir(dir);
    return test_log_teardown(state);
}

static void write_text(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void regular_file_read_whole(void **state)
{
    (void)state;
    write_text("a=1\nb=2\n");
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(util_file_read(path, "the file", 8, false, &text, &len),
                     STRATA_OK);
    assert_string_equal(text, "a=1\nb=2\n");
    assert_int_equal(len, 8);
    util_free(text);
    write_text("");
    assert_int_equal(util_file_read(path, "the file", 8, false, &text, &len),
                     STRATA_OK);
    assert_int_equal(len, 0);
    util_free(text);
    assert_int_equal(test_log.errors, 0);
}

static void longer_than_the_bound(void **state)
{
    (void)state;
    write_text("123456789");
    char *text = NULL;
    assert_int_equal(util_file_read(path, "X=f", 8, false, &text, NULL),
                     STRATA_ERR_CONFIG);
    test_log_expect("X=f: 9 bytes, longer than 8");
}

/* /proc's files are regular with a size of 0: what is read past the size
 * fstat gave is kept, as long as it is within the bound. */
static void a_file_longer_than_its_size_said(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(util_file_read("/proc/self/status", "X=status", 1u << 16,
                                    false, &text, &len),
                     STRATA_OK);
    assert_true(len > 64 && strlen(text) == len);
    assert_non_null(strstr(text, "\nPid:"));
    util_free(text);
    assert_int_equal(
        util_file_read("/proc/self/status", "X=status", 64, false, &text, &len),
        STRATA_ERR_CONFIG);
    test_log_expect("X=status: longer than 64 bytes");
}

static void directory_refused(void **state)
{
    (void)state;
    char *text = NULL;
    assert_int_equal(util_file_read(dir, "X=dir", 64, false, &text, NULL),
                     STRATA_ERR_CONFIG);
    test_log_expect("X=dir: is a directory, not a regular file");
}

/* Without O_NONBLOCK the open waits for a writer that never comes (ctest's
 * timeout ends the test). */
static void fifo_refused_at_once(void **state)
{
    (void)state;
    assert_int_equal(mkfifo(path, 0600), 0);
    char *text = NULL;
    assert_int_equal(util_file_read(path, "X=fifo", 64, false, &text, NULL),
                     STRATA_ERR_CONFIG);
    test_log_expect("X=fifo: is a FIFO, not a regular file");
}

static void missing_file(void **state)
{
    (void)state;
    char *text = NULL;
    assert_int_equal(util_file_read(path, "X=gone", 64, true, &text, NULL),
                     STRATA_ERR_AGAIN);
    assert_int_equal(test_log.errors, 0);
    assert_int_equal(util_file_read(path, "X=gone", 64, false, &text, NULL),
                     STRATA_ERR_CONFIG);
    test_log_expect("X=gone: cannot open: No such file or directory");
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(regular_file_read_whole),
        T(longer_than_the_bound),
        T(a_file_longer_than_its_size_said),
        T(directory_refused),
        T(fifo_refused_at_once),
        T(missing_file),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
