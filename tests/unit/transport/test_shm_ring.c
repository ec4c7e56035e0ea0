/*
 * The shm record ring: a producer and a consumer thread exchange records of
 * every size in order (run under TSan too), the doorbells fire only when
 * armed, and a producer that breaks the ring is caught.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transport/shm/ring.h"
#include "transport/transport.h"

#define CAP 4096
#define NRECS 50000

static void *new_ring(void)
{
    void *map = aligned_alloc(4096, tp_shm_ring_bytes(CAP));
    memset(map, 0, tp_shm_ring_bytes(CAP));
    return map;
}

static void *producer(void *arg)
{
    tp_shm_ring_t tx;
    tp_shm_ring_attach(&tx, arg, CAP);
    uint8_t msg[TP_MSG_MAX];
    for (uint32_t i = 0; i < NRECS; i++) {
        bool is_msg = i % 3 == 0;
        uint32_t len = is_msg ? (i * 7) % 600 : i;
        for (uint32_t j = 0; j < len && is_msg; j++)
            msg[j] = (uint8_t)(i + j);
        while (!tp_shm_ring_room(&tx, is_msg ? len : 0))
            ;
        tp_shm_ring_push(&tx, is_msg ? TP_SHM_REC_MSG : TP_SHM_REC_WRITE_IMM,
                         len, is_msg ? 0 : i, msg);
    }
    return NULL;
}

static void records_arrive_in_order(void **state)
{
    (void)state;
    void *map = new_ring();
    tp_shm_ring_t rx;
    tp_shm_ring_attach(&rx, map, CAP);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, producer, map), 0);
    for (uint32_t i = 0; i < NRECS;) {
        tp_shm_rec_t rec;
        const uint8_t *p;
        bool got;
        const char *why;
        assert_int_equal(tp_shm_ring_peek(&rx, &rec, &p, &got, &why),
                         STRATA_OK);
        if (!got) {
            tp_shm_ring_release(&rx);
            continue;
        }
        if (i % 3 == 0) {
            assert_int_equal(rec.type, TP_SHM_REC_MSG);
            assert_int_equal(rec.len, (i * 7) % 600);
            for (uint32_t j = 0; j < rec.len; j++)
                assert_int_equal(p[j], (uint8_t)(i + j));
        } else {
            assert_int_equal(rec.type, TP_SHM_REC_WRITE_IMM);
            assert_int_equal(rec.imm, i);
            assert_int_equal(rec.len, i);
        }
        tp_shm_ring_next(&rx, &rec);
        if (++i % 16 == 0)
            tp_shm_ring_release(&rx);
    }
    pthread_join(t, NULL);
    assert_true(tp_shm_ring_empty(&rx));
    free(map);
}

static void doorbells_fire_only_when_armed(void **state)
{
    (void)state;
    void *map = new_ring();
    tp_shm_ring_t tx, rx;
    tp_shm_ring_attach(&tx, map, CAP);
    tp_shm_ring_attach(&rx, map, CAP);
    assert_false(tp_shm_ring_push(&tx, TP_SHM_REC_WRITE_IMM, 1, 1, NULL));
    assert_false(tp_shm_ring_arm(&rx)); /* a record is waiting */
    tp_shm_rec_t rec;
    const uint8_t *p;
    bool got;
    const char *why;
    tp_shm_ring_peek(&rx, &rec, &p, &got, &why);
    tp_shm_ring_next(&rx, &rec);
    assert_false(tp_shm_ring_release(&rx));
    assert_true(tp_shm_ring_arm(&rx));
    assert_true(tp_shm_ring_push(&tx, TP_SHM_REC_WRITE_IMM, 2, 2, NULL));
    assert_false(tp_shm_ring_push(&tx, TP_SHM_REC_WRITE_IMM, 3, 3, NULL));

    /* A full ring: the producer asks for space, the consumer's release
     * says to ring it. */
    while (tp_shm_ring_room(&tx, 0))
        tp_shm_ring_push(&tx, TP_SHM_REC_WRITE_IMM, 0, 0, NULL);
    assert_true(tp_shm_ring_want_space(&tx, 0));
    tp_shm_ring_peek(&rx, &rec, &p, &got, &why);
    tp_shm_ring_next(&rx, &rec);
    assert_true(tp_shm_ring_release(&rx));
    assert_false(tp_shm_ring_release(&rx));
    assert_true(tp_shm_ring_room(&tx, 0));
    free(map);
}

static strata_status_t peek(tp_shm_ring_t *rx)
{
    tp_shm_rec_t rec;
    const uint8_t *p;
    bool got;
    const char *why = NULL;
    strata_status_t st = tp_shm_ring_peek(rx, &rec, &p, &got, &why);
    assert_true(st == STRATA_OK || why != NULL);
    return st;
}

static void broken_rings_are_caught(void **state)
{
    (void)state;
    void *map = new_ring();
    tp_shm_ring_hdr_t *hdr = map;
    tp_shm_rec_t *first = (tp_shm_rec_t *)((char *)map + TP_SHM_RING_DATA);
    tp_shm_ring_t rx;

    tp_shm_ring_attach(&rx, map, CAP);
    atomic_store(&hdr->head, CAP + 16); /* more than the ring holds */
    assert_int_equal(peek(&rx), STRATA_ERR_PROTO);

    tp_shm_ring_attach(&rx, map, CAP);
    atomic_store(&hdr->head, 7); /* not a whole record */
    assert_int_equal(peek(&rx), STRATA_ERR_PROTO);

    tp_shm_ring_attach(&rx, map, CAP);
    *first = (tp_shm_rec_t){.type = 99};
    atomic_store(&hdr->head, 16);
    assert_int_equal(peek(&rx), STRATA_ERR_PROTO);

    tp_shm_ring_attach(&rx, map, CAP);
    *first = (tp_shm_rec_t){.type = TP_SHM_REC_MSG, .len = 64};
    atomic_store(&hdr->head, 32); /* the message runs past head */
    assert_int_equal(peek(&rx), STRATA_ERR_PROTO);

    tp_shm_ring_attach(&rx, map, CAP);
    *first = (tp_shm_rec_t){.type = TP_SHM_REC_MSG, .len = TP_MSG_MAX + 16};
    atomic_store(&hdr->head, CAP);
    assert_int_equal(peek(&rx), STRATA_ERR_PROTO);

    tp_shm_ring_attach(&rx, map, CAP);
    *first = (tp_shm_rec_t){.type = TP_SHM_REC_PAD};
    atomic_store(&hdr->head, 16); /* padding that claims the whole ring */
    assert_int_equal(peek(&rx), STRATA_ERR_PROTO);
    free(map);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(records_arrive_in_order),
        cmocka_unit_test(doorbells_fire_only_when_armed),
        cmocka_unit_test(broken_rings_are_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
