"""Paged attention kernels in Triton: decode (one query per request) and extend (a chunk of new queries
over a cached prefix, causal), both reading keys and values through the page table.

The page table holds one slot per position, so the kernels gather keys block by block: positions
[start, start + BLOCK_N) of a request -> their slots -> rows of the KV cache. Softmax is computed online
(a running maximum and sum per query), so no [queries x keys] matrix is ever stored. Accumulation is in
float32 whatever the cache dtype; float32 inputs multiply in full precision (no TF32).

Both kernels also run on a CPU under TRITON_INTERPRET=1 (slowly), which is how the course tests them there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(Q, K, V, O, PageTable, TableIdx, SeqLens, scale,
                   stride_qb, stride_qh, stride_kn, stride_kh, stride_ob, stride_oh, stride_pt,
                   GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                   PRECISION: tl.constexpr):
    # One program per (request, kv head): the GROUP query heads sharing that kv head read each key once.
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    # TODO(ch17): load the request's row and length; load the [BLOCK_G, D] queries of heads kvh*GROUP + g
    # (g < GROUP; the rest padded with zeros: tl.dot needs 16 rows). For each block of BLOCK_N positions:
    # gather their slots from the page table, load keys and values (int64 offsets), scores = q @ k^T * scale
    # (masked beyond seq_len), and fold them into the running max m, sum l and accumulator acc. Store acc / l.
    # >>> solution
    row = tl.load(TableIdx + b).to(tl.int64)
    seq_len = tl.load(SeqLens + b)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D)
    heads = kvh * GROUP + g
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=(g < GROUP)[:, None], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < seq_len
        slots = tl.load(PageTable + row * stride_pt + n, mask=valid, other=0).to(tl.int64)
        kv_off = slots[:, None] * stride_kn + kvh * stride_kh + d[None, :]
        k = tl.load(K + kv_off, mask=valid[:, None], other=0.0)
        v = tl.load(V + kv_off, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + b * stride_ob + heads[:, None] * stride_oh + d[None, :], out.to(O.dtype.element_ty),
             mask=(g < GROUP)[:, None])
    # <<< solution


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
    # <= cached_len + j. Load this block's queries, then loop over key blocks up to the last position this
    # block can see (the prefix and the new tokens alike are in the cache already), gathering slots through
    # the page table, with the same online softmax as the decode kernel and a causal mask. Store acc / l.
    # >>> solution
    row = tl.load(TableIdx + b).to(tl.int64)
    seq_len = tl.load(SeqLens + b)
    cached = tl.load(CachedLens + b)
    kvh = h // GROUP
    m = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    q_valid = m < q_len
    q_rows = (q_start + m).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + h * stride_qh + d[None, :], mask=q_valid[:, None], other=0.0)
    q_pos = cached + m
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = tl.minimum(seq_len, cached + (mb + 1) * BLOCK_M)  # no query of this block sees beyond that
    for start in range(0, end, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < seq_len
        slots = tl.load(PageTable + row * stride_pt + n, mask=valid, other=0).to(tl.int64)
        kv_off = slots[:, None] * stride_kn + kvh * stride_kh + d[None, :]
        k = tl.load(K + kv_off, mask=valid[:, None], other=0.0)
        v = tl.load(V + kv_off, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        s = tl.where(valid[None, :] & (n[None, :] <= q_pos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # key 0 is visible to every row: never all -inf
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + q_rows[:, None] * stride_ot + h * stride_oh + d[None, :], out.to(O.dtype.element_ty),
             mask=q_valid[:, None])
    # <<< solution


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
