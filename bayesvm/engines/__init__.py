"""Inference engines, by model family: ``linear`` (normal and learned-penalty priors, random effects),
``selection`` (sparse priors), ``imputation`` (missing predictors) and ``kernel`` (Gaussian processes, PCVM).
Shared by all of them: the augmentation (``augmentation``), the variance-component priors
(``variance_prior``), the joint log density (``joint``), SQUAREM acceleration (``squarem``) and minibatches
(``batches``).  Engines take plain arrays and the model's records and return plain outputs; they import the
linear-algebra backend (:mod:`bayesvm.linalg`), never the results or the package face."""
