/* int4 weights times int8 activation rows, each row computed exactly as it would be alone.
 *
 * y[r][o] = t_r * sum_g ( s[o][g] * D[r][o][g] + m[o][g] * A[r][g] ) + b[o]
 *   D[r][o][g] = sum_{i in g} Q[o][i] * a[r][i]   (int32: exact)       W[o][i] ~ s[o][g] * Q[o][i] + m[o][g]
 *   A[r][g]    = sum_{i in g} a[r][i]                                   Q in 0..15, groups g of 32 inputs
 *   a[r][i]    = nearbyint(x[r][i] / t_r) in -127..127, t_r = max_i |x[r][i]| / 127
 *
 * The weight: tiles of 16 outputs; per tile, per group, 320 bytes: 16 fp16 scales, 16 fp16 mins, 256 bytes of
 * nibbles in 4 chunks of 64 bytes, chunk c holding at byte 4*o + k the inputs 8c + k (low nibble) and 8c + 4 + k
 * (high nibble) of output o (k = 0..3): one 64-byte load unpacks into two vectors of 16 outputs x 4 inputs, the
 * lanes of a u8 x s8 dot product into int32 (VNNI's vpdpbusd; vpmaddubsw + vpmaddwd on AVX2, exact here because
 * 15 * 127 * 2 fits 16 bits). Each row's float operations are the same sequence whatever the number of rows or
 * threads (threads split the tiles, rows never meet), and every instruction set below computes the same bits:
 * integer sums are exact and the float steps are the same fused multiply-adds in the same order.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#endif

#define GROUP 32
#define TILE 16
#define BLOCK_BYTES (TILE * 2 * 2 + TILE * GROUP / 2)
#define LEVELS 127.0f

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else { /* subnormal half: normalise */
        int shift = 0;
        while (!(mantissa & 0x400)) { mantissa <<= 1; shift++; }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Row r of x quantised: a (inputs bytes), its group sums, its scale t. */
