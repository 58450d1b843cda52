"""Helpers the tests and the benchmarks share: a PyTorch reference model, tokenizers trained by `tokenizers`, and
one harness for three browser engines. Not part of the site (its wheel holds slm and playground) nor of
`pip install ./py` (slm alone)."""
