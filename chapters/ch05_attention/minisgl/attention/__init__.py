"""Attention backends: how a batch's queries meet the keys and values in the paged KV cache."""