static float quantise_row(const float *x, int inputs, int8_t *a, float *group_sums) {
    float largest = 0.0f;
    for (int i = 0; i < inputs; i++) {
        float magnitude = fabsf(x[i]);
        largest = magnitude > largest ? magnitude : largest;
    }
    float t = largest > 1e-12f ? largest / LEVELS : 1e-12f / LEVELS;
    for (int i = 0; i < inputs; i++) {
        float q = rintf(x[i] / t); /* to nearest, ties to even: the default rounding mode */
        a[i] = (int8_t)(q > LEVELS ? LEVELS : q < -LEVELS ? -LEVELS : q);
    }
    for (int g = 0; g < inputs / GROUP; g++) {
        int32_t sum = 0;
        for (int i = 0; i < GROUP; i++) sum += a[g * GROUP + i];
        group_sums[g] = (float)sum; /* exact: |sum| <= 32 * 127 */
    }
    return t;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define ROWS_AT_ONCE 8
/* rows is a constant where this is inlined (tile_rows below), so the rows' accumulators stay in registers */
static inline __attribute__((always_inline)) void tile_rows_of(const uint8_t *tile, int groups, const int8_t *a,
                                                               const float *sums, const int rows, int inputs,
                                                               float *acc) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512 total[ROWS_AT_ONCE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++, tile += BLOCK_BYTES) {
        __m512i dot[ROWS_AT_ONCE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m512i packed = _mm512_loadu_si512((const void *)(tile + 64 + 64 * c));
            __m512i first = _mm512_and_si512(packed, low), second = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
            for (int r = 0; r < rows; r++) {
                const int32_t *ar = (const int32_t *)(a + (size_t)r * inputs + g * GROUP);
                dot[r] = _mm512_dpbusd_epi32(dot[r], first, _mm512_set1_epi32(ar[2 * c]));
                dot[r] = _mm512_dpbusd_epi32(dot[r], second, _mm512_set1_epi32(ar[2 * c + 1]));
            }
        }
        __m512 scale = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)tile));
        __m512 minimum = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(tile + 32)));
        for (int r = 0; r < rows; r++) {
            total[r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot[r]), total[r]);
            total[r] = _mm512_fmadd_ps(minimum, _mm512_set1_ps(sums[(size_t)r * groups + g]), total[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(acc + r * TILE, total[r]);
}
static void tile_rows(const uint8_t *tile, int groups, const int8_t *a, const float *sums, int rows, int inputs,
                      float *acc) {
    switch (rows) {
    case 1: tile_rows_of(tile, groups, a, sums, 1, inputs, acc); break;
    case 2: tile_rows_of(tile, groups, a, sums, 2, inputs, acc); break;
    case 3: tile_rows_of(tile, groups, a, sums, 3, inputs, acc); break;
    case 4: tile_rows_of(tile, groups, a, sums, 4, inputs, acc); break;
    case 5: tile_rows_of(tile, groups, a, sums, 5, inputs, acc); break;
    case 6: tile_rows_of(tile, groups, a, sums, 6, inputs, acc); break;
    case 7: tile_rows_of(tile, groups, a, sums, 7, inputs, acc); break;
    default: tile_rows_of(tile, groups, a, sums, 8, inputs, acc); break;
    }
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ROWS_AT_ONCE 4
/* A group's 8 u8 x s8 products of a row (vpmaddubsw: pairs into int16) summed in int16 before one widening
 * (vpmaddwd): |each| <= 2 * 15 * 127 = 3810, so 8 of them fit 16 bits (30480): the same exact integer sums as widening
 * each, for a third of the instructions; the weights of a group unpacked once for every row of the block. */
static inline __attribute__((always_inline)) void tile_rows_of(const uint8_t *tile, int groups, const int8_t *a,
                                                               const float *sums, const int rows, int inputs,
                                                               float *acc) {
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 total[ROWS_AT_ONCE][2];
    for (int r = 0; r < rows; r++) total[r][0] = total[r][1] = _mm256_setzero_ps();
    for (int g = 0; g < groups; g++, tile += BLOCK_BYTES) {
        for (int h = 0; h < 2; h++) { /* outputs 8h..8h+7: bytes 32h..32h+31 of each chunk */
            __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(tile + 16 * h)));
            __m256 minimum = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(tile + 32 + 16 * h)));
            __m256i weights[8]; /* inputs 4j..4j+3 of each output: chunk j / 2, its low (j even) or high nibbles */
            for (int c = 0; c < 4; c++) {
                __m256i packed = _mm256_loadu_si256((const __m256i *)(tile + 64 + 64 * c + 32 * h));
                weights[2 * c] = _mm256_and_si256(packed, low);
                weights[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
            }
            for (int r = 0; r < rows; r++) {
                const int32_t *ar = (const int32_t *)(a + (size_t)r * inputs + g * GROUP);
                __m256i pairs = _mm256_maddubs_epi16(weights[0], _mm256_set1_epi32(ar[0]));
                for (int j = 1; j < 8; j++)
                    pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(weights[j], _mm256_set1_epi32(ar[j])));
                __m256i dot = _mm256_madd_epi16(pairs, ones);
                total[r][h] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), total[r][h]);
                total[r][h] = _mm256_fmadd_ps(minimum, _mm256_set1_ps(sums[(size_t)r * groups + g]), total[r][h]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(acc + r * TILE, total[r][0]);
        _mm256_storeu_ps(acc + r * TILE + 8, total[r][1]);
    }
}
static void tile_rows(const uint8_t *tile, int groups, const int8_t *a, const float *sums, int rows, int inputs,
                      float *acc) {
    switch (rows) {
    case 1: tile_rows_of(tile, groups, a, sums, 1, inputs, acc); break;
    case 2: tile_rows_of(tile, groups, a, sums, 2, inputs, acc); break;
    case 3: tile_rows_of(tile, groups, a, sums, 3, inputs, acc); break;
    default: tile_rows_of(tile, groups, a, sums, 4, inputs, acc); break;
    }
}
#else
#define ROWS_AT_ONCE 1
static void tile_rows(const uint8_t *tile, int groups, const int8_t *a, const float *sums, int rows, int inputs,
                      float *acc) {
    (void)rows;
    float total[TILE] = {0};
    for (int g = 0; g < groups; g++, tile += BLOCK_BYTES) {
        const uint16_t *halves = (const uint16_t *)tile;
        const int8_t *ar = a + g * GROUP;
        for (int o = 0; o < TILE; o++) {
            int32_t dot = 0;
            for (int c = 0; c < 4; c++) {
                for (int k = 0; k < 4; k++) {
                    uint8_t byte = tile[64 + 64 * c + 4 * o + k];
                    dot += (byte & 0x0f) * ar[8 * c + k] + (byte >> 4) * ar[8 * c + 4 + k];
                }
            }
            total[o] = fmaf(half_to_float(halves[o]), (float)dot, total[o]);
            total[o] = fmaf(half_to_float(halves[TILE + o]), sums[g], total[o]);
        }
    }
    memcpy(acc, total, sizeof total);
}
#endif

/* y (rows, outputs) = x (rows, inputs) times the packed weight, plus bias (or none) (kernels.h). */
int int4_rows_product(const float *x, int rows, int inputs, int outputs, const uint8_t *weight, const float *bias,
                      float *y) {
    int groups = inputs / GROUP, tiles = outputs / TILE;
    int8_t *a = malloc((size_t)rows * inputs);
    float *sums = malloc(sizeof(float) * (size_t)rows * groups);
    float *scales = malloc(sizeof(float) * (size_t)rows);
    if (!a || !sums || !scales) {
        free(a); free(sums); free(scales);
        return -1;
    }
    for (int r = 0; r < rows; r++)
        scales[r] = quantise_row(x + (size_t)r * inputs, inputs, a + (size_t)r * inputs, sums + (size_t)r * groups);
    /* rows in blocks of at most ROWS_AT_ONCE, as even as they go (7 rows: one block, not 6 + 1) */
    int blocks = (rows + ROWS_AT_ONCE - 1) / ROWS_AT_ONCE, per_block = (rows + blocks - 1) / blocks;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tiles; t++) {
        const uint8_t *tile = weight + (size_t)t * groups * BLOCK_BYTES;
        float acc[ROWS_AT_ONCE * TILE];
        for (int r0 = 0; r0 < rows; r0 += per_block) {
            int n = rows - r0 < per_block ? rows - r0 : per_block;
            tile_rows(tile, groups, a + (size_t)r0 * inputs, sums + (size_t)r0 * groups, n, inputs, acc);
            for (int r = 0; r < n; r++) {
                for (int o = 0; o < TILE; o++) {
                    float value = acc[r * TILE + o] * scales[r0 + r];
                    y[(size_t)(r0 + r) * outputs + t * TILE + o] = bias ? value + bias[t * TILE + o] : value;
                }
            }
        }
    }
    free(a); free(sums); free(scales);
    return 0;
}
