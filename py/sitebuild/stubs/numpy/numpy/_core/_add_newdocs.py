"""NumPy's docstrings for its C objects are not part of this site (docs/site.md)."""
