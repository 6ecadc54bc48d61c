"""flow.nn.Module: the base class of layers, with PyTorch's registration rules (parameters,
buffers and submodules are registered by assignment) and its state_dict format."""
import collections
import collections.abc
import itertools

from ... import _trace_ctx


class _Unavailable:
    """Stands for Tensor/Parameter where the eager tensor module is not built in."""


_types = []


def _tensor_types():
    """(Tensor, Parameter) of the eager package, imported on first use (the eager module imports
    actorflow, so it cannot be imported while actorflow.nn loads)."""
    if not _types:
        try:
            from ..._tensor import Parameter, Tensor
        except ImportError:
            return _Unavailable, _Unavailable
        _types.extend((Tensor, Parameter))
    return _types[0], _types[1]


class IncompatibleKeys(collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict(strict=False) returns: the keys it did not find and those it did
    not use."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """Returned by register_forward_hook / register_forward_pre_hook: remove() unregisters."""

    _next_id = itertools.count()

    def __init__(self, hooks):
        self._hooks = hooks
        self.id = next(RemovableHandle._next_id)

    def remove(self):
        self._hooks.pop(self.id, None)


def add_indent(text, spaces):
    """Indents every line of `text` but the first by `spaces` (the nested repr layout)."""
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    pad = " " * spaces
    return lines[0] + "\n" + "\n".join(pad + line for line in lines[1:])


def _check_name(kind, name, module):
    if not isinstance(name, str):
        raise TypeError("%s name should be a string, got %s" % (kind, type(name).__name__))
    if name == "":
        raise KeyError('%s name can\'t be empty string ""' % kind)
    if "." in name:
        raise KeyError('%s name can\'t contain ".", got %r' % (kind, name))
    if hasattr(module, name) and name not in module._parameters and name not in module._buffers \
            and name not in module._modules:
        raise KeyError("attribute %r already exists in %s" % (name, type(module).__name__))


class Module:
    """Subclasses call super().__init__() first, assign Parameters, sub-Modules and buffers
    (register_buffer) in __init__, and define forward(*inputs)."""

    _version = 1

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks", collections.OrderedDict())

    # ---- registration -------------------------------------------------------------------
    def _require_init(self, what):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign %s before %s.__init__() calls super().__init__()" % (
                what, type(self).__name__))

    def register_parameter(self, name, param):
        """Adds `param` (a Parameter or None) as parameter `name`."""
        self._require_init("parameters")
        _check_name("parameter", name, self)
        _, Parameter = _tensor_types()
        if param is not None and not isinstance(param, Parameter):
            raise TypeError("cannot assign '%s' object to parameter '%s' (flow.nn.Parameter or None required)" % (
                type(param).__name__, name))
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Adds `tensor` (a Tensor or None) as buffer `name`: state that is no parameter (the
        running statistics of batch norm). Persistent buffers are part of state_dict."""
        self._require_init("buffers")
        _check_name("buffer", name, self)
        Tensor, _ = _tensor_types()
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError("cannot assign '%s' object to buffer '%s' (flow.Tensor or None required)" % (
                type(tensor).__name__, name))
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name, module):
        """Adds `module` (a Module or None) as submodule `name`."""
        self._require_init("submodules")
        if module is not None and not isinstance(module, Module):
            raise TypeError("%s is not a Module subclass" % type(module).__name__)
        _check_name("module", name, self)
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        Tensor, Parameter = _tensor_types() if params is not None else (None, None)
        if Parameter is not None and isinstance(value, Parameter):
            self._forget(name)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError("cannot assign '%s' as parameter '%s' (flow.nn.Parameter or None expected)" % (
                    type(value).__name__, name))
            params[name] = None
        elif isinstance(value, Module):
            self._require_init("submodules")
            self._forget(name)
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError("cannot assign '%s' as child module '%s' (flow.nn.Module or None expected)" % (
                    type(value).__name__, name))
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError("cannot assign '%s' as buffer '%s' (flow.Tensor or None expected)" % (
                    type(value).__name__, name))
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name):
        self.__dict__.pop(name, None)
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __getattr__(self, name):
        # Only called when normal lookup fails: the registered names live in the tables.
        tables = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in tables and name in tables[table]:
                return tables[table][name]
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers) | set(self._modules))

    # ---- calling ------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        raise NotImplementedError('Module [%s] is missing the required "forward" function' % type(self).__name__)

    def __call__(self, *inputs, **kwargs):
        if self._forward_pre_hooks:
            for hook in list(self._forward_pre_hooks.values()):
                result = hook(self, inputs)
                if result is not None:
                    inputs = result if isinstance(result, tuple) else (result,)
        output = self.forward(*inputs, **kwargs)
        if self._forward_hooks:
            for hook in list(self._forward_hooks.values()):
                result = hook(self, inputs, output)
                if result is not None:
                    output = result
        return output

    def register_forward_pre_hook(self, hook):
        """hook(module, inputs) -> None or new inputs, before each forward."""
        handle = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[handle.id] = hook
        return handle

    def register_forward_hook(self, hook):
        """hook(module, inputs, output) -> None or a new output, after each forward."""
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        return handle

    # ---- traversal ----------------------------------------------------------------------
    def _named_members(self, get_members, prefix="", recurse=True):
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (module_prefix + "." + name if module_prefix else name), value

    def named_parameters(self, prefix="", recurse=True):
        """(qualified name, Parameter) pairs, each parameter once (shared ones under their first name)."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True):
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse)

    def buffers(self, recurse=True):
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(qualified name, module) pairs of this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + "." + name if prefix else name, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def get_submodule(self, target):
        module = self
        for part in target.split(".") if target else []:
            if part not in module._modules or module._modules[part] is None:
                raise AttributeError("%s has no submodule %r (looking up %r)" % (type(module).__name__, part, target))
            module = module._modules[part]
        return module

    # ---- modes and bulk operations ------------------------------------------------------
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be a bool, got %r" % (mode,))
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=False):
        """Clears every parameter's gradient: zeroes it in place, or drops it (None)."""
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.zero_()

    def apply(self, fn):
        """fn(module) for every descendant (children first) and then this module; returns self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """to(device) / to(dtype) / to(device, dtype): casts every floating parameter and buffer
        in place (the tensor objects stay, their data changes; gradients are dropped) and returns
        self. Only the CPU device exists for eager tensors."""
        from ... import _dtypes
        device, dtype = None, None
        for value in list(args) + list(kwargs.values()):
            if isinstance(value, _dtypes.DType):
                dtype = value
            else:
                device = value
        unknown = set(kwargs) - {"device", "dtype"}
        if unknown:
            raise TypeError("Module.to got unexpected keyword argument(s) %s" % sorted(unknown))
        if device is not None:
            name = str(getattr(device, "type", device)).split(":")[0]
            if name != "cpu":
                raise ValueError("Module.to: device %r is not supported by eager mode; use 'cpu'" % (device,))
        if dtype is not None:
            if not dtype.name.startswith("float"):
                raise TypeError("Module.to only accepts floating point dtypes, got %s" % dtype.name)
            from ... import no_grad
            with no_grad():
                for module in self.modules():
                    for table in (module._parameters, module._buffers):
                        for key, value in table.items():
                            if value is not None and value.dtype.name.startswith("float") and value.dtype != dtype:
                                # in place (the same Parameter object), so optimizers built
                                # before the cast keep updating the module's parameters
                                value.data = value.to(dtype)
                                value.grad = None
        return self

    def float(self):
        from ... import _dtypes
        return self.to(_dtypes.float32)

    def double(self):
        from ... import _dtypes
        return self.to(_dtypes.float64)

    def cpu(self):
        return self

    # ---- state_dict ---------------------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = buffer if keep_vars else buffer.detach()

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """OrderedDict {qualified name: Tensor} of parameters and persistent buffers, each
        module's own first, then its children's (PyTorch's order and names). The tensors share
        storage with the module's (detached unless keep_vars)."""
        if destination is None:
            destination = collections.OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination, prefix + name + ".", keep_vars)
        return destination

    def _state_entries(self, prefix=""):
        """(key, module, table name, local name) of every entry state_dict would hold."""
        for name, param in self._parameters.items():
            if param is not None:
                yield prefix + name, self, "_parameters", name
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers:
                yield prefix + name, self, "_buffers", name
        for name, module in self._modules.items():
            if module is not None:
                yield from module._state_entries(prefix + name + ".")

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values of `state_dict` ({name: Tensor or numpy array}) into the
        parameters and buffers in place. Every entry is checked before anything is copied, so
        an error leaves the module as it was: a shape mismatch always raises; missing and
        unexpected keys raise when strict (else they are returned as IncompatibleKeys)."""
        import numpy as np
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError("Expected state_dict to be dict-like, got %s." % type(state_dict).__name__)
        Tensor, _ = _tensor_types()
        entries = list(self._state_entries())
        expected = {key for key, _, _, _ in entries}
        missing = [key for key, _, _, _ in entries if key not in state_dict]
        unexpected = [key for key in state_dict if key not in expected]
        errors, copies = [], []
        for key, module, table, name in entries:
            if key not in state_dict:
                continue
            target = getattr(module, table)[name]
            value = state_dict[key]
            if not isinstance(value, (Tensor, np.ndarray)):
                errors.append('While copying the parameter named "%s", expected flow.Tensor or numpy array from '
                              'checkpoint but received %s' % (key, type(value).__name__))
                continue
            if tuple(value.shape) != tuple(target.shape):
                errors.append("size mismatch for %s: copying a param with shape %s from checkpoint, the shape in "
                              "current model is %s." % (key, _shape_text(value.shape), _shape_text(target.shape)))
                continue
            copies.append((target, value))
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: %s. " % ", ".join('"%s"' % k for k in unexpected))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: %s. " % ", ".join('"%s"' % k for k in missing))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s" % (type(self).__name__,
                                                                                 "\n\t".join(errors)))
        from ... import no_grad, tensor
        with no_grad():
            for target, value in copies:
                if isinstance(value, np.ndarray):
                    value = tensor(value, dtype=target.dtype)
                target.copy_(value)
        return IncompatibleKeys(missing, unexpected)

    # ---- printing -----------------------------------------------------------------------
    def extra_repr(self):
        """The text inside this module's parentheses in repr (its configuration)."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = ["(%s): %s" % (name, add_indent(repr(module), 2)) for name, module in self._modules.items()]
        lines = extra_lines + child_lines
        text = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                text += extra_lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"


def _shape_text(shape):
    """A shape as PyTorch prints it in load_state_dict errors: flow.Size([2, 3])."""
    return "flow.Size([%s])" % ", ".join(str(int(d)) for d in shape)


def is_lazy(inputs):
    """Whether ops on `inputs` are traced (a job function or an nn.Graph) rather than run."""
    check = getattr(_trace_ctx, "is_lazy", None)
    if check is not None:
        return check(inputs)
    return any(isinstance(x, _trace_ctx.BlobDef) for x in inputs)
