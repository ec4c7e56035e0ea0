/* Typed configuration from defaults, a key=value file and the environment. */
#include "engine/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/alloc.h"
#include "util/log.h"
#include "util/parse.h"

extern char **environ;

#define ENG_CFG_PREFIX "STRATA_"
#define ENG_CFG_VALUE_MAX 4096

enum { F_INF = 1u << 0, F_SECRET = 1u << 1 };

/* An upper bound meaning "none" (read back as INT64_MAX). */
#define NO_MAX 1e19

typedef enum eng_cfg_type {
    BOOL,
    INT,
    SIZE,
    DOUBLE,
    ENUM,
    STRING,
} eng_cfg_type_t;

/* Syntax of a STRING setting beyond "any text". */
typedef struct eng_cfg_syntax {
    bool (*ok)(const char *value);
    const char *expected;
} eng_cfg_syntax_t;

typedef struct eng_cfg_spec {
    const char *name; /* with the STRATA_ prefix */
    eng_cfg_type_t type;
    const char *def;
    double min, max;
    unsigned flags;
    const char *choices;
    const eng_cfg_syntax_t *syntax;
    const char *help;
} eng_cfg_spec_t;

typedef struct eng_cfg_value {
    char *raw; /* the text as given, trimmed */
    int64_t i;
    double d;
    eng_cfg_source_t src;
} eng_cfg_value_t;

struct eng_config {
    eng_cfg_value_t v[ENG_CFG__COUNT];
    char *file; /* STRATA_CONFIG as read, for the dump */
};

/* ---- validators of STRING settings ---- */

static bool eng_cfg_is_uint(const char *s, size_t n)
{
    if (n == 0 || n > 9)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* "p" holds n comma-separated items, each accepted by item(). */
static bool eng_cfg_is_list(const char *p, bool (*item)(const char *, size_t))
{
    if (*p == '\0')
        return false;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (!item(p, len))
            return false;
        if (p[len] == '\0')
            return true;
        p += len + 1;
    }
}

static bool eng_cfg_is_dev_index(const char *p, size_t len)
{
    const char *colon = memchr(p, ':', len);
    return colon && colon != p &&
           eng_cfg_is_uint(colon + 1, len - (size_t)(colon + 1 - p));
}

static bool eng_cfg_gid_index_ok(const char *v)
{
    return strcmp(v, "auto") == 0 || eng_cfg_is_uint(v, strlen(v)) ||
           eng_cfg_is_list(v, eng_cfg_is_dev_index);
}

static bool eng_cfg_host_port_ok(const char *v)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v || !eng_cfg_is_uint(colon + 1, strlen(colon + 1)))
        return false;
    long port = strtol(colon + 1, NULL, 10);
    return port >= 1 && port <= 65535;
}

static bool eng_cfg_grouping_ok(const char *v)
{
    return strcmp(v, "auto") == 0 || (strncmp(v, "manual:", 7) == 0 &&
                                      eng_cfg_is_list(v + 7, eng_cfg_is_uint));
}

static const eng_cfg_syntax_t eng_cfg_syntax_gid_index = {
    eng_cfg_gid_index_ok,
    "auto, a GID index, or device:index pairs such as mlx5_0:3,mlx5_1:5"};
static const eng_cfg_syntax_t eng_cfg_syntax_host_port = {
    eng_cfg_host_port_ok, "host:port with a port in [1, 65535]"};
static const eng_cfg_syntax_t eng_cfg_syntax_grouping = {
    eng_cfg_grouping_ok, "auto, or manual: followed by one group number per "
                         "worker (manual:0,0,1,1)"};

static const eng_cfg_spec_t eng_cfg_specs[ENG_CFG__COUNT] = {
#define ENG_CFG(name, type, def, min, max, flags, choices, syntax, help)       \
    [ENG_CFG_##name] = {ENG_CFG_PREFIX #name,                                  \
                        type,                                                  \
                        def,                                                   \
                        min,                                                   \
                        max,                                                   \
                        flags,                                                 \
                        choices,                                               \
                        syntax,                                                \
                        help},
#include "engine/config_keys.def"
#undef ENG_CFG
};

