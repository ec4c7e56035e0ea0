/* Forward and backward passes of the MLP; GEMMs in OpenBLAS. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "perf/train/log.h"
#include "perf/train/mlp.h"

struct perf_mlp_work {
    perf_mlp_dims_t d;
    size_t max_batch;
    float *h;      /* max_batch x hidden: ReLU activations */
    float *dh;     /* max_batch x hidden: their gradient */
    float *z;      /* max_batch x out: logits, then their grad */
    float *x;      /* max_batch x in: an evaluation chunk */
    uint8_t *y;    /* max_batch labels of that chunk */
    uint32_t *idx; /* max_batch sample indices of that chunk */
};

typedef struct mlp_views {
    float *w1, *b1, *w2, *b2;
} mlp_views_t;

static mlp_views_t views(const perf_mlp_dims_t *d, const float *flat)
{
    float *p = (float *)flat;
    mlp_views_t v;
    v.w1 = p;
    v.b1 = v.w1 + d->hidden * d->in;
    v.w2 = v.b1 + d->hidden;
    v.b2 = v.w2 + d->out * d->hidden;
    return v;
}

size_t perf_mlp_param_count(const perf_mlp_dims_t *d)
{
    return d->hidden * d->in + d->hidden + d->out * d->hidden + d->out;
}

void perf_mlp_tensors(const perf_mlp_dims_t *d,
                      perf_mlp_tensor_t tensors_out[PERF_MLP_TENSORS])
{
    const size_t counts[PERF_MLP_TENSORS] = {d->hidden * d->in, d->hidden,
                                             d->out * d->hidden, d->out};
    static const char *const names[PERF_MLP_TENSORS] = {
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    size_t offset = 0;
    for (int i = 0; i < PERF_MLP_TENSORS; i++) {
        tensors_out[i] = (perf_mlp_tensor_t){names[i], offset, counts[i]};
        offset += counts[i];
    }
}

void perf_mlp_init(const perf_mlp_dims_t *d, uint64_t seed, float *params)
{
    perf_rng_t rng;
    perf_rng_seed(&rng, seed);
    mlp_views_t v = views(d, params);
    double s1 = sqrt(2.0 / (double)d->in);
    double s2 = sqrt(1.0 / (double)d->hidden);
    for (size_t i = 0; i < d->hidden * d->in; i++)
        v.w1[i] = (float)(s1 * perf_rng_normal(&rng));
    for (size_t i = 0; i < d->out * d->hidden; i++)
        v.w2[i] = (float)(s2 * perf_rng_normal(&rng));
    memset(v.b1, 0, d->hidden * sizeof(float));
    memset(v.b2, 0, d->out * sizeof(float));
}

strata_status_t perf_mlp_work_create(const perf_mlp_dims_t *d, size_t max_batch,
                                     perf_mlp_work_t **work_out)
{
    perf_mlp_work_t *w = calloc(1, sizeof(*w));
    if (!w)
        goto nomem;
    w->d = *d;
    w->max_batch = max_batch;
    w->h = malloc(max_batch * d->hidden * sizeof(float));
    w->dh = malloc(max_batch * d->hidden * sizeof(float));
    w->z = malloc(max_batch * d->out * sizeof(float));
    w->x = malloc(max_batch * d->in * sizeof(float));
    w->y = malloc(max_batch);
    w->idx = malloc(max_batch * sizeof(uint32_t));
    if (!w->h || !w->dh || !w->z || !w->x || !w->y || !w->idx)
        goto free_work;
    *work_out = w;
    return STRATA_OK;

free_work:
    perf_mlp_work_free(w);
nomem:
    perf_error("cannot allocate the MLP's scratch for batches of %zu",
               max_batch);
    return STRATA_ERR_NOMEM;
}

void perf_mlp_work_free(perf_mlp_work_t *w)
{
    if (!w)
        return;
    free(w->h);
    free(w->dh);
    free(w->z);
    free(w->x);
    free(w->y);
    free(w->idx);
    free(w);
}

/* h = relu(x W1^T + b1); z = h W2^T + b2 */
static void forward(perf_mlp_work_t *w, const mlp_views_t *v, const float *x,
                    size_t n)
{
    const perf_mlp_dims_t *d = &w->d;
    for (size_t i = 0; i < n; i++)
        memcpy(w->h + i * d->hidden, v->b1, d->hidden * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)d->hidden,
                (int)d->in, 1.0f, x, (int)d->in, v->w1, (int)d->in, 1.0f, w->h,
                (int)d->hidden);
    for (size_t i = 0; i < n * d->hidden; i++)
        w->h[i] = w->h[i] > 0.0f ? w->h[i] : 0.0f;
    for (size_t i = 0; i < n; i++)
        memcpy(w->z + i * d->out, v->b2, d->out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)d->out,
                (int)d->hidden, 1.0f, w->h, (int)d->hidden, v->w2,
                (int)d->hidden, 1.0f, w->z, (int)d->out);
}

