/* Typed settings from defaults, a key=value file and the environment; see
 * settings.h. */
#include "util/settings.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/alloc.h"
#include "util/file.h"
#include "util/log.h"
#include "util/parse.h"

extern char **environ;

#define UTIL_SETTINGS_PREFIX "STRATA_"
#define UTIL_SETTINGS_VALUE_MAX 4096

typedef struct util_settings_value {
    char *raw; /* the text as given, trimmed */
    int64_t i;
    double d;
    util_setting_source_t src;
} util_settings_value_t;

struct util_settings {
    const util_setting_t *rows;
    int count;
    char *file; /* STRATA_CONFIG as read, for the dump */
    util_settings_value_t v[];
};

/* ---- for the syntax checkers of STRING settings ---- */

bool util_setting_is_uint(const char *s, size_t n)
{
    if (n == 0 || n > 9)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

bool util_setting_is_list(const char *p, bool (*item)(const char *, size_t))
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

static const char *const util_settings_source_names[] = {"default", "file",
                                                         "environment", "api"};

/* ---- parsing one value ---- */

static int64_t util_settings_limit(double x)
{
    if (x >= 9.2e18)
        return INT64_MAX;
    if (x <= -9.2e18)
        return INT64_MIN;
    return (int64_t)x;
}

static bool util_settings_parse_int(const util_setting_t *spec, const char *s,
                                    int64_t *out)
{
    if ((spec->flags & UTIL_SETTING_INF) &&
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

static int util_settings_choice(const char *choices, const char *s)
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
static void util_settings_expected(const util_setting_t *spec, char *buf,
                                   size_t cap)
{
    int64_t lo = util_settings_limit(spec->min),
            hi = util_settings_limit(spec->max);
    switch (spec->type) {
    case UTIL_SETTING_BOOL:
        snprintf(buf, cap, "a boolean (1, 0, true, false, yes, no, on, off)");
        break;
    case UTIL_SETTING_INT:
        if (hi == INT64_MAX)
            snprintf(buf, cap, "an integer >= %lld%s", (long long)lo,
                     spec->flags & UTIL_SETTING_INF ? ", or inf" : "");
        else
            snprintf(buf, cap, "an integer in [%lld, %lld]", (long long)lo,
                     (long long)hi);
        break;
    case UTIL_SETTING_SIZE:
        snprintf(buf, cap, "a size in bytes in [%lld, %lld] (suffix K, M, G)%s",
                 (long long)lo, (long long)hi,
                 spec->flags & UTIL_SETTING_AUTO ? ", or auto" : "");
        break;
    case UTIL_SETTING_DOUBLE:
        snprintf(buf, cap, "a number in [%g, %g]", spec->min, spec->max);
        break;
    case UTIL_SETTING_ENUM:
        snprintf(buf, cap, "one of %s", spec->choices);
        break;
    case UTIL_SETTING_STRING:
        snprintf(buf, cap, "%s",
                 spec->syntax ? spec->syntax->expected : "any text");
        break;
    }
}

/* Parse and check value for spec; on failure return false with why set. */
static bool util_settings_parse(const util_setting_t *spec, const char *s,
                                util_settings_value_t *out, char *why,
                                size_t whycap)
{
    int64_t i = 0;
    double d = 0;
    bool ok = true;
    switch (spec->type) {
    case UTIL_SETTING_BOOL: {
        int b = util_settings_choice("0|1|false|true|no|yes|off|on", s);
        ok = b >= 0;
        i = b & 1;
        break;
    }
    case UTIL_SETTING_INT:
    case UTIL_SETTING_SIZE: {
        uint64_t bytes = 0; /* util_parse_size keeps it <= INT64_MAX */
        if ((spec->flags & UTIL_SETTING_AUTO) && strcasecmp(s, "auto") == 0)
            break; /* i = 0: the module chooses */
        ok = spec->type == UTIL_SETTING_INT
                 ? util_settings_parse_int(spec, s, &i)
                 : util_parse_size(s, &bytes);
        if (spec->type == UTIL_SETTING_SIZE)
            i = (int64_t)bytes;
        ok = ok && i >= util_settings_limit(spec->min) &&
             i <= util_settings_limit(spec->max);
        break;
    }
    case UTIL_SETTING_DOUBLE: {
        char *end;
        errno = 0;
        d = strtod(s, &end);
        ok = !errno && end != s && *end == '\0' && isfinite(d) &&
             d >= spec->min && d <= spec->max;
        break;
    }
    case UTIL_SETTING_ENUM:
        i = util_settings_choice(spec->choices, s);
        ok = i >= 0;
        break;
    case UTIL_SETTING_STRING:
        ok = !spec->syntax || *s == '\0' || spec->syntax->ok(s);
        break;
    }
    if (!ok) {
        util_settings_expected(spec, why, whycap);
        return false;
    }
    out->i = i;
    out->d = d;
    return true;
}

/* ---- keys ---- */

static int util_settings_lookup(const util_settings_t *s, const char *name)
{
    for (int k = 0; k < s->count; k++)
        if (strcmp(s->rows[k].name, name) == 0)
            return k;
    return -1;
}

/* Levenshtein distance, capped: suggestions are for typos only. */
static size_t util_settings_distance(const char *a, const char *b)
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

static void util_settings_report_unknown(const util_settings_t *s,
                                         const char *name, const char *value,
                                         const char *where)
{
    /* Suggest only near misses: at most two edits, and fewer than half the
     * name after the prefix. */
    const char *best = NULL;
    size_t best_d = 3;
    size_t tail = strlen(name) > 7 ? strlen(name) - 7 : 0;
    for (int k = 0; k < s->count; k++) {
        size_t d = util_settings_distance(name, s->rows[k].name);
        if (d < best_d && 2 * d < tail) {
            best_d = d;
            best = s->rows[k].name;
        }
    }
    util_error("config: %s=%s (%s): unknown setting%s%s%s; expected one of the "
               "settings listed by 'strata-config --list'",
               name, value, where, best ? " (did you mean " : "",
               best ? best : "", best ? "?)" : "");
}

/* Normalise a file key: "STRATA_FOO" as is, "foo" to "STRATA_FOO". */
static bool util_settings_key_name(const char *key, char *buf, size_t cap)
{
    if (strncmp(key, UTIL_SETTINGS_PREFIX, strlen(UTIL_SETTINGS_PREFIX)) == 0)
        return (size_t)snprintf(buf, cap, "%s", key) < cap;
    size_t n = (size_t)snprintf(buf, cap, UTIL_SETTINGS_PREFIX "%s", key);
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    return n < cap;
}

static strata_status_t util_settings_assign(util_settings_t *s,
                                            const char *name, const char *value,
                                            util_setting_source_t src,
                                            const char *where)
{
    int k = util_settings_lookup(s, name);
    if (k < 0) {
        util_settings_report_unknown(s, name, value, where);
        return STRATA_ERR_CONFIG;
    }
    const util_setting_t *spec = &s->rows[k];
    util_settings_value_t parsed = {0};
    char why[256];
    if (strlen(value) >= UTIL_SETTINGS_VALUE_MAX) {
        util_error("config: %s (%s): value of %zu bytes; expected at most %d",
                   name, where, strlen(value), UTIL_SETTINGS_VALUE_MAX - 1);
        return STRATA_ERR_CONFIG;
    }
    if (!util_settings_parse(spec, value, &parsed, why, sizeof(why))) {
        util_error("config: %s=%s (%s): expected %s", name,
                   spec->flags & UTIL_SETTING_SECRET ? "<hidden>" : value,
                   where, why);
        return STRATA_ERR_CONFIG;
    }
    parsed.raw = util_strdup(value);
    if (!parsed.raw)
        return STRATA_ERR_NOMEM;
    parsed.src = src;
    util_free(s->v[k].raw);
    s->v[k] = parsed;
    return STRATA_OK;
}

/* Whether a load in scope judges name: every STRATA_* name when the rows are
 * all settings, only the rows' own names otherwise. STRATA_CONFIG is the
 * mechanism's own, a row only for --list and --dump. */
static bool util_settings_judges(const util_settings_t *s,
                                 util_settings_scope_t scope, const char *name)
{
    if (util_settings_lookup(s, name) >= 0)
        return true;
    return scope == UTIL_SETTINGS_ALL && strcmp(name, "STRATA_CONFIG") != 0;
}

static char *util_settings_trim(char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    char *e = text + strlen(text);
    while (e > text && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return text;
}

/* One line of a STRATA_CONFIG file, comment stripped. */
static strata_status_t util_settings_read_line(util_settings_t *s,
                                               util_settings_scope_t scope,
                                               char *line, const char *where)
{
    char *text = util_settings_trim(line);
    if (*text == '\0')
        return STRATA_OK;
    char *eq = strchr(text, '=');
    char name[128];
    if (!eq) {
        if (scope == UTIL_SETTINGS_OWN)
            return STRATA_OK; /* whose line it is, nobody can tell */
        util_error("config: %s: '%s': expected key=value", where, text);
        return STRATA_ERR_CONFIG;
    }
    *eq = '\0';
    char *key = util_settings_trim(text), *value = util_settings_trim(eq + 1);
    if (!util_settings_key_name(key, name, sizeof(name)) ||
        strcmp(name, "STRATA_CONFIG") == 0) {
        if (scope == UTIL_SETTINGS_OWN)
            return STRATA_OK;
        util_error("config: %s: key '%s' is not allowed in a file", where, key);
        return STRATA_ERR_CONFIG;
    }
    if (!util_settings_judges(s, scope, name))
        return STRATA_OK;
    return util_settings_assign(s, name, value, UTIL_SETTING_SRC_FILE, where);
}

/* A settings file is a few hundred bytes; this bounds what a wrong path
 * (a log, a core dump) costs. */
#define UTIL_SETTINGS_FILE_MAX (1u << 20)

static strata_status_t util_settings_read_file(util_settings_t *s,
                                               util_settings_scope_t scope,
                                               const char *path)
{
    char what[PATH_MAX + 32], *text;
    snprintf(what, sizeof(what), "config: STRATA_CONFIG=%s", path);
    strata_status_t st =
        util_file_read(path, what, UTIL_SETTINGS_FILE_MAX, false, &text, NULL);
    if (st != STRATA_OK)
        return st;
    char *line = text;
    for (unsigned lineno = 1; *line; lineno++) {
        char *next = line + strcspn(line, "\n");
        if (*next)
            *next++ = '\0';
        char where[512];
        snprintf(where, sizeof(where), "file %s:%u", path, lineno);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        if (util_settings_read_line(s, scope, line, where))
            st = STRATA_ERR_CONFIG;
        line = next;
    }
    util_free(text);
    return st;
}

/* STRATA_*, except a binding's own STRATA_EXT_* (never read, never
 * refused). */
static bool util_settings_env_ours(const char *entry)
{
    return strncmp(entry, UTIL_SETTINGS_PREFIX, strlen(UTIL_SETTINGS_PREFIX)) ==
               0 &&
           strncmp(entry, STRATA_EXT_PREFIX, strlen(STRATA_EXT_PREFIX)) != 0;
}

static strata_status_t util_settings_read_env(util_settings_t *s,
                                              util_settings_scope_t scope)
{
    strata_status_t st = STRATA_OK;
    for (char **e = environ; e && *e; e++) {
        if (!util_settings_env_ours(*e))
            continue;
        const char *eq = strchr(*e, '=');
        char name[128];
        if (!eq || (size_t)(eq - *e) >= sizeof(name)) {
            if (scope == UTIL_SETTINGS_OWN)
                continue; /* longer than any row's name */
            util_error("config: %.*s...: unknown setting; expected one of "
                       "the settings listed by 'strata-config --list'",
                       64, *e);
            st = STRATA_ERR_CONFIG;
            continue;
        }
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        if (util_settings_judges(s, scope, name) &&
            util_settings_assign(s, name, eq + 1, UTIL_SETTING_SRC_ENV,
                                 "environment"))
            st = STRATA_ERR_CONFIG;
    }
    return st;
}

/* ---- public functions ---- */

strata_status_t util_settings_defaults(const util_setting_t *rows, int count,
                                       util_settings_t **settings_out)
{
    util_settings_t *s =
        util_calloc(1, sizeof(*s) + (size_t)count * sizeof(s->v[0]));
    if (!s)
        return STRATA_ERR_NOMEM;
    s->rows = rows;
    s->count = count;
    for (int k = 0; k < count; k++) {
        if (util_settings_assign(s, rows[k].name, rows[k].def,
                                 UTIL_SETTING_SRC_DEFAULT, "default")) {
            util_settings_free(s); /* a bad default is a bug in the table */
            return STRATA_ERR_CONFIG;
        }
    }
    *settings_out = s;
    return STRATA_OK;
}

strata_status_t util_settings_load(const util_setting_t *rows, int count,
                                   util_settings_scope_t scope,
                                   util_settings_t **settings_out)
{
    util_settings_t *s;
    strata_status_t st = util_settings_defaults(rows, count, &s);
    if (st)
        return st;

    const char *path = getenv("STRATA_CONFIG");
    if (path && *path) {
        s->file = util_strdup(path);
        if (!s->file) {
            st = STRATA_ERR_NOMEM;
            goto free_settings;
        }
        st = util_settings_read_file(s, scope, path);
    }
    /* The environment is read even after a bad file, to report every error. */
    strata_status_t env_st = util_settings_read_env(s, scope);
    if (st || env_st) {
        st = st ? st : env_st;
        goto free_settings;
    }
    *settings_out = s;
    return STRATA_OK;

free_settings:
    util_settings_free(s);
    return st;
}

void util_settings_free(util_settings_t *s)
{
    if (!s)
        return;
    for (int k = 0; k < s->count; k++)
        util_free(s->v[k].raw);
    util_free(s->file);
    util_free(s);
}

strata_status_t util_settings_set(util_settings_t *s, const char *key,
                                  const char *value)
{
    char name[128];
    if (!s || !key || !value) {
        util_error("config: setting a value: NULL %s", !s     ? "settings"
                                                       : !key ? "key"
                                                              : "value");
        return STRATA_ERR_INVALID;
    }
    if (!util_settings_key_name(key, name, sizeof(name))) {
        util_error("config: key '%.64s...' is too long", key);
        return STRATA_ERR_CONFIG;
    }
    return util_settings_assign(s, name, value, UTIL_SETTING_SRC_API, "api");
}

int util_settings_key(const util_settings_t *s, const char *key)
{
    char name[128];
    if (!key || !util_settings_key_name(key, name, sizeof(name)))
        return -1;
    return util_settings_lookup(s, name);
}

static bool util_settings_is(const util_settings_t *s, int key,
                             util_setting_type_t a, util_setting_type_t b)
{
    return key >= 0 && key < s->count &&
           (s->rows[key].type == a || s->rows[key].type == b);
}

int64_t util_settings_int(const util_settings_t *s, int key)
{
    if (util_settings_is(s, key, UTIL_SETTING_INT, UTIL_SETTING_SIZE) ||
        util_settings_is(s, key, UTIL_SETTING_BOOL, UTIL_SETTING_ENUM))
        return s->v[key].i;
    return 0;
}

double util_settings_double(const util_settings_t *s, int key)
{
    return util_settings_is(s, key, UTIL_SETTING_DOUBLE, UTIL_SETTING_DOUBLE)
               ? s->v[key].d
               : 0.0;
}

const char *util_settings_str(const util_settings_t *s, int key)
{
    return key >= 0 && key < s->count ? s->v[key].raw : "";
}

util_setting_source_t util_settings_source(const util_settings_t *s, int key)
{
    return key >= 0 && key < s->count ? s->v[key].src
                                      : UTIL_SETTING_SRC_DEFAULT;
}

int util_settings_block(const util_settings_t *s, const util_setting_t *rows,
                        int count)
{
    int first = count > 0 ? util_settings_lookup(s, rows[0].name) : -1;
    if (first < 0 || first + count > s->count)
        return -1;
    for (int k = 1; k < count; k++)
        if (strcmp(s->rows[first + k].name, rows[k].name) != 0)
            return -1;
    return first;
}

void util_settings_dump(const util_settings_t *s, FILE *out)
{
    for (int k = 0; k < s->count; k++) {
        const util_setting_t *spec = &s->rows[k];
        const util_settings_value_t *v = &s->v[k];
        char where[600];
        snprintf(where, sizeof(where), "%s%s%s",
                 util_settings_source_names[v->src],
                 v->src == UTIL_SETTING_SRC_FILE ? " " : "",
                 v->src == UTIL_SETTING_SRC_FILE ? s->file : "");
        char line[UTIL_SETTINGS_VALUE_MAX + 128];
        if ((spec->flags & UTIL_SETTING_SECRET) && *v->raw)
            snprintf(line, sizeof(line), "# %s=<hidden>", spec->name);
        else
            snprintf(line, sizeof(line), "%s=%s", spec->name, v->raw);
        fprintf(out, "%-40s # %s\n", line, where);
    }
}

void util_settings_list(const util_setting_t *rows, int count, FILE *out)
{
    for (int k = 0; k < count; k++) {
        const util_setting_t *spec = &rows[k];
        char expected[256];
        util_settings_expected(spec, expected, sizeof(expected));
        fprintf(out, "%s\n    %s\n    expects %s; default '%s'\n", spec->name,
                spec->help, expected, spec->def);
    }
}
