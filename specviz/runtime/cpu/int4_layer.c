/* An int4 model's decoder layer in two calls: the Python around some forty small tensor operations a layer (each a
 * few microseconds of dispatch) costs a step more than its products do beyond its weights' bytes.
 *
 * The math is the lean step's (llama_step.py; LLaMA, Touvron et al. 2023; Qwen2's q, k and v biases):
 *   layer_in:  h = n1(x);  q, k, v = h W_qkv^T + b_qkv  (one int4 product, int4_rows.c);  q, k = RoPE(q), RoPE(k)
 *   (the caller appends k and v to the model's cache)
 *   layer_out: x += W_o Attn(q, keys, values)  (rows_attention, row_attention.c);  h = n2(x);
 *              x += W_down (silu(h W_gate^T) * h W_up^T)
 *   n(x) = g * x / sqrt(mean(x^2) + eps)  (RMSNorm, Zhang & Sennrich 2019);  silu(z) = z / (1 + e^-z)
 *   RoPE: (x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin) at the row's angles.
 * EVERY pass of an int4 model runs it, a target's and transformers' own forward included (llama_step.py), so it
 * defines the int4 model's numbers: its norms' sums are this file's (float32, inputs in order), not torch's. Each row
 * is computed alone (norms, RoPE and SiLU row by row, the products' and attention's rows never meet), so a pass over
 * k rows gives, row for row, the bits of k one-row calls: what makes an int4 target exact to itself.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int int4_rows_product(const float *x, int rows, int inputs, int outputs, const uint8_t *weight, const float *bias,
                      float *y);
int rows_attention(const float *q, int rows, int heads, int d, const float *k, const float *v, int kv_heads, int keys,
                   const int32_t *seen_count, const int32_t *seen_index, float scale, float *out);

static void rms_norm_rows(const float *x, int rows, int hidden, const float *gain, float eps, float *out) {
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * hidden;
        float squares = 0.0f;
        for (int i = 0; i < hidden; i++) squares += row[i] * row[i];
        float inverse = 1.0f / sqrtf(squares / (float)hidden + eps);
        for (int i = 0; i < hidden; i++) out[(size_t)r * hidden + i] = gain[i] * (row[i] * inverse);
    }
}

/* heads of one row, (heads, d) at in, rotated into (heads, rows, d) at out for row r */
static void rotate_heads(const float *in, int heads, int rows, int r, int d, const float *cos, const float *sin,
                         float *out) {
    int half = d / 2;
    for (int h = 0; h < heads; h++) {
        const float *x = in + (size_t)h * d;
        float *y = out + ((size_t)h * rows + r) * d;
        for (int i = 0; i < half; i++) {
            y[i] = x[i] * cos[i] - x[i + half] * sin[i];
            y[i + half] = x[i + half] * cos[i + half] + x[i] * sin[i + half];
        }
    }
}

/* x (rows, hidden); cos, sin (rows, d); q out (heads, rows, d), k and v out (kv_heads, rows, d). 0, or -1 when out
 * of memory. */
int int4_layer_in(const float *x, int rows, int hidden, const float *gain, float eps, const uint8_t *qkv,
                  const float *qkv_bias, int heads, int kv_heads, int d, const float *cos, const float *sin, float *q,
                  float *k, float *v) {
    int width = (heads + 2 * kv_heads) * d;
    float *h = malloc(sizeof(float) * (size_t)rows * hidden);
    float *projected = malloc(sizeof(float) * (size_t)rows * width);
    int failed = !h || !projected;
    if (!failed) {
        rms_norm_rows(x, rows, hidden, gain, eps, h);
        failed = int4_rows_product(h, rows, hidden, width, qkv, qkv_bias, projected);
    }
    for (int r = 0; !failed && r < rows; r++) {
        const float *row = projected + (size_t)r * width;
        const float *c = cos + (size_t)r * d, *s = sin + (size_t)r * d;
        rotate_heads(row, heads, rows, r, d, c, s, q);
        rotate_heads(row + (size_t)heads * d, kv_heads, rows, r, d, c, s, k);
        for (int g = 0; g < kv_heads; g++)
            memcpy(v + ((size_t)g * rows + r) * d, row + (size_t)(heads + kv_heads + g) * d, sizeof(float) * d);
    }
    free(h);
    free(projected);
    return failed ? -1 : 0;
}

static int add_product(float *x, const float *in, int rows, int inputs, int outputs, const uint8_t *weight,
                       const float *bias) {
    float *y = malloc(sizeof(float) * (size_t)rows * outputs);
    int failed = !y || int4_rows_product(in, rows, inputs, outputs, weight, bias, y);
    for (size_t i = 0; !failed && i < (size_t)rows * outputs; i++) x[i] += y[i];
    free(y);
    return failed ? -1 : 0;
}

/* x (rows, hidden) updated in place; q (heads, rows, d); keys and values (kv_heads, n_keys, d) with the rows' own;
 * seen_count / seen_index as rows_attention reads them; gate_up: the gate's and the up's weights end to end. */
int int4_layer_out(float *x, int rows, int hidden, const float *q, int heads, int d, const float *keys,
                   const float *values, int kv_heads, int n_keys, const int32_t *seen_count, const int32_t *seen_index,
                   float scale, const uint8_t *o, const float *o_bias, const float *gain, float eps,
                   const uint8_t *gate_up, const float *gate_up_bias, int intermediate, const uint8_t *down,
                   const float *down_bias) {
    float *attended = malloc(sizeof(float) * (size_t)rows * heads * d);
    float *h = malloc(sizeof(float) * (size_t)rows * hidden);
    float *both = malloc(sizeof(float) * (size_t)rows * 2 * intermediate);
    float *act = malloc(sizeof(float) * (size_t)rows * intermediate);
    int failed = !attended || !h || !both || !act;
    failed = failed || rows_attention(q, rows, heads, d, keys, values, kv_heads, n_keys, seen_count, seen_index, scale,
                                      attended);
    failed = failed || add_product(x, attended, rows, heads * d, hidden, o, o_bias);
    if (!failed) {
        rms_norm_rows(x, rows, hidden, gain, eps, h);
        failed = int4_rows_product(h, rows, hidden, 2 * intermediate, gate_up, gate_up_bias, both);
    }
    for (int r = 0; !failed && r < rows; r++) {
        const float *gate = both + (size_t)r * 2 * intermediate, *up = gate + intermediate;
        for (int i = 0; i < intermediate; i++)
            act[(size_t)r * intermediate + i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
    }
    failed = failed || add_product(x, act, rows, intermediate, hidden, down, down_bias);
    free(attended);
    free(h);
    free(both);
    free(act);
    return failed ? -1 : 0;
}
