/* Attention one query row at a time, each row computed exactly as it would be alone.
 *
 * out[r][h] = (sum_i e_i v[g][j_i]) / sum_i e_i,   e_i = exp(s_i - max_i s_i),   s_i = scale * (q[h][r] . k[g][j_i])
 *
 * for query row r and head h over the keys j_1 < j_2 < ... it sees (a causal row: the first n keys; a tree node: the
 * cache and its ancestors), g = h / (heads / kv_heads) the key/value head its group of query heads shares (GQA,
 * Ainslie et al. 2023). Every sum runs in a fixed order of its own:
 *   a dot product: 16 partial sums over the dimensions (lane l adds dimensions l, l + 16, l + 32, ... in turn), then
 *     the fixed tree (l, l + 8), (l, l + 4), (l, l + 2), (l, l + 1);
 *   the exponentials' total: 16 partial sums over the keys, then the same tree;
 *   an output dimension: the keys one after another, then one division by the total.
 * So a row's bits depend only on its query and the keys it sees, never on how many rows or threads share the call
 * (a pass over k + 1 rows gives, row for row, the bits of k + 1 one-row steps, as the int4 product does), and the
 * three instruction sets below (AVX-512, AVX2, plain C) compute the same bits: no multiply and add are contracted
 * into one (see compiled.py), and the exponential is the same plain float arithmetic everywhere. Head dimensions are a
 * multiple of 16.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define LANES 16

/* The fixed tree over 16 partial sums. */
static float lanes_total(float *part) {
    for (int width = LANES / 2; width > 0; width /= 2)
        for (int l = 0; l < width; l++) part[l] += part[l + width];
    return part[0];
}

/* exp(x) for x <= 0 (Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2, a degree-6 polynomial in r, times 2^n) in plain
 * float operations, which the compiler may put in vectors without changing a bit: n is rounded by adding and
 * subtracting 1.5 * 2^23, and 2^n is built in the exponent's bits. Below -87 it returns exp(-87) (about 1.6e-38: a
 * key that far below the row's best adds nothing a float32 total can hold). */
static float exp_nonpositive(float x) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23 */
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_to_n;
    memcpy(&two_to_n, &bits, sizeof two_to_n);
    return p * two_to_n;
}

#if defined(__AVX2__)
/* The tree's last three levels on 8 lanes already holding (l, l + 8). */
static inline float total8(__m256 eight) {
    __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
    __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}
#endif

#if defined(__AVX512F__)
#define KEYS_AT_ONCE 4
/* q . k for KEYS_AT_ONCE keys: their sums side by side (independent: each key's is the one it has alone). */
static void dots(const float *q, const float *const *keys, int d, float *result) {
    __m512 sum[KEYS_AT_ONCE];
    for (int b = 0; b < KEYS_AT_ONCE; b++) sum[b] = _mm512_setzero_ps();
    for (int i = 0; i < d; i += LANES) {
        __m512 query = _mm512_loadu_ps(q + i);
        for (int b = 0; b < KEYS_AT_ONCE; b++)
            sum[b] = _mm512_add_ps(sum[b], _mm512_mul_ps(query, _mm512_loadu_ps(keys[b] + i)));
    }
    for (int b = 0; b < KEYS_AT_ONCE; b++) {
        __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum[b]), 1));
        result[b] = total8(_mm256_add_ps(_mm512_castps512_ps256(sum[b]), high));
    }
}

/* out[t] = sum_i e_i v_i[t] for 64 dimensions t (or 16 where fewer remain), the keys in order. */
static void weighted_values(const float *e, const float *values, const int32_t *seen, int n, int d, float *out) {
    for (int t = 0; t < d;) {
        int chunks = d - t >= 4 * LANES ? 4 : 1;
        __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int i = 0; i < n; i++) {
            const float *value = values + (size_t)(seen ? seen[i] : i) * d + t;
            __m512 weight = _mm512_set1_ps(e[i]);
            for (int c = 0; c < chunks; c++)
                sum[c] = _mm512_add_ps(sum[c], _mm512_mul_ps(weight, _mm512_loadu_ps(value + c * LANES)));
        }
        for (int c = 0; c < chunks; c++) _mm512_storeu_ps(out + t + c * LANES, sum[c]);
        t += chunks * LANES;
    }
}
#elif defined(__AVX2__)
#define KEYS_AT_ONCE 2
static void dots(const float *q, const float *const *keys, int d, float *result) {
    __m256 low[KEYS_AT_ONCE], high[KEYS_AT_ONCE]; /* lanes 0..7 and 8..15 */
    for (int b = 0; b < KEYS_AT_ONCE; b++) low[b] = high[b] = _mm256_setzero_ps();
    for (int i = 0; i < d; i += LANES) {
        __m256 query_low = _mm256_loadu_ps(q + i), query_high = _mm256_loadu_ps(q + i + 8);
        for (int b = 0; b < KEYS_AT_ONCE; b++) {
            low[b] = _mm256_add_ps(low[b], _mm256_mul_ps(query_low, _mm256_loadu_ps(keys[b] + i)));
            high[b] = _mm256_add_ps(high[b], _mm256_mul_ps(query_high, _mm256_loadu_ps(keys[b] + i + 8)));
        }
    }
    for (int b = 0; b < KEYS_AT_ONCE; b++) result[b] = total8(_mm256_add_ps(low[b], high[b]));
}

