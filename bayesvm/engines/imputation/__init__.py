"""Engines for missing predictors: the paper's joint imputation model (``joint_model``; Luts & Ormerod 2014,
Alg. 4 and Appendix C) and multiple imputation pooled over VB, accurate VB, SVI or selection fits
(``multiple``)."""
