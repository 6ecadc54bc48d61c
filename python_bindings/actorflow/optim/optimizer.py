"""flow.optim.Optimizer: parameter groups, per-parameter state and PyTorch's state_dict
format. Subclasses update the parameters eagerly through the registered update ops, which
write the parameter (and its state) in place."""
import collections
import collections.abc
import copy

from .. import _trace_ctx


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


class ParameterState(collections.abc.MutableMapping):
    """{parameter: state dict}, keyed by identity (tensors compare elementwise, not by identity)."""

    def __init__(self):
        self._states = {}  # id(parameter) -> (parameter, state)

    def __getitem__(self, param):
        entry = self._states.get(id(param))
        if entry is None:
            entry = self._states[id(param)] = (param, {})
        return entry[1]

    def __setitem__(self, param, state):
        self._states[id(param)] = (param, state)

    def __delitem__(self, param):
        del self._states[id(param)]

    def __contains__(self, param):
        return id(param) in self._states

    def __iter__(self):
        return (param for param, _ in list(self._states.values()))

    def __len__(self):
        return len(self._states)


class Optimizer:
    def __init__(self, params, defaults):
        from .._tensor import Tensor
        self.defaults = defaults
        self.state = ParameterState()
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but "
                            "got a Tensor")
        if isinstance(params, dict):
            params = [params]
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        """Adds a group ({"params": [...], option: value}); unset options take the defaults."""
        from .._tensor import Tensor
        if not isinstance(param_group, dict):
            raise TypeError("param group must be a dict, got %s" % type(param_group).__name__)
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for i, param in enumerate(params):
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but parameter %d of the group is %s" % (
                    i, type(param).__name__))
            if not param.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor (parameter %d of the group)" % i)
            if param.dtype.name != "float32":
                raise TypeError("%s: parameter %d is %s; the update ops need float32" % (
                    type(self).__name__, i, param.dtype.name))
        group = dict(param_group, params=params)
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError("parameter group didn't specify a value of required optimization parameter " + name)
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group (or twice in one)")
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group):
        if group["lr"] < 0.0:
            raise ValueError("Invalid learning rate: %r" % (group["lr"],))

    def zero_grad(self, set_to_none=False):
        """Clears the gradients of every parameter: zeroes them in place or drops them (None)."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.zero_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from .. import enable_grad
            with enable_grad():
                loss = closure()
        from .. import no_grad
        with no_grad():
            for group in self.param_groups:
                self._update_group(group)
        return loss

    def _update_group(self, group):
        raise NotImplementedError

    # ---- the update ops -----------------------------------------------------------------------
    def _rate(self, group, values, slot="_rate"):
        """A float32 tensor holding `values` (a number or a tuple), one per group and slot,
        rewritten only when they change: the update ops read lr (and Adam's bias corrections)
        from an input, so schedules need no new kernels."""
        values = tuple(values) if isinstance(values, (tuple, list)) else (float(values),)
        cached = group.get(slot)
        if cached is None or len(cached[0]) != len(values):
            from .. import float32, tensor
            cached = group[slot] = [values, tensor(list(values), dtype=float32)]
        elif cached[0] != values:
            from .. import float32, tensor
            cached[1].copy_(tensor(list(values), dtype=float32))
            cached[0] = values
        return cached[1]

    @staticmethod
    def _update(op_type, inputs, attrs):
        _trace_ctx.add_op(op_type, inputs, attrs, None, 0)

    # ---- state_dict -----------------------------------------------------------------------------
    def _export_state(self, param, group, state):
        """The state of `param` as it appears in state_dict (PyTorch's keys)."""
        return dict(state)

    def _import_state(self, param, group, state):
        return dict(state)

    def state_dict(self):
        """{"state": {index: {name: value}}, "param_groups": [{option: value, "params": [indices]}]}
        with parameters numbered across groups in order, as PyTorch."""
        index, packed_groups, packed_state = 0, [], {}
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params" and not k.startswith("_")}
            packed["params"] = list(range(index, index + len(group["params"])))
            for i, param in zip(packed["params"], group["params"]):
                if param in self.state and self.state[param]:
                    packed_state[i] = self._export_state(param, group, self.state[param])
            index += len(group["params"])
            packed_groups.append(packed)
        return {"state": packed_state, "param_groups": packed_groups}

    def load_state_dict(self, state_dict):
        """Restores options and state saved by state_dict(); the groups must have the same sizes."""
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if groups is None or "state" not in state_dict:
            raise ValueError("load_state_dict expects {'state': ..., 'param_groups': [...]}, got %r" % (
                type(state_dict).__name__,))
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has %d parameter groups, the optimizer has %d" % (
                len(groups), len(self.param_groups)))
        for saved, group in zip(groups, self.param_groups):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group (%d vs %d parameters)" % (len(saved["params"]),
                                                                            len(group["params"])))
        saved_state = {int(k): v for k, v in state_dict["state"].items()}
        new_state = ParameterState()
        for saved, group in zip(groups, self.param_groups):
            for key, value in saved.items():
                if key != "params":
                    group[key] = copy.deepcopy(value)
            group.pop("_rate", None)
            for index, param in zip(saved["params"], group["params"]):
                if index in saved_state:
                    new_state[param] = self._import_state(param, group, saved_state[index])
        self.state = new_state

    def __repr__(self):
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += "\nParameter Group %d" % i
            for key in sorted(group):
                if key != "params" and not key.startswith("_"):
                    text += "\n    %s: %s" % (key, group[key])
        return text + "\n)"


def _clone(value):
    """A copy of a state value (tensors copied so the exported state does not alias the live one)."""
    from .._tensor import Tensor
    if isinstance(value, Tensor):
        from .. import tensor
        return tensor(value.numpy(), dtype=value.dtype)
    return copy.deepcopy(value)


def _as_tensor(value, like):
    from .. import tensor
    import numpy as np
    from .._tensor import Tensor
    if isinstance(value, Tensor):
        value = value.numpy()
    array = np.asarray(value, dtype=np.float32)
    if tuple(array.shape) != tuple(like.shape):
        raise ValueError("optimizer state of shape %s does not match its parameter %s" % (
            tuple(array.shape), tuple(like.shape)))
    return tensor(array, dtype=like.dtype)
