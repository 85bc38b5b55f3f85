"""Teaching-only models: small, model-free simulations that make one idea of a chapter visible.

The engine never imports this package; nothing in it runs when requests are served.
"""
