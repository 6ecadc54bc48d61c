"""Optimizers and learning-rate schedulers. The schedule is evaluated per call on the host and
fed to the update ops (a (1,) float feed), so changing the rate never recompiles."""
import math as _math
import types

from ._trace_ctx import check_blob, current, user_location


def _number(value, what, minimum=None, maximum=None, open_maximum=False):
    """value as a finite float in range; TypeError/ValueError naming `what` otherwise (a NaN
    or negative learning rate would train to garbage without a word)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError("%s must be a number, got %r (%s)" % (what, value, type(value).__name__))
    value = float(value)
    if not _math.isfinite(value):
        raise ValueError("%s must be finite, got %r" % (what, value))
    if minimum is not None and value < minimum:
        raise ValueError("%s must be >= %g, got %r" % (what, minimum, value))
    if maximum is not None and (value >= maximum if open_maximum else value > maximum):
        raise ValueError("%s must be %s %g, got %r" % (what, "<" if open_maximum else "<=", maximum, value))
    return value


def _count(value, what, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, got %r (%s)" % (what, value, type(value).__name__))
    if value < minimum:
        raise ValueError("%s must be >= %d, got %d" % (what, minimum, value))
    return value


def _rates(values, what):
    if not isinstance(values, (list, tuple)):
        raise TypeError("%s must be a list of numbers, got %r" % (what, values))
    return [_number(v, "%s[%d]" % (what, i), minimum=0.0) for i, v in enumerate(values)]


def _boundaries(values, what):
    if not isinstance(values, (list, tuple)):
        raise TypeError("%s must be a list of ints, got %r" % (what, values))
    out = [_count(v, "%s[%d]" % (what, i)) for i, v in enumerate(values)]
    if out != sorted(out):
        raise ValueError("%s must be increasing, got %r" % (what, out))
    return out


def _unknown(what, unused):
    if unused:
        raise TypeError("%s got unexpected argument(s) %s (at %s)" % (what, ", ".join(sorted(unused)), user_location()))


class _Warmup:
    def __init__(self, steps, start_multiplier=0.0):
        self.steps = _count(steps, "warmup steps")
        self.start = _number(start_multiplier, "warmup multiplier", minimum=0.0)

    def apply(self, step, lr):
        if step >= self.steps or self.steps == 0:
            return lr
        return lr * (self.start + (1.0 - self.start) * step / self.steps)


class _ConstantWarmup(_Warmup):
    """lr * multiplier for the first `steps` steps (OneFlow's warmup.constant)."""

    def apply(self, step, lr):
        return lr * self.start if step < self.steps else lr


warmup = types.SimpleNamespace(linear=lambda steps, start_multiplier=0.0: _Warmup(steps, start_multiplier),
                               constant=lambda steps, multiplier: _ConstantWarmup(steps, multiplier))


class _Scheduler:
    def __init__(self, warmup=None):
        if warmup is not None and not isinstance(warmup, _Warmup):
            raise TypeError("warmup must be flow.optimizer.warmup.linear(...) or .constant(...), got %r" % (warmup,))
        self.warmup = warmup

    def __call__(self, step):
        lr = self.base(step)
        return self.warmup.apply(step, lr) if self.warmup is not None else lr


class PiecewiseConstantScheduler(_Scheduler):
    def __init__(self, boundaries, values, warmup=None):
        super().__init__(warmup)
        if len(values) != len(boundaries) + 1:
            raise ValueError("PiecewiseConstantScheduler needs len(values) == len(boundaries) + 1, got %d and %d"
                             % (len(values), len(boundaries)))
        self.boundaries = _boundaries(boundaries, "PiecewiseConstantScheduler boundaries")
        self.values = _rates(values, "PiecewiseConstantScheduler values")

    def base(self, step):
        for b, v in zip(self.boundaries, self.values):
            if step < b:
                return v
        return self.values[-1]


class PiecewiseScalingScheduler(_Scheduler):
    def __init__(self, base_lr, boundaries, scale, warmup=None):
        super().__init__(warmup)
        self.base_lr = _number(base_lr, "PiecewiseScalingScheduler base_lr", minimum=0.0)
        self.boundaries = _boundaries(boundaries, "PiecewiseScalingScheduler boundaries")
        self.scale = (_rates(scale, "PiecewiseScalingScheduler scale") if isinstance(scale, (list, tuple)) else
                      [_number(scale, "PiecewiseScalingScheduler scale", minimum=0.0) ** (i + 1)
                       for i in range(len(boundaries))])
        if len(self.scale) != len(self.boundaries):
            raise ValueError("PiecewiseScalingScheduler needs one scale per boundary, got %d and %d"
                             % (len(self.scale), len(self.boundaries)))

    def base(self, step):
        lr = self.base_lr
        for b, s in zip(self.boundaries, self.scale):
            if step >= b:
                lr = self.base_lr * s
        return lr


class CosineScheduler(_Scheduler):
    def __init__(self, base_lr, steps, alpha=0.0, warmup=None):
        super().__init__(warmup)
        self.base_lr = _number(base_lr, "CosineScheduler base_lr", minimum=0.0)
        self.steps = _count(steps, "CosineScheduler steps", minimum=1)
        self.alpha = _number(alpha, "CosineScheduler alpha", minimum=0.0, maximum=1.0)

    def base(self, step):
        t = min(step, self.steps) / self.steps
        return self.base_lr * ((1 - self.alpha) * 0.5 * (1 + _math.cos(_math.pi * t)) + self.alpha)


class PolynomialScheduler(_Scheduler):
    def __init__(self, base_lr, steps, end_learning_rate=0.0001, power=1.0, cycle=False, warmup=None):
        super().__init__(warmup)
        self.base_lr = _number(base_lr, "PolynomialScheduler base_lr", minimum=0.0)
        self.steps = _count(steps, "PolynomialScheduler steps", minimum=1)
        self.end = _number(end_learning_rate, "PolynomialScheduler end_learning_rate", minimum=0.0)
        self.power = _number(power, "PolynomialScheduler power", minimum=0.0)
        self.cycle = bool(cycle)

    def base(self, step):
        steps = self.steps
        if self.cycle:
            steps = self.steps * max(1, _math.ceil(step / self.steps))
        t = min(step, steps) / steps
        return (self.base_lr - self.end) * (1 - t) ** self.power + self.end


class ExponentialScheduler(_Scheduler):
    """base_lr * decay_rate ** (step / steps), the exponent floored when staircase."""

    def __init__(self, base_lr, steps, decay_rate, staircase=False, warmup=None):
        super().__init__(warmup)
        self.base_lr = _number(base_lr, "ExponentialScheduler base_lr", minimum=0.0)
        self.steps = _count(steps, "ExponentialScheduler steps", minimum=1)
        self.decay_rate = _number(decay_rate, "ExponentialScheduler decay_rate", minimum=0.0)
        self.staircase = bool(staircase)

    def base(self, step):
        p = step / self.steps
        return self.base_lr * self.decay_rate ** (_math.floor(p) if self.staircase else p)


class _ClipByGlobalNorm:
    def __init__(self, clip_norm):
        self.clip_norm = _number(clip_norm, "grad_clipping.by_global_norm clip_norm", minimum=0.0)
        if self.clip_norm == 0.0:
            raise ValueError("grad_clipping.by_global_norm clip_norm must be > 0, got 0")


grad_clipping = types.SimpleNamespace(by_global_norm=_ClipByGlobalNorm)


class Optimizer:
    def __init__(self, lr_scheduler, spec, grad_clipping=None, variables=None):
        if not isinstance(lr_scheduler, _Scheduler):
            if isinstance(lr_scheduler, bool) or not isinstance(lr_scheduler, (int, float)):
                raise TypeError("the learning rate must be a number or a flow.optimizer scheduler, got %r (at %s)" % (
                    lr_scheduler, user_location()))
            lr_scheduler = PiecewiseConstantScheduler([], [_number(lr_scheduler, "learning rate", minimum=0.0)])
        if grad_clipping is not None and not isinstance(grad_clipping, _ClipByGlobalNorm):
            raise TypeError("grad_clipping must be flow.optimizer.grad_clipping.by_global_norm(...), got %r" % (
                grad_clipping,))
        if variables is not None and (not isinstance(variables, (list, tuple)) or
                                      not all(isinstance(v, str) for v in variables)):
            raise TypeError("variables must be a list of variable names, got %r" % (variables,))
        self.lr_scheduler = lr_scheduler
        self.spec = dict(spec)
        if grad_clipping is not None:
            self.spec["clip_norm"] = grad_clipping.clip_norm
        if variables is not None:
            self.spec["variables"] = list(variables)
        self.bias_correction = False

    def learning_rate(self, step):
        lr = self.lr_scheduler(step)
        if self.bias_correction:
            t = step + 1
            lr *= _math.sqrt(1 - self.spec["beta2"] ** t) / (1 - self.spec["beta1"] ** t)
        return lr

    def rate_feed(self, step):
        """What the job's "learning_rate" feed holds at `step` (see python_bindings/C_API.md)."""
        return [self.learning_rate(step)]

    def minimize(self, loss):
        """Adds the backward pass and the updates of `loss`. Once per job: a second call
        (which would add the gradient again) is an error naming both lines."""
        ctx = current("Optimizer.minimize")
        location = user_location()
        if ctx.optimizer is not None:
            raise ValueError("job '%s': minimize() at %s, but minimize() was already called at %s; a job has one "
                             "optimizer (minimize a sum of losses, or pass a list of losses to one minimize())" % (
                                 ctx.job_name, location, ctx.optimizer_location))
        if ctx.job_type != "train":
            raise ValueError("job '%s': minimize() at %s in a predict job; use @flow.global_function(type=\"train\")"
                             % (ctx.job_name, location))
        losses = list(loss) if isinstance(loss, (list, tuple)) else [loss]
        if not losses:
            raise ValueError("minimize() at %s: no loss given" % location)
        for i, l in enumerate(losses):
            check_blob(l, ctx, "minimize()'s loss" if len(losses) == 1 else "minimize()'s loss %d" % i)
        for l in losses:
            ctx.builder.add_loss(l.ref)
        ctx.builder.set_optimizer(self.spec)
        ctx.optimizer = self
        ctx.optimizer_location = location


def _moments(what, beta1, beta2, epsilon, weight_decay):
    return (_number(beta1, what + " beta1", minimum=0.0, maximum=1.0, open_maximum=True),
            _number(beta2, what + " beta2", minimum=0.0, maximum=1.0, open_maximum=True),
            _number(epsilon, what + " epsilon", minimum=0.0),
            _number(weight_decay, what + " weight_decay", minimum=0.0))


class SGD(Optimizer):
    def __init__(self, lr_scheduler, momentum=0.9, weight_decay=0.0, grad_clipping=None, variables=None, **unused):
        _unknown("flow.optimizer.SGD", unused)
        momentum = _number(momentum, "SGD momentum", minimum=0.0, maximum=1.0, open_maximum=True)
        weight_decay = _number(weight_decay, "SGD weight_decay", minimum=0.0)
        kind = "momentum" if momentum else "sgd"
        super().__init__(lr_scheduler, {"type": kind, "momentum": float(momentum), "weight_decay": float(weight_decay)},
                         grad_clipping, variables)


class Adam(Optimizer):
    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-8, do_bias_correction=True, weight_decay=0.0,
                 grad_clipping=None, variables=None, **unused):
        _unknown("flow.optimizer." + type(self).__name__, unused)
        beta1, beta2, epsilon, weight_decay = _moments(type(self).__name__, beta1, beta2, epsilon, weight_decay)
        super().__init__(lr_scheduler, {"type": "adam", "beta1": beta1, "beta2": beta2, "epsilon": epsilon,
                                        "weight_decay": float(weight_decay)}, grad_clipping, variables)
        self.bias_correction = bool(do_bias_correction)


