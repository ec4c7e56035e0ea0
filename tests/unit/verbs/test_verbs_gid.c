/* GID selection against a fake sysfs tree, and STRATA_IB_GID_INDEX. */
#include <errno.h>
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
#include "transport/verbs/verbs_gid.h"
#include "util/log.h"

static char root[64];

static void mkdirs(const char *path)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A GID entry of dev port 1; type NULL: its type file is a directory, so
 * reading it fails (EISDIR), as reading a GID of another namespace fails
 * with EINVAL in a container. */
static void gid(const char *dev, int index, const char *value, const char *type)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "%s/ports/1/gids/%d", dev, index);
    put(rel, value);
    snprintf(rel, sizeof(rel), "%s/ports/1/gid_attrs/types/%d", dev, index);
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    unlink(path);
    rmdir(path);
    if (type)
        put(rel, type);
    else
        mkdirs(path);
}

static const char *zero = "0000:0000:0000:0000:0000:0000:0000:0000\n";
static const char *link_local = "fe80:0000:0000:0000:9c5b:49ff:fec0:d065\n";
static const char *v4 = "0000:0000:0000:0000:0000:ffff:c612:0001\n";
static const char *v6 = "2001:0db8:0000:0000:0000:0000:0000:0007\n";

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/strata-sysfs-XXXXXX");
    assert_non_null(mkdtemp(root));
    test_log_start();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    test_log_stop();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static int select_index(const char *dev, bool ethernet, int override)
{
    tp_verbs_gid_t g;
    if (tp_verbs_gid_select(root, dev, 1, ethernet, override, &g) != STRATA_OK)
        return -1;
    return g.index;
}

/* What rxe shows: link-local first, the IPv4-mapped one after it, and
 * unused entries whose type cannot be read. */
static void ipv4_roce_v2_wins(void **state)
{
    (void)state;
    gid("rxe0", 0, link_local, "RoCE v2\n");
    gid("rxe0", 1, v4, "RoCE v2\n");
    gid("rxe0", 2, zero, NULL);
    gid("rxe0", 3, zero, NULL);
    tp_verbs_gid_t g;
    assert_int_equal(tp_verbs_gid_select(root, "rxe0", 1, true, -1, &g),
                     STRATA_OK);
    assert_int_equal(g.index, 1);
    assert_true(g.ipv4);
    assert_int_equal(g.type, TP_VERBS_GID_ROCE_V2);
    char text[64];
    tp_verbs_gid_str(&g, text, sizeof(text));
    assert_string_equal(text, "::ffff:198.18.0.1");
}

/* mlx5-style table: v1 and v2 of each address; v2 IPv4 first, then v2
 * global IPv6, then v1, link-local last. */
static void preference_order(void **state)
{
    (void)state;
    gid("mlx5_0", 0, link_local, "IB/RoCE v1\n");
    gid("mlx5_0", 1, link_local, "RoCE v2\n");
    gid("mlx5_0", 2, v6, "IB/RoCE v1\n");
    gid("mlx5_0", 3, v6, "RoCE v2\n");
    gid("mlx5_0", 4, v4, "IB/RoCE v1\n");
    gid("mlx5_0", 5, v4, "RoCE v2\n");
    assert_int_equal(select_index("mlx5_0", true, -1), 5);
    gid("mlx5_0", 5, zero, "RoCE v2\n"); /* address removed */
    assert_int_equal(select_index("mlx5_0", true, -1), 3);
    gid("mlx5_0", 3, v6, NULL); /* another namespace's */
    assert_int_equal(select_index("mlx5_0", true, -1), 4);
    gid("mlx5_0", 4, zero, NULL);
    assert_int_equal(select_index("mlx5_0", true, -1), 2);
    gid("mlx5_0", 2, zero, NULL);
    assert_int_equal(select_index("mlx5_0", true, -1), 1);
}

