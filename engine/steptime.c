/* A worker's own step time, from model landings and pushes. */
#include "engine/steptime.h"

#include <string.h>

void eng_steptime_init(eng_steptime_t *s)
{
    memset(s, 0, sizeof(*s));
    s->landed = -1;
    s->pushed = -1;
}

void eng_steptime_landed(eng_steptime_t *s, int64_t clock, uint64_t ns)
{
    s->landed_ns[clock % ENG_STEPTIME_LANDED] = ns;
    s->landed = clock;
}

/* When the step pushed at ns began: after the previous push, and after the
 * newest model (of a clock up to its own) that had landed by then. */
static uint64_t eng_steptime_begin(const eng_steptime_t *s, int64_t clock,
                                   uint64_t ns)
{
    uint64_t begin = s->pushed_ns;
    int64_t k = s->landed < clock ? s->landed : clock;
    for (int64_t low = k - ENG_STEPTIME_LANDED + 1; k >= 0 && k >= low; k--) {
        uint64_t at = s->landed_ns[k % ENG_STEPTIME_LANDED];
        if (at <= ns) {
            begin = at > begin ? at : begin;
            break;
        }
    }
    return begin;
}

bool eng_steptime_pushed(eng_steptime_t *s, int64_t clock, uint64_t ns)
{
    bool measured = clock >= 1 && s->pushed == clock - 1;
    if (measured) {
        uint64_t begin = eng_steptime_begin(s, clock, ns);
        uint64_t i = s->steps % ENG_STEPTIME_RING;
        s->step[i] = ns > begin ? (double)(ns - begin) * 1e-9 : 0;
        s->end_ns[i] = ns;
        s->steps++;
    }
    s->pushed = clock;
    s->pushed_ns = ns;
    return measured;
}

double eng_steptime_estimate(const eng_steptime_t *s, uint64_t now_ns)
{
    uint64_t since = now_ns - ENG_STEPTIME_SPAN_MS * 1000000ull;
    double v[ENG_STEPTIME_RING];
    uint64_t n = 0;
    for (uint64_t k = s->steps; k > 0 && n < ENG_STEPTIME_RING; k--) {
        uint64_t i = (k - 1) % ENG_STEPTIME_RING;
        if (n >= ENG_STEPTIME_MIN_STEPS && s->end_ns[i] < since)
            break;
        double t = s->step[i]; /* kept sorted: at most 64 */
        uint64_t j = n++;
        for (; j > 0 && v[j - 1] > t; j--)
            v[j] = v[j - 1];
        v[j] = t;
    }
    if (n == 0)
        return 0;
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
