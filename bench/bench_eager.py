"""Eager mode side by side with PyTorch eager, same thread budget: the dispatch cost of small ops
(µs per call) and an MLP 784-512-10 training step (batch 100: forward, cross entropy, backward,
SGD update).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_eager.py [--threads N] [--json out.json]

PyTorch runs with OpenBLAS's core pinned when its detection is below the CPU's (SkylakeX on an
AVX-512 machine, see _common.pin_blas_core) and under each split of the threads between its
OpenMP and OpenBLAS pools; the fastest split per row is compared. All candidates are
interleaved ABBA in one process."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets the BLAS environment before numpy loads)

ARGS = _common.parse_args(__doc__.splitlines()[0])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import actorflow as flow  # noqa: E402

flow.set_num_threads(ARGS.threads)
IN, HIDDEN, OUT, BATCH = 784, 512, 10, 100


def op_rows():
    rng = np.random.default_rng(0)
    x10, y10 = rng.standard_normal(10, dtype=np.float32), rng.standard_normal(10, dtype=np.float32)
    m64 = rng.standard_normal((64, 64), dtype=np.float32)
    fa, fb, fm = flow.tensor(x10), flow.tensor(y10), flow.tensor(m64)
    ta, tb, tm = torch.tensor(x10), torch.tensor(y10), torch.tensor(m64)
    fg = flow.tensor(x10, requires_grad=True)
    tg = torch.tensor(x10, requires_grad=True)

    def flow_backward():
        (fg * fb).sum().backward()

    def torch_backward():
        (tg * tb).sum().backward()

    cases = [
        ("add, 10 elements", lambda: fa + fb, lambda: ta + tb),
        ("relu, 10 elements", lambda: fa.relu(), lambda: ta.relu()),
        ("mul by a scalar, 10 elements", lambda: fa * 2.0, lambda: ta * 2.0),
        ("sum, 10 elements", lambda: fa.sum(), lambda: ta.sum()),
        ("matmul 64x64", lambda: fm @ fm, lambda: tm @ tm),
        ("mul+sum+backward, 10 elements", flow_backward, torch_backward),
    ]
    rows = []
    for name, ours, theirs in cases:
        rows.append(_common.Row(name, [_common.Candidate("actorflow", ours, "actorflow")]
                                + _common.torch_variants(torch, ARGS.blas, ARGS.threads, [("eager", theirs)])))
    return rows


def mlp_row():
    rng = np.random.default_rng(1)
    x = rng.random((BATCH, IN), dtype=np.float32)
    y = rng.integers(0, OUT, size=(BATCH,))
    w1 = (rng.standard_normal((IN, HIDDEN)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, OUT)) * 0.05).astype(np.float32)
    b1, b2 = np.zeros(HIDDEN, np.float32), np.zeros(OUT, np.float32)

    params = [flow.nn.Parameter(flow.tensor(v)) for v in (w1, b1, w2, b2)]
    fx, fy = flow.tensor(x), flow.tensor(y.astype(np.int32))
    lr = flow.tensor([0.1])

    def flow_step():
        fw1, fb1, fw2, fb2 = params
        logits = (fx @ fw1 + fb1).relu() @ fw2 + fb2
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(fy, logits).mean()
        for p in params:
            p.grad = None
        loss.backward()
        with flow.no_grad():
            for p in params:
                flow._tensor.run_op("sgd_update", [p, p.grad, lr], {}, num_outputs=0)
        return loss

    tparams = [torch.tensor(v, requires_grad=True) for v in (w1, b1, w2, b2)]
    tx, ty = torch.tensor(x), torch.tensor(y)
    optimizer = torch.optim.SGD(tparams, lr=0.1)

    def torch_step():
        tw1, tb1, tw2, tb2 = tparams
        logits = (tx @ tw1 + tb1).relu() @ tw2 + tb2
        loss = torch.nn.functional.cross_entropy(logits, ty)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    # Same initial state, same data: the first losses agree (a check that both run the same step).
    first = [flow_step().item() for _ in range(3)]
    reference = [torch_step().item() for _ in range(3)]
    np.testing.assert_allclose(first, reference, rtol=1e-4)
    return _common.Row("MLP train step, batch 100", [_common.Candidate("actorflow", flow_step, "actorflow")]
                       + _common.torch_variants(torch, ARGS.blas, ARGS.threads, [("eager", torch_step)]))


def main():
    rows = [row.measure(ARGS) for row in op_rows()]
    rows.append(mlp_row().measure(ARGS))
    notes = ["ops: one call per sample (a Python expression producing a new tensor; no autograd except the "
             "backward row)",
             "MLP: Parameters 784x512, 512, 512x10, 10 (float32); loss = mean cross entropy; grads set to None, "
             "backward, SGD lr 0.1 (actorflow: sgd_update per parameter, in place; PyTorch: torch.optim.SGD)",
             "ratios: PyTorch time / actorflow time per round (> 1 means actorflow is faster)",
             "torch %s (%d cores, statistics over %d rounds)" % (torch.__version__, os.cpu_count(), ARGS.rounds)]
    _common.report("bench_eager", rows, ARGS, notes)


if __name__ == "__main__":
    main()
