"""Sequential, ModuleList and ModuleDict: modules that hold modules."""
import collections
import collections.abc
import operator

from .module import Module


def _index(index, length, what):
    index = operator.index(index)
    if not -length <= index < length:
        raise IndexError("index %d is out of range for %s of length %d" % (index, what, length))
    return index % length


class Sequential(Module):
    """Sequential(m1, m2, ...) or Sequential(OrderedDict(name=module)): forward feeds each
    module's output to the next."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(collections.OrderedDict(list(self._modules.items())[index]))
        keys = list(self._modules)
        return self._modules[keys[_index(index, len(keys), "Sequential")]]

    def __setitem__(self, index, module):
        keys = list(self._modules)
        setattr(self, keys[_index(index, len(keys), "Sequential")], module)

    def __delitem__(self, index):
        keys = list(self._modules)
        if isinstance(index, slice):
            for key in keys[index]:
                delattr(self, key)
        else:
            delattr(self, keys[_index(index, len(keys), "Sequential")])

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):  # noqa: A002  (PyTorch's name)
        for module in self._modules.values():
            input = module(input)  # noqa: A001
        return input


class ModuleList(Module):
    """A list of modules, registered as submodules "0", "1", ..."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(list(self._modules.values())[index])
        return self._modules[str(_index(index, len(self), "ModuleList"))]

    def __setitem__(self, index, module):
        setattr(self, str(_index(index, len(self), "ModuleList")), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self


class ModuleDict(Module):
    """An ordered dict of modules, registered under their keys."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        items = modules.items() if isinstance(modules, collections.abc.Mapping) else modules
        for key, module in items:
            self[key] = module
