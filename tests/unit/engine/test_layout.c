/* Layout: partitions, pieces, shard balance, hashes and mismatch messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/layout.h"
#include "engine/layout_wire.h"
#include "tests/support/test_log.h"
#include "util/alloc.h"
#include "util/log.h"

static eng_tensor_desc_t desc(const char *name, strata_dtype_t dt, uint64_t n)
{
    eng_tensor_desc_t d = {.dtype = dt, .count = n};
    snprintf(d.name, sizeof(d.name), "%s", name);
    return d;
}

/* Every byte of every tensor is in exactly one piece, pieces of a partition
 * tile it, and shard offsets tile each shard. */
static void check_invariants(const eng_layout_t *l)
{
    uint64_t covered[16] = {0};
    assert_true(l->ntensors <= 16);
    for (uint32_t p = 0; p < l->nparts; p++) {
        const eng_partition_t *part = &l->parts[p];
        uint64_t at = 0;
        assert_true(part->bytes > 0 && part->bytes <= l->partition_bytes);
        for (uint32_t k = 0; k < part->npieces; k++) {
            const eng_piece_t *pc = &l->pieces[part->first_piece + k];
            assert_int_equal(pc->part_off, at);
            assert_int_equal(l->tensors[pc->tensor].dtype, part->dtype);
            assert_int_equal(pc->part, p);
            uint32_t first = l->tensor_first_piece[pc->tensor];
            uint32_t idx = part->first_piece + k;
            assert_true(idx >= first &&
                        idx < first + l->tensor_npieces[pc->tensor]);
            assert_int_equal(pc->tensor_off, covered[pc->tensor]);
            covered[pc->tensor] += pc->len;
            at += pc->len;
        }
        assert_int_equal(at, part->bytes);
        assert_int_equal(l->shard_parts[part->shard][part->shard_index], p);
    }
    for (uint32_t t = 0; t < l->ntensors; t++)
        assert_int_equal(covered[t], l->tensor_bytes[t]);
    for (uint32_t s = 0; s < l->nshards; s++) {
        uint64_t off = 0;
        for (uint32_t i = 0; i < l->shard_nparts[s]; i++) {
            const eng_partition_t *part = &l->parts[l->shard_parts[s][i]];
            assert_int_equal(part->shard_off, off);
            off += part->bytes;
        }
        assert_int_equal(off, l->shard_bytes[s]);
    }
}

static void large_split_small_packed(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {
        desc("big", STRATA_FP32, 2500),   /* 10000 B: 4096 + 4096 + 1808 */
        desc("small1", STRATA_FP32, 100), /* packed after big's tail */
        desc("small2", STRATA_FP32, 10),
    };
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 3, 4096, 2, &l), STRATA_OK);
    check_invariants(l);
    assert_int_equal(l->nparts, 3);
    assert_int_equal(l->parts[0].bytes, 4096);
    assert_int_equal(l->parts[1].bytes, 4096);
    assert_int_equal(l->parts[2].bytes, 1808 + 400 + 40);
    assert_int_equal(l->parts[2].npieces, 3);
    assert_int_equal(l->parts[2].count, (1808 + 440) / 4);
    eng_layout_free(l);
}

static void dtype_change_starts_a_partition(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {
        desc("a", STRATA_FP32, 10),
        desc("b", STRATA_FP16, 3), /* 6 bytes: its own partition */
        desc("c", STRATA_FP16, 5),
        desc("d", STRATA_FP64, 1),
    };
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 4, 4096, 3, &l), STRATA_OK);
    check_invariants(l);
    assert_int_equal(l->nparts, 3);
    assert_int_equal(l->parts[1].dtype, STRATA_FP16);
    assert_int_equal(l->parts[1].bytes, 16);
    assert_int_equal(l->parts[1].count, 8);
    /* Three partitions on three shards: one each. */
    for (uint32_t s = 0; s < 3; s++)
        assert_int_equal(l->shard_nparts[s], 1);
    eng_layout_free(l);
}

static void partition_size_rounds_to_elements(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("x", STRATA_FP64, 1000)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4100, 1, &l), STRATA_OK);
    check_invariants(l);
    assert_int_equal(l->parts[0].bytes, 4096); /* 4100 rounded down to 8 */
    eng_layout_free(l);
}