static const char *const eng_cfg_source_names[] = {"default", "file",
                                                   "environment", "api"};

/* ---- parsing one value ---- */

static int64_t eng_cfg_limit(double x)
{
    if (x >= 9.2e18)
        return INT64_MAX;
    if (x <= -9.2e18)
        return INT64_MIN;
    return (int64_t)x;
}

static bool eng_cfg_parse_int(const eng_cfg_spec_t *spec, const char *s,
                              int64_t *out)
{
    if ((spec->flags & F_INF) &&
        (strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0 ||
         strcasecmp(s, "unbounded") == 0)) {
        *out = INT64_MAX;
        return true;
    }
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return false;
    *out = n;
    return true;
}

static int eng_cfg_choice(const char *choices, const char *s)
{
    size_t slen = strlen(s);
    int index = 0;
    for (const char *p = choices; *p; index++) {
        size_t len = strcspn(p, "|");
        if (len == slen && strncasecmp(p, s, len) == 0)
            return index;
        p += len + (p[len] == '|');
    }
    return -1;
}

/* Describe what a setting accepts, for error messages and --list. */
static void eng_cfg_expected(const eng_cfg_spec_t *spec, char *buf, size_t cap)
{
    int64_t lo = eng_cfg_limit(spec->min), hi = eng_cfg_limit(spec->max);
    switch (spec->type) {
    case BOOL:
        snprintf(buf, cap, "a boolean (1, 0, true, false, yes, no, on, off)");
        break;
    case INT:
        if (hi == INT64_MAX)
            snprintf(buf, cap, "an integer >= %lld%s", (long long)lo,
                     spec->flags & F_INF ? ", or inf" : "");
        else
            snprintf(buf, cap, "an integer in [%lld, %lld]", (long long)lo,
                     (long long)hi);
        break;
    case SIZE:
        snprintf(buf, cap, "a size in bytes in [%lld, %lld] (suffix K, M, G)",
                 (long long)lo, (long long)hi);
        break;
    case DOUBLE:
        snprintf(buf, cap, "a number in [%g, %g]", spec->min, spec->max);
        break;
    case ENUM:
        snprintf(buf, cap, "one of %s", spec->choices);
        break;
    case STRING:
        snprintf(buf, cap, "%s",
                 spec->syntax ? spec->syntax->expected : "any text");
        break;
    }
}

/* Parse and check value for spec; on failure return false with why set. */
static bool eng_cfg_parse(const eng_cfg_spec_t *spec, const char *s,
                          eng_cfg_value_t *out, char *why, size_t whycap)
{
    int64_t i = 0;
    double d = 0;
    bool ok = true;
    switch (spec->type) {
    case BOOL: {
        int b = eng_cfg_choice("0|1|false|true|no|yes|off|on", s);
        ok = b >= 0;
        i = b & 1;
        break;
    }
    case INT:
    case SIZE: {
        uint64_t bytes = 0; /* util_parse_size keeps it <= INT64_MAX */
        ok = spec->type == INT ? eng_cfg_parse_int(spec, s, &i)
                               : util_parse_size(s, &bytes);
        if (spec->type == SIZE)
            i = (int64_t)bytes;
        ok = ok && i >= eng_cfg_limit(spec->min) &&
             i <= eng_cfg_limit(spec->max);
        break;
    }
    case DOUBLE: {
        char *end;
        errno = 0;
        d = strtod(s, &end);
        ok = !errno && end != s && *end == '\0' && isfinite(d) &&
             d >= spec->min && d <= spec->max;
        break;
    }
    case ENUM:
        i = eng_cfg_choice(spec->choices, s);
        ok = i >= 0;
        break;
    case STRING:
        ok = !spec->syntax || *s == '\0' || spec->syntax->ok(s);
        break;
    }
    if (!ok) {
        eng_cfg_expected(spec, why, whycap);
        return false;
    }
    out->i = i;
    out->d = d;
    return true;
}

