"""Logistic regression by full-batch gradient descent on a synthetic dataset:
the same steps on one process (reference) or data-parallel (each rank holds a
shard; gradients are summed with all_reduce)."""
import numpy as np

N, D, STEPS, LR = 2000, 8, 200, 0.5


def dataset():
    rng = np.random.default_rng(1234)
    X = rng.normal(size=(N, D))
    w_true = rng.normal(size=D)
    y = (X @ w_true + 0.5 * rng.normal(size=N) > 0).astype(np.float64)
    return X, y


def gradient_sum(w, X, y):
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    return X.T @ (p - y)


def train(X, y, allreduce=None):
    w = np.zeros(D)
    for _ in range(STEPS):
        g = gradient_sum(w, X, y)
        if allreduce is not None:
            allreduce(g)  # sum over the shards, in place
        w -= LR * g / N
    return w
