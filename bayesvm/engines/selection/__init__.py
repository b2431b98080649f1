"""Engines for the priors on the penalised slopes (Laplace-zero, spike-and-slab, lasso), each asking the prior's law
(``laws``: the block of the slopes, one table): mean-field VB (``vb``: Luts & Ormerod 2014, Alg. 3; ``spike_slab_vb``;
``lasso_vb``), the accurate fit (``ep``: a site per slope, the tilted moments of ``tilted``), Gibbs (``gibbs``) with its
model-space moves, lasso EM / ECME (``lasso_em``), SVI (``svi``) and out-of-core VB (``stream_vb``)."""