/* ---- keys ---- */

static int eng_cfg_lookup(const char *name)
{
    for (int k = 0; k < ENG_CFG__COUNT; k++)
        if (strcmp(eng_cfg_specs[k].name, name) == 0)
            return k;
    return -1;
}

/* Levenshtein distance, capped: suggestions are for typos only. */
static size_t eng_cfg_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (a[i - 1] != b[j - 1]);
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

static void eng_cfg_report_unknown(const char *name, const char *value,
                                   const char *where)
{
    /* Suggest only near misses: at most two edits, and fewer than half the
     * name after the prefix. */
    const char *best = NULL;
    size_t best_d = 3;
    size_t tail = strlen(name) > 7 ? strlen(name) - 7 : 0;
    for (int k = 0; k < ENG_CFG__COUNT; k++) {
        size_t d = eng_cfg_distance(name, eng_cfg_specs[k].name);
        if (d < best_d && 2 * d < tail) {
            best_d = d;
            best = eng_cfg_specs[k].name;
        }
    }
    util_error("config: %s=%s (%s): unknown setting%s%s%s; expected one of the "
               "settings listed by 'strata-config --list'",
               name, value, where, best ? " (did you mean " : "",
               best ? best : "", best ? "?)" : "");
}

/* Normalise a file key: "STRATA_FOO" as is, "foo" to "STRATA_FOO". */
static bool eng_cfg_key_name(const char *key, char *buf, size_t cap)
{
    if (strncmp(key, ENG_CFG_PREFIX, strlen(ENG_CFG_PREFIX)) == 0)
        return (size_t)snprintf(buf, cap, "%s", key) < cap;
    size_t n = (size_t)snprintf(buf, cap, ENG_CFG_PREFIX "%s", key);
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    return n < cap;
}

static strata_status_t eng_cfg_assign(eng_config_t *cfg, const char *name,
                                      const char *value, eng_cfg_source_t src,
                                      const char *where)
{
    int k = eng_cfg_lookup(name);
    if (k < 0) {
        eng_cfg_report_unknown(name, value, where);
        return STRATA_ERR_CONFIG;
    }
    const eng_cfg_spec_t *spec = &eng_cfg_specs[k];
    eng_cfg_value_t parsed = {0};
    char why[256];
    if (strlen(value) >= ENG_CFG_VALUE_MAX) {
        util_error("config: %s (%s): value of %zu bytes; expected at most %d",
                   name, where, strlen(value), ENG_CFG_VALUE_MAX - 1);
        return STRATA_ERR_CONFIG;
    }
    if (!eng_cfg_parse(spec, value, &parsed, why, sizeof(why))) {
        util_error("config: %s=%s (%s): expected %s", name,
                   spec->flags & F_SECRET ? "<hidden>" : value, where, why);
        return STRATA_ERR_CONFIG;
    }
    parsed.raw = util_strdup(value);
    if (!parsed.raw)
        return STRATA_ERR_NOMEM;
    parsed.src = src;
    util_free(cfg->v[k].raw);
    cfg->v[k] = parsed;
    return STRATA_OK;
}