static void weighted_values(const float *e, const float *values, const int32_t *seen, int n, int d, float *out) {
    for (int t = 0; t < d; t += LANES) {
        __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();
        for (int i = 0; i < n; i++) {
            const float *value = values + (size_t)(seen ? seen[i] : i) * d + t;
            __m256 weight = _mm256_set1_ps(e[i]);
            low = _mm256_add_ps(low, _mm256_mul_ps(weight, _mm256_loadu_ps(value)));
            high = _mm256_add_ps(high, _mm256_mul_ps(weight, _mm256_loadu_ps(value + 8)));
        }
        _mm256_storeu_ps(out + t, low);
        _mm256_storeu_ps(out + t + 8, high);
    }
}
#else
#define KEYS_AT_ONCE 1
static void dots(const float *q, const float *const *keys, int d, float *result) {
    float part[LANES] = {0};
    for (int i = 0; i < d; i += LANES)
        for (int l = 0; l < LANES; l++) part[l] += q[i + l] * keys[0][i + l];
    result[0] = lanes_total(part);
}

static void weighted_values(const float *e, const float *values, const int32_t *seen, int n, int d, float *out) {
    for (int t = 0; t < d; t++) out[t] = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *value = values + (size_t)(seen ? seen[i] : i) * d;
        for (int t = 0; t < d; t++) out[t] += e[i] * value[t];
    }
}
#endif

/* One row and head: out (d) from its query (d), the keys and values of its key/value head (keys, d) and the n keys
 * it sees (their indices, or NULL: the first n); scores a buffer of n + KEYS_AT_ONCE floats. */
static void attend(const float *query, const float *keys, const float *values, int d, const int32_t *seen, int n,
                   float scale, float *scores, float *out) {
    const float *block[KEYS_AT_ONCE];
    float result[KEYS_AT_ONCE];
    for (int i = 0; i < n; i += KEYS_AT_ONCE) { /* past the n-th key, the first key again: its score is dropped */
        for (int b = 0; b < KEYS_AT_ONCE; b++)
            block[b] = keys + (size_t)(i + b < n ? (seen ? seen[i + b] : i + b) : 0) * d;
        dots(query, block, d, result);
        for (int b = 0; b < KEYS_AT_ONCE; b++) scores[i + b] = scale * result[b];
    }
    float best = scores[0];
    for (int i = 1; i < n; i++) best = scores[i] > best ? scores[i] : best;
    for (int i = 0; i < n; i++) scores[i] = exp_nonpositive(scores[i] - best);
    float part[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) part[l] += scores[i + l];
    for (int l = 0; i + l < n; l++) part[l] += scores[i + l];
    float total = lanes_total(part);
    weighted_values(scores, values, seen, n, d, out);
    for (int t = 0; t < d; t++) out[t] /= total;
}

/* out (rows, heads, d) from q (heads, rows, d), k and v (kv_heads, keys, d): struct rows_attention_args (kernels.h).
 * Returns 0, or -1 when out of memory. */
int rows_attention(const struct rows_attention_args *args) {
    const struct rows_attention_args a = *args;
    int group = a.heads / a.kv_heads, failed = 0;
#pragma omp parallel
    {
        float *scores = malloc(sizeof(float) * ((size_t)a.keys + KEYS_AT_ONCE));
        if (!scores) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int task = 0; task < a.rows * a.heads; task++) {
            int r = task / a.heads, h = task % a.heads;
            size_t head = (size_t)(h / group) * a.keys * a.d;
            if (scores)
                attend(a.q + ((size_t)h * a.rows + r) * a.d, a.k + head, a.v + head, a.d,
                       a.seen_index ? a.seen_index + (size_t)r * a.keys : NULL, a.seen_count[r], a.scale, scores,
                       a.out + ((size_t)r * a.heads + h) * a.d);
        }
        free(scores);
    }
    return failed ? -1 : 0;
}
