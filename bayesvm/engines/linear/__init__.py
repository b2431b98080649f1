"""Engines for linear and mixed models (fixed effects, random-effect terms, ``gp()`` bases) with a normal or
learned-penalty prior: mean-field VB (``vb``; Luts & Ormerod 2014, Alg. 1-2), accurate VB by EP (``ep``),
Gibbs sampling (``gibbs``, its compiled row pass ``compiled_rows`` and its non-centring moves
``interweave``), EM / ECME (``em``), SVI (``svi``) and streamed VB for out-of-core data (``stream_vb``)."""
