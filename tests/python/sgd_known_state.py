"""A train job whose state after n steps is known exactly, shared by the checkpoint and stress
tests: SGD with rate 0.5 on loss = sum(a * x) + sum(b * (x + x)) with x = 1 gives
a = -0.5 n, b = -n, whichever job (of those sharing the variables) took the step."""
import numpy as np

import actorflow as flow
import actorflow.typing as tp


def train_job(prefix, name, asynchronous=False):
    """The job over variables `prefix`-a and `prefix`-b, named `name` (train steps are kept per
    job name for the process's lifetime)."""
    annotation = tp.Callback[tp.Numpy] if asynchronous else tp.Numpy

    def job(x: tp.Numpy.Placeholder((4,))) -> annotation:
        a = flow.get_variable(prefix + "-a", shape=(4,), initializer=flow.zeros_initializer())
        b = flow.get_variable(prefix + "-b", shape=(4,), initializer=flow.zeros_initializer())
        loss = flow.math.reduce_sum(a * x + b * (x + x))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss
    job.__annotations__["return"] = annotation
    job.__name__ = name
    return flow.global_function(type="train")(job)


def check_state(values, prefix, jobs):
    """The total step of `jobs` in `values` (a snapshot), after checking the variables hold the
    state after it."""
    step = sum(int(values["System-Train-TrainStep-" + job.__name__][0]) for job in jobs)
    np.testing.assert_array_equal(values[prefix + "-a"], np.full(4, -0.5 * step, np.float32), err_msg="step %d" % step)
    np.testing.assert_array_equal(values[prefix + "-b"], np.full(4, -1.0 * step, np.float32), err_msg="step %d" % step)
    return step