static void shards_balance_bytes(void **state)
{
    (void)state;
    /* 10 full partitions and a small one on 4 shards: 3,3,3,2 full ones,
     * the small one on a shard with 2. */
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 10 * 1024 + 7)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4096, 4, &l), STRATA_OK);
    check_invariants(l);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t s = 0; s < 4; s++) {
        lo = l->shard_bytes[s] < lo ? l->shard_bytes[s] : lo;
        hi = l->shard_bytes[s] > hi ? l->shard_bytes[s] : hi;
    }
    assert_true(hi - lo <= 4096);
    assert_int_equal(l->shard_bytes[0] + l->shard_bytes[1] + l->shard_bytes[2] +
                         l->shard_bytes[3],
                     (10 * 1024 + 7) * 4);
    eng_layout_free(l);
}

static void more_shards_than_partitions(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 3)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4096, 4, &l), STRATA_OK);
    check_invariants(l);
    assert_int_equal(l->shard_nparts[0], 1);
    assert_int_equal(l->shard_nparts[3], 0);
    eng_layout_free(l);
}

/* By default every shard is its own aggregator's, numbered as in it. */
static void one_shard_per_holder_by_default(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 10 * 1024 + 7)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4096, 3, &l), STRATA_OK);
    assert_int_equal(l->nholders, 3);
    assert_int_equal(l->holders_used, 3);
    for (uint32_t s = 0; s < 3; s++) {
        assert_int_equal(l->held_bytes[s], l->shard_bytes[s]);
        assert_int_equal(l->held_nparts[s], l->shard_nparts[s]);
    }
    for (uint32_t i = 0; i < l->nparts; i++) {
        const eng_partition_t *p = &l->parts[i];
        assert_int_equal(p->holder, p->shard);
        assert_int_equal(p->held_index, p->shard_index);
        assert_int_equal(p->held_off, p->shard_off);
        assert_int_equal(p->region, 0);
        assert_int_equal(p->region_bytes, l->held_bytes[p->holder]);
        /* a push's slot: the parity's copy of the shard, as before */
        assert_int_equal(eng_layout_slot_off(p, 7),
                         l->held_bytes[p->holder] + p->held_off);
    }
    eng_layout_free(l);
}

/* The holder h's partitions, as numbered: its list and each partition's
 * holder and index agree, and each region's offsets tile it. */
static void check_held(const eng_layout_t *l, uint32_t h)
{
    uint64_t off[8] = {0};
    assert_true(l->held_nregions[h] <= 8);
    for (uint32_t i = 0; i < l->held_nparts[h]; i++) {
        if (l->held_parts[h][i] == ENG_LAYOUT_MOVED)
            continue;
        const eng_partition_t *p = &l->parts[l->held_parts[h][i]];
        assert_int_equal(p->holder, h);
        assert_int_equal(p->held_index, i);
        assert_true(p->region < l->held_nregions[h]);
        assert_int_equal(p->held_off, off[p->region]);
        off[p->region] += p->bytes;
    }
    for (uint32_t i = 0; i < l->nparts; i++) {
        const eng_partition_t *p = &l->parts[i];
        if (p->holder == h)
            assert_int_equal(p->region_bytes, off[p->region]);
    }
}

/* A lost aggregator's shard moves to a taker at run time: what the taker
 * held keeps its numbers, offsets and region (its slots were sized at the
 * commit); the moved partitions follow its own in a region of their own,
 * their slots two copies of that region; every other aggregator is as it
 * was. A second move makes a second region. */
