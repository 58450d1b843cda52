"""Stand-in for numpy's LAPACK gufuncs: this site does not ship them (docs/site.md)."""


def __getattr__(name: str) -> object:
    raise AttributeError(f"numpy.linalg's LAPACK routines ({name}) are not part of this site: build.py dropped "
                         "numpy/linalg/_umath_linalg to keep the download small")
