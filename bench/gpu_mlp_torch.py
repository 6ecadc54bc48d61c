"""The seed MLP train step in PyTorch, the peer of bench/gpu_mlp_bench.cc: 784-512-10, batch 100,
SGD lr 0.1, x and labels fed from host memory each step and the per-sample loss returned to
host memory each step (as actorflow's Run does). Eager, torch.compile, and (cuda only) the whole
step captured once in a CUDA graph and replayed (PyTorch's lowest-overhead form for a small
model). Prints one JSON line.
Usage: python3 bench/gpu_mlp_torch.py [cuda|cpu] [steps] [warmup]; GPU_BENCH_TORCH_MODES picks modes."""
import json
import os
import sys
import time

import torch


def measure(step, steps, warmup, sync):
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        step()
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"step_ms_median": times[len(times) // 2], "step_ms_p10": times[int(0.1 * (len(times) - 1))],
            "step_ms_p90": times[int(0.9 * (len(times) - 1))]}


def measure_cuda_graph(train_step, x_host, labels_host, steps, warmup):
    """The train step captured once into a CUDA graph over static device inputs; each measured
    step copies the batch in, replays the graph and copies the loss out."""
    static_x = x_host.to("cuda")
    static_labels = labels_host.to("cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph (allocations, lazy state)
        for _ in range(3):
            train_step(static_x, static_labels)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step(static_x, static_labels)
    holder = {}

    def step():
        static_x.copy_(x_host, non_blocking=True)
        static_labels.copy_(labels_host, non_blocking=True)
        graph.replay()
        holder["loss"] = static_loss.to("cpu")

    return measure(step, steps, warmup, torch.cuda.synchronize)


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 math, as actorflow's cuBLAS calls
    x_host = (0.5 + 0.5 * torch.sin(0.37 * torch.arange(100 * 784, dtype=torch.float32))).reshape(100, 784)
    labels_host = (torch.arange(100) % 10).to(torch.int64)
    if device == "cuda":
        x_host, labels_host = x_host.pin_memory(), labels_host.pin_memory()
    result = {"device": device, "torch": torch.__version__, "batch": 100, "steps": steps}
    modes = ("eager", "compile", "cuda_graph") if device == "cuda" else ("eager", "compile")
    if os.environ.get("GPU_BENCH_TORCH_MODES"):  # e.g. "eager,cuda_graph" (torch.compile takes ~25 s)
        modes = tuple(m for m in modes if m in os.environ["GPU_BENCH_TORCH_MODES"].split(","))
    for mode in modes:
        model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss_fn = torch.nn.CrossEntropyLoss(reduction="none")

        def train_step(x, labels):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), labels)
            loss.mean().backward()
            optimizer.step()
            return loss

        if mode == "cuda_graph":
            try:
                result[mode] = measure_cuda_graph(train_step, x_host, labels_host, steps, warmup)
            except Exception as error:  # noqa: BLE001 (reported, not hidden)
                result[mode + "_error"] = repr(error)
            continue
        step_fn = train_step
        if mode == "compile":
            try:
                step_fn = torch.compile(train_step)
            except Exception as error:  # noqa: BLE001 (reported, not hidden)
                result["compile_error"] = repr(error)
                continue
        holder = {}

        def step():
            x = x_host.to(device, non_blocking=True)
            labels = labels_host.to(device, non_blocking=True)
            holder["loss"] = step_fn(x, labels).to("cpu")

        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        try:
            result[mode] = measure(step, steps, warmup, sync)
        except Exception as error:  # noqa: BLE001
            result[mode + "_error"] = repr(error)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
