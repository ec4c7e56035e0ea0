/* Group membership over time: segments of each worker's pushes. */
#include "engine/members.h"

#include <inttypes.h>
#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

typedef struct eng_history {
    eng_segment_t *seg;
    uint32_t n, cap;
} eng_history_t;

struct eng_members {
    uint32_t workers, groups;
    eng_history_t *hist; /* [workers] */
    uint32_t **ever;     /* [groups][workers]: workers ever in the group */
    uint32_t *never;     /* [groups] */
    uint8_t *ever_bits;  /* [groups * workers]: listed in ever[g] */
    int64_t *high;       /* [groups]: group clocks ended segments reached */
    int64_t *join;       /* [groups]: a regroup's J, or -1 */
};

static void eng_members_note(eng_members_t *m, uint32_t w, uint32_t g)
{
    uint8_t *bit = &m->ever_bits[(size_t)g * m->workers + w];
    if (*bit)
        return;
    *bit = 1;
    uint32_t *list = m->ever[g];
    uint32_t i = m->never[g]++;
    for (; i > 0 && list[i - 1] > w; i--) /* kept sorted */
        list[i] = list[i - 1];
    list[i] = w;
}

static strata_status_t eng_history_push(eng_history_t *h, eng_segment_t s)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? 2 * h->cap : 2;
        eng_segment_t *seg = util_realloc(h->seg, sizeof(*seg) * cap);
        if (!seg)
            return STRATA_ERR_NOMEM;
        h->seg = seg;
        h->cap = cap;
    }
    h->seg[h->n++] = s;
    return STRATA_OK;
}

strata_status_t eng_members_create(uint32_t workers, uint32_t groups,
                                   const uint32_t *group_of,
                                   eng_members_t **members_out)
{
    for (uint32_t w = 0; w < workers; w++)
        if (group_of[w] >= groups) {
            util_error("members: worker %" PRIu32 " is in group %" PRIu32
                       " of %" PRIu32,
                       w, group_of[w], groups);
            return STRATA_ERR_INVALID;
        }
    eng_members_t *m = util_calloc(1, sizeof(*m));
    if (!m)
        goto nomem;
    m->workers = workers;
    m->groups = groups;
    m->hist = util_calloc(workers ? workers : 1, sizeof(*m->hist));
    m->ever = util_calloc(groups, sizeof(*m->ever));
    m->never = util_calloc(groups, sizeof(*m->never));
    m->ever_bits = util_calloc((size_t)groups * workers + 1, 1);
    m->high = util_calloc(groups, sizeof(*m->high));
    m->join = util_calloc(groups, sizeof(*m->join));
    if (!m->hist || !m->ever || !m->never || !m->ever_bits || !m->high ||
        !m->join)
        goto free_members;
    for (uint32_t g = 0; g < groups; g++)
        if (!(m->ever[g] = util_malloc(sizeof(uint32_t) * (workers + 1))))
            goto free_members;
    for (uint32_t w = 0; w < workers; w++) {
        eng_segment_t s = {.start = 0, .offset = 0, .group = group_of[w]};
        if (eng_history_push(&m->hist[w], s) != STRATA_OK)
            goto free_members;
        eng_members_note(m, w, group_of[w]);
    }
    *members_out = m;
    return STRATA_OK;
free_members:
    eng_members_destroy(m);
nomem:
    util_error("members: out of memory for %" PRIu32 " workers and %" PRIu32
               " groups",
               workers, groups);
    return STRATA_ERR_NOMEM;
}

void eng_members_destroy(eng_members_t *m)
{
    if (!m)
        return;
    for (uint32_t w = 0; m->hist && w < m->workers; w++)
        util_free(m->hist[w].seg);
    for (uint32_t g = 0; m->ever && g < m->groups; g++)
        util_free(m->ever[g]);
    util_free(m->hist);
    util_free(m->ever);
    util_free(m->never);
    util_free(m->ever_bits);
    util_free(m->high);
    util_free(m->join);
    util_free(m);
}

static void eng_members_raise(int64_t *v, int64_t to)
{
    if (to > *v)
        *v = to;
}

strata_status_t eng_members_move(eng_members_t *m, uint32_t worker,
                                 int64_t start, uint32_t group,
                                 int64_t group_clock)
{
    if (worker >= m->workers || group >= m->groups || group_clock < 0) {
        util_error("members: cannot move worker %" PRIu32 " into group %" PRIu32
                   " at clock %" PRId64 " (%" PRIu32 " workers, %" PRIu32
                   " groups)",
                   worker, group, group_clock, m->workers, m->groups);
        return STRATA_ERR_INVALID;
    }
    eng_history_t *h = &m->hist[worker];
    eng_segment_t *last = &h->seg[h->n - 1];
    if (start < last->start) {
        util_error("members: worker %" PRIu32 " moves at its clock %" PRId64
                   ", before its last move at %" PRId64,
                   worker, start, last->start);
        return STRATA_ERR_INVALID;
    }
    eng_segment_t s = {
        .start = start, .offset = group_clock - start, .group = group};
    eng_members_raise(&m->high[last->group], start + last->offset);
    if (eng_history_push(h, s) != STRATA_OK) {
        util_error("members: out of memory moving worker %" PRIu32, worker);
        return STRATA_ERR_NOMEM;
    }
    eng_members_note(m, worker, group);
    return STRATA_OK;
}