static char *eng_cfg_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static strata_status_t eng_cfg_read_file(eng_config_t *cfg, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        util_error("config: STRATA_CONFIG=%s: cannot open: %s; expected a "
                   "readable key=value file",
                   path, strerror(errno));
        return STRATA_ERR_CONFIG;
    }
    strata_status_t st = STRATA_OK;
    char *line = NULL;
    size_t cap = 0;
    for (unsigned lineno = 1; getline(&line, &cap, f) >= 0; lineno++) {
        char where[512];
        snprintf(where, sizeof(where), "file %s:%u", path, lineno);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *text = eng_cfg_trim(line);
        if (*text == '\0')
            continue;
        char *eq = strchr(text, '=');
        char name[128];
        if (!eq) {
            util_error("config: %s: '%s': expected key=value", where, text);
            st = STRATA_ERR_CONFIG;
            continue;
        }
        *eq = '\0';
        char *key = eng_cfg_trim(text), *value = eng_cfg_trim(eq + 1);
        if (!eng_cfg_key_name(key, name, sizeof(name)) ||
            strcmp(name, "STRATA_CONFIG") == 0) {
            util_error("config: %s: key '%s' is not allowed in a file", where,
                       key);
            st = STRATA_ERR_CONFIG;
            continue;
        }
        if (eng_cfg_assign(cfg, name, value, ENG_CFG_SRC_FILE, where))
            st = STRATA_ERR_CONFIG;
    }
    free(line); /* allocated by getline */
    fclose(f);
    return st;
}

static strata_status_t eng_cfg_read_env(eng_config_t *cfg)
{
    strata_status_t st = STRATA_OK;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, ENG_CFG_PREFIX, strlen(ENG_CFG_PREFIX)) != 0 ||
            strncmp(*e, STRATA_EXT_PREFIX, strlen(STRATA_EXT_PREFIX)) == 0)
            continue; /* not ours, or a binding's own setting */
        const char *eq = strchr(*e, '=');
        char name[128];
        if (!eq || (size_t)(eq - *e) >= sizeof(name)) {
            util_error("config: %.*s...: unknown setting; expected one of "
                       "the settings listed by 'strata-config --list'",
                       64, *e);
            st = STRATA_ERR_CONFIG;
            continue;
        }
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        if (eng_cfg_assign(cfg, name, eq + 1, ENG_CFG_SRC_ENV, "environment"))
            st = STRATA_ERR_CONFIG;
    }
    return st;
}

/* ---- public functions ---- */

strata_status_t eng_config_defaults(eng_config_t **cfg_out)
{
    eng_config_t *cfg = util_calloc(1, sizeof(*cfg));
    if (!cfg)
        return STRATA_ERR_NOMEM;
    for (int k = 0; k < ENG_CFG__COUNT; k++) {
        if (eng_cfg_assign(cfg, eng_cfg_specs[k].name, eng_cfg_specs[k].def,
                           ENG_CFG_SRC_DEFAULT, "default")) {
            eng_config_free(cfg); /* a bad default is a bug in the table */
            return STRATA_ERR_CONFIG;
        }
    }
    *cfg_out = cfg;
    return STRATA_OK;
}

strata_status_t eng_config_load(eng_config_t **cfg_out)
{
    eng_config_t *cfg;
    strata_status_t st = eng_config_defaults(&cfg);
    if (st)
        return st;

    const char *path = getenv("STRATA_CONFIG");
    if (path && *path) {
        cfg->file = util_strdup(path);
        if (!cfg->file) {
            st = STRATA_ERR_NOMEM;
            goto free_cfg;
        }
        st = eng_cfg_read_file(cfg, path);
    }
    /* The environment is read even after a bad file, to report every error. */
    strata_status_t env_st = eng_cfg_read_env(cfg);
    if (st || env_st) {
        st = st ? st : env_st;
        goto free_cfg;
    }
    util_log_set_level((util_log_level_t)cfg->v[ENG_CFG_LOG].i);
    *cfg_out = cfg;
    return STRATA_OK;

free_cfg:
    eng_config_free(cfg);
    return st;
}

void eng_config_free(eng_config_t *cfg)
{
    if (!cfg)
        return;
    for (int k = 0; k < ENG_CFG__COUNT; k++)
        util_free(cfg->v[k].raw);
    util_free(cfg->file);
    util_free(cfg);
}

