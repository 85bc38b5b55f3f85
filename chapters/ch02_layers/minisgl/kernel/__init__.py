"""Compute kernels. torch_ops holds the plain-PyTorch versions every other backend is checked against."""
