/*
 * Logging for every module: one line per message on stderr (or a sink set by
 * a test), with a UTC timestamp, the process id, the rank once known, the
 * level and the source location. The level comes from STRATA_LOG.
 */
#ifndef STRATA_UTIL_LOG_H
#define STRATA_UTIL_LOG_H

#include <stdatomic.h>

typedef enum eng_log_level {
    ENG_LOG_ERROR,
    ENG_LOG_WARN,
    ENG_LOG_INFO,
    ENG_LOG_DEBUG,
    ENG_LOG_TRACE,
} eng_log_level_t;

/* "error", "warn", "info", "debug", "trace", NULL: indexed by level. */
extern const char *const eng_log_level_names[];

/* Threshold read by the macros; negative until the first message or
 * eng_log_set_level(). Use the macros, not this. */
extern _Atomic int eng_log_threshold;

void eng_log_set_level(eng_log_level_t level);
eng_log_level_t eng_log_get_level(void);
/* Parse a level name; returns -1 when the name is not one of the levels. */
int eng_log_parse_level(const char *name);

/* Rank shown in every line from now on (-1: not known yet). */
void eng_log_set_rank(int rank);

/* Replace the output: every formatted line (without newline) goes to fn.
 * NULL restores stderr. For tests and for frameworks with their own logs. */
typedef void (*eng_log_sink_fn)(void *arg, eng_log_level_t level,
                                const char *line);
void eng_log_set_sink(eng_log_sink_fn fn, void *arg);

void eng_log_write(eng_log_level_t level, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

int eng_log_init_threshold(void);

static inline int eng_log_enabled(eng_log_level_t level)
{
    int t = atomic_load_explicit(&eng_log_threshold, memory_order_relaxed);
    if (t < 0)
        t = eng_log_init_threshold();
    return (int)level <= t;
}

#define eng_log(level, ...)                                                    \
    do {                                                                       \
        if (eng_log_enabled(level))                                            \
            eng_log_write(level, __FILE__, __LINE__, __VA_ARGS__);             \
    } while (0)

#define eng_error(...) eng_log(ENG_LOG_ERROR, __VA_ARGS__)
#define eng_warn(...) eng_log(ENG_LOG_WARN, __VA_ARGS__)
#define eng_info(...) eng_log(ENG_LOG_INFO, __VA_ARGS__)
#define eng_debug(...) eng_log(ENG_LOG_DEBUG, __VA_ARGS__)
#define eng_trace(...) eng_log(ENG_LOG_TRACE, __VA_ARGS__)

#endif /* STRATA_UTIL_LOG_H */