void eng_members_retire(eng_members_t *m, uint32_t worker, int64_t end)
{
    if (worker >= m->workers)
        return;
    const eng_segment_t *s = eng_members_current(m, worker);
    eng_members_raise(&m->high[s->group], end + s->offset);
}

/* J of every group a frozen worker ends up in whose membership changes: past
 * the clocks ended segments reached, its frozen members' and its
 * newcomers'; -1 for the others. */
static void eng_members_join_clocks(eng_members_t *m, const int64_t *frozen_at,
                                    const uint32_t *target)
{
    for (uint32_t g = 0; g < m->groups; g++)
        m->join[g] = -1;
    for (uint32_t w = 0; w < m->workers; w++) {
        const eng_segment_t *s = eng_members_current(m, w);
        if (frozen_at[w] >= 0 && s->group != target[w])
            m->join[target[w]] = m->high[target[w]];
    }
    for (uint32_t w = 0; w < m->workers; w++) {
        const eng_segment_t *s = eng_members_current(m, w);
        int64_t reached = frozen_at[w] + s->offset;
        if (frozen_at[w] < 0)
            continue;
        if (m->join[s->group] >= 0)
            eng_members_raise(&m->join[s->group], reached);
        if (m->join[target[w]] >= 0)
            eng_members_raise(&m->join[target[w]], reached);
    }
}

strata_status_t eng_members_regroup(eng_members_t *m, const int64_t *frozen_at,
                                    const uint32_t *target,
                                    eng_move_t *moves_out, uint32_t *nmoves_out)
{
    *nmoves_out = 0;
    for (uint32_t w = 0; w < m->workers; w++)
        if (frozen_at[w] >= 0 && target[w] >= m->groups) {
            util_error("members: regroup moves worker %" PRIu32
                       " into group %" PRIu32 " of %" PRIu32,
                       w, target[w], m->groups);
            return STRATA_ERR_INVALID;
        }
    eng_members_join_clocks(m, frozen_at, target);
    for (uint32_t w = 0; w < m->workers; w++) {
        const eng_segment_t *s = eng_members_current(m, w);
        uint32_t g = target[w];
        if (frozen_at[w] < 0 || m->join[g] < 0 ||
            (s->group == g && frozen_at[w] + s->offset == m->join[g]))
            continue;
        eng_move_t mv = {.worker = w,
                         .start = frozen_at[w],
                         .group = g,
                         .group_clock = m->join[g]};
        strata_status_t st =
            eng_members_move(m, w, mv.start, mv.group, mv.group_clock);
        if (st != STRATA_OK)
            return st;
        moves_out[(*nmoves_out)++] = mv;
    }
    return STRATA_OK;
}

void eng_members_resume(const eng_members_t *m, int64_t from,
                        int64_t *resume_out)
{
    for (uint32_t w = 0; w < m->workers; w++)
        eng_members_raise(&from, eng_members_current(m, w)->start);
    for (uint32_t w = 0; w < m->workers; w++) { /* a regroup's moves: few */
        const eng_segment_t *s = eng_members_current(m, w);
        int64_t join = from + s->offset;
        for (uint32_t v = 0; v < m->workers; v++) {
            const eng_segment_t *o = eng_members_current(m, v);
            if (o->group == s->group)
                eng_members_raise(&join, from + o->offset);
        }
        resume_out[w] = join - s->offset;
    }
}

uint32_t eng_members_nsegments(const eng_members_t *m, uint32_t worker)
{
    return m->hist[worker].n;
}

const eng_segment_t *eng_members_segment(const eng_members_t *m,
                                         uint32_t worker, uint32_t index)
{
    return &m->hist[worker].seg[index];
}

const eng_segment_t *eng_members_current(const eng_members_t *m,
                                         uint32_t worker)
{
    const eng_history_t *h = &m->hist[worker];
    return &h->seg[h->n - 1];
}

uint32_t eng_members_find(const eng_members_t *m, uint32_t worker,
                          int64_t worker_clock)
{
    const eng_history_t *h = &m->hist[worker];
    uint32_t i = h->n - 1;
    while (i > 0 && h->seg[i].start > worker_clock)
        i--;
    return i;
}

bool eng_members_at(const eng_members_t *m, uint32_t worker, uint32_t group,
                    int64_t group_clock, uint32_t *index_out,
                    int64_t *worker_clock_out)
{
    const eng_history_t *h = &m->hist[worker];
    for (uint32_t i = h->n; i-- > 0;) {
        const eng_segment_t *s = &h->seg[i];
        int64_t wc = group_clock - s->offset;
        if (s->group != group || wc < s->start ||
            (i + 1 < h->n && wc >= h->seg[i + 1].start))
            continue;
        *index_out = i;
        *worker_clock_out = wc;
        return true;
    }
    return false;
}

const uint32_t *eng_members_of(const eng_members_t *m, uint32_t group,
                               uint32_t *count_out)
{
    *count_out = m->never[group];
    return m->ever[group];
}

uint32_t eng_members_workers(const eng_members_t *m)
{
    return m->workers;
}

uint32_t eng_members_groups(const eng_members_t *m)
{
    return m->groups;
}
