/* The package's C kernels: every function the library exports and the structs its longer calls take, included by
 * every source (each source's own header comment gives its arithmetic). compiled.py binds these through ctypes,
 * mirroring each struct field for field (RowsAttentionArgs, Int4LayerArgs), and checks the mirrors against
 * kernels_struct_size and kernels_field below when it loads the library.
 *
 * Tensors are float32 (int32 for the key indices), contiguous, row-major, in the shapes noted; weights are int4
 * tiles packed as int4_rows.c lays them out. Each kernel returns 0, or -1 when out of memory.
 */
#ifndef SPECVIZ_KERNELS_H
#define SPECVIZ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* int4_rows.c: y (rows, outputs) = x (rows, inputs) times the packed weight, plus bias (outputs) or NULL. Seven
 * arguments, called some 170 times a draft's step: the one kernel without a struct. */
int int4_rows_product(const float *x, int rows, int inputs, int outputs, const uint8_t *weight, const float *bias,
                      float *y);

/* row_attention.c: out[r][h] = softmax(scale * q[h][r] k[g]^T) v[g] over the keys row r sees, g = h / (heads /
 * kv_heads). */
struct rows_attention_args {
    const float *q; /* (heads, rows, d), d a multiple of 16 */
    int rows;
    int heads;
    int d;
    const float *k; /* (kv_heads, keys, d) */
    const float *v; /* (kv_heads, keys, d) */
    int kv_heads;
    int keys;
    const int32_t *seen_count; /* (rows): row r sees seen_count[r] >= 1 keys */
    const int32_t *seen_index; /* (rows, keys): row r's first seen_count[r] are its keys; NULL: the first keys */
    float scale;
    float *out; /* (rows, heads, d) */
};
int rows_attention(const struct rows_attention_args *args);

/* int4_layer.c: an int4 model's decoder layer in two calls, one struct for both. int4_layer_in reads the first
 * block and writes q, k and v; the caller appends k and v to its cache, sets keys, values, n_keys and the seen keys,
 * and int4_layer_out reads q and the rest and adds the layer's two residuals to x. */
struct int4_layer_args {
    float *x; /* (rows, hidden): read by int4_layer_in, added to in place by int4_layer_out */
    int rows;
    int hidden;
    int heads;
    int kv_heads;
    int d;
    float eps; /* both RMSNorms' */
    /* int4_layer_in */
    const float *attention_norm; /* (hidden): n1's gain */
    const uint8_t *qkv;          /* q, k and v's weights end to end, (heads + 2 kv_heads) d outputs */
    const float *qkv_bias;       /* ((heads + 2 kv_heads) d) or NULL */
    const float *cos;            /* (rows, d): the rows' rotary angles */
    const float *sin;            /* (rows, d) */
    float *q;                    /* (heads, rows, d): written by int4_layer_in, read by int4_layer_out */
    float *k;                    /* (kv_heads, rows, d): written by int4_layer_in */
    float *v;                    /* (kv_heads, rows, d): written by int4_layer_in */
    /* int4_layer_out */
    const float *keys;   /* (kv_heads, n_keys, d): the cache's, the rows' own included */
    const float *values; /* (kv_heads, n_keys, d) */
    int n_keys;
    const int32_t *seen_count; /* as rows_attention_args' */
    const int32_t *seen_index;
    float scale;
    const uint8_t *o;       /* hidden outputs of heads d inputs */
    const float *o_bias;    /* (hidden) or NULL */
    const float *mlp_norm;  /* (hidden): n2's gain */
    const uint8_t *gate_up; /* the gate's and the up's weights end to end, 2 intermediate outputs */
    const float *gate_up_bias;
    int intermediate;
    const uint8_t *down; /* hidden outputs of intermediate inputs */
    const float *down_bias;
};
int int4_layer_in(const struct int4_layer_args *args);
int int4_layer_out(const struct int4_layer_args *args);

/* kernels_layout.c: the structs' layout as compiled, for the ctypes mirrors' check. The size of struct `type`
 * ("rows_attention_args", "int4_layer_args"), 0 for another name; its field number `index` in declaration order:
 * the field's name, its offset and size written, or NULL past the last. */
size_t kernels_struct_size(const char *type);
const char *kernels_field(const char *type, int index, size_t *offset, size_t *size);

#endif
