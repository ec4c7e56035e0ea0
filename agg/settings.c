/* The kernels' settings (settings.def) and the parameters read from them. */
#include <string.h>

#include "agg/agg.h"
#include "util/log.h"

const util_setting_t agg_settings[AGG_SET__COUNT] = {
#define UTIL_SETTING(name, ...)                                                \
    [AGG_SET_##name] = UTIL_SETTING_ROW(name, __VA_ARGS__),
#include "agg/settings.def"
#undef UTIL_SETTING
};

strata_status_t agg_params_read(const util_settings_t *s,
                                agg_params_t *params_out)
{
    /* The choices of STRATA_SIMD, in the order of settings.def. */
    static const char *const simd[] = {"auto", "scalar", "avx2", "avx512"};
    int first = s ? util_settings_block(s, agg_settings, AGG_SET__COUNT) : -1;
    if (first < 0) {
        util_error("agg: settings without the kernels' rows (STRATA_SIMD, "
                   "STRATA_REDUCE_THREADS)");
        return STRATA_ERR_INVALID;
    }
    int64_t i = util_settings_int(s, first + AGG_SET_SIMD);
    *params_out = (agg_params_t){
        .simd = i >= 0 && i < 4 ? simd[i] : "auto",
        .reduce_threads =
            (unsigned)util_settings_int(s, first + AGG_SET_REDUCE_THREADS),
    };
    return STRATA_OK;
}
