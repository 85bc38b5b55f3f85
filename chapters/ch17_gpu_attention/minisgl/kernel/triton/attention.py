"""Paged attention kernels in Triton: decode (one query per request) and extend (a chunk of new queries
over a cached prefix, causal), both reading keys and values through the page table.

The page table holds one slot per position, so the kernels gather keys block by block: positions
[start, start + BLOCK_N) of a request -> their slots -> rows of the KV cache. Softmax is computed online
(a running maximum and sum per query), so no [queries x keys] matrix is ever stored. Accumulation is in
float32 whatever the cache dtype; float32 inputs multiply in full precision (no TF32).

The two kernels differ only in which queries they load and how far each may see; the block step they share,
gathering keys and folding them into the online softmax, is `_attend_block`.

Both kernels also run on a CPU under TRITON_INTERPRET=1 (slowly), which is how the course tests them there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _attend_block(q, q_last, K, V, PageTable, row, kvh, start, seq_len, m_i, l_i, acc, scale,
                  stride_kn, stride_kh, stride_pt,
                  BLOCK_N: tl.constexpr, D: tl.constexpr, PRECISION: tl.constexpr):
    """Fold keys [start, start + BLOCK_N) of one request into the online softmax of the query rows q: key n
    is visible to row i when n < seq_len and n <= q_last[i]. Returns the new (m_i, l_i, acc)."""
    # TODO(ch17): gather the block's slots from the page table (masked beyond seq_len, int64 offsets), load its
    # keys and values of KV head kvh, scores = q @ k^T * scale with invisible keys at -inf, then the online
    # softmax update: new running max, rescale l_i and acc by exp(old max - new max), add this block's terms.
    raise NotImplementedError("TODO(ch17): _attend_block")


@triton.jit
def _decode_kernel(Q, K, V, O, PageTable, TableIdx, SeqLens, scale,
                   stride_qb, stride_qh, stride_kn, stride_kh, stride_ob, stride_oh, stride_pt,
                   GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                   PRECISION: tl.constexpr):
    # One program per (request, kv head): the GROUP query heads sharing that kv head read each key once. Their
    # queries form a [BLOCK_G, D] tile (rows past GROUP are zeros: tl.dot needs 16 rows) that sees every key.
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    row = tl.load(TableIdx + b).to(tl.int64)
    seq_len = tl.load(SeqLens + b)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D)
    heads = kvh * GROUP + g
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=(g < GROUP)[:, None], other=0.0)
    q_last = tl.full([BLOCK_G], seq_len - 1, tl.int32)  # the one new token sits at the last position
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        m_i, l_i, acc = _attend_block(q, q_last, K, V, PageTable, row, kvh, start, seq_len, m_i, l_i, acc, scale,
                                      stride_kn, stride_kh, stride_pt, BLOCK_N, D, PRECISION)
    out = acc / l_i[:, None]
    tl.store(O + b * stride_ob + heads[:, None] * stride_oh + d[None, :], out.to(O.dtype.element_ty),
             mask=(g < GROUP)[:, None])


@triton.jit
def _extend_kernel(Q, K, V, O, PageTable, TableIdx, SeqLens, CachedLens, CuSeqlensQ, scale,
                   stride_qt, stride_qh, stride_kn, stride_kh, stride_ot, stride_oh, stride_pt,
                   GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                   PRECISION: tl.constexpr):
    # One program per (request, query head, block of BLOCK_M new tokens).
    b = tl.program_id(0)
    h = tl.program_id(1)
    mb = tl.program_id(2)
    q_start = tl.load(CuSeqlensQ + b)
    q_len = tl.load(CuSeqlensQ + b + 1) - q_start
    if mb * BLOCK_M >= q_len:
        return
    # TODO(ch17): new token j of the request sits at position cached_len + j and may see keys at positions
    # <= cached_len + j. Load this block's queries (query head h reads KV head h // GROUP), then fold in key
    # blocks with _attend_block up to the last position this block can see (the prefix and the new tokens
    # alike are in the cache already). Store acc / l for the rows that are real tokens.
    raise NotImplementedError("TODO(ch17): _extend_kernel")


def _check(q: torch.Tensor, k_cache: torch.Tensor) -> tuple[int, int, str]:
    head_dim = q.shape[-1]
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"the Triton kernels need a power-of-two head_dim >= 16, got {head_dim}")
    group = q.shape[1] // k_cache.shape[1]
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # tf32 is ignored for 16-bit inputs
    return head_dim, group, precision


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                           table_idx: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           block_n: int = 64) -> torch.Tensor:
    """q [B, Hq, D], caches [slots, Hkv, D], page_table [rows, width] (slot per position) -> [B, Hq, D]."""
    head_dim, group, precision = _check(q, k_cache)
    out = torch.empty_like(q)
    grid = (q.shape[0], k_cache.shape[1])
    _decode_kernel[grid](q, k_cache, v_cache, out, page_table, table_idx, seq_lens, scale,
                         q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), out.stride(0), out.stride(1),
                         page_table.stride(0), GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
                         BLOCK_N=block_n, D=head_dim, PRECISION=precision)
    return out


def paged_extend_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                           table_idx: torch.Tensor, seq_lens: torch.Tensor, cached_lens: torch.Tensor,
                           cu_seqlens_q: torch.Tensor, max_seqlen_q: int, scale: float,
                           block_m: int = 32, block_n: int = 32) -> torch.Tensor:
    """q [T, Hq, D] (the new tokens of every request, flattened) -> [T, Hq, D]; causal over a cached prefix."""
    head_dim, group, precision = _check(q, k_cache)
    out = torch.empty_like(q)
    grid = (len(seq_lens), q.shape[1], triton.cdiv(max_seqlen_q, block_m))
    _extend_kernel[grid](q, k_cache, v_cache, out, page_table, table_idx, seq_lens, cached_lens, cu_seqlens_q, scale,
                         q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), out.stride(0), out.stride(1),
                         page_table.stride(0), GROUP=group, BLOCK_M=block_m, BLOCK_N=block_n, D=head_dim,
                         PRECISION=precision)
    return out