static void a_shard_moves_to_a_taker(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 10 * 1024 + 7),
                             desc("h", STRATA_FP16, 3000)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 2, 4096, 3, &l), STRATA_OK);
    eng_partition_t before[64];
    assert_true(l->nparts <= 64);
    memcpy(before, l->parts, sizeof(*l->parts) * l->nparts);
    uint32_t n0 = l->held_nparts[0], n1 = l->held_nparts[1];
    uint64_t b0 = l->held_bytes[0], b1 = l->held_bytes[1];
    assert_true(n0 > 0 && n1 > 0);

    uint32_t region;
    assert_int_equal(eng_layout_move(l, 1, 0, &region), STRATA_OK);
    assert_int_equal(region, 1);
    assert_int_equal(l->held_nregions[0], 2);
    assert_int_equal(l->held_nparts[0], n0 + n1);
    /* region 0's bytes, the stride of the slots sized at the commit */
    assert_int_equal(l->held_bytes[0], b0);
    assert_int_equal(l->held_bytes[1], b1);
    assert_int_equal(l->held_nparts[1], n1); /* indices are not reused */
    assert_int_equal(l->holders_used, 2);
    for (uint32_t i = 0; i < n1; i++)
        assert_int_equal(l->held_parts[1][i], ENG_LAYOUT_MOVED);
    for (uint32_t i = 0; i < l->nparts; i++) {
        const eng_partition_t *p = &l->parts[i], *was = &before[i];
        if (was->holder != 1) {
            assert_memory_equal(p, was, sizeof(*p));
            continue;
        }
        assert_int_equal(p->holder, 0);
        assert_int_equal(p->held_index, n0 + was->held_index);
        assert_int_equal(p->region, 1);
        assert_int_equal(p->held_off, was->held_off);
        assert_int_equal(p->region_bytes, l->shard_bytes[1]);
        assert_int_equal(eng_layout_slot_off(p, 3),
                         l->shard_bytes[1] + was->held_off);
    }
    check_held(l, 0);
    check_held(l, 1);
    check_held(l, 2);
    check_invariants(l);

    /* The taker is lost in turn: both its regions move on, as one shard
     * each; then one aggregator holds everything. */
    assert_int_equal(eng_layout_move(l, 0, 2, &region), STRATA_OK);
    assert_int_equal(region, 1);
    assert_int_equal(eng_layout_move(l, 1, 2, &region), STRATA_OK);
    assert_int_equal(region, 2);
    assert_int_equal(l->holders_used, 1);
    assert_int_equal(l->held_nparts[2], l->nparts);
    for (uint32_t h = 0; h < 3; h++)
        check_held(l, h);

    /* Refused, and nothing changes: a shard or an aggregator out of range,
     * a shard the taker holds. */
    memcpy(before, l->parts, sizeof(*l->parts) * l->nparts);
    test_log_start();
    assert_int_equal(eng_layout_move(l, 3, 0, &region), STRATA_ERR_INVALID);
    assert_int_equal(eng_layout_move(l, 0, 3, &region), STRATA_ERR_INVALID);
    assert_int_equal(eng_layout_move(l, 2, 2, &region), STRATA_ERR_INVALID);
    test_log_expect_n(3, "cannot move shard 2 to aggregator 2: it holds it");
    test_log_stop();
    assert_memory_equal(l->parts, before, sizeof(*l->parts) * l->nparts);
    assert_int_equal(l->held_nregions[2], 3);
    eng_layout_free(l);
}

/* A shard without partitions moves without a region. */
static void an_empty_shard_moves_without_a_region(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 100)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4096, 3, &l), STRATA_OK);
    assert_int_equal(l->shard_nparts[2], 0);
    uint32_t region = 0;
    assert_int_equal(eng_layout_move(l, 2, 0, &region), STRATA_OK);
    assert_int_equal(region, UINT32_MAX);
    assert_int_equal(l->held_nregions[0], 1);
    check_held(l, 0);
    eng_layout_free(l);
}

/* eng_layout_adopt of t[0..n) on nshards shards, those in spare[] given no
 * partition. */
static strata_status_t adopt_spared(const eng_tensor_desc_t *t, uint32_t n,
                                    uint32_t nshards, const bool *spare,
                                    eng_layout_t **l_out)
{
    eng_tensor_desc_t *copy = util_malloc(sizeof(*t) * n);
    assert_non_null(copy);
    memcpy(copy, t, sizeof(*t) * n);
    return eng_layout_adopt(copy, n, 4096, nshards, spare, l_out);
}

/* A spare aggregator's shard gets no partition, the others share the
 * model's bytes as without it; taking a lost shard over, the spare holds
 * exactly that shard (in its region 1, its region 0 empty): one shard per
 * aggregator still. Every shard spare is refused, named. */
