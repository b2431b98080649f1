"""Engines for missing predictors: the paper's joint imputation model (``joint_model``; Luts & Ormerod 2014,
Alg. 4 and Appendix C), the class-conditional normal imputation model with its exact data-augmentation chain
(``normal_model``), and multiple imputation pooled over VB, accurate VB, SVI or selection fits (``multiple``)."""
