/* The library's configuration: the rows of every module (config_keys.def) on
 * the typed settings of util/settings.c, and the engine's syntax checkers. */
#include "engine/config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"

static bool eng_cfg_host_port_ok(const char *v)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v ||
        !util_setting_is_uint(colon + 1, strlen(colon + 1)))
        return false;
    long port = strtol(colon + 1, NULL, 10);
    return port >= 1 && port <= 65535;
}

static bool eng_cfg_grouping_ok(const char *v)
{
    return strcmp(v, "auto") == 0 ||
           (strncmp(v, "manual:", 7) == 0 &&
            util_setting_is_list(v + 7, util_setting_is_uint));
}

static const util_setting_syntax_t eng_cfg_syntax_host_port = {
    eng_cfg_host_port_ok, "host:port with a port in [1, 65535]"};
static const util_setting_syntax_t eng_cfg_syntax_grouping = {
    eng_cfg_grouping_ok, "auto, or manual: followed by one group number per "
                         "worker (manual:0,0,1,1)"};

static const util_setting_t eng_cfg_rows[ENG_CFG__COUNT] = {
#define UTIL_SETTING(name, ...)                                                \
    [ENG_CFG_##name] = UTIL_SETTING_ROW(name, __VA_ARGS__),
#include "engine/config_keys.def"
#undef UTIL_SETTING
};

strata_status_t eng_config_defaults(eng_config_t **cfg_out)
{
    return util_settings_defaults(eng_cfg_rows, ENG_CFG__COUNT, cfg_out);
}

strata_status_t eng_config_load(eng_config_t **cfg_out)
{
    eng_config_t *cfg;
    strata_status_t st = util_settings_load(eng_cfg_rows, ENG_CFG__COUNT,
                                            UTIL_SETTINGS_ALL, &cfg);
    if (st)
        return st;
    util_log_set_level((util_log_level_t)eng_config_int(cfg, ENG_CFG_LOG));
    *cfg_out = cfg;
    return STRATA_OK;
}

void eng_config_free(eng_config_t *cfg)
{
    util_settings_free(cfg);
}

strata_status_t eng_config_set(eng_config_t *cfg, const char *key,
                               const char *value)
{
    strata_status_t st = util_settings_set(cfg, key, value);
    if (st == STRATA_OK && util_settings_key(cfg, key) == ENG_CFG_LOG)
        util_log_set_level((util_log_level_t)eng_config_int(cfg, ENG_CFG_LOG));
    return st;
}

const char *eng_config_name(eng_cfg_key_t key)
{
    return (unsigned)key < ENG_CFG__COUNT ? eng_cfg_rows[key].name : "?";
}

int eng_config_find(const char *name)
{
    const size_t prefix = strlen("STRATA_");
    if (strncasecmp(name, "STRATA_", prefix) == 0)
        name += prefix;
    for (int k = 0; k < ENG_CFG__COUNT; k++)
        if (strcasecmp(eng_cfg_rows[k].name + prefix, name) == 0)
            return k;
    return -1;
}

bool eng_config_secret(eng_cfg_key_t key)
{
    return (unsigned)key < ENG_CFG__COUNT &&
           (eng_cfg_rows[key].flags & UTIL_SETTING_SECRET);
}

strata_status_t eng_config_tp_params(const eng_config_t *cfg,
                                     tp_params_t *params_out)
{
    return tp_params_read(cfg, (int)eng_config_int(cfg, ENG_CFG_TIMEOUT_MS),
                          params_out);
}

void eng_config_dump(const eng_config_t *cfg, FILE *out)
{
    util_settings_dump(cfg, out);
}

void eng_config_list(FILE *out)
{
    util_settings_list(eng_cfg_rows, ENG_CFG__COUNT, out);
}
