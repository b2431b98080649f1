"""Engines for kernel (Gaussian-process) models: Wenzel et al.'s (2017) batch and inducing-point VB (``vb``)
and SVI (``svi``), and Chen, Tino & Yao's probabilistic classification vector machine (``pcvm``: Laplace and
EP; ``pcvm_em``: the top-down EM)."""
