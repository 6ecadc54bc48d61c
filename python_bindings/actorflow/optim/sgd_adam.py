"""SGD (momentum, weight decay), Adam and AdamW with PyTorch's semantics, updating in place
through the registered sgd_update / momentum_update / adam_update ops."""
from .optimizer import Optimizer, _as_tensor, _clone, required


def _zeros_like(param):
    from .. import zeros_like
    return zeros_like(param.detach())


class SGD(Optimizer):
    """PyTorch's SGD: with momentum, buf = momentum * buf + (grad + weight_decay * param);
    param -= lr * buf (dampening 0, no Nesterov).

    The momentum_update op keeps the buffer pre-scaled by the learning rate (m = -c * buf,
    c = the group's lr), which is what it adds to the parameter. When a schedule changes lr the
    buffers are rescaled by new/old, and a step with lr == 0 updates them against a scratch
    copy of the parameter, so the result follows PyTorch's recurrence for any schedule."""

    def __init__(self, params, lr=required, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: %r" % (lr,))
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: %r" % (momentum,))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: %r" % (weight_decay,))
        if dampening != 0.0 or nesterov:
            raise ValueError("SGD: dampening and nesterov are not supported (got dampening=%r, nesterov=%r)" % (
                dampening, nesterov))
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def _update_group(self, group):
        lr, momentum, decay = float(group["lr"]), float(group["momentum"]), float(group["weight_decay"])
        params = [p for p in group["params"] if p.grad is not None]
        if momentum == 0.0:
            rate = self._rate(group, lr)
            for param in params:
                self._update("sgd_update", [param, param.grad, rate], {"weight_decay": decay})
            return
        attrs = {"beta": momentum, "weight_decay": decay}
        scale = group.get("_scale")
        if lr != 0.0 and scale is not None and scale != lr:
            for param in group["params"]:
                if param in self.state and "momentum" in self.state[param]:
                    self.state[param]["momentum"].mul_(lr / scale)
        if lr != 0.0:
            group["_scale"] = scale = lr
        elif scale is None:
            group["_scale"] = scale = 1.0
        rate = self._rate(group, scale)
        for param in params:
            state = self.state[param]
            if "momentum" not in state:
                state["momentum"] = _zeros_like(param)
            if lr != 0.0:
                self._update("momentum_update", [param, param.grad, state["momentum"], rate], attrs)
            else:  # the buffer moves, the parameter does not
                scratch = param.detach().clone() if hasattr(param, "clone") else _clone(param)
                self._update("momentum_update", [scratch, param.grad, state["momentum"], rate], attrs)

    def _export_state(self, param, group, state):
        out = {k: _clone(v) for k, v in state.items() if k != "momentum"}
        if "momentum" in state:
            buffer = _clone(state["momentum"])
            buffer.mul_(-1.0 / group.get("_scale", 1.0))
            out["momentum_buffer"] = buffer
        return out

    def _import_state(self, param, group, state):
        out = {k: v for k, v in state.items() if k != "momentum_buffer"}
        if state.get("momentum_buffer") is not None:
            scale = float(group["lr"]) or 1.0
            group["_scale"] = scale
            buffer = _as_tensor(state["momentum_buffer"], param)
            buffer.mul_(-scale)
            out["momentum"] = buffer
        return out


class Adam(Optimizer):
    """PyTorch's Adam (L2 weight decay added to the gradient; amsgrad not supported): the
    adam_update op gets lr = [lr, 1/(1-beta1^t), 1/(1-beta2^t)] and applies PyTorch's
    bias-corrected step, eps added to sqrt(v^)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
        if lr < 0.0:
            raise ValueError("Invalid learning rate: %r" % (lr,))
        if eps < 0.0:
            raise ValueError("Invalid epsilon value: %r" % (eps,))
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameters: %r (each must be in [0, 1))" % (betas,))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: %r" % (weight_decay,))
        if amsgrad:
            raise ValueError("%s: amsgrad is not supported" % type(self).__name__)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad))

    def _update_group(self, group):
        lr, (beta1, beta2) = float(group["lr"]), group["betas"]
        attrs = {"beta1": float(beta1), "beta2": float(beta2), "epsilon": float(group["eps"]),
                 "weight_decay": float(group["weight_decay"]), "decoupled_weight_decay": self.decoupled}
        for param in group["params"]:
            if param.grad is None:
                continue
            state = self.state[param]
            if not state:
                state["step"] = 0
                state["exp_avg"] = _zeros_like(param)
                state["exp_avg_sq"] = _zeros_like(param)
            state["step"] += 1
            step = state["step"]
            rate = self._rate(group, (lr, 1.0 / (1.0 - beta1 ** step), 1.0 / (1.0 - beta2 ** step)))
            self._update("adam_update", [param, param.grad, state["exp_avg"], state["exp_avg_sq"], rate], attrs)

    def _export_state(self, param, group, state):
        return {k: _clone(v) for k, v in state.items()}

    def _import_state(self, param, group, state):
        out = dict(state)
        for key in ("exp_avg", "exp_avg_sq"):
            if key in out:
                out[key] = _as_tensor(out[key], param)
        out["step"] = int(out.get("step", 0))
        return out


class AdamW(Adam):
    """PyTorch's AdamW: param *= 1 - lr * weight_decay and the Adam step without decay, in one
    adam_update (decoupled_weight_decay)."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
