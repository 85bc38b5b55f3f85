"""Paged decode attention on the CPU, in C: each request's keys and values read in place (chapter 22's CPU profile).

The torch backend's decode gathers every request's keys and values into a padded [batch, longest, heads, dim]
copy (a float32 one for a 16-bit cache) before SDPA reads it: at batch 64 that moves several times the bytes
the attention needs, and at batch 1 the dozen small ops around SDPA cost more than the attention. The kernel in
cpu_attention.c walks each request's page-table row instead, one cache row at a time, as chapter 17's Triton
decode kernel does on a GPU.

The C file is compiled once per machine with the system's C compiler ($CC, else `cc`), optimised for this CPU
and with OpenMP (torch's threads run it), into ~/.cache/minisgl (or $XDG_CACHE_HOME/minisgl), and called through
ctypes. Without a compiler (one line on stderr says so), or for a dtype it does not take (it takes float32 and
bfloat16), `applies` is False and the backend keeps its torch path; ENABLED = False switches the kernel off (the
tests compare both paths).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ENABLED = True  # read at every call
SOURCE = Path(__file__).with_name("cpu_attention.c")
DTYPES = (torch.float32, torch.bfloat16)
# Tried in order: this CPU's vector instructions and OpenMP threads, then a plain build (a compiler without
# OpenMP, such as Apple's clang, still gets a working single-threaded kernel).
FLAG_SETS = (["-O3", "-march=native", "-fopenmp"], ["-O3"])
_ARGTYPES = [ctypes.c_void_p] * 4 + [ctypes.c_int64] + [ctypes.c_void_p] * 2 + [ctypes.c_int64, ctypes.c_void_p,
             ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int]
_library: ctypes.CDLL | None = None
_tried = False


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minisgl"


def build(source: Path = SOURCE, out_dir: Path | None = None) -> Path | None:
    """Compile `source` into a shared library (once: the file's name holds a hash of the source, the compiler,
    the flags and the machine); its path, or None when no flag set compiles."""
    out_dir = out_dir or cache_dir()
    cc = os.environ.get("CC", "cc")
    text = source.read_bytes()
    for flags in FLAG_SETS:
        key = hashlib.sha256(text + repr((cc, flags, platform.machine(), platform.node())).encode()).hexdigest()
        target = out_dir / f"{source.stem}-{key[:16]}.so"
        if target.exists():
            return target
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)  # then renamed: a parallel build never sees half a file
        os.close(fd)
        try:
            done = subprocess.run([cc, *flags, "-shared", "-fPIC", str(source), "-o", tmp],
                                  capture_output=True).returncode == 0
        except OSError:  # no compiler at all
            done = False
        if done:
            os.replace(tmp, target)
            return target
        os.unlink(tmp)
    return None


def library() -> ctypes.CDLL | None:
    """The compiled kernel, built on the first call; None (saying so in one line on stderr) when it cannot be
    built: a machine without a C compiler (macOS without Xcode's tools) runs the torch path."""
    global _library, _tried
    if not _tried:
        _tried = True
        path = build()
        if path is None:
            print(f"minisgl: could not compile {SOURCE.name} with {os.environ.get('CC', 'cc')}: the CPU decode "
                  "attention gathers keys and values in torch instead", file=sys.stderr)
        else:
            _library = ctypes.CDLL(str(path))
            _library.paged_decode_attention.argtypes = _ARGTYPES
            _library.paged_decode_attention.restype = None
    return _library


def applies(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    return (ENABLED and q.device.type == "cpu" and q.dtype in DTYPES and k_cache.dtype == q.dtype
            and k_cache.is_contiguous() and library() is not None)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                           table_idx: torch.Tensor, seq_lens: torch.Tensor, max_len: int,
                           scale: float) -> torch.Tensor:
    """q [B, Hq, D] -> [B, Hq, D]: request b attends to the slots page_table[table_idx[b], :seq_lens[b]] of
    k_cache and v_cache ([slots, Hkv, D], contiguous, q's dtype); max_len >= every seq_len. Call when applies()."""
    if max_len > page_table.shape[1] or page_table.dtype != torch.int32 or page_table.stride(1) != 1:
        raise ValueError(f"the kernel reads int32 page-table rows of up to {page_table.shape[1]} slots "
                         f"({page_table.dtype}), asked for {max_len}")
    q = q.contiguous()
    table_idx = table_idx.to(torch.int64).contiguous()  # no copy when it already is
    seq_lens = seq_lens.to(torch.int32).contiguous()
    out = torch.empty_like(q)
    library().paged_decode_attention(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), page_table.data_ptr(), page_table.stride(0),
        table_idx.data_ptr(), seq_lens.data_ptr(), max_len, out.data_ptr(), q.shape[0], q.shape[1],
        k_cache.shape[1], q.shape[2], scale, int(q.dtype == torch.bfloat16))
    return out
