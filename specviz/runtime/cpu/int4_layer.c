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

#include "kernels.h"

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

/* h = n1(x); q, k, v = h W_qkv^T + b_qkv; q, k = RoPE(q), RoPE(k): struct int4_layer_args' first block (kernels.h).
 * 0, or -1 when out of memory. */
int int4_layer_in(const struct int4_layer_args *args) {
    const struct int4_layer_args a = *args;
    int width = (a.heads + 2 * a.kv_heads) * a.d;
    float *h = malloc(sizeof(float) * (size_t)a.rows * a.hidden);
    float *projected = malloc(sizeof(float) * (size_t)a.rows * width);
    int failed = !h || !projected;
    if (!failed) {
        rms_norm_rows(a.x, a.rows, a.hidden, a.attention_norm, a.eps, h);
        failed = int4_rows_product(h, a.rows, a.hidden, width, a.qkv, a.qkv_bias, projected);
    }
    for (int r = 0; !failed && r < a.rows; r++) {
        const float *row = projected + (size_t)r * width;
        const float *c = a.cos + (size_t)r * a.d, *s = a.sin + (size_t)r * a.d;
        rotate_heads(row, a.heads, a.rows, r, a.d, c, s, a.q);
        rotate_heads(row + (size_t)a.heads * a.d, a.kv_heads, a.rows, r, a.d, c, s, a.k);
        for (int g = 0; g < a.kv_heads; g++)
            memcpy(a.v + ((size_t)g * a.rows + r) * a.d, row + (size_t)(a.heads + a.kv_heads + g) * a.d,
                   sizeof(float) * a.d);
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

/* x += W_o Attn(q, keys, values); h = n2(x); x += W_down (silu(h W_gate^T) * h W_up^T): struct int4_layer_args'
 * second block (kernels.h), x updated in place. 0, or -1 when out of memory. */
int int4_layer_out(const struct int4_layer_args *args) {
    const struct int4_layer_args a = *args;
    float *attended = malloc(sizeof(float) * (size_t)a.rows * a.heads * a.d);
    float *h = malloc(sizeof(float) * (size_t)a.rows * a.hidden);
    float *both = malloc(sizeof(float) * (size_t)a.rows * 2 * a.intermediate);
    float *act = malloc(sizeof(float) * (size_t)a.rows * a.intermediate);
    struct rows_attention_args attention = {
        .q = a.q, .rows = a.rows, .heads = a.heads, .d = a.d, .k = a.keys, .v = a.values, .kv_heads = a.kv_heads,
        .keys = a.n_keys, .seen_count = a.seen_count, .seen_index = a.seen_index, .scale = a.scale, .out = attended,
    };
    int failed = !attended || !h || !both || !act;
    failed = failed || rows_attention(&attention);
    failed = failed || add_product(a.x, attended, a.rows, a.heads * a.d, a.hidden, a.o, a.o_bias);
    if (!failed) {
        rms_norm_rows(a.x, a.rows, a.hidden, a.mlp_norm, a.eps, h);
        failed = int4_rows_product(h, a.rows, a.hidden, 2 * a.intermediate, a.gate_up, a.gate_up_bias, both);
    }
    for (int r = 0; !failed && r < a.rows; r++) {
        const float *gate = both + (size_t)r * 2 * a.intermediate, *up = gate + a.intermediate;
        for (int i = 0; i < a.intermediate; i++)
            act[(size_t)r * a.intermediate + i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
    }
    failed = failed || add_product(a.x, act, a.rows, a.intermediate, a.hidden, a.down, a.down_bias);
    free(attended);
    free(h);
    free(both);
    free(act);
    return failed ? -1 : 0;
}
