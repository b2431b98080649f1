"""Exact posterior model probabilities of a small selection problem, by enumerating the models.

Each model's evidence is quadrature over its included slopes of ``exp(-2 sum hinge) x prior``; the
prior's part (and any hyperparameter integral) is supplied by the caller.
"""

import numpy as np
from scipy.special import logsumexp


def log_hinge(grid_beta, X, y):
    return -2.0 * np.maximum(0.0, 1.0 - (grid_beta @ X.T) * y).sum(axis=-1)


def grid(dim, half_width=4.0, points=121):
    axis = np.linspace(-half_width, half_width, points)
    mesh = np.meshgrid(*([axis] * dim), indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=-1), (axis[1] - axis[0]) ** dim


def enumerate_models(problem, log_prior_of_model):
    """log posterior probability of every model (bit k of the index = slope k included)."""
    p = problem.m
    logs = []
    for model in range(2**p):
        on = [k for k in range(p) if model >> k & 1]
        if not on:
            logs.append(float(log_hinge(np.zeros((1, p)), problem.X, problem.y)[0]) + log_prior_of_model(on, None))
            continue
        grid_points, cell = grid(len(on))
        beta = np.zeros((grid_points.shape[0], p))
        beta[:, on] = grid_points
        logs.append(log_prior_of_model(on, (grid_points, cell, log_hinge(beta, problem.X, problem.y))))
    logs = np.array(logs)
    return np.exp(logs - logsumexp(logs))


def sampled_model_probabilities(result, p):
    codes = (result.include.reshape(-1, p) * (2 ** np.arange(p))).sum(axis=1)
    return np.bincount(codes, minlength=2**p) / codes.size