strata_status_t eng_config_set(eng_config_t *cfg, const char *key,
                               const char *value)
{
    char name[128];
    if (!cfg || !key || !value) {
        util_error("config: eng_config_set: NULL %s", !cfg   ? "config"
                                                      : !key ? "key"
                                                             : "value");
        return STRATA_ERR_INVALID;
    }
    if (!eng_cfg_key_name(key, name, sizeof(name))) {
        util_error("config: key '%.64s...' is too long", key);
        return STRATA_ERR_CONFIG;
    }
    strata_status_t st =
        eng_cfg_assign(cfg, name, value, ENG_CFG_SRC_API, "api");
    if (!st && eng_cfg_lookup(name) == ENG_CFG_LOG)
        util_log_set_level((util_log_level_t)cfg->v[ENG_CFG_LOG].i);
    return st;
}

static bool eng_cfg_is(eng_cfg_key_t key, eng_cfg_type_t a, eng_cfg_type_t b)
{
    return (unsigned)key < ENG_CFG__COUNT &&
           (eng_cfg_specs[key].type == a || eng_cfg_specs[key].type == b);
}

int64_t eng_config_int(const eng_config_t *cfg, eng_cfg_key_t key)
{
    if (eng_cfg_is(key, INT, SIZE) || eng_cfg_is(key, BOOL, ENUM))
        return cfg->v[key].i;
    return 0;
}

double eng_config_double(const eng_config_t *cfg, eng_cfg_key_t key)
{
    return eng_cfg_is(key, DOUBLE, DOUBLE) ? cfg->v[key].d : 0.0;
}

const char *eng_config_str(const eng_config_t *cfg, eng_cfg_key_t key)
{
    return (unsigned)key < ENG_CFG__COUNT ? cfg->v[key].raw : "";
}

eng_cfg_source_t eng_config_source(const eng_config_t *cfg, eng_cfg_key_t key)
{
    return (unsigned)key < ENG_CFG__COUNT ? cfg->v[key].src
                                          : ENG_CFG_SRC_DEFAULT;
}

const char *eng_config_name(eng_cfg_key_t key)
{
    return (unsigned)key < ENG_CFG__COUNT ? eng_cfg_specs[key].name : "?";
}

int eng_config_find(const char *name)
{
    if (strncasecmp(name, ENG_CFG_PREFIX, strlen(ENG_CFG_PREFIX)) == 0)
        name += strlen(ENG_CFG_PREFIX);
    for (int k = 0; k < ENG_CFG__COUNT; k++)
        if (strcasecmp(eng_cfg_specs[k].name + strlen(ENG_CFG_PREFIX), name) ==
            0)
            return k;
    return -1;
}

bool eng_config_secret(eng_cfg_key_t key)
{
    return (unsigned)key < ENG_CFG__COUNT &&
           (eng_cfg_specs[key].flags & F_SECRET);
}

/* The dump is itself a valid STRATA_CONFIG file (secrets left out). */
void eng_config_dump(const eng_config_t *cfg, FILE *out)
{
    for (int k = 0; k < ENG_CFG__COUNT; k++) {
        const eng_cfg_spec_t *spec = &eng_cfg_specs[k];
        const eng_cfg_value_t *v = &cfg->v[k];
        char where[600];
        snprintf(where, sizeof(where), "%s%s%s", eng_cfg_source_names[v->src],
                 v->src == ENG_CFG_SRC_FILE ? " " : "",
                 v->src == ENG_CFG_SRC_FILE ? cfg->file : "");
        char line[ENG_CFG_VALUE_MAX + 128];
        if ((spec->flags & F_SECRET) && *v->raw)
            snprintf(line, sizeof(line), "# %s=<hidden>", spec->name);
        else
            snprintf(line, sizeof(line), "%s=%s", spec->name, v->raw);
        fprintf(out, "%-40s # %s\n", line, where);
    }
}

void eng_config_list(FILE *out)
{
    for (int k = 0; k < ENG_CFG__COUNT; k++) {
        const eng_cfg_spec_t *spec = &eng_cfg_specs[k];
        char expected[256];
        eng_cfg_expected(spec, expected, sizeof(expected));
        fprintf(out, "%s\n    %s\n    expects %s; default '%s'\n", spec->name,
                spec->help, expected, spec->def);
    }
}