/* Softmax cross-entropy of each row of z; when grad is set, z is replaced
 * by dLoss/dz of the mean loss. Returns the summed loss. */
static double softmax_xent(float *z, size_t n, size_t classes, const uint8_t *y,
                           int grad, size_t *correct_out)
{
    double total = 0.0;
    size_t correct = 0;
    for (size_t i = 0; i < n; i++) {
        float *row = z + i * classes;
        size_t best = 0;
        for (size_t c = 1; c < classes; c++)
            best = row[c] > row[best] ? c : best;
        correct += best == y[i];
        const double top = row[best]; /* row is overwritten below */
        double sum = 0.0;
        for (size_t c = 0; c < classes; c++)
            sum += exp((double)row[c] - top);
        total += log(sum) - ((double)row[y[i]] - top);
        if (!grad)
            continue;
        for (size_t c = 0; c < classes; c++) {
            double p = exp((double)row[c] - top) / sum;
            row[c] = (float)((p - (c == y[i])) / (double)n);
        }
    }
    if (correct_out)
        *correct_out = correct;
    return total;
}

static void column_sums(const float *m, size_t rows, size_t cols, float *out)
{
    memset(out, 0, cols * sizeof(float));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            out[j] += m[i * cols + j];
}

double perf_mlp_loss_grad(perf_mlp_work_t *w, const float *params,
                          const float *x, const uint8_t *y, size_t n,
                          float *grads)
{
    const perf_mlp_dims_t *d = &w->d;
    mlp_views_t v = views(d, params), g = views(d, grads);
    forward(w, &v, x, n);
    double loss = softmax_xent(w->z, n, d->out, y, 1, NULL);
    /* dW2 = dz^T h, db2 = sum dz */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d->out,
                (int)d->hidden, (int)n, 1.0f, w->z, (int)d->out, w->h,
                (int)d->hidden, 0.0f, g.w2, (int)d->hidden);
    column_sums(w->z, n, d->out, g.b2);
    /* dh = dz W2, masked by the ReLU: h > 0 exactly where it was active. */
    float *dh = w->dh;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
                (int)d->hidden, (int)d->out, 1.0f, w->z, (int)d->out, v.w2,
                (int)d->hidden, 0.0f, dh, (int)d->hidden);
    for (size_t i = 0; i < n * d->hidden; i++)
        dh[i] = w->h[i] > 0.0f ? dh[i] : 0.0f;
    /* dW1 = dh^T x, db1 = sum dh */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d->hidden,
                (int)d->in, (int)n, 1.0f, dh, (int)d->hidden, x, (int)d->in,
                0.0f, g.w1, (int)d->in);
    column_sums(dh, n, d->hidden, g.b1);
    return loss / (double)n;
}

double perf_mlp_loss(perf_mlp_work_t *w, const float *params, const float *x,
                     const uint8_t *y, size_t n, size_t *correct_out)
{
    mlp_views_t v = views(&w->d, params);
    forward(w, &v, x, n);
    return softmax_xent(w->z, n, w->d.out, y, 0, correct_out) / (double)n;
}

void perf_mlp_evaluate(perf_mlp_work_t *w, const float *params,
                       const perf_dataset_t *ds, double *acc_out,
                       double *loss_out)
{
    size_t correct = 0;
    double loss = 0.0;
    for (size_t at = 0; at < ds->count; at += w->max_batch) {
        size_t n =
            ds->count - at < w->max_batch ? ds->count - at : w->max_batch;
        for (size_t i = 0; i < n; i++)
            w->idx[i] = (uint32_t)(at + i);
        perf_dataset_gather(ds, w->idx, n, w->x, w->y);
        size_t c;
        loss += perf_mlp_loss(w, params, w->x, w->y, n, &c) * (double)n;
        correct += c;
    }
    *acc_out = (double)correct / (double)ds->count;
    *loss_out = loss / (double)ds->count;
}

void perf_mlp_sgd(size_t count, float lr, const float *grads, float *params)
{
    cblas_saxpy((int)count, -lr, grads, 1, params, 1);
}
