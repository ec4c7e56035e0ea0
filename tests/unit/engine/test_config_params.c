/* The engine's one table holds every module's rows, and the parameters the
 * engine hands agg/ and transport/ are those the modules read from their
 * own rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/config.h"
#include "tests/support/test_log.h"

static void every_module_row_is_listed(void **state)
{
    (void)state;
    eng_config_t *cfg = NULL;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    assert_int_equal(util_settings_block(cfg, agg_settings, AGG_SET__COUNT),
                     ENG_CFG_SIMD);
    assert_int_equal(util_settings_block(cfg, tp_settings, TP_SET__COUNT),
                     ENG_CFG_TRANSPORT);
    for (int k = 0; k < TP_SET__COUNT; k++)
        assert_string_equal(eng_config_name(ENG_CFG_TRANSPORT + k),
                            tp_settings[k].name);
    eng_config_free(cfg);
}

static void transport_params_follow_the_settings(void **state)
{
    (void)state;
    static const char *const kv[] = {
        "TIMEOUT_MS", "1234",      "TRANSPORT",   "SHM",          "JOB_SECRET",
        "s3",         "TCP_CRC",   "yes",         "IB_DEVICE",    "mlx5_0:1",
        "IB_QPS",     "4",         "IB_TX_DEPTH", "256",          "IB_RX_DEPTH",
        "32",         "IB_INLINE", "0",           "IB_GID_INDEX", "mlx5_0:3",
        NULL};
    eng_config_t *cfg = NULL;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    tp_params_t p;
    assert_int_equal(eng_config_tp_params(cfg, &p), STRATA_OK);
    assert_int_equal(p.timeout_ms, 30000);
    assert_null(p.transport); /* auto */
    assert_false(p.tcp_crc);
    assert_int_equal(p.ib_qps, 1);
    for (int i = 0; kv[i]; i += 2)
        assert_int_equal(eng_config_set(cfg, kv[i], kv[i + 1]), STRATA_OK);
    assert_int_equal(eng_config_tp_params(cfg, &p), STRATA_OK);
    assert_int_equal(p.timeout_ms, 1234);
    assert_string_equal(p.transport, "shm");
    assert_string_equal(p.secret, "s3");
    assert_string_equal(p.secret_file, "");
    assert_true(p.tcp_crc);
    assert_string_equal(p.ib_device, "mlx5_0:1");
    assert_string_equal(p.ib_gid_index, "mlx5_0:3");
    assert_int_equal(p.ib_qps, 4);
    assert_int_equal(p.ib_tx_depth, 256);
    assert_int_equal(p.ib_rx_depth, 32);
    assert_int_equal(p.ib_inline, 0);
    eng_config_free(cfg);
}

static void kernel_params_follow_the_settings(void **state)
{
    (void)state;
    eng_config_t *cfg = NULL;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    agg_params_t p;
    assert_int_equal(agg_params_read(cfg, &p), STRATA_OK);
    assert_string_equal(p.simd, "auto");
    assert_int_equal(p.reduce_threads, 0);
    assert_int_equal(eng_config_set(cfg, "SIMD", "Scalar"), STRATA_OK);
    assert_int_equal(eng_config_set(cfg, "REDUCE_THREADS", "3"), STRATA_OK);
    assert_int_equal(agg_params_read(cfg, &p), STRATA_OK);
    assert_string_equal(p.simd, "scalar");
    assert_int_equal(p.reduce_threads, 3);
    eng_config_free(cfg);
}

static void settings_without_a_module_rows_are_refused(void **state)
{
    (void)state;
    util_settings_t *s = NULL;
    assert_int_equal(util_settings_defaults(agg_settings, AGG_SET__COUNT, &s),
                     STRATA_OK);
    tp_params_t p;
    assert_int_equal(tp_params_read(s, 1000, &p), STRATA_ERR_INVALID);
    test_log_expect("without the transports' rows");
    assert_int_equal(tp_params_read(NULL, 1000, &p), STRATA_ERR_INVALID);
    test_log_expect("without the transports' rows");
    util_settings_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_module_row_is_listed),
        cmocka_unit_test(transport_params_follow_the_settings),
        cmocka_unit_test(kernel_params_follow_the_settings),
        cmocka_unit_test_setup_teardown(
            settings_without_a_module_rows_are_refused, test_log_setup,
            test_log_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
