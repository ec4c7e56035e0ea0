/*
 * Configuration: every setting is typed, range-checked and comes from, in
 * increasing priority, its default, the key=value file named by STRATA_CONFIG,
 * the environment (STRATA_*), or the API (eng_config_set). The settings are
 * listed in config_keys.def; anything else named STRATA_* is an error.
 */
#ifndef STRATA_ENGINE_CONFIG_H
#define STRATA_ENGINE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <strata/strata.h>

typedef enum eng_cfg_key {
#define ENG_CFG(name, ...) ENG_CFG_##name,
#include "engine/config_keys.def"
#undef ENG_CFG
    ENG_CFG__COUNT
} eng_cfg_key_t;

typedef enum eng_cfg_source {
    ENG_CFG_SRC_DEFAULT,
    ENG_CFG_SRC_FILE,
    ENG_CFG_SRC_ENV,
    ENG_CFG_SRC_API,
} eng_cfg_source_t;

typedef struct eng_config eng_config_t;

/* Defaults, then the STRATA_CONFIG file, then the environment. Every bad
 * setting is logged on its own line naming the key, the value and what was
 * expected; then STRATA_ERR_CONFIG is returned and nothing is allocated. */
strata_status_t eng_config_load(eng_config_t **cfg_out);

/* Defaults only: for tests and programs that ignore the environment. */
strata_status_t eng_config_defaults(eng_config_t **cfg_out);

void eng_config_free(eng_config_t *cfg);

/* Set one key (STRATA_NAME or name) from the API; checked like any other
 * source. On error the previous value is kept. */
strata_status_t eng_config_set(eng_config_t *cfg, const char *key,
                               const char *value);

/* Typed reads. eng_config_int serves INT, SIZE, BOOL (0/1) and ENUM (index
 * into its choices); a read of the wrong type is a programming error and
 * returns 0. Strings are owned by the config. */
int64_t eng_config_int(const eng_config_t *cfg, eng_cfg_key_t key);
double eng_config_double(const eng_config_t *cfg, eng_cfg_key_t key);
const char *eng_config_str(const eng_config_t *cfg, eng_cfg_key_t key);
eng_cfg_source_t eng_config_source(const eng_config_t *cfg, eng_cfg_key_t key);

/* The environment variable name, e.g. "STRATA_POLICY". */
const char *eng_config_name(eng_cfg_key_t key);
/* The key named name (STRATA_NAME or name, any case), or -1. */
int eng_config_find(const char *name);
/* Whether the value must not be shown (the job secret). */
bool eng_config_secret(eng_cfg_key_t key);

/* Print every setting with its effective value and where it came from. */
void eng_config_dump(const eng_config_t *cfg, FILE *out);

/* Print every setting with its type, default and help. */
void eng_config_list(FILE *out);

#endif /* STRATA_ENGINE_CONFIG_H */
