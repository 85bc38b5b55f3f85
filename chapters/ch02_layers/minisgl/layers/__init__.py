"""Layers as plain objects holding tensors (no nn.Module): inference needs no autograd or hooks."""
