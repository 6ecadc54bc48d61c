"""Variable initializers (computed once, on the host, from the session's seeded generator)."""
import hashlib
import os

import numpy as np


def _default_generator():
    # The processes of one launch draw the same initial values: each machine holds its own copy
    # of every variable (docs/cluster.md), so the copies must start equal. flow.random.seed, the
    # same on every rank, overrides it as in one process.
    job = os.environ.get("ACTORFLOW_JOB_ID", "")
    if job:
        return np.random.default_rng(int.from_bytes(hashlib.sha256(job.encode()).digest()[:8], "little"))
    return np.random.default_rng()


_rng = [_default_generator()]


def seed(value):
    """Makes variable initialization reproducible."""
    _rng[0] = np.random.default_rng(int(value))


def generator(seed=None):
    """The session's generator, or with `seed` a generator of its own: an initializer given a
    seed draws the same values every time it initializes (in any session)."""
    if seed is None:
        return _rng[0]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError("initializer seed: expected a non-negative int, got %r" % (seed,))
    return np.random.default_rng(int(seed))


class Initializer:
    def __init__(self, fn, description):
        self._fn = fn
        self.description = description

    def __call__(self, shape, dtype):
        return np.array(self._fn(tuple(shape)), dtype=dtype, order="C")  # keeps 0-d shapes

    def __repr__(self):
        return self.description


def truncated_normal(stddev=1.0, mean=0.0, seed=None):
    if seed is not None:
        generator(seed)  # checks it now, at the user's line

    def fn(shape):
        g = generator(seed)
        out = g.normal(mean, stddev, size=shape)
        bad = np.abs(out - mean) > 2 * stddev
        while bad.any():  # resample outside two standard deviations
            out[bad] = g.normal(mean, stddev, size=int(bad.sum()))
            bad = np.abs(out - mean) > 2 * stddev
        return out
    return Initializer(fn, "truncated_normal(stddev=%g)" % stddev)


truncated_normal_initializer = truncated_normal


def random_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=None):
    if seed is not None:
        generator(seed)  # checks it now, at the user's line
    return Initializer(lambda s: generator(seed).normal(mean, stddev, size=s), "random_normal(%g, %g)" % (mean, stddev))


def random_uniform_initializer(minval=0.0, maxval=1.0, dtype=None, seed=None):
    if seed is not None:
        generator(seed)
    return Initializer(lambda s: generator(seed).uniform(minval, maxval, size=s), "random_uniform(%g, %g)" % (minval, maxval))


def zeros_initializer(dtype=None):
    return Initializer(lambda s: np.zeros(s), "zeros")


def ones_initializer(dtype=None):
    return Initializer(lambda s: np.ones(s), "ones")


def constant_initializer(value=0.0, dtype=None):
    return Initializer(lambda s: np.full(s, value), "constant(%r)" % (value,))


def _fans(shape):
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    # OneFlow's layouts: dense weight (out, in), conv weight (out, in, kh, kw).
    return shape[1] * receptive, shape[0] * receptive


def xavier_uniform_initializer():
    def fn(shape):
        fan_in, fan_out = _fans(shape)
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return generator().uniform(-limit, limit, size=shape)
    return Initializer(fn, "xavier_uniform")


glorot_uniform_initializer = xavier_uniform_initializer


def kaiming_initializer(shape=None, distribution="random_normal", mode="fan_in", nonlinearity="leaky_relu",
                        negative_slope=0.0, data_format="NCHW"):
    gain = np.sqrt(2.0 / (1 + negative_slope ** 2)) if nonlinearity in ("relu", "leaky_relu") else 1.0

    def fn(s):
        fan_in, fan_out = _fans(s)
        std = gain / np.sqrt(fan_in if mode == "fan_in" else fan_out)
        if distribution == "random_uniform":
            limit = np.sqrt(3.0) * std
            return generator().uniform(-limit, limit, size=s)
        return generator().normal(0.0, std, size=s)
    return Initializer(fn, "kaiming(%s, %s)" % (distribution, mode))
