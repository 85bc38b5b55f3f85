"""Teaching-only code: hand-driven loops (chapter 6's ManualBatcher) and model-free simulations (chapter 10's
step simulator) that make one idea of a chapter visible.

The engine never imports this package; nothing in it runs when requests are served.
"""