static void a_spare_holds_no_shard_until_it_takes_one(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 9 * 1024),
                             desc("b", STRATA_FP32, 3 * 1024 + 5)};
    bool spare[4] = {false, false, false, true};
    eng_layout_t *l, *plain;
    assert_int_equal(adopt_spared(t, 2, 4, spare, &l), STRATA_OK);
    assert_int_equal(eng_layout_build(t, 2, 4096, 3, &plain), STRATA_OK);
    assert_int_equal(l->nholders, 4);
    assert_int_equal(l->shard_nparts[3], 0);
    assert_int_equal(l->held_nparts[3], 0);
    assert_int_equal(l->held_bytes[3], 0);
    assert_int_equal(l->shards_used, 3);
    assert_int_equal(l->holders_used, 3);
    for (uint32_t s = 0; s < 3; s++) {
        assert_int_equal(l->shard_bytes[s], plain->shard_bytes[s]);
        assert_int_equal(l->shard_nparts[s], plain->shard_nparts[s]);
    }
    for (uint32_t i = 0; i < l->nparts; i++)
        assert_int_equal(l->parts[i].shard, plain->parts[i].shard);
    eng_layout_free(plain);

    uint32_t region = 0;
    uint32_t lost_nparts = l->shard_nparts[1];
    assert_true(lost_nparts > 0);
    assert_int_equal(eng_layout_move(l, 1, 3, &region), STRATA_OK);
    assert_int_equal(region, 1);
    assert_int_equal(l->held_nparts[3], lost_nparts);
    for (uint32_t i = 0; i < lost_nparts; i++) {
        const eng_partition_t *p = &l->parts[l->held_parts[3][i]];
        assert_int_equal(p->shard, 1);
        assert_int_equal(p->region, 1);
        assert_int_equal(p->region_bytes, l->shard_bytes[1]);
    }
    check_held(l, 3);
    assert_int_equal(l->holders_used, 3); /* 0, 2 and the spare */
    eng_layout_free(l);

    bool all[2] = {true, true};
    test_log_start();
    assert_int_equal(adopt_spared(t, 2, 2, all, &l), STRATA_ERR_INVALID);
    test_log_expect("(2 of them spare)");
    test_log_stop();
}

/* STRATA_SHARDS: 5 shards on 2 aggregators, shard s on s mod 2; each
 * holds its shards' partitions one shard after the other, contiguous. */
static void shards_held_round_robin(void **state)
{
    (void)state;
    eng_tensor_desc_t t[] = {desc("w", STRATA_FP32, 11 * 1024 + 7)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4096, 5, &l), STRATA_OK);
    assert_int_equal(eng_layout_hold(l, 2), STRATA_OK);
    assert_int_equal(l->holders_used, 2);
    assert_int_equal(l->held_nparts[0], l->shard_nparts[0] +
                                            l->shard_nparts[2] +
                                            l->shard_nparts[4]);
    assert_int_equal(l->held_nparts[1],
                     l->shard_nparts[1] + l->shard_nparts[3]);
    assert_int_equal(l->held_bytes[0] + l->held_bytes[1], (11 * 1024 + 7) * 4);
    for (uint32_t h = 0; h < 2; h++) {
        uint64_t off = 0;
        uint32_t last_shard = 0;
        for (uint32_t i = 0; i < l->held_nparts[h]; i++) {
            const eng_partition_t *p = &l->parts[l->held_parts[h][i]];
            assert_int_equal(p->holder, h);
            assert_int_equal(p->shard % 2, h);
            assert_int_equal(p->held_index, i);
            assert_int_equal(p->held_off, off);
            assert_true(p->shard >= last_shard); /* shard after shard */
            last_shard = p->shard;
            off += p->bytes;
        }
        assert_int_equal(off, l->held_bytes[h]);
    }
    /* Held again, by one aggregator: everything on it, renumbered. */
    assert_int_equal(eng_layout_hold(l, 1), STRATA_OK);
    assert_int_equal(l->holders_used, 1);
    assert_int_equal(l->held_nparts[0], l->nparts);
    assert_int_equal(eng_layout_hold(l, 6), STRATA_ERR_INVALID);
    assert_int_equal(eng_layout_hold(l, 0), STRATA_ERR_INVALID);
    eng_layout_free(l);
}

/* The engine's partition size: the model in 2 per shard on one host, 16
 * across hosts, whole cache lines, within [1M, 4M] on one host, [64K, 1M]
 * across hosts; between the bounds every shard holds that many partitions. */