static void unreadable_types_are_skipped(void **state)
{
    (void)state;
    gid("rxe0", 0, link_local, "RoCE v2\n");
    gid("rxe0", 1, v4, NULL);
    assert_int_equal(select_index("rxe0", true, -1), 0);
    gid("rxe0", 0, link_local, NULL);
    assert_int_equal(select_index("rxe0", true, -1), -1);
    assert_non_null(strstr(test_log.last_error, "no usable GID"));
    assert_non_null(strstr(test_log.last_error, "rxe0"));
}

static void override_is_checked(void **state)
{
    (void)state;
    gid("mlx5_0", 0, link_local, "RoCE v2\n");
    gid("mlx5_0", 1, v4, "RoCE v2\n");
    gid("mlx5_0", 2, zero, NULL);
    assert_int_equal(select_index("mlx5_0", true, 0), 0);
    assert_int_equal(select_index("mlx5_0", true, 2), -1);
    assert_non_null(strstr(test_log.last_error, "GID 2 of mlx5_0"));
    assert_int_equal(select_index("mlx5_0", true, 7), -1);
}

static void infiniband_uses_index_0(void **state)
{
    (void)state;
    put("mlx4_0/ports/1/gids/0", "fe80:0000:0000:0000:0002:c903:0010:a1b2\n");
    put("mlx4_0/ports/1/gids/1", "fe80:0000:0000:0000:0002:c903:0010:a1b3\n");
    tp_verbs_gid_t g;
    assert_int_equal(tp_verbs_gid_select(root, "mlx4_0", 1, false, -1, &g),
                     STRATA_OK);
    assert_int_equal(g.index, 0);
    assert_int_equal(g.type, TP_VERBS_GID_IB);
    assert_int_equal(select_index("mlx4_0", false, 1), 1);
}

static void missing_device(void **state)
{
    (void)state;
    assert_int_equal(select_index("nodev", true, -1), -1);
    assert_non_null(strstr(test_log.last_error, "nodev"));
}

static int override_of(const char *spec, const char *dev)
{
    int index = -2;
    if (tp_verbs_gid_override(spec, dev, &index) != STRATA_OK)
        return -3;
    return index;
}

static void gid_index_setting(void **state)
{
    (void)state;
    assert_int_equal(override_of("auto", "mlx5_0"), -1);
    assert_int_equal(override_of("", "mlx5_0"), -1);
    assert_int_equal(override_of("3", "mlx5_0"), 3);
    assert_int_equal(override_of("0", "rxe0"), 0);
    assert_int_equal(override_of("mlx5_0:3,mlx5_1:5", "mlx5_0"), 3);
    assert_int_equal(override_of("mlx5_0:3,mlx5_1:5", "mlx5_1"), 5);
    /* a device the list does not name keeps automatic selection */
    assert_int_equal(override_of("mlx5_0:3,mlx5_1:5", "mlx5_2"), -1);
    /* names are matched whole, not as prefixes */
    assert_int_equal(override_of("mlx5_1:5", "mlx5_10"), -1);
    assert_int_equal(override_of("mlx5_10:4,mlx5_1:5", "mlx5_1"), 5);
    /* device names may themselves hold digits and underscores */
    assert_int_equal(override_of("rocep1s0f0:7", "rocep1s0f0"), 7);
}

static void gid_index_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "x", "-1", "3x", "mlx5_0:", ":3", "mlx5_0:3:4", "mlx5_0:a", "5000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        test_log.last_error[0] = '\0';
        assert_int_equal(override_of(bad[i], "mlx5_0"), -3);
        assert_non_null(strstr(test_log.last_error, "STRATA_IB_GID_INDEX"));
        assert_non_null(strstr(test_log.last_error, bad[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ipv4_roce_v2_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(preference_order, setup, teardown),
        cmocka_unit_test_setup_teardown(unreadable_types_are_skipped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(override_is_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(infiniband_uses_index_0, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(missing_device, setup, teardown),
        cmocka_unit_test_setup_teardown(gid_index_setting, setup, teardown),
        cmocka_unit_test_setup_teardown(gid_index_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
