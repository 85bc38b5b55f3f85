"""Paged attention kernels in Triton: decode (one query per request) and extend (a chunk of new queries
over a cached prefix, causal), both reading keys and values through the page table. Chapter 26: the decode kernel
also takes a verify step's rows, a few queries each (a row's last token and its drafts), in one tile.

The page table holds one slot per position, so the kernels gather keys block by block: positions
[start, start + BLOCK_N) of a request -> their slots -> rows of the KV cache. Softmax is computed online
(a running maximum and sum per query), so no [queries x keys] matrix is ever stored. Accumulation is in
float32 whatever the cache dtype; float32 inputs multiply in full precision (no TF32).

The two kernels differ only in which queries they load and how far each may see; the block step they share,
gathering keys and folding them into the online softmax, is `_attend_block`.

Both kernels also run on a CPU under TRITON_INTERPRET=1 (slowly), which is how the course tests them there.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _attend_block(q, q_last, K, V, PageTable, row, kvh, start, seq_len, m_i, l_i, acc, scale,
                  stride_kn, stride_kh, stride_pt,
                  BLOCK_N: tl.constexpr, D: tl.constexpr, PRECISION: tl.constexpr):
    """Fold keys [start, start + BLOCK_N) of one request into the online softmax of the query rows q: key n
    is visible to row i when n < seq_len and n <= q_last[i]. Returns the new (m_i, l_i, acc). Chapter 26: in a
    split-K slice of late keys an early query of a verify row may see none; its sums turn NaN, and the decode kernel
    keeps such a slice out of the merge (l_i > 0 is false for NaN), as it does an empty one."""
    n = start + tl.arange(0, BLOCK_N)
    d = tl.arange(0, D)
    valid = n < seq_len
    slots = tl.load(PageTable + row * stride_pt + n, mask=valid, other=0).to(tl.int64)
    kv_off = slots[:, None] * stride_kn + kvh * stride_kh + d[None, :]
    # Chapter 30: an FP8 cache is read as the queries' dtype (exact: e4m3 fits in 16 bits); its scales are
    # applied outside (the key scale folded into `scale`, the value scale on the output)
    k = tl.load(K + kv_off, mask=valid[:, None], other=0.0).to(q.dtype)
    v = tl.load(V + kv_off, mask=valid[:, None], other=0.0).to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    s = tl.where(valid[None, :] & (n[None, :] <= q_last[:, None]), s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))  # key 0 is visible to every row: all -inf only in such a late slice
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _decode_kernel(Q, K, V, O, Lse, PageTable, TableIdx, SeqLens, Order, scale,
                   stride_qb, stride_qh, stride_kn, stride_kh, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                   stride_pt,
                   GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                   PRECISION: tl.constexpr, SPLITS: tl.constexpr, ORDERED: tl.constexpr, WIDTH: tl.constexpr):
    # One program per (request, kv head, split): the GROUP query heads sharing that kv head read each key once.
    # Their queries form a [BLOCK_G, D] tile (rows past GROUP are zeros: tl.dot needs 16 rows). With SPLITS > 1
    # (split-K, for batches too small to fill the GPU) each program sees one slice of the request's positions
    # and stores a partial result for _merge_splits_kernel; with SPLITS == 1 it sees them all and stores the
    # output itself. The GPU starts programs in the order of their ids, a request's (kv head, split) programs
    # together; with ORDERED the r-th request to start is Order[r] (the longest first), else request r.
    # WIDTH > 1 (chapter 26, a verify step): request b has WIDTH queries, rows b * WIDTH .. b * WIDTH + WIDTH - 1 of
    # Q, at its last WIDTH positions; the tile holds all of them (query j of head g at row j * GROUP + g), each key
    # read once for the WIDTH x GROUP queries, each query seeing keys up to its own position.
    kvh = tl.program_id(0) // SPLITS
    split = tl.program_id(0) % SPLITS
    b = tl.load(Order + tl.program_id(1)) if ORDERED else tl.program_id(1)
    row = tl.load(TableIdx + b).to(tl.int64)
    seq_len = tl.load(SeqLens + b)
    r = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D)
    j = r // GROUP  # which of the request's queries (0 in a decode step)
    heads = kvh * GROUP + r % GROUP
    tokens = b * WIDTH + j
    real = r < WIDTH * GROUP
    q = tl.load(Q + tokens[:, None] * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=real[:, None],
                other=0.0)
    q_last = seq_len - WIDTH + j  # a decode step's one new token sits at the last position
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    keep = real[:, None]
    if SPLITS == 1:  # the whole sequence (a loop from the constant 0 compiles to the tighter code)
        for start in range(0, seq_len, BLOCK_N):
            m_i, l_i, acc = _attend_block(q, q_last, K, V, PageTable, row, kvh, start, seq_len, m_i, l_i, acc, scale,
                                          stride_kn, stride_kh, stride_pt, BLOCK_N, D, PRECISION)
        out = acc / l_i[:, None]
        tl.store(O + tokens[:, None] * stride_ob + heads[:, None] * stride_oh + d[None, :], out.to(O.dtype.element_ty),
                 mask=keep)
    else:
        # This program's slice: whole blocks, so the slices of one request never overlap. A slice past the end of
        # a short request is empty.
        per_split = tl.cdiv(tl.cdiv(seq_len, SPLITS), BLOCK_N) * BLOCK_N
        lo = split * per_split
        for start in range(lo, tl.minimum(seq_len, lo + per_split), BLOCK_N):
            m_i, l_i, acc = _attend_block(q, q_last, K, V, PageTable, row, kvh, start, seq_len, m_i, l_i, acc, scale,
                                          stride_kn, stride_kh, stride_pt, BLOCK_N, D, PRECISION)
        # The slice's own softmax: its normalised output and log-sum-exp (-inf and zeros for an empty slice).
        seen = l_i > 0
        out = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
        lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
        part = tokens * stride_ob + heads * stride_oh + split * stride_os  # partials: [queries, Hq, SPLITS, D] float32
        tl.store(O + part[:, None] + d[None, :], out, mask=keep)
        tl.store(Lse + tokens * stride_lb + heads * stride_lh + split, lse, mask=real)


@triton.jit
def _merge_splits_kernel(Part, Lse, O, stride_ob, stride_oh, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
                         D: tl.constexpr):
    # One program per (query, query head): o = sum_s exp(lse_s - lse) * o_s, lse = log sum_s exp(lse_s).
    # Part [B, Hq, SPLITS, D] and Lse [B, Hq, SPLITS] are contiguous float32 (paged_decode_attention made them).
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, D)
    base = (b * tl.num_programs(1) + h) * SPLITS
    lse = tl.load(Lse + base + s, mask=s < SPLITS, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, 0))  # key 0, in split 0, is visible to every query: the maximum is finite
    part = tl.load(Part + (base + s)[:, None] * D + d[None, :], mask=(s < SPLITS)[:, None], other=0.0)
    out = tl.sum(weight[:, None] * part, 0) / tl.sum(weight, 0)
    tl.store(O + b * stride_ob + h * stride_oh + d, out.to(O.dtype.element_ty))


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
    row = tl.load(TableIdx + b).to(tl.int64)
    seq_len = tl.load(SeqLens + b)
    cached = tl.load(CachedLens + b)
    kvh = h // GROUP
    m = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    q_valid = m < q_len
    q_rows = (q_start + m).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + h * stride_qh + d[None, :], mask=q_valid[:, None], other=0.0)
    q_last = cached + m  # causal: each new token sees the prefix and the new tokens up to itself
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = tl.minimum(seq_len, cached + (mb + 1) * BLOCK_M)  # no query of this block sees beyond that
    for start in range(0, end, BLOCK_N):
        m_i, l_i, acc = _attend_block(q, q_last, K, V, PageTable, row, kvh, start, seq_len, m_i, l_i, acc, scale,
                                      stride_kn, stride_kh, stride_pt, BLOCK_N, D, PRECISION)
    out = acc / l_i[:, None]
    tl.store(O + q_rows[:, None] * stride_ot + h * stride_oh + d[None, :], out.to(O.dtype.element_ty),
             mask=q_valid[:, None])


def _check(q: torch.Tensor, k_cache: torch.Tensor) -> tuple[int, int, str]:
    head_dim = q.shape[-1]
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"the Triton kernels need a power-of-two head_dim >= 16, got {head_dim}")
    group = q.shape[1] // k_cache.shape[1]
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # tf32 is ignored for 16-bit inputs
    return head_dim, group, precision


def decode_splits(batch: int, kv_heads: int, device: torch.device) -> int:
    """How many slices split-K cuts each request into: the largest power of two that keeps the programs
    (batch * kv_heads * splits) within WAVE_PROGRAMS per streaming multiprocessor, at most MAX_SPLITS; 1 when
    the batch alone provides that many (more slices would only add the merge's traffic). One split off CUDA
    (the interpreter gains nothing from more programs)."""
    if device.type != "cuda":
        return 1
    room = WAVE_PROGRAMS * _sm_count(device) // (batch * kv_heads)
    return min(MAX_SPLITS, 1 << (room.bit_length() - 1)) if room > 1 else 1


def decode_block(batch: int, kv_heads: int, device: torch.device) -> tuple[int, int | None]:
    """(keys per block, pipeline stages or None for Triton's default) of the decode kernel for a batch:
    SMALL_BATCH_BLOCK while the batch's programs (one per request and KV head, before split-K) fit in one wave of
    WAVE_PROGRAMS per streaming multiprocessor, else (64, default). With that few programs a long request's program
    walks its keys alone and sets the step's time; larger blocks keep more of its bytes in flight. With many
    programs, smaller blocks let more of them share a multiprocessor. (64, default) off CUDA."""
    if device.type != "cuda" or SMALL_BATCH_BLOCK is None or batch * kv_heads > WAVE_PROGRAMS * _sm_count(device):
        return 64, None
    return SMALL_BATCH_BLOCK


@lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a GPU, asked once (a decode step without graphs asks once per layer)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


# Measured on an H200 (132 SMs; chapter 22's split sweep, contexts of 512 and 1,536): 4 programs per SM was
# best at every batch size, and an uneven number of slices was slower than the power of two below it.
WAVE_PROGRAMS = 4
# Keys per block and pipeline stages for batches of one wave (decode_block). Chapter 22's sweep on an H200: on
# contexts spread as a real batch's, 6-14% faster than (64, 3 stages) at 16-64 requests; on equal contexts up to 11%
# slower. None: (64, default) at every batch size (chapter 22's ablation row `ours-block-64`).
SMALL_BATCH_BLOCK: tuple[int, int] | None = (128, 2)
MAX_SPLITS = 16
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second dimension, which counts the requests
# The backends pass `longest_first` orders to the decode kernel while this is True (chapter 22's ablation row
# `ours-no-lpt` turns it off).
LONGEST_FIRST = True


def longest_first(seq_lens: np.ndarray) -> np.ndarray:
    """The requests' indices, longest context first (ties in batch order), as int32: the order in which the
    decode kernel should start them. The GPU hands each streaming multiprocessor the next program in line as
    one finishes; started last, a long request would run on alone while the others idle (longest processing
    time first, a classic rule for scheduling jobs on parallel machines)."""
    return np.argsort(-seq_lens.astype(np.int64), kind="stable").astype(np.int32)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                           table_idx: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           block_n: int | None = None, splits: int | None = None,
                           order: torch.Tensor | None = None, width: int = 1, **tuning) -> torch.Tensor:
    """q [B * width, Hq, D], caches [slots, Hkv, D], page_table [rows, row width] (slot per position) -> like q.
    Request b attends with `width` queries (chapter 26's verify rows; 1 in a decode step), rows b * width ..
    b * width + width - 1 of q, at its last `width` positions (seq_lens[b] - width ..), causally.

    `block_n` is the number of keys a program folds in per step; None picks it, with the pipeline's stages, from
    the batch (decode_block). `splits` slices every request's positions over that many programs per (request, KV
    head) (split-K, or flash-decoding) and merges the slices in a second kernel; None picks it from the batch
    (decode_splits). Both are Python ints, fixed for a given batch size: a CUDA graph captured at that size
    replays them.
    `order` (int32 [B], a permutation of the requests) is the order in which their programs start: longest
    first (`longest_first`) keeps the longest contexts from starting last and running on alone. It changes
    when each program runs, never what it computes. `tuning` (num_warps, num_stages) goes to the launch: for
    probes that sweep it."""
    head_dim, group, precision = _check(q, k_cache)
    queries, heads = q.shape[:2]
    batch = len(table_idx)
    if width < 1 or queries != batch * width:
        raise ValueError(f"{queries} queries for {batch} requests of width {width}: expected {batch * width}")
    if splits is None:  # a verify row's program does `width` queries' work: split as that many rows would be
        # (an H100, 8 rows of width 5 over 320 keys: 8.7 us a layer unsplit, 10.5 with the 8 slices 8 rows get)
        splits = decode_splits(queries, k_cache.shape[1], q.device)
    if splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    if block_n is None:
        block_n, stages = decode_block(batch, k_cache.shape[1], q.device)
        if stages is not None:
            tuning.setdefault("num_stages", stages)
    out = torch.empty_like(q)
    if splits == 1:
        dest, lse = out, out  # no partials: the kernel stores the output itself (lse unused)
    else:
        dest = torch.empty(queries, heads, splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(queries, heads, splits, dtype=torch.float32, device=q.device)
    if batch > MAX_GRID_Y:
        raise ValueError(f"a decode batch of {batch} requests is more than one launch takes ({MAX_GRID_Y})")
    grid = (k_cache.shape[1] * splits, batch)
    _decode_kernel[grid](q, k_cache, v_cache, dest, lse, page_table, table_idx, seq_lens,
                         order if order is not None else seq_lens, scale,
                         q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), dest.stride(0),
                         dest.stride(1), dest.stride(2) if splits > 1 else 0, lse.stride(0), lse.stride(1),
                         page_table.stride(0),
                         GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group * width)), BLOCK_N=block_n,
                         D=head_dim, PRECISION=precision, SPLITS=splits, ORDERED=order is not None, WIDTH=width,
                         **tuning)
    if splits > 1:
        _merge_splits_kernel[(queries, heads)](dest, lse, out, out.stride(0), out.stride(1), SPLITS=splits,
                                             BLOCK_S=triton.next_power_of_2(splits), D=head_dim)
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
