"""Deciding what runs next: request slots now, the full scheduler from chapter 7."""
