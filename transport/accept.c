/* Pausing a listener that ran out of descriptors (accept.h). */
#include "transport/accept.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "util/clock.h"
#include "util/log.h"

#define TP_ACCEPT_PAUSE_MIN_MS 10
#define TP_ACCEPT_PAUSE_MAX_MS 1000

bool tp_accept_failed(tp_accept_pause_t *p, const char *prov, const char *addr,
                      int err)
{
    if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) {
        util_warn("%s: accept on %s: %s", prov, addr, strerror(err));
        return false;
    }
    if (!p->pause_ms) {
        struct rlimit rl = {0};
        getrlimit(RLIMIT_NOFILE, &rl);
        util_warn("%s: accept on %s: %s (%s): connections wait in the "
                  "backlog, accepting again every %d ms at most until it "
                  "succeeds",
                  prov, addr, strerror(err),
                  err == EMFILE ? "raise the descriptor limit, ulimit -n"
                  : err == ENFILE
                      ? "the system's file table is full, fs.file-max"
                      : "the system is out of memory",
                  TP_ACCEPT_PAUSE_MAX_MS);
        util_debug("%s: RLIMIT_NOFILE soft %llu, hard %llu", prov,
                   (unsigned long long)rl.rlim_cur,
                   (unsigned long long)rl.rlim_max);
        p->pause_ms = TP_ACCEPT_PAUSE_MIN_MS;
    } else if (p->pause_ms < TP_ACCEPT_PAUSE_MAX_MS) {
        p->pause_ms *= 2;
        if (p->pause_ms > TP_ACCEPT_PAUSE_MAX_MS)
            p->pause_ms = TP_ACCEPT_PAUSE_MAX_MS;
    }
    p->resume_ns = util_now_ns() + (uint64_t)p->pause_ms * 1000000u;
    return true;
}

void tp_accept_ok(tp_accept_pause_t *p, const char *prov, const char *addr)
{
    if (!p->pause_ms)
        return;
    util_info("%s: accepting connections on %s again", prov, addr);
    p->pause_ms = 0;
}

bool tp_accept_due(tp_accept_pause_t *p, uint64_t now_ns)
{
    if (!p->resume_ns || p->resume_ns > now_ns)
        return false;
    p->resume_ns = 0;
    return true;
}

uint64_t tp_accept_first(const tp_accept_pause_t *p, uint64_t first)
{
    if (!p->resume_ns)
        return first;
    return !first || p->resume_ns < first ? p->resume_ns : first;
}
