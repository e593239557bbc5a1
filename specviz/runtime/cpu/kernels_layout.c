/* The layout of kernels.h's structs as this compiler lays them out, for compiled.py's check of its ctypes mirrors:
 * each struct's size, and each field's name, offset and size in declaration order. A field left out of the table
 * below changes no offset but the struct's size (checked too) or the count of fields the mirror has. */
#include <string.h>

#include "kernels.h"

struct field {
    const char *type, *name;
    size_t offset, size;
};

#define FIELD(type, name) {#type, #name, offsetof(struct type, name), sizeof(((struct type *)0)->name)}
#define ATTENTION(name) FIELD(rows_attention_args, name)
#define LAYER(name) FIELD(int4_layer_args, name)

static const struct field fields[] = {
    ATTENTION(q),          ATTENTION(rows),           ATTENTION(heads),      ATTENTION(d),
    ATTENTION(k),          ATTENTION(v),              ATTENTION(kv_heads),   ATTENTION(keys),
    ATTENTION(seen_count), ATTENTION(seen_index),     ATTENTION(scale),      ATTENTION(out),
    LAYER(x),              LAYER(rows),               LAYER(hidden),         LAYER(heads),
    LAYER(kv_heads),       LAYER(d),                  LAYER(eps),            LAYER(attention_norm),
    LAYER(qkv),            LAYER(qkv_bias),           LAYER(cos),            LAYER(sin),
    LAYER(q),              LAYER(k),                  LAYER(v),              LAYER(keys),
    LAYER(values),         LAYER(n_keys),             LAYER(seen_count),     LAYER(seen_index),
    LAYER(scale),          LAYER(o),                  LAYER(o_bias),         LAYER(mlp_norm),
    LAYER(gate_up),        LAYER(gate_up_bias),       LAYER(intermediate),   LAYER(down),
    LAYER(down_bias),
};

size_t kernels_struct_size(const char *type) {
    if (!strcmp(type, "rows_attention_args")) return sizeof(struct rows_attention_args);
    if (!strcmp(type, "int4_layer_args")) return sizeof(struct int4_layer_args);
    return 0;
}

const char *kernels_field(const char *type, int index, size_t *offset, size_t *size) {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strcmp(fields[i].type, type) || index--) continue;
        *offset = fields[i].offset;
        *size = fields[i].size;
        return fields[i].name;
    }
    return NULL;
}
