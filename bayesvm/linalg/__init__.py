"""The linear-algebra backend of the engines: structured Gaussian algebra behind one protocol.

``dense`` (dense and blocked Cholesky, the random-effect block-diagonal layout), ``row_sums`` (the row statistics
every sweep or draw takes), ``sparse`` (sparse Cholesky with selected inversion: CHOLMOD or SuperLU), ``schur``
(elimination of the largest grouping factor onto a dense Schur complement, for crossed factors) and ``probes``
(Rao-Blackwellised probe estimates of posterior variances by conjugate gradients).  Nothing here knows about the SVM:
engines and the model import it, it imports neither.
"""
