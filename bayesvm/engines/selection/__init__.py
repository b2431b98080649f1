"""Engines for variable-selection priors on the slopes: Laplace-zero VB (``vb``; Luts & Ormerod 2014,
Alg. 3), the selection Gibbs samplers (``gibbs``: Laplace-zero, spike-and-slab, lasso) with their model-space
swap moves (``moves``), and lasso EM / ECME (``lasso_em``)."""
