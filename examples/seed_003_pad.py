"""Seed 003 (OneFlow's zero_pad / reflection_pad script), with the import lines changed to
actorflow. Two job functions in one script, the first one called twice. `np.float` no longer
exists in NumPy >= 1.24, so `astype(np.float)` is spelled `astype(np.float64)`: the float64
array is converted to the placeholder's float32 on the way in, as OneFlow does."""
import actorflow as flow
from actorflow.typing import Numpy  # noqa: F401  (seed: from oneflow.python.framework.typing import Numpy)
import actorflow.typing as tp
import numpy as np


@flow.global_function()
def zero_pad(x: tp.Numpy.Placeholder((2, 1, 3, 3))) -> tp.Numpy:
    with flow.scope.placement('cpu', '0:0'):
        unused = flow.reflection_pad2d(x, padding=1)  # noqa: F841
        out = flow.zero_pad2d(x, padding=2)
    return out


@flow.global_function()
def reflection_pad(x: tp.Numpy.Placeholder((2, 1, 3, 3))) -> tp.Numpy:
    with flow.scope.placement('cpu', '0:0'):
        loss = flow.reflection_pad2d(x, padding=1)
    return loss


x = np.arange(18).reshape((2, 1, 3, 3)).astype(np.float64)
y = zero_pad(x)
y1 = zero_pad(x)
y2 = reflection_pad(x)
print('in:\n{} \n out:\n{}\n out1:\n{} \nout2:\n{}'.format(x, y, y1, y2))
print('{} {} {} {}'.format(type(x), type(y), type(y1), type(y2)))
