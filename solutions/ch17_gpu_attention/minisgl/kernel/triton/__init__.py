"""Triton kernels (chapter 17 on). Importing this package needs triton; the engine imports it only when a
Triton backend is chosen."""
