/*
 * Typed settings. A module lists the settings it reads as rows of a table,
 * one UTIL_SETTING(...) line each in its own .def file (agg/settings.def,
 * transport/settings.def, engine/config_keys.def); a util_settings_t holds one
 * value per row, from, in increasing priority, the row's default, the
 * key=value file named by STRATA_CONFIG, the environment (STRATA_*), or
 * util_settings_set(). Values are range-checked when they are read in; a bad
 * one is logged on its own line naming the key, the value, where it came from
 * and what was expected.
 *
 * A row: UTIL_SETTING(NAME, TYPE, DEFAULT, MIN, MAX, FLAGS, CHOICES, SYNTAX,
 *                     HELP)
 * NAME is the environment variable without its STRATA_ prefix, and the key
 * accepted in a STRATA_CONFIG file (as STRATA_NAME or lower-case name).
 * TYPE: BOOL, INT, SIZE (bytes, K/M/G suffixes), DOUBLE, ENUM (CHOICES
 * "a|b|c", read back as the index), STRING (checked by SYNTAX, a
 * util_setting_syntax_t *, when set). MIN/MAX bound INT, SIZE and DOUBLE
 * (UTIL_SETTING_NO_MAX: no bound). FLAGS: UTIL_SETTING_INF lets an INT be "inf"
 * (read back as INT64_MAX); UTIL_SETTING_AUTO lets a SIZE be "auto"
 * (read back as 0: the module chooses); UTIL_SETTING_SECRET hides the value in
 * dumps.
 */
#ifndef STRATA_UTIL_SETTINGS_H
#define STRATA_UTIL_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <strata/strata.h>

typedef enum util_setting_type {
    UTIL_SETTING_BOOL,
    UTIL_SETTING_INT,
    UTIL_SETTING_SIZE,
    UTIL_SETTING_DOUBLE,
    UTIL_SETTING_ENUM,
    UTIL_SETTING_STRING,
} util_setting_type_t;

enum {
    UTIL_SETTING_INF = 1u << 0,
    UTIL_SETTING_SECRET = 1u << 1,
    UTIL_SETTING_AUTO = 1u << 2,
};

/* An upper bound meaning "none" (read back as INT64_MAX). */
#define UTIL_SETTING_NO_MAX 1e19

/* Syntax of a STRING setting beyond "any text". */
typedef struct util_setting_syntax {
    bool (*ok)(const char *value);
    const char *expected; /* for the error message and --list */
} util_setting_syntax_t;

typedef struct util_setting {
    const char *name; /* with the STRATA_ prefix */
    util_setting_type_t type;
    const char *def;
    double min, max;
    unsigned flags;
    const char *choices;
    const util_setting_syntax_t *syntax;
    const char *help;
} util_setting_t;

/* The util_setting_t of a UTIL_SETTING(...) row. */
#define UTIL_SETTING_ROW(name, type, def, min, max, flags, choices, syntax,    \
                         help)                                                 \
    {                                                                          \
        "STRATA_" #name, UTIL_SETTING_##type, def, min, max, flags, choices,   \
            syntax, help                                                       \
    }

typedef enum util_setting_source {
    UTIL_SETTING_SRC_DEFAULT,
    UTIL_SETTING_SRC_FILE,
    UTIL_SETTING_SRC_ENV,
    UTIL_SETTING_SRC_API,
} util_setting_source_t;

/* Which STRATA_* names a load judges. */
typedef enum util_settings_scope {
    /* The rows are every setting there is: any other STRATA_* name in the
     * environment or the file is an error, with a suggestion for a typo. */
    UTIL_SETTINGS_ALL,
    /* The rows are one module's: other names belong to other modules and
     * are left alone, good or bad. */
    UTIL_SETTINGS_OWN,
} util_settings_scope_t;

typedef struct util_settings util_settings_t;

/* The defaults of rows[0..count). The rows must outlive the settings. */
strata_status_t util_settings_defaults(const util_setting_t *rows, int count,
                                       util_settings_t **settings_out);

/* Defaults, then the STRATA_CONFIG file, then the environment. Every bad
 * setting within scope is logged; then STRATA_ERR_CONFIG is returned and
 * nothing is allocated. */
strata_status_t util_settings_load(const util_setting_t *rows, int count,
                                   util_settings_scope_t scope,
                                   util_settings_t **settings_out);

void util_settings_free(util_settings_t *s);

/* Set one key (STRATA_NAME or name) from the API; checked like any other
 * source. On error the previous value is kept. */
strata_status_t util_settings_set(util_settings_t *s, const char *key,
                                  const char *value);

/* The row a key names (STRATA_NAME or name, as util_settings_set takes it),
 * or -1. */
int util_settings_key(const util_settings_t *s, const char *key);

/* Typed reads of row key. util_settings_int serves INT, SIZE, BOOL (0/1) and
 * ENUM (index into its choices); a read of the wrong type is a programming
 * error and returns 0. Strings are owned by the settings. */
int64_t util_settings_int(const util_settings_t *s, int key);
double util_settings_double(const util_settings_t *s, int key);
const char *util_settings_str(const util_settings_t *s, int key);
util_setting_source_t util_settings_source(const util_settings_t *s, int key);

/* Where rows[0..count) sit, in this order, among the rows of s: the key of
 * rows[0], or -1 if s lacks them. A module reads its own rows with it from
 * settings that combine several modules' tables. */
int util_settings_block(const util_settings_t *s, const util_setting_t *rows,
                        int count);

/* Print every setting with its effective value and where it came from; the
 * output is itself a valid STRATA_CONFIG file (secrets left out). */
void util_settings_dump(const util_settings_t *s, FILE *out);

/* Print every row with its type, default and help. */
void util_settings_list(const util_setting_t *rows, int count, FILE *out);

/* For SYNTAX checkers: s[0..n) is 1 to 9 decimal digits; p is a non-empty
 * comma-separated list of items each accepted by item(text, len). */
bool util_setting_is_uint(const char *s, size_t n);
bool util_setting_is_list(const char *p, bool (*item)(const char *, size_t));

#endif /* STRATA_UTIL_SETTINGS_H */
