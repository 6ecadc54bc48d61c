"""Optimizers and learning-rate schedulers. The schedule is evaluated per call on the host and
fed to the update ops (a (1,) float feed), so changing the rate never recompiles."""
import math as _math
import types

from ._trace_ctx import current


class _Warmup:
    def __init__(self, steps, start_multiplier=0.0):
        self.steps = int(steps)
        self.start = float(start_multiplier)

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
        self.boundaries, self.values = list(boundaries), list(values)

    def base(self, step):
        for b, v in zip(self.boundaries, self.values):
            if step < b:
                return v
        return self.values[-1]


class PiecewiseScalingScheduler(_Scheduler):
    def __init__(self, base_lr, boundaries, scale, warmup=None):
        super().__init__(warmup)
        self.base_lr, self.boundaries = base_lr, list(boundaries)
        self.scale = list(scale) if isinstance(scale, (list, tuple)) else [scale ** (i + 1) for i in range(len(boundaries))]

    def base(self, step):
        lr = self.base_lr
        for b, s in zip(self.boundaries, self.scale):
            if step >= b:
                lr = self.base_lr * s
        return lr


class CosineScheduler(_Scheduler):
    def __init__(self, base_lr, steps, alpha=0.0, warmup=None):
        super().__init__(warmup)
        self.base_lr, self.steps, self.alpha = base_lr, steps, alpha

    def base(self, step):
        t = min(step, self.steps) / self.steps
        return self.base_lr * ((1 - self.alpha) * 0.5 * (1 + _math.cos(_math.pi * t)) + self.alpha)


class PolynomialScheduler(_Scheduler):
    def __init__(self, base_lr, steps, end_learning_rate=0.0001, power=1.0, cycle=False, warmup=None):
        super().__init__(warmup)
        self.base_lr, self.steps, self.end, self.power, self.cycle = base_lr, steps, end_learning_rate, power, cycle

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
        self.base_lr, self.steps, self.decay_rate, self.staircase = base_lr, steps, decay_rate, staircase

    def base(self, step):
        p = step / self.steps
        return self.base_lr * self.decay_rate ** (_math.floor(p) if self.staircase else p)


class _ClipByGlobalNorm:
    def __init__(self, clip_norm):
        self.clip_norm = float(clip_norm)


grad_clipping = types.SimpleNamespace(by_global_norm=_ClipByGlobalNorm)


class Optimizer:
    def __init__(self, lr_scheduler, spec, grad_clipping=None, variables=None):
        if isinstance(lr_scheduler, (int, float)):
            lr_scheduler = PiecewiseConstantScheduler([], [float(lr_scheduler)])
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
        ctx = current("Optimizer.minimize")
        losses = loss if isinstance(loss, (list, tuple)) else [loss]
        for l in losses:
            ctx.builder.add_loss(l.ref)
        ctx.builder.set_optimizer(self.spec)
        ctx.optimizer = self


class SGD(Optimizer):
    def __init__(self, lr_scheduler, momentum=0.9, weight_decay=0.0, grad_clipping=None, variables=None, **unused):
        kind = "momentum" if momentum else "sgd"
        super().__init__(lr_scheduler, {"type": kind, "momentum": float(momentum), "weight_decay": float(weight_decay)},
                         grad_clipping, variables)


class Adam(Optimizer):
    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-8, do_bias_correction=True, weight_decay=0.0,
                 grad_clipping=None, variables=None, **unused):
        super().__init__(lr_scheduler, {"type": "adam", "beta1": beta1, "beta2": beta2, "epsilon": epsilon,
                                        "weight_decay": float(weight_decay)}, grad_clipping, variables)
        self.bias_correction = bool(do_bias_correction)


class AdamW(Adam):
    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-8, do_bias_correction=True, weight_decay=0.01,
                 grad_clipping=None, variables=None, **unused):
        super().__init__(lr_scheduler, beta1, beta2, epsilon, do_bias_correction, weight_decay, grad_clipping, variables)
        self.spec["type"] = "adamw"


class LAMB(Optimizer):
    """LAMB (layer-wise adaptive moments): the Adam direction with bias-corrected moments plus
    weight decay, scaled per variable by the trust ratio ||w|| / ||direction||."""

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=0.0, grad_clipping=None,
                 variables=None, **unused):
        super().__init__(lr_scheduler, {"type": "lamb", "beta1": beta1, "beta2": beta2, "epsilon": epsilon,
                                        "weight_decay": float(weight_decay)}, grad_clipping, variables)

    def rate_feed(self, step):
        t = step + 1
        return [self.lr_scheduler(step), 1.0 / (1 - self.spec["beta1"] ** t), 1.0 / (1 - self.spec["beta2"] ** t)]


class RMSProp(Optimizer):
    def __init__(self, lr_scheduler, decay_rate=0.99, epsilon=1e-8, weight_decay=0.0, grad_clipping=None, variables=None,
                 **unused):
        super().__init__(lr_scheduler, {"type": "rmsprop", "decay_rate": decay_rate, "epsilon": epsilon,
                                        "weight_decay": float(weight_decay)}, grad_clipping, variables)
