/*
 * Reed-Solomon erasure coding over GF(2^8), on ISA-L: a block cut into k
 * data fragments gets m parity fragments, and any k of the k + m fragments
 * give the block back. The generator is a Cauchy matrix
 * (gf_gen_cauchy1_matrix), whose every k rows are invertible, so that any
 * k survivors decode, which Vandermonde's (gf_gen_rs_matrix) does not
 * promise for every k and m. Encoding and decoding are ec_encode_data with
 * tables from ec_init_tables; decoding inverts the k surviving rows
 * (gf_invert_matrix).
 */
#ifndef STRATA_AGG_EC_H
#define STRATA_AGG_EC_H

#include <stddef.h>

#include <strata/strata.h>

/* Most fragments a code may have: GF(2^8) has 255 non-zero elements. */
#define AGG_EC_MAX_FRAGMENTS 255

typedef struct agg_ec agg_ec_t;

/* A code of k data and m parity fragments (k >= 1, k + m <= 255);
 * STRATA_ERR_INVALID (logged) otherwise. */
strata_status_t agg_ec_create(unsigned k, unsigned m, agg_ec_t **ec_out);
void agg_ec_destroy(agg_ec_t *ec);
unsigned agg_ec_k(const agg_ec_t *ec);
unsigned agg_ec_m(const agg_ec_t *ec);

/* The m parity fragments of the k data fragments, each len bytes. */
void agg_ec_encode(const agg_ec_t *ec, size_t len,
                   const unsigned char *const *data,
                   unsigned char *const *parity);

/* Adds data fragment i's share to parity fragment j (0..m-1), len bytes:
 * a parity fragment that starts at zero and gets the share of every data
 * fragment, wherever each is held, ends equal to agg_ec_encode's. */
void agg_ec_encode_update(const agg_ec_t *ec, size_t len, unsigned i,
                          unsigned j, const unsigned char *data,
                          unsigned char *parity);

/* The k data fragments from any k fragments: frags[i] is fragment idx[i]
 * (0..k-1 data, k..k+m-1 parity), every idx distinct; data_out[j] receives
 * data fragment j, or nothing when NULL (only the fragments wanted are
 * decoded). A data_out buffer may be the frags[i] that holds that same
 * fragment, never another fragment's.
 * STRATA_ERR_INVALID (logged) for indices out of range or repeated. */
strata_status_t agg_ec_decode(const agg_ec_t *ec, size_t len,
                              const unsigned *idx,
                              const unsigned char *const *frags,
                              unsigned char *const *data_out);

#endif /* STRATA_AGG_EC_H */
