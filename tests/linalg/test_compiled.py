"""The numba plumbing (bayesvm.linalg.compiled): scipy.special's C functions called from compiled code."""

import pytest

from bayesvm.linalg import compiled


@pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
def test_scipy_special_functions_compile_to_the_ufuncs_values():
    """``compiled.scipy_special`` calls scipy's own C functions from compiled code: the ufuncs' values exactly, in
    both tails; an unknown name is refused."""
    import numba
    from scipy import special

    log_ndtr, ndtri_exp = compiled.scipy_special("log_ndtr"), compiled.scipy_special("ndtri_exp")
    gammaincinv = compiled.scipy_special("gammaincinv", 2)

    @numba.njit
    def values(x, p):
        return log_ndtr(x, 0), ndtri_exp(-p, 0), gammaincinv(2.5, p, 0)

    for x, p in [(-40.0, 1e-300), (-3.0, 0.3), (0.0, 0.5), (8.0, 1.0 - 1e-12)]:
        assert values(x, p) == (special.log_ndtr(x), special.ndtri_exp(-p), special.gammaincinv(2.5, p))
    with pytest.raises(ImportError):
        compiled.scipy_special("no_such_function")
