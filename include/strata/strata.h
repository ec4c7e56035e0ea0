/*
 * Strata: gradient aggregation for heterogeneous training clusters over RDMA.
 *
 * This is the public C API a training framework sees. Every function that can
 * fail returns a strata_status_t; 0 (STRATA_OK) means success, and the
 * function that detected an error has already logged it with its context.
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Status codes. X(name, value, description): the list is the single source of
 * the enum and of strata_strerror()'s text.
 */
#define STRATA_STATUS_LIST(X)                                                  \
    X(STRATA_OK, 0, "success")                                                 \
    X(STRATA_INPROGRESS, 1, "operation in progress")                           \
    X(STRATA_ERR_INVALID, 2, "invalid argument")                               \
    X(STRATA_ERR_CONFIG, 3, "invalid configuration")                           \
    X(STRATA_ERR_NOMEM, 4, "out of memory")                                    \
    X(STRATA_ERR_IO, 5, "input/output error")                                  \
    X(STRATA_ERR_TIMEOUT, 6, "timed out")                                      \
    X(STRATA_ERR_PEER, 7, "peer failed or disconnected")                       \
    X(STRATA_ERR_PROTO, 8, "malformed or unexpected message")                  \
    X(STRATA_ERR_AUTH, 9, "authentication failed")                             \
    X(STRATA_ERR_UNSUPPORTED, 10, "not supported or not compiled in")          \
    X(STRATA_ERR_NO_DEVICE, 11, "no usable device")                            \
    X(STRATA_ERR_AGAIN, 12, "resource temporarily unavailable")                \
    X(STRATA_ERR_MISMATCH, 13, "mismatch between ranks")                       \
    X(STRATA_ERR_STATE, 14, "operation not valid in the current state")        \
    X(STRATA_ERR_RANGE, 15, "value out of range")                              \
    X(STRATA_ERR_CANCELED, 16, "operation canceled")

#define STRATA_STATUS_ENUM_ENTRY(name, value, text) name = value,
typedef enum strata_status {
    STRATA_STATUS_LIST(STRATA_STATUS_ENUM_ENTRY)
} strata_status_t;
#undef STRATA_STATUS_ENUM_ENTRY

/* A fixed English description of a status; never NULL, even for unknown codes.
 */
const char *strata_strerror(strata_status_t status);

/* Element types of tensors and of the reduction kernels. fp16 is IEEE
 * binary16; bf16 is the upper half of an fp32. */
typedef enum strata_dtype {
    STRATA_FP32,
    STRATA_FP64,
    STRATA_FP16,
    STRATA_BF16,
} strata_dtype_t;

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH" (of the library loaded, which
 * may differ from the header's STRATA_VERSION_* the caller was built with). */
const char *strata_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_STRATA_H */
