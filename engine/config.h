/*
 * The library's configuration: every setting of every module, the rows of
 * engine/config_keys.def (which includes agg/settings.def and
 * transport/settings.def), on the typed settings of util/settings.h. Values
 * come from, in increasing priority, their default, the key=value file named
 * by STRATA_CONFIG, the environment (STRATA_*), or the API (eng_config_set);
 * anything else named STRATA_* is an error.
 */
#ifndef STRATA_ENGINE_CONFIG_H
#define STRATA_ENGINE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <strata/strata.h>

#include "agg/agg.h"
#include "transport/transport.h"
#include "util/settings.h"

typedef enum eng_cfg_key {
#define UTIL_SETTING(name, ...) ENG_CFG_##name,
#include "engine/config_keys.def"
#undef UTIL_SETTING
    ENG_CFG__COUNT
} eng_cfg_key_t;

typedef enum eng_cfg_source {
    ENG_CFG_SRC_DEFAULT = UTIL_SETTING_SRC_DEFAULT,
    ENG_CFG_SRC_FILE = UTIL_SETTING_SRC_FILE,
    ENG_CFG_SRC_ENV = UTIL_SETTING_SRC_ENV,
    ENG_CFG_SRC_API = UTIL_SETTING_SRC_API,
} eng_cfg_source_t;

/* Settings over the rows of config_keys.def: the util_settings_* functions
 * apply to it too. */
typedef util_settings_t eng_config_t;

/* Defaults, then the STRATA_CONFIG file, then the environment. Every bad
 * setting is logged on its own line naming the key, the value and what was
 * expected; then STRATA_ERR_CONFIG is returned and nothing is allocated.
 * Sets the log level (STRATA_LOG). */
strata_status_t eng_config_load(eng_config_t **cfg_out);

/* Defaults only: for tests and programs that ignore the environment. */
strata_status_t eng_config_defaults(eng_config_t **cfg_out);

void eng_config_free(eng_config_t *cfg);

/* Set one key (STRATA_NAME or name) from the API; checked like any other
 * source. On error the previous value is kept. */
strata_status_t eng_config_set(eng_config_t *cfg, const char *key,
                               const char *value);

/* Typed reads: see util_settings_int() and the others. */
static inline int64_t eng_config_int(const eng_config_t *cfg, eng_cfg_key_t key)
{
    return util_settings_int(cfg, (int)key);
}

static inline double eng_config_double(const eng_config_t *cfg,
                                       eng_cfg_key_t key)
{
    return util_settings_double(cfg, (int)key);
}

static inline const char *eng_config_str(const eng_config_t *cfg,
                                         eng_cfg_key_t key)
{
    return util_settings_str(cfg, (int)key);
}

static inline eng_cfg_source_t eng_config_source(const eng_config_t *cfg,
                                                 eng_cfg_key_t key)
{
    return (eng_cfg_source_t)util_settings_source(cfg, (int)key);
}

/* The environment variable name, e.g. "STRATA_POLICY". */
const char *eng_config_name(eng_cfg_key_t key);
/* The key named name (STRATA_NAME or name, any case), or -1. */
int eng_config_find(const char *name);
/* Whether the value must not be shown (the job secret). */
bool eng_config_secret(eng_cfg_key_t key);

/* The transports' parameters: their rows, and STRATA_TIMEOUT_MS. Strings
 * point into cfg. */
strata_status_t eng_config_tp_params(const eng_config_t *cfg,
                                     tp_params_t *params_out);

/* Print every setting with its effective value and where it came from. */
void eng_config_dump(const eng_config_t *cfg, FILE *out);

/* Print every setting with its type, default and help. */
void eng_config_list(FILE *out);

#endif /* STRATA_ENGINE_CONFIG_H */
