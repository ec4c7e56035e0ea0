/*
 * Transport parameters as the engine makes them, for the transport tests:
 * the transports' own settings (tp_settings) at their defaults, then some set
 * by name, read with tp_params_read().
 */
#ifndef STRATA_TESTS_SUPPORT_TEST_TP_PARAMS_H
#define STRATA_TESTS_SUPPORT_TEST_TP_PARAMS_H

#include <stddef.h>

#include "transport/transport.h"
#include "util/settings.h"

/* kv: NULL-terminated key, value pairs (STRATA_NAME or name). The strings of
 * *params_out live in *settings_out: free it with util_settings_free() once
 * tp_open() returned. */
static inline strata_status_t test_tp_params(const char *const *kv,
                                             int timeout_ms,
                                             util_settings_t **settings_out,
                                             tp_params_t *params_out)
{
    util_settings_t *s;
    strata_status_t st = util_settings_defaults(tp_settings, TP_SET__COUNT, &s);
    if (st != STRATA_OK)
        return st;
    for (size_t i = 0; st == STRATA_OK && kv && kv[i]; i += 2)
        st = util_settings_set(s, kv[i], kv[i + 1]);
    if (st == STRATA_OK)
        st = tp_params_read(s, timeout_ms, params_out);
    if (st != STRATA_OK) {
        util_settings_free(s);
        return st;
    }
    *settings_out = s;
    return STRATA_OK;
}

#endif /* STRATA_TESTS_SUPPORT_TEST_TP_PARAMS_H */
