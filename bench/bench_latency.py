"""Single-call latency of batch-1 MLP inference (784-512-10) and of an empty job from Python,
each call timed alone: the median and the 10th percentile (on a shared host the low percentile
is the cost when nothing else ran on the cores meanwhile). Candidates are interleaved in blocks,
forward then reversed order, in one process:

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_latency.py [--blocks 40]

  predict            the job function called with a float32 array (the user's call)
  predict run()      CompiledJob.run alone (the C++ call path, without the Python wrapper)
  predict, no gemv   the same job compiled with disable_fusion("gemv") (oneDNN for both layers)
  predict, 200 us apart  the user's call with 200 us of other work (a busy wait) before each
                     call, outside the timed part: a caller that does something between calls
  empty / empty run()  a job returning its (1,) input
  predict / empty, actors  the same jobs compiled with disable_run_inline(): each call goes
                     through the actors (what asynchronous or overlapping calls get), where the
                     CAF workers' polling between calls decides whether a call finds them awake
For the candidates whose kernels split over the kernels' helper pool (the GEMV), it also prints
how many of those split kernels ran on the caller alone ("alone": no helper came in time, so
the call took as long as on one core) and how many woke a sleeping helper ("woke": each costs
the caller ~9 us on a VM whose idle vCPU halts): the two modes of a bimodal batch-1 time.
Last, the process's CPU use while idle (2 s without calls, after a second of settling): what
the runtime's and kernels' threads cost when nobody calls (their polling after a call is over).
Run it against two builds alternately (PYTHONPATH) to compare them."""
import argparse
import resource
import time

import numpy as np

import actorflow as flow
import actorflow.typing as tp
from actorflow import _C

PARSER = argparse.ArgumentParser(description=__doc__.splitlines()[0])
PARSER.add_argument("--blocks", type=int, default=40, help="interleaved blocks per candidate")
PARSER.add_argument("--calls", type=int, default=300, help="calls per block")
PARSER.add_argument("--threads", type=int, default=2)
ARGS = PARSER.parse_args()

flow.config.num_threads(ARGS.threads)


def make_predict(name, disabled=(), inline=True):
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)
    if not inline:
        config.disable_run_inline()

    def predict(images: tp.Numpy.Placeholder((1, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=0)
        flat = flow.reshape(images, [images.shape[0], -1])
        hidden = flow.layers.dense(flat, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        return flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
    predict.__name__ = name
    return flow.global_function(type="predict", function_config=config)(predict)


def make_empty(name, inline=True):
    config = flow.function_config()
    if not inline:
        config.disable_run_inline()

    def empty(x: tp.Numpy.Placeholder((1,), dtype=flow.float)) -> tp.Numpy:
        return x
    empty.__name__ = name
    return flow.global_function(type="predict", function_config=config)(empty)


empty = make_empty("empty")
empty_actors = make_empty("empty_actors", inline=False)


def main():
    predict = make_predict("predict")
    predict_actors = make_predict("predict_actors", inline=False)
    try:
        predict_onednn = make_predict("predict_no_gemv", ("gemv",))
    except ValueError:  # a build without the GEMV loop
        predict_onednn = None
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    e = np.zeros((1,), np.float32)
    first = predict(x)  # compiles
    if predict_onednn is not None:
        np.testing.assert_allclose(first, predict_onednn(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first, predict_actors(x), rtol=1e-5, atol=1e-5)
    empty(e)
    empty_actors(e)
    run, empty_run = predict._compiled.run, empty._compiled.run
    feeds, empty_feeds = [x], [e]
    predict_call = lambda: predict(x)
    candidates = [("predict", predict_call, 0), ("predict run()", lambda: run(feeds), 0),
                  ("predict, 200 us apart", predict_call, 200),
                  ("predict, actors", lambda: predict_actors(x), 0),
                  ("empty", lambda: empty(e), 0), ("empty run()", lambda: empty_run(empty_feeds), 0),
                  ("empty, actors", lambda: empty_actors(e), 0)]
    if predict_onednn is not None:
        candidates.insert(3, ("predict, no gemv", lambda: predict_onednn(x), 0))
    times = {name: [] for name, _, _ in candidates}
    pool = {name: [0, 0, 0] for name, _, _ in candidates}  # split jobs, alone, woke
    counts = getattr(_C, "_kernel_pool_counts", lambda: (0, 0, 0))  # absent in older builds
    clock = time.perf_counter_ns
    for block in range(ARGS.blocks):
        for name, fn, gap_us in (candidates if block % 2 == 0 else candidates[::-1]):
            samples = times[name]
            before = counts()
            for _ in range(ARGS.calls):
                if gap_us:
                    until = clock() + gap_us * 1000
                    while clock() < until:
                        pass
                start = clock()
                fn()
                samples.append(clock() - start)
            after = counts()
            for k in range(3):
                pool[name][k] += after[k] - before[k]
    for name, samples in times.items():
        samples.sort()
        jobs, alone, woke = pool[name]
        split = "  split kernels: alone %5.1f%%, woke %5.1f%%" % (100 * alone / jobs, 100 * woke / jobs) if jobs else ""
        print("%-22s median %7.2f us  p10 %7.2f us%s" % (name, samples[len(samples) // 2] / 1e3,
                                                         samples[len(samples) // 10] / 1e3, split))
    time.sleep(1.0)
    usage = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # user + system seconds
    cpu, wall = usage(), time.monotonic()
    time.sleep(2.0)
    print("idle: the process used %.2f%% of one core over 2 s without calls" %
          (100 * (usage() - cpu) / (time.monotonic() - wall)))

if __name__ == "__main__":
    main()
