"""Single-call latency of batch-1 MLP inference (784-512-10) and of an empty job from Python,
each call timed alone: the median and the 10th percentile (on a shared host the low percentile
is the cost when nothing else ran on the cores meanwhile). Candidates are interleaved in blocks,
forward then reversed order, in one process:

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_latency.py [--blocks 40]

  predict            the job function called with a float32 array (the user's call)
  predict run()      CompiledJob.run alone (the C++ call path, without the Python wrapper)
  predict, no gemv   the same job compiled with disable_fusion("gemv") (oneDNN for both layers)
  empty / empty run()  a job returning its (1,) input
Run it against two builds alternately (PYTHONPATH) to compare them."""
import argparse
import time

import numpy as np

import actorflow as flow
import actorflow.typing as tp

PARSER = argparse.ArgumentParser(description=__doc__.splitlines()[0])
PARSER.add_argument("--blocks", type=int, default=40, help="interleaved blocks per candidate")
PARSER.add_argument("--calls", type=int, default=300, help="calls per block")
PARSER.add_argument("--threads", type=int, default=2)
ARGS = PARSER.parse_args()

flow.config.num_threads(ARGS.threads)


def make_predict(name, disabled=()):
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    def predict(images: tp.Numpy.Placeholder((1, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=0)
        flat = flow.reshape(images, [images.shape[0], -1])
        hidden = flow.layers.dense(flat, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        return flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
    predict.__name__ = name
    return flow.global_function(type="predict", function_config=config)(predict)


@flow.global_function(type="predict")
def empty(x: tp.Numpy.Placeholder((1,), dtype=flow.float)) -> tp.Numpy:
    return x


def main():
    predict = make_predict("predict")
    try:
        predict_onednn = make_predict("predict_no_gemv", ("gemv",))
    except ValueError:  # a build without the GEMV loop
        predict_onednn = None
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    e = np.zeros((1,), np.float32)
    first = predict(x)  # compiles
    if predict_onednn is not None:
        np.testing.assert_allclose(first, predict_onednn(x), rtol=1e-5, atol=1e-5)
    empty(e)
    run, empty_run = predict._compiled.run, empty._compiled.run
    feeds, empty_feeds = [x], [e]
    candidates = [("predict", lambda: predict(x)), ("predict run()", lambda: run(feeds)),
                  ("empty", lambda: empty(e)), ("empty run()", lambda: empty_run(empty_feeds))]
    if predict_onednn is not None:
        candidates.insert(2, ("predict, no gemv", lambda: predict_onednn(x)))
    times = {name: [] for name, _ in candidates}
    clock = time.perf_counter_ns
    for block in range(ARGS.blocks):
        for name, fn in (candidates if block % 2 == 0 else candidates[::-1]):
            samples = times[name]
            for _ in range(ARGS.calls):
                start = clock()
                fn()
                samples.append(clock() - start)
    for name, samples in times.items():
        samples.sort()
        print("%-18s median %7.2f us  p10 %7.2f us" % (name, samples[len(samples) // 2] / 1e3,
                                                      samples[len(samples) // 10] / 1e3))


if __name__ == "__main__":
    main()
