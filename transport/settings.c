/* The transports' settings (settings.def), the syntax of the GID index, and
 * the parameters read from them. */
#include <stdbool.h>
#include <string.h>

#include "transport/transport.h"
#include "util/log.h"

static bool tp_setting_is_dev_index(const char *p, size_t len)
{
    const char *colon = memchr(p, ':', len);
    return colon && colon != p &&
           util_setting_is_uint(colon + 1, len - (size_t)(colon + 1 - p));
}

static bool tp_setting_gid_index_ok(const char *v)
{
    return strcmp(v, "auto") == 0 || util_setting_is_uint(v, strlen(v)) ||
           util_setting_is_list(v, tp_setting_is_dev_index);
}

const util_setting_syntax_t tp_setting_syntax_gid_index = {
    tp_setting_gid_index_ok,
    "auto, a GID index, or device:index pairs such as mlx5_0:3,mlx5_1:5"};

const util_setting_t tp_settings[TP_SET__COUNT] = {
#define UTIL_SETTING(name, ...)                                                \
    [TP_SET_##name] = UTIL_SETTING_ROW(name, __VA_ARGS__),
#include "transport/settings.def"
#undef UTIL_SETTING
};

strata_status_t tp_params_read(const util_settings_t *s, int timeout_ms,
                               tp_params_t *params_out)
{
    /* The choices of STRATA_TRANSPORT, in the order of settings.def. */
    static const char *const provider[] = {NULL, "verbs", "tcp", "shm"};
    int k = s ? util_settings_block(s, tp_settings, TP_SET__COUNT) : -1;
    if (k < 0) {
        util_error("transport: settings without the transports' rows "
                   "(STRATA_TRANSPORT ... STRATA_JOB_SECRET_FILE)");
        return STRATA_ERR_INVALID;
    }
    int64_t which = util_settings_int(s, k + TP_SET_TRANSPORT);
    *params_out = (tp_params_t){
        .timeout_ms = timeout_ms,
        .transport = which > 0 && which < 4 ? provider[which] : NULL,
        .secret = util_settings_str(s, k + TP_SET_JOB_SECRET),
        .secret_file = util_settings_str(s, k + TP_SET_JOB_SECRET_FILE),
        .tcp_crc = util_settings_int(s, k + TP_SET_TCP_CRC) != 0,
        .ifname = util_settings_str(s, k + TP_SET_IFNAME),
        .ib_device = util_settings_str(s, k + TP_SET_IB_DEVICE),
        .ib_gid_index = util_settings_str(s, k + TP_SET_IB_GID_INDEX),
        .ib_qps = (unsigned)util_settings_int(s, k + TP_SET_IB_QPS),
        .ib_tx_depth = (uint32_t)util_settings_int(s, k + TP_SET_IB_TX_DEPTH),
        .ib_rx_depth = (uint32_t)util_settings_int(s, k + TP_SET_IB_RX_DEPTH),
        .ib_inline = (uint32_t)util_settings_int(s, k + TP_SET_IB_INLINE),
    };
    return STRATA_OK;
}