static void auto_partition_follows_model_and_shards(void **state)
{
    (void)state;
    const uint64_t kib = 1024, mib = kib * kib;
    const uint64_t models[] = {4,           4 * kib,   256 * kib, 1 * mib,
                               1 * mib + 4, 2 * mib,   4 * mib,   6 * mib + 12,
                               64 * mib,    1024 * mib};
    const uint32_t shards[] = {1, 2, 3, 4, 8, 16};
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++)
        for (size_t k = 0; k < sizeof(shards) / sizeof(shards[0]); k++)
            for (int hosts = 0; hosts < 2; hosts++) {
                uint32_t s = shards[k];
                uint64_t min = hosts ? ENG_PARTITION_AUTO_MIN
                                     : ENG_PARTITION_AUTO_MIN_HOST;
                uint64_t max = hosts ? ENG_PARTITION_AUTO_MAX_HOSTS
                                     : ENG_PARTITION_AUTO_MAX;
                uint32_t per = hosts ? 16 : 2;
                eng_tensor_desc_t t = desc("w", STRATA_FP32, models[m] / 4);
                uint64_t p = eng_layout_auto_partition(&t, 1, s, hosts);
                uint64_t share = (models[m] + per * s - 1) / (per * s);
                assert_true(p % 64 == 0);
                if (share <= min)
                    assert_int_equal(p, min);
                else if (share >= max)
                    assert_int_equal(p, max);
                else
                    assert_true(p >= share && p < share + 64);
                if (share < min || share > max || models[m] > 64 * mib)
                    continue;
                eng_layout_t *l;
                assert_int_equal(eng_layout_build(&t, 1, p, s, &l), STRATA_OK);
                for (uint32_t a = 0; a < s; a++)
                    assert_int_equal(l->shard_nparts[a], per);
                eng_layout_free(l);
            }
    /* 1 MiB on 2 shards: one partition on one host, where a push lands at
     * once and every partition costs wake-ups on the shared cores; the
     * 64 KiB floor across hosts (docs/engine.md). */
    eng_tensor_desc_t t = desc("w", STRATA_FP32, 1 << 18);
    assert_int_equal(eng_layout_auto_partition(&t, 1, 2, false), 1 * mib);
    assert_int_equal(eng_layout_auto_partition(&t, 1, 2, true), 64 * kib);
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(&t, 1, 1 * mib, 2, &l), STRATA_OK);
    assert_int_equal(l->nparts, 1);
    eng_layout_free(l);
    /* 16 MiB on one shard: 4 MiB on one host, 1 MiB across hosts. */
    t = desc("w", STRATA_FP32, 4 << 20);
    assert_int_equal(eng_layout_auto_partition(&t, 1, 1, false), 4 * mib);
    assert_int_equal(eng_layout_auto_partition(&t, 1, 1, true), 1 * mib);
    /* 4 MiB on one shard across hosts: sixteen of 256 KiB, so that the last
     * one's model writes, which nothing overlaps, are a sixteenth of what
     * the shard's link carries (four of 1 MiB kept a round at 0.73 of the
     * link bound). */
    t = desc("w", STRATA_FP32, 1 << 20);
    assert_int_equal(eng_layout_auto_partition(&t, 1, 1, true), 256 * kib);
    /* The model is every tensor, of every dtype. */
    eng_tensor_desc_t mixed[] = {desc("a", STRATA_FP32, 1 << 18),
                                 desc("b", STRATA_FP16, 1 << 19),
                                 desc("c", STRATA_FP64, 1 << 17)};
    assert_int_equal(eng_layout_auto_partition(mixed, 3, 2, true), 96 * kib);
    assert_int_equal(eng_layout_auto_partition(mixed, 3, 1, false), 1536 * kib);
}