class AdamW(Adam):
    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-8, do_bias_correction=True, weight_decay=0.01,
                 grad_clipping=None, variables=None, **unused):
        _unknown("flow.optimizer.AdamW", unused)
        super().__init__(lr_scheduler, beta1, beta2, epsilon, do_bias_correction, weight_decay, grad_clipping, variables)
        self.spec["type"] = "adamw"


class LAMB(Optimizer):
    """LAMB (layer-wise adaptive moments): the Adam direction with bias-corrected moments plus
    weight decay, scaled per variable by the trust ratio ||w|| / ||direction||."""

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=0.0, grad_clipping=None,
                 variables=None, **unused):
        _unknown("flow.optimizer.LAMB", unused)
        beta1, beta2, epsilon, weight_decay = _moments("LAMB", beta1, beta2, epsilon, weight_decay)
        super().__init__(lr_scheduler, {"type": "lamb", "beta1": beta1, "beta2": beta2, "epsilon": epsilon,
                                        "weight_decay": float(weight_decay)}, grad_clipping, variables)

    def rate_feed(self, step):
        t = step + 1
        return [self.lr_scheduler(step), 1.0 / (1 - self.spec["beta1"] ** t), 1.0 / (1 - self.spec["beta2"] ** t)]


class RMSProp(Optimizer):
    def __init__(self, lr_scheduler, decay_rate=0.99, epsilon=1e-8, weight_decay=0.0, grad_clipping=None, variables=None,
                 **unused):
        _unknown("flow.optimizer.RMSProp", unused)
        decay_rate = _number(decay_rate, "RMSProp decay_rate", minimum=0.0, maximum=1.0, open_maximum=True)
        epsilon = _number(epsilon, "RMSProp epsilon", minimum=0.0)
        weight_decay = _number(weight_decay, "RMSProp weight_decay", minimum=0.0)
        super().__init__(lr_scheduler, {"type": "rmsprop", "decay_rate": decay_rate, "epsilon": epsilon,
                                        "weight_decay": float(weight_decay)}, grad_clipping, variables)
