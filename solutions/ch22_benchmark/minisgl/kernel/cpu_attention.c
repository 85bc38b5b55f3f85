/* Paged decode attention on the CPU: one query per request, its keys and values read in place from the paged
 * KV cache (kernel/cpu_attention.py builds this file with the system's C compiler and calls it).
 *
 * The torch backend gathers every request's keys and values into a padded [batch, longest, heads, dim] copy and
 * then attends; at batch 64 that copy moves several times the bytes the attention itself must read. Here each
 * request walks its page-table row: for every position, the slot's key row gives one score per query head
 * (grouped-query heads share the row), a softmax per head, then the value rows are summed with those weights.
 * Nothing is copied but one cache row at a time, widened to float32 (16-bit caches are attended in float32, as
 * the torch backend does on a CPU). Requests run in parallel on torch's OpenMP threads, which this library shares
 * (the same libgomp is loaded once).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_to_float(uint16_t x) {
    union { uint32_t u; float f; } v = {(uint32_t)x << 16};
    return v.f;
}

static inline uint16_t float_to_bf16(float x) { /* round to nearest even, as torch's .to(bfloat16) */
    union { float f; uint32_t u; } v = {x};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* NaN stays NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

/* e^x for x <= 0 (a score minus the row's maximum): 2^n * e^r with |r| <= ln2 / 2, e^r by its Taylor
 * polynomial (Cephes' coefficients, about 1 ulp), plain arithmetic so that the compiler vectorizes the loop. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = __builtin_roundf(x * 1.44269504f);
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f; /* x - n ln2, ln2 split in two for precision */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { uint32_t u; float f; } two_n = {(uint32_t)((int32_t)n + 127) << 23};
    return p * two_n.f;
}

/* Row `index` of a [rows, n] float32 or bfloat16 array, as float32: in place for float32, widened into `buf`. */
static inline __attribute__((always_inline)) const float *row_of(const void *base, int64_t index, int n,
                                                                 int bf16, float *buf) {
    if (!bf16) return (const float *)base + index * n;
    const uint16_t *src = (const uint16_t *)base + index * n;
#pragma omp simd
    for (int i = 0; i < n; ++i) buf[i] = bf16_to_float(src[i]);
    return buf;
}

static inline __attribute__((always_inline)) void decode(
    const void *q, const void *k_cache, const void *v_cache, const int32_t *page_table, int64_t table_stride,
    const int64_t *table_idx, const int32_t *seq_lens, int64_t max_len, void *out, int64_t batch, int q_heads,
    int kv_heads, int head_dim, float scale, int bf16) {
    const int group = q_heads / kv_heads, row = kv_heads * head_dim, q_size = q_heads * head_dim;
#pragma omp parallel
    {
        /* per thread: a widened query, the output accumulator, a widened cache row, the longest row's scores */
        float *query = malloc(sizeof(float) * ((size_t)2 * q_size + row + (size_t)q_heads * max_len));
        float *acc = query + q_size, *buf = acc + q_size, *scores = buf + row;
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t n = seq_lens[b];
            const int32_t *slots = page_table + table_idx[b] * table_stride;
            const float *qb = row_of(q, b, q_size, bf16, query);
            for (int64_t t = 0; t < n; ++t) { /* scores: one per query head, from its group's key */
                const float *key = row_of(k_cache, slots[t], row, bf16, buf);
                for (int h = 0; h < q_heads; ++h) {
                    const float *qh = qb + h * head_dim, *kh = key + (h / group) * head_dim;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int d = 0; d < head_dim; ++d) dot += qh[d] * kh[d];
                    scores[h * n + t] = dot * scale;
                }
            }
            for (int h = 0; h < q_heads; ++h) { /* softmax of each head's scores */
                float *s = scores + h * n, top = s[0], sum = 0.0f;
                for (int64_t t = 1; t < n; ++t) top = s[t] > top ? s[t] : top;
#pragma omp simd reduction(+ : sum)
                for (int64_t t = 0; t < n; ++t) {
                    s[t] = exp_nonpositive(s[t] - top);
                    sum += s[t];
                }
                const float inv = 1.0f / sum;
#pragma omp simd
                for (int64_t t = 0; t < n; ++t) s[t] *= inv;
            }
            memset(acc, 0, sizeof(float) * q_size);
            for (int64_t t = 0; t < n; ++t) { /* the values, weighted */
                const float *value = row_of(v_cache, slots[t], row, bf16, buf);
                for (int h = 0; h < q_heads; ++h) {
                    const float p = scores[h * n + t], *vh = value + (h / group) * head_dim;
                    float *a = acc + h * head_dim;
#pragma omp simd
                    for (int d = 0; d < head_dim; ++d) a[d] += p * vh[d];
                }
            }
            if (bf16) {
                uint16_t *o = (uint16_t *)out + b * q_size;
                for (int i = 0; i < q_size; ++i) o[i] = float_to_bf16(acc[i]);
            } else {
                memcpy((float *)out + b * q_size, acc, sizeof(float) * q_size);
            }
        }
        free(query);
    }
}

/* q, out: [batch, q_heads, head_dim]; k_cache, v_cache: [slots, kv_heads, head_dim]; all contiguous, float32
 * (bf16 = 0) or bfloat16 (bf16 = 1). Request b reads slots page_table[table_idx[b], 0 .. seq_lens[b] - 1];
 * max_len >= every seq_len. */
void paged_decode_attention(const void *q, const void *k_cache, const void *v_cache, const int32_t *page_table,
                            int64_t table_stride, const int64_t *table_idx, const int32_t *seq_lens, int64_t max_len,
                            void *out, int64_t batch, int q_heads, int kv_heads, int head_dim, float scale,
                            int bf16) {
    if (bf16) /* two copies of the loop, each with its element type fixed */
        decode(q, k_cache, v_cache, page_table, table_stride, table_idx, seq_lens, max_len, out, batch, q_heads,
               kv_heads, head_dim, scale, 1);
    else
        decode(q, k_cache, v_cache, page_table, table_stride, table_idx, seq_lens, max_len, out, batch, q_heads,
               kv_heads, head_dim, scale, 0);
}