static void hash_depends_on_everything(void **state)
{
    (void)state;
    eng_tensor_desc_t a[] = {desc("w", STRATA_FP32, 10),
                             desc("b", STRATA_FP32, 2)};
    eng_tensor_desc_t b[2];
    uint64_t h = eng_layout_hash(a, 2, 4096);
    assert_int_equal(h, eng_layout_hash(a, 2, 4096));
    assert_true(h != eng_layout_hash(a, 2, 8192));
    assert_true(h != eng_layout_hash(a, 1, 4096));
    memcpy(b, a, sizeof(a));
    b[1].count = 3;
    assert_true(h != eng_layout_hash(b, 2, 4096));
    memcpy(b, a, sizeof(a));
    b[0].dtype = STRATA_BF16;
    assert_true(h != eng_layout_hash(b, 2, 4096));
    memcpy(b, a, sizeof(a));
    snprintf(b[0].name, sizeof(b[0].name), "v");
    assert_true(h != eng_layout_hash(b, 2, 4096));
}

static void mismatch_names_first_difference(void **state)
{
    (void)state;
    eng_tensor_desc_t ref[] = {desc("conv.w", STRATA_FP32, 100),
                               desc("fc1.weight", STRATA_FP32, 2000),
                               desc("fc1.bias", STRATA_FP32, 10)};
    eng_tensor_desc_t got[3];
    char msg[512];
    memcpy(got, ref, sizeof(ref));
    assert_int_equal(
        eng_layout_compare(ref, 3, 4096, 2, got, 3, 4096, 5, msg, sizeof(msg)),
        0);
    got[1].count = 1000;
    got[2].count = 1;
    assert_int_equal(
        eng_layout_compare(ref, 3, 4096, 2, got, 3, 4096, 5, msg, sizeof(msg)),
        -1);
    assert_non_null(strstr(msg, "tensor #1"));
    assert_non_null(strstr(msg, "rank 5 registered 'fc1.weight' fp32[1000]"));
    assert_non_null(strstr(msg, "rank 2 registered 'fc1.weight' fp32[2000]"));

    assert_int_equal(
        eng_layout_compare(ref, 3, 4096, 2, ref, 2, 4096, 6, msg, sizeof(msg)),
        -1);
    assert_non_null(strstr(msg, "rank 6 registered 2 tensors"));
    assert_non_null(strstr(msg, "'fc1.bias'"));

    assert_int_equal(
        eng_layout_compare(ref, 3, 4096, 2, ref, 3, 8192, 6, msg, sizeof(msg)),
        -1);
    assert_non_null(strstr(msg, "STRATA_PARTITION_BYTES=8192"));
}

static void bad_descriptions_are_refused(void **state)
{
    (void)state;
    test_log_start();
    eng_tensor_desc_t t[] = {desc("", STRATA_FP32, 1)};
    eng_layout_t *l;
    assert_int_equal(eng_layout_build(t, 1, 4096, 1, &l), STRATA_ERR_INVALID);
    t[0] = desc("x", STRATA_FP32, 0);
    assert_int_equal(eng_layout_build(t, 1, 4096, 1, &l), STRATA_ERR_INVALID);
    t[0] = desc("x", (strata_dtype_t)42, 1);
    assert_int_equal(eng_layout_build(t, 1, 4096, 1, &l), STRATA_ERR_INVALID);
    t[0] = desc("x", STRATA_FP32, UINT64_MAX / 2);
    assert_int_equal(eng_layout_build(t, 1, 4096, 1, &l), STRATA_ERR_INVALID);
    assert_int_equal(test_log.errors, 4); /* each refusal said once */
    test_log_stop();
}

/* Feed rx the message in w. */
static strata_status_t rx_feed(eng_layout_rx_t *rx, const eng_wbuf_t *w)
{
    eng_rbuf_t r;
    unsigned type;
    eng_rbuf_init(&r, w->p, eng_wbuf_len(w), &type);
    return eng_layout_rx_msg(rx, type, &r, "the test");
}

/* Feed rx a LAYOUT announcing n tensors (hashed, when tensors is set). */
static strata_status_t rx_layout(eng_layout_rx_t *rx,
                                 const eng_tensor_desc_t *tensors, uint32_t n)
{
    unsigned char buf[64];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_LAYOUT);
    eng_put_u64(&w, tensors ? eng_layout_hash(tensors, n, 4096) : 0);
    eng_put_u32(&w, n);
    eng_put_u64(&w, 4096);
    return rx_feed(rx, &w);
}

/* Feed rx the TENSORS chunk of tensors[first..first+k), saying it holds
 * said of them. */
