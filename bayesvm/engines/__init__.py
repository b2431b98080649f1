"""Inference engines, by model family: ``linear`` (normal and learned-penalty priors, random effects),
``selection`` (sparse priors), ``imputation`` (missing predictors) and ``kernel`` (Gaussian processes, PCVM); a
family imports only the families it builds on (kernel and selection on linear; imputation on linear and selection).
Every fit chooses its engine from one table (``registry``: a route per family and method, with the records of
``runs``).  Shared by all of them: the augmentation (``augmentation``), the variance-component priors
(``variance_prior``), the joint log density (``joint``), SQUAREM acceleration (``squarem``), minibatches
(``batches``), the stochastic engines' step sizes and stopping rule (``stochastic``) and the convergence diagnostics
of draws (``chain_checks``).  Engines take plain arrays and the model's records and return plain outputs; they import
the linear-algebra backend (:mod:`bayesvm.linalg`), never the results or the package face."""
