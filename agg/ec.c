/* Reed-Solomon erasure coding on ISA-L (agg/ec.h). */
#include "agg/ec.h"

#include <stdbool.h>
#include <string.h>

#include <isa-l/erasure_code.h>

#include "util/alloc.h"
#include "util/log.h"

struct agg_ec {
    unsigned k, m;
    unsigned char *matrix; /* (k + m) x k: identity, then the parity rows */
    unsigned char *tables; /* ec_init_tables of the parity rows */
};

strata_status_t agg_ec_create(unsigned k, unsigned m, agg_ec_t **ec_out)
{
    if (k < 1 || k + m > AGG_EC_MAX_FRAGMENTS) {
        util_error("erasure code: %u data and %u parity fragments; expected "
                   "at least one data fragment and at most %d in all",
                   k, m, AGG_EC_MAX_FRAGMENTS);
        return STRATA_ERR_INVALID;
    }
    agg_ec_t *ec = util_calloc(1, sizeof(*ec));
    if (!ec)
        goto nomem;
    ec->k = k;
    ec->m = m;
    ec->matrix = util_malloc((size_t)(k + m) * k);
    ec->tables = util_malloc((size_t)32 * k * (m ? m : 1));
    if (!ec->matrix || !ec->tables)
        goto free_ec;
    gf_gen_cauchy1_matrix(ec->matrix, (int)(k + m), (int)k);
    if (m > 0)
        ec_init_tables((int)k, (int)m, ec->matrix + (size_t)k * k, ec->tables);
    *ec_out = ec;
    return STRATA_OK;
free_ec:
    agg_ec_destroy(ec);
nomem:
    util_error("erasure code: out of memory for %u + %u fragments", k, m);
    return STRATA_ERR_NOMEM;
}

void agg_ec_destroy(agg_ec_t *ec)
{
    if (!ec)
        return;
    util_free(ec->matrix);
    util_free(ec->tables);
    util_free(ec);
}

unsigned agg_ec_k(const agg_ec_t *ec)
{
    return ec->k;
}

unsigned agg_ec_m(const agg_ec_t *ec)
{
    return ec->m;
}

/* ec_encode_data takes an int length: longer fragments go in pieces (the
 * code works byte column by byte column). */
#define AGG_EC_PIECE ((size_t)1 << 30)

static void agg_ec_run(size_t len, unsigned k, unsigned rows,
                       unsigned char *tables, const unsigned char *const *src,
                       unsigned char *const *dst)
{
    unsigned char *in[AGG_EC_MAX_FRAGMENTS], *out[AGG_EC_MAX_FRAGMENTS];
    for (size_t off = 0; off < len; off += AGG_EC_PIECE) {
        size_t n = len - off < AGG_EC_PIECE ? len - off : AGG_EC_PIECE;
        for (unsigned i = 0; i < k; i++) /* ISA-L only reads them */
            in[i] = (unsigned char *)src[i] + off;
        for (unsigned i = 0; i < rows; i++)
            out[i] = dst[i] + off;
        ec_encode_data((int)n, (int)k, (int)rows, tables, in, out);
    }
}

void agg_ec_encode(const agg_ec_t *ec, size_t len,
                   const unsigned char *const *data,
                   unsigned char *const *parity)
{
    if (ec->m > 0 && len > 0)
        agg_ec_run(len, ec->k, ec->m, ec->tables, data, parity);
}

void agg_ec_encode_update(const agg_ec_t *ec, size_t len, unsigned i,
                          unsigned j, const unsigned char *data,
                          unsigned char *parity)
{
    /* the tables of parity row j are the 32 * k bytes from 32 * k * j */
    unsigned char *tables = ec->tables + (size_t)32 * ec->k * j;
    for (size_t off = 0; off < len; off += AGG_EC_PIECE) {
        size_t n = len - off < AGG_EC_PIECE ? len - off : AGG_EC_PIECE;
        unsigned char *out = parity + off;
        ec_encode_data_update((int)n, (int)ec->k, 1, (int)i, tables,
                              (unsigned char *)data + off, &out);
    }
}

/* The rows of the inverse of the surviving fragments' rows that give the
 * missing data fragments, as tables. */
static strata_status_t agg_ec_decode_tables(const agg_ec_t *ec,
                                            const unsigned *idx,
                                            const unsigned *missing,
                                            unsigned nmissing,
                                            unsigned char *tables)
{
    unsigned k = ec->k;
    unsigned char *b = util_malloc((size_t)k * k);
    unsigned char *inv = util_malloc((size_t)k * k);
    unsigned char *rows = util_malloc((size_t)k * nmissing);
    strata_status_t st = STRATA_ERR_NOMEM;
    if (!b || !inv || !rows)
        goto free_all;
    for (unsigned i = 0; i < k; i++)
        memcpy(b + (size_t)i * k, ec->matrix + (size_t)idx[i] * k, k);
    /* A Cauchy matrix's k rows are always invertible. */
    st = gf_invert_matrix(b, inv, (int)k) == 0 ? STRATA_OK : STRATA_ERR_STATE;
    if (st != STRATA_OK) {
        util_error("erasure code: the %u surviving fragments do not decode", k);
        goto free_all;
    }
    for (unsigned j = 0; j < nmissing; j++)
        memcpy(rows + (size_t)j * k, inv + (size_t)missing[j] * k, k);
    ec_init_tables((int)k, (int)nmissing, rows, tables);
free_all:
    util_free(b);
    util_free(inv);
    util_free(rows);
    return st;
}

strata_status_t agg_ec_decode(const agg_ec_t *ec, size_t len,
                              const unsigned *idx,
                              const unsigned char *const *frags,
                              unsigned char *const *data_out)
{
    unsigned k = ec->k, n = ec->k + ec->m;
    int where[AGG_EC_MAX_FRAGMENTS]; /* data fragment j: its i in frags */
    bool seen[AGG_EC_MAX_FRAGMENTS] = {false};
    for (unsigned j = 0; j < k; j++)
        where[j] = -1;
    for (unsigned i = 0; i < k; i++) {
        if (idx[i] >= n || seen[idx[i]]) {
            util_error("erasure code: fragment %u given twice or not one of "
                       "%u",
                       idx[i], n);
            return STRATA_ERR_INVALID;
        }
        seen[idx[i]] = true;
        if (idx[i] < k)
            where[idx[i]] = (int)i;
    }
    unsigned missing[AGG_EC_MAX_FRAGMENTS], nmissing = 0;
    unsigned char *out[AGG_EC_MAX_FRAGMENTS];
    for (unsigned j = 0; j < k; j++)
        if (where[j] < 0 && data_out[j]) {
            out[nmissing] = data_out[j];
            missing[nmissing++] = j;
        }
    if (nmissing > 0) {
        unsigned char *tables = util_malloc((size_t)32 * k * nmissing);
        if (!tables) {
            util_error("erasure code: out of memory decoding");
            return STRATA_ERR_NOMEM;
        }
        strata_status_t st =
            agg_ec_decode_tables(ec, idx, missing, nmissing, tables);
        if (st == STRATA_OK && len > 0)
            agg_ec_run(len, k, nmissing, tables, frags, out);
        util_free(tables);
        if (st != STRATA_OK)
            return st;
    }
    for (unsigned j = 0; j < k; j++) /* present data fragments */
        if (where[j] >= 0 && data_out[j] && data_out[j] != frags[where[j]])
            memmove(data_out[j], frags[where[j]], len);
    return STRATA_OK;
}
