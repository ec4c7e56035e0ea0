/* Model layout: partitions of the registered tensors and their shards. */
#include "engine/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/strata_agg.h>

#include "util/alloc.h"
#include "util/log.h"

strata_status_t eng_tensor_desc_check(const eng_tensor_desc_t *desc)
{
    size_t len = strnlen(desc->name, sizeof(desc->name));
    if (len == 0 || len > ENG_TENSOR_NAME_MAX) {
        util_error("tensor name '%.40s%s' is %s: expected 1 to %d bytes",
                   desc->name, len > 40 ? "..." : "",
                   len == 0 ? "empty" : "too long", ENG_TENSOR_NAME_MAX);
        return STRATA_ERR_INVALID;
    }
    size_t esize = strata_dtype_size(desc->dtype);
    if (esize == 0) {
        util_error("tensor '%s': unknown dtype %d", desc->name,
                   (int)desc->dtype);
        return STRATA_ERR_INVALID;
    }
    if (desc->count == 0 || desc->count > (UINT64_MAX >> 1) / esize) {
        util_error("tensor '%s': element count %llu is out of range (expected "
                   "1 to %llu)",
                   desc->name, (unsigned long long)desc->count,
                   (unsigned long long)((UINT64_MAX >> 1) / esize));
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

static uint64_t eng_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t eng_fnv1a_u64(uint64_t h, uint64_t v)
{
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    return eng_fnv1a(h, le, sizeof(le));
}

uint64_t eng_tensor_name_key(const char *name)
{
    uint64_t h = eng_fnv1a(0xcbf29ce484222325ull, name, strlen(name));
    return h ? h : 1;
}

uint64_t eng_layout_hash(const eng_tensor_desc_t *tensors, uint32_t ntensors,
                         uint64_t partition_bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = eng_fnv1a_u64(h, ntensors);
    h = eng_fnv1a_u64(h, partition_bytes);
    for (uint32_t i = 0; i < ntensors; i++) {
        size_t len = strnlen(tensors[i].name, sizeof(tensors[i].name));
        h = eng_fnv1a_u64(h, len);
        h = eng_fnv1a(h, tensors[i].name, len);
        h = eng_fnv1a_u64(h, (uint64_t)tensors[i].dtype);
        h = eng_fnv1a_u64(h, tensors[i].count);
    }
    return h;
}

uint64_t eng_layout_auto_partition(const eng_tensor_desc_t *tensors,
                                   uint32_t ntensors, uint32_t nshards,
                                   bool spans_hosts)
{
    uint64_t per_shard = spans_hosts ? ENG_PARTITION_AUTO_PARTS_HOSTS : 2;
    uint64_t model = 0, parts = per_shard * (nshards ? nshards : 1);
    uint64_t min =
        spans_hosts ? ENG_PARTITION_AUTO_MIN : ENG_PARTITION_AUTO_MIN_HOST;
    uint64_t max =
        spans_hosts ? ENG_PARTITION_AUTO_MAX_HOSTS : ENG_PARTITION_AUTO_MAX;
    for (uint32_t i = 0; i < ntensors; i++)
        model += tensors[i].count * strata_dtype_size(tensors[i].dtype);
    uint64_t bytes = (model / parts + (model % parts != 0) + 63) / 64 * 64;
    return bytes < min ? min : bytes > max ? max : bytes;
}

/* Partitions and pieces, in one pass over the tensors; with out arrays NULL
 * only counts them. */
static void eng_layout_cut(eng_layout_t *l, uint32_t *nparts_out,
                           uint32_t *npieces_out)
{
    uint32_t np = 0, npc = 0;
    eng_partition_t *cur = NULL;
    eng_partition_t scratch;
    for (uint32_t t = 0; t < l->ntensors; t++) {
        strata_dtype_t dt = l->tensors[t].dtype;
        size_t esize = strata_dtype_size(dt);
        uint64_t cap = l->partition_bytes / esize * esize;
        uint64_t left = l->tensor_bytes[t], off = 0;
        while (left > 0) {
            if (!cur || cur->dtype != dt || cur->bytes == cap) {
                cur = l->parts ? &l->parts[np] : &scratch;
                *cur = (eng_partition_t){.dtype = dt, .first_piece = npc};
                np++;
            }
            uint64_t len = cap - cur->bytes < left ? cap - cur->bytes : left;
            if (l->pieces)
                l->pieces[npc] = (eng_piece_t){.tensor = t,
                                               .part = np - 1,
                                               .tensor_off = off,
                                               .part_off = cur->bytes,
                                               .len = len};
            npc++;
            cur->npieces++;
            cur->bytes += len;
            cur->count = cur->bytes / esize;
            off += len;
            left -= len;
        }
    }
    *nparts_out = np;
    *npieces_out = npc;
}

static int eng_cmp_bytes_desc(const void *a, const void *b, void *parts)
{
    const eng_partition_t *p = parts;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    if (p[ia].bytes != p[ib].bytes)
        return p[ia].bytes > p[ib].bytes ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

/* Longest-processing-time-first: the biggest partitions first, each to the
 * shard with the fewest bytes so far (ties: the lowest shard) of those not
 * spare. */
static strata_status_t eng_layout_shard(eng_layout_t *l, const bool *spare)
{
    uint32_t *order = util_malloc(sizeof(*order) * l->nparts);
    if (!order)
        return STRATA_ERR_NOMEM;
    for (uint32_t i = 0; i < l->nparts; i++)
        order[i] = i;
    qsort_r(order, l->nparts, sizeof(*order), eng_cmp_bytes_desc, l->parts);
    for (uint32_t i = 0; i < l->nparts; i++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t s = 0; s < l->nshards; s++)
            if (!(spare && spare[s]) &&
                (best == UINT32_MAX ||
                 l->shard_bytes[s] < l->shard_bytes[best]))
                best = s;
        l->parts[order[i]].shard = best;
        l->shard_bytes[best] += l->parts[order[i]].bytes;
        l->shards_used += l->shard_nparts[best]++ == 0;
    }
    util_free(order);

    /* Within a shard, partitions keep their model order. */
    for (uint32_t s = 0; s < l->nshards; s++) {
        l->shard_parts[s] =
            util_malloc(sizeof(uint32_t) * (l->shard_nparts[s] + 1));
        if (!l->shard_parts[s])
            return STRATA_ERR_NOMEM;
        l->shard_nparts[s] = 0;
        l->shard_bytes[s] = 0;
    }
    for (uint32_t i = 0; i < l->nparts; i++) {
        eng_partition_t *p = &l->parts[i];
        p->shard_index = l->shard_nparts[p->shard]++;
        p->shard_off = l->shard_bytes[p->shard];
        l->shard_parts[p->shard][p->shard_index] = i;
        l->shard_bytes[p->shard] += p->bytes;
    }
    return STRATA_OK;
}

strata_status_t eng_layout_adopt(eng_tensor_desc_t *tensors, uint32_t ntensors,
                                 uint64_t partition_bytes, uint32_t nshards,
                                 const bool *spare, eng_layout_t **layout_out)
{
    uint32_t nspare = 0;
    for (uint32_t s = 0; spare && s < nshards; s++)
        nspare += spare[s];
    if (ntensors == 0 || nshards == 0 || partition_bytes < 8 ||
        nspare == nshards) {
        util_error("cannot lay out %u tensors on %u shards (%u of them "
                   "spare) with partitions of %llu bytes",
                   ntensors, nshards, nspare,
                   (unsigned long long)partition_bytes);
        util_free(tensors);
        return STRATA_ERR_INVALID;
    }
    for (uint32_t i = 0; i < ntensors; i++) {
        strata_status_t st = eng_tensor_desc_check(&tensors[i]);
        if (st != STRATA_OK) {
            util_free(tensors);
            return st;
        }
    }
    eng_layout_t *l = util_calloc(1, sizeof(*l));
    if (!l) {
        util_free(tensors);
        return STRATA_ERR_NOMEM;
    }
    l->ntensors = ntensors;
    l->nshards = nshards;
    l->partition_bytes = partition_bytes;
    l->hash = eng_layout_hash(tensors, ntensors, partition_bytes);
    l->tensors = tensors;
    l->tensor_bytes = util_malloc(sizeof(uint64_t) * ntensors);
    l->tensor_first_piece = util_calloc(ntensors, sizeof(uint32_t));
    l->tensor_npieces = util_calloc(ntensors, sizeof(uint32_t));
    l->shard_bytes = util_calloc(nshards, sizeof(uint64_t));
    l->shard_nparts = util_calloc(nshards, sizeof(uint32_t));
    l->shard_parts = util_calloc(nshards, sizeof(uint32_t *));
    if (!l->tensors || !l->tensor_bytes || !l->tensor_first_piece ||
        !l->tensor_npieces || !l->shard_bytes || !l->shard_nparts ||
        !l->shard_parts)
        goto nomem;
    for (uint32_t i = 0; i < ntensors; i++)
        l->tensor_bytes[i] =
            tensors[i].count * strata_dtype_size(tensors[i].dtype);

    eng_layout_cut(l, &l->nparts, &l->npieces);
    if (l->nparts >= ENG_LAYOUT_MAX_PARTS) {
        util_error("the model needs %u partitions of STRATA_PARTITION_BYTES="
                   "%llu, more than the %u an immediate can name: raise "
                   "STRATA_PARTITION_BYTES",
                   l->nparts, (unsigned long long)partition_bytes,
                   ENG_LAYOUT_MAX_PARTS - 1);
        eng_layout_free(l);
        return STRATA_ERR_CONFIG;
    }
    l->parts = util_calloc(l->nparts, sizeof(*l->parts));
    l->pieces = util_calloc(l->npieces, sizeof(*l->pieces));
    if (!l->parts || !l->pieces)
        goto nomem;
    eng_layout_cut(l, &l->nparts, &l->npieces);
    for (uint32_t k = 0; k < l->npieces; k++)
        if (l->tensor_npieces[l->pieces[k].tensor]++ == 0)
            l->tensor_first_piece[l->pieces[k].tensor] = k;
    if (eng_layout_shard(l, spare) != STRATA_OK ||
        eng_layout_hold(l, nshards) != STRATA_OK)
        goto nomem;
    *layout_out = l;
    return STRATA_OK;

nomem:
    util_error("out of memory laying out %u tensors", ntensors);
    eng_layout_free(l);
    return STRATA_ERR_NOMEM;
}

strata_status_t eng_layout_build(const eng_tensor_desc_t *tensors,
                                 uint32_t ntensors, uint64_t partition_bytes,
                                 uint32_t nshards, eng_layout_t **layout_out)
{
    eng_tensor_desc_t *copy = util_malloc(sizeof(*tensors) * (ntensors + 1));
    if (!copy) {
        util_error("out of memory laying out %u tensors", ntensors);
        return STRATA_ERR_NOMEM;
    }
    memcpy(copy, tensors, sizeof(*tensors) * ntensors);
    return eng_layout_adopt(copy, ntensors, partition_bytes, nshards, NULL,
                            layout_out);
}

static void eng_layout_unhold(eng_layout_t *l)
{
    for (uint32_t h = 0; l->held_parts && h < l->nholders; h++)
        util_free(l->held_parts[h]);
    util_free(l->held_parts);
    util_free(l->held_nparts);
    util_free(l->held_bytes);
    util_free(l->held_nregions);
    l->held_parts = NULL;
    l->held_nparts = NULL;
    l->held_bytes = NULL;
    l->held_nregions = NULL;
    l->nholders = l->holders_used = 0;
}

strata_status_t eng_layout_hold(eng_layout_t *l, uint32_t nholders)
{
    if (nholders == 0 || nholders > l->nshards) {
        util_error("cannot hold %u shards on %u aggregators", l->nshards,
                   nholders);
        return STRATA_ERR_INVALID;
    }
    eng_layout_unhold(l);
    l->nholders = nholders;
    l->held_bytes = util_calloc(nholders, sizeof(uint64_t));
    l->held_nparts = util_calloc(nholders, sizeof(uint32_t));
    l->held_parts = util_calloc(nholders, sizeof(uint32_t *));
    l->held_nregions = util_calloc(nholders, sizeof(uint32_t));
    if (!l->held_bytes || !l->held_nparts || !l->held_parts ||
        !l->held_nregions)
        goto nomem;
    for (uint32_t s = 0; s < l->nshards; s++)
        l->held_nparts[s % nholders] += l->shard_nparts[s];
    for (uint32_t h = 0; h < nholders; h++) {
        l->held_parts[h] =
            util_malloc(sizeof(uint32_t) * (l->held_nparts[h] + 1));
        if (!l->held_parts[h])
            goto nomem;
        l->holders_used += l->held_nparts[h] > 0;
        l->held_nparts[h] = 0;
        l->held_nregions[h] = 1;
    }
    for (uint32_t s = 0; s < l->nshards; s++) {
        uint32_t h = s % nholders;
        for (uint32_t i = 0; i < l->shard_nparts[s]; i++) {
            eng_partition_t *p = &l->parts[l->shard_parts[s][i]];
            p->holder = h;
            p->held_index = l->held_nparts[h]++;
            p->held_off = l->held_bytes[h];
            l->held_parts[h][p->held_index] = l->shard_parts[s][i];
            l->held_bytes[h] += p->bytes;
        }
    }
    for (uint32_t i = 0; i < l->nparts; i++) {
        l->parts[i].region = 0;
        l->parts[i].region_bytes = l->held_bytes[l->parts[i].holder];
    }
    return STRATA_OK;
nomem:
    util_error("out of memory holding %u shards on %u aggregators", l->nshards,
               nholders);
    eng_layout_unhold(l);
    return STRATA_ERR_NOMEM;
}

/* Whether aggregator h holds a partition. */
static bool eng_layout_holds(const eng_layout_t *l, uint32_t h)
{
    for (uint32_t i = 0; i < l->held_nparts[h]; i++)
        if (l->held_parts[h][i] != ENG_LAYOUT_MOVED)
            return true;
    return false;
}

strata_status_t eng_layout_move(eng_layout_t *l, uint32_t shard, uint32_t taker,
                                uint32_t *region_out)
{
    if (shard >= l->nshards || taker >= l->nholders) {
        util_error("cannot move shard %u of %u to aggregator %u of %u", shard,
                   l->nshards, taker, l->nholders);
        return STRATA_ERR_INVALID;
    }
    uint32_t n = l->shard_nparts[shard];
    *region_out = UINT32_MAX;
    if (n == 0)
        return STRATA_OK;
    const uint32_t *sp = l->shard_parts[shard];
    if (l->parts[sp[0]].holder == taker) {
        util_error("cannot move shard %u to aggregator %u: it holds it", shard,
                   taker);
        return STRATA_ERR_INVALID;
    }
    if (l->held_nparts[taker] + n >= ENG_LAYOUT_MAX_PARTS) {
        util_error("cannot move shard %u to aggregator %u: it would number "
                   "more partitions than an immediate can name",
                   shard, taker);
        return STRATA_ERR_INVALID;
    }
    uint32_t *held =
        util_realloc(l->held_parts[taker],
                     sizeof(uint32_t) * (l->held_nparts[taker] + n + 1));
    if (!held) {
        util_error("out of memory moving shard %u to aggregator %u", shard,
                   taker);
        return STRATA_ERR_NOMEM;
    }
    l->held_parts[taker] = held;
    uint32_t region = l->held_nregions[taker]++;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        eng_partition_t *p = &l->parts[sp[i]];
        l->held_parts[p->holder][p->held_index] = ENG_LAYOUT_MOVED;
        p->holder = taker;
        p->held_index = l->held_nparts[taker]++;
        p->region = region;
        p->held_off = off;
        p->region_bytes = l->shard_bytes[shard];
        held[p->held_index] = sp[i];
        off += p->bytes;
    }
    l->holders_used = 0;
    for (uint32_t h = 0; h < l->nholders; h++)
        l->holders_used += eng_layout_holds(l, h);
    *region_out = region;
    return STRATA_OK;
}

void eng_layout_free(eng_layout_t *l)
{
    if (!l)
        return;
    eng_layout_unhold(l);
    for (uint32_t s = 0; l->shard_parts && s < l->nshards; s++)
        util_free(l->shard_parts[s]);
    util_free(l->shard_parts);
    util_free(l->shard_nparts);
    util_free(l->shard_bytes);
    util_free(l->pieces);
    util_free(l->parts);
    util_free(l->tensor_bytes);
    util_free(l->tensor_first_piece);
    util_free(l->tensor_npieces);
    util_free(l->tensors);
    util_free(l);
}

static void eng_desc_str(const eng_tensor_desc_t *d, char *buf, size_t len)
{
    snprintf(buf, len, "'%s' %s[%llu]", d->name, strata_dtype_name(d->dtype),
             (unsigned long long)d->count);
}

int eng_layout_compare(const eng_tensor_desc_t *ref, uint32_t nref,
                       uint64_t ref_partition_bytes, int ref_rank,
                       const eng_tensor_desc_t *got, uint32_t ngot,
                       uint64_t got_partition_bytes, int rank, char *msg,
                       size_t msg_len)
{
    char a[ENG_TENSOR_NAME_MAX + 48], b[ENG_TENSOR_NAME_MAX + 48];
    uint32_t n = nref < ngot ? nref : ngot;
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(ref[i].name, got[i].name) == 0 &&
            ref[i].dtype == got[i].dtype && ref[i].count == got[i].count)
            continue;
        eng_desc_str(&got[i], a, sizeof(a));
        eng_desc_str(&ref[i], b, sizeof(b));
        snprintf(msg, msg_len,
                 "layout mismatch at tensor #%u: rank %d registered %s, "
                 "rank %d registered %s",
                 i, rank, a, ref_rank, b);
        return -1;
    }
    if (nref != ngot) {
        const eng_tensor_desc_t *extra = nref > ngot ? &ref[n] : &got[n];
        eng_desc_str(extra, a, sizeof(a));
        snprintf(msg, msg_len,
                 "layout mismatch at tensor #%u: rank %d registered %u "
                 "tensors, rank %d registered %u; the first extra one is %s",
                 n, rank, ngot, ref_rank, nref, a);
        return -1;
    }
    if (ref_partition_bytes != got_partition_bytes) {
        snprintf(msg, msg_len,
                 "layout mismatch: rank %d has STRATA_PARTITION_BYTES=%llu, "
                 "rank %d has %llu",
                 rank, (unsigned long long)got_partition_bytes, ref_rank,
                 (unsigned long long)ref_partition_bytes);
        return -1;
    }
    return 0;
}
