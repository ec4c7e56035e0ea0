/*
 * The model: a multilayer perceptron in -> hidden (ReLU) -> out with a
 * softmax cross-entropy loss, 784-256-10 for Fashion-MNIST. Its GEMMs go
 * through OpenBLAS's cblas.
 *
 * Parameters, and gradients in the same layout, live in one flat fp32
 * buffer, so a distribution layer can register its tensors as they are:
 * fc1.weight (hidden x in), fc1.bias (hidden), fc2.weight (out x hidden),
 * fc2.bias (out).
 */
#ifndef STRATA_PERF_TRAIN_MLP_H
#define STRATA_PERF_TRAIN_MLP_H

#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#include "perf/train/data.h"

typedef struct perf_mlp_dims {
    size_t in, hidden, out;
} perf_mlp_dims_t;

#define PERF_MLP_TENSORS 4

typedef struct perf_mlp_tensor {
    const char *name;
    size_t offset; /* in elements, into the flat buffer */
    size_t count;
} perf_mlp_tensor_t;

size_t perf_mlp_param_count(const perf_mlp_dims_t *d);
void perf_mlp_tensors(const perf_mlp_dims_t *d,
                      perf_mlp_tensor_t tensors_out[PERF_MLP_TENSORS]);

/* He-normal weights for fc1 (it feeds a ReLU), LeCun-normal for fc2, zero
 * biases; the same seed gives the same model in every process. */
void perf_mlp_init(const perf_mlp_dims_t *d, uint64_t seed, float *params);

/* Scratch for batches of up to max_batch samples; one per thread. */
typedef struct perf_mlp_work perf_mlp_work_t;

strata_status_t perf_mlp_work_create(const perf_mlp_dims_t *d, size_t max_batch,
                                     perf_mlp_work_t **work_out);
void perf_mlp_work_free(perf_mlp_work_t *w);

/* Mean loss over the n samples x (n x in) with labels y; writes the
 * gradient of that mean into grads. n <= max_batch. */
double perf_mlp_loss_grad(perf_mlp_work_t *w, const float *params,
                          const float *x, const uint8_t *y, size_t n,
                          float *grads);

/* Mean loss only, and how many samples the model classifies right. */
double perf_mlp_loss(perf_mlp_work_t *w, const float *params, const float *x,
                     const uint8_t *y, size_t n, size_t *correct_out);

/* Accuracy and mean loss over a whole data set. */
void perf_mlp_evaluate(perf_mlp_work_t *w, const float *params,
                       const perf_dataset_t *ds, double *acc_out,
                       double *loss_out);

/* params -= lr * grads */
void perf_mlp_sgd(size_t count, float lr, const float *grads, float *params);

#endif /* STRATA_PERF_TRAIN_MLP_H */