static strata_status_t rx_chunk_saying(eng_layout_rx_t *rx,
                                       const eng_tensor_desc_t *tensors,
                                       uint32_t first, uint16_t k,
                                       uint16_t said)
{
    unsigned char buf[1024];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_TENSORS);
    eng_put_u32(&w, first);
    eng_put_u16(&w, said);
    for (uint32_t i = first; i < first + k; i++) {
        eng_put_str(&w, tensors[i].name);
        eng_put_u8(&w, (uint8_t)tensors[i].dtype);
        eng_put_u64(&w, tensors[i].count);
    }
    return rx_feed(rx, &w);
}

static strata_status_t rx_chunk(eng_layout_rx_t *rx,
                                const eng_tensor_desc_t *tensors,
                                uint32_t first, uint16_t k)
{
    return rx_chunk_saying(rx, tensors, first, k, k);
}

/* A layout is reassembled from its chunks, exactly; its array grows with
 * the descriptions that arrive, not to the count LAYOUT announces (a
 * member's LAYOUT announcing 2^24 tensors took 4.5 GB at once: ASan's
 * fuzz_engine_layout spent minutes in such allocations). */
static void a_layout_takes_memory_as_its_tensors_arrive(void **state)
{
    (void)state;
    eng_tensor_desc_t t[5];
    for (int i = 0; i < 5; i++)
        t[i] = desc(i % 2 ? "bias" : "weight", STRATA_FP32, 100u + i);
    eng_layout_rx_t rx = {0};
    assert_int_equal(rx_layout(&rx, t, 5), STRATA_OK);
    assert_int_equal(rx_chunk(&rx, t, 0, 2), STRATA_OK);
    assert_int_equal(rx_chunk(&rx, t, 2, 1), STRATA_OK);
    assert_false(rx.complete);
    assert_int_equal(rx_chunk(&rx, t, 3, 2), STRATA_OK);
    assert_true(rx.complete);
    assert_int_equal(rx.nreceived, 5);
    assert_true(rx.cap >= 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(rx.tensors[i].name, t[i].name);
        assert_int_equal(rx.tensors[i].dtype, t[i].dtype);
        assert_int_equal(rx.tensors[i].count, t[i].count);
    }
    eng_layout_rx_free(&rx);

    assert_int_equal(rx_layout(&rx, NULL, 1u << 24), STRATA_OK);
    assert_true(rx.cap == 0 && !rx.tensors);
    assert_int_equal(rx_chunk(&rx, t, 0, 3), STRATA_OK);
    assert_int_equal(rx_chunk(&rx, t, 3, 2), STRATA_OK);
    assert_int_equal(rx.nreceived, 5);
    assert_true(rx.cap >= 5 && rx.cap <= 10);
    eng_layout_rx_free(&rx);

    /* a chunk saying it holds more tensors than its bytes can: refused
     * before any room is made for them */
    test_log_start();
    assert_int_equal(rx_layout(&rx, NULL, 1u << 24), STRATA_OK);
    assert_int_equal(rx_chunk_saying(&rx, t, 0, 1, 60000), STRATA_ERR_PROTO);
    assert_true(rx.cap == 0 && !rx.tensors);
    assert_int_equal(test_log.errors, 1);
    assert_non_null(strstr(test_log.last, "malformed TENSORS message from "
                                          "the test"));
    test_log_stop();
    eng_layout_rx_free(&rx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(large_split_small_packed),
        cmocka_unit_test(dtype_change_starts_a_partition),
        cmocka_unit_test(partition_size_rounds_to_elements),
        cmocka_unit_test(shards_balance_bytes),
        cmocka_unit_test(more_shards_than_partitions),
        cmocka_unit_test(one_shard_per_holder_by_default),
        cmocka_unit_test(shards_held_round_robin),
        cmocka_unit_test(a_shard_moves_to_a_taker),
        cmocka_unit_test(an_empty_shard_moves_without_a_region),
        cmocka_unit_test(a_spare_holds_no_shard_until_it_takes_one),
        cmocka_unit_test(auto_partition_follows_model_and_shards),
        cmocka_unit_test(hash_depends_on_everything),
        cmocka_unit_test(mismatch_names_first_difference),
        cmocka_unit_test(bad_descriptions_are_refused),
        cmocka_unit_test(a_layout_takes_memory_as_its_tensors_arrive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
