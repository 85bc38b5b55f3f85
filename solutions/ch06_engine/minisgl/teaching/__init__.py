"""Teaching-only code: models and hand-driven loops that the chapters use to show an idea. The engine never
imports this package."""
