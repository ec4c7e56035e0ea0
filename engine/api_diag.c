/* The public API a binding needs besides training: the text of failures,
 * the log, the effective settings. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "util/log.h"

_Static_assert((int)STRATA_LOG_ERROR == (int)UTIL_LOG_ERROR &&
                   (int)STRATA_LOG_TRACE == (int)UTIL_LOG_TRACE,
               "strata_log_level_t and util_log_level_t differ");

size_t strata_last_error(const strata_ctx_t *ctx, char *buf, size_t len)
{
    const char *text = util_log_thread_last_error();
    if (ctx && atomic_load_explicit(&((strata_ctx_t *)ctx)->fatal_text,
                                    memory_order_acquire))
        text = ctx->fatal_msg;
    if (buf && len > 0)
        snprintf(buf, len, "%s", text);
    return strlen(text);
}

/* ---- the log ---- */

static strata_log_fn eng_log_fn;

static void eng_log_forward(void *arg, util_log_level_t level, const char *line)
{
    eng_log_fn(arg, (strata_log_level_t)level, line);
}

void strata_log_set_handler(strata_log_fn fn, void *arg)
{
    /* The sink is swapped under its lock; eng_log_fn only ever changes
     * together with it, so a line in flight sees a matching pair. */
    util_log_set_sink(NULL, NULL);
    eng_log_fn = fn;
    if (fn)
        util_log_set_sink(eng_log_forward, arg);
}

void strata_log_set_level(strata_log_level_t level)
{
    if ((int)level < (int)STRATA_LOG_ERROR)
        level = STRATA_LOG_ERROR;
    if ((int)level > (int)STRATA_LOG_TRACE)
        level = STRATA_LOG_TRACE;
    util_log_set_level((util_log_level_t)level);
}

/* ---- settings ---- */

strata_status_t strata_setting(const strata_ctx_t *ctx, const char *key,
                               char *buf, size_t len, size_t *len_out)
{
    if (!ctx || !key || (len > 0 && !buf)) {
        util_error("strata_setting: ctx, key and buf must not be NULL");
        return STRATA_ERR_INVALID;
    }
    int k = eng_config_find(key);
    if (k < 0) {
        util_error("strata_setting: '%s' is not a setting (strata-config "
                   "--list names them)",
                   key);
        return STRATA_ERR_INVALID;
    }
    if (eng_config_secret((eng_cfg_key_t)k)) {
        util_error("strata_setting: %s is secret", eng_config_name(k));
        return STRATA_ERR_INVALID;
    }
    const char *value = eng_config_str(ctx->cfg, (eng_cfg_key_t)k);
    size_t need = strlen(value) + 1;
    if (len_out)
        *len_out = need;
    if (need > len)
        return STRATA_ERR_RANGE;
    memcpy(buf, value, need);
    return STRATA_OK;
}
