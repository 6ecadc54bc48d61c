"""A REAL trace: a C++ program on the installed runtime (include/actorflow/pipeline.h) runs a
pipeline whose third stage is deliberately slow, with the trace switch on. The viewer must name
that stage the bottleneck and show its producer's time as backpressure stall.

The program is built here against `cmake --install <build> --component actorflow_runtime`, the
way an outside user builds (tests/consumer does the same). The build directory is
$ACTORFLOW_BUILD_DIR, or the one whose python/ folder is on PYTHONPATH (ctest sets that)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from trace_cli import CLI  # noqa: E402
from actorflow.trace import load, read_json, summarize, validate  # noqa: E402

SLOW_MS = 2

PROGRAM = r"""
// reader -> preprocess -> slow -> writer; `slow` sleeps SLOW_MS per batch, the rest take microseconds.
#include <actorflow/pipeline.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

using actorflow::DType;
using actorflow::Status;
using actorflow::StageArgs;

int main(int argc, char** argv) {
  const int iterations = std::atoi(argv[1]);
  const actorflow::TensorDesc batch{{256}, DType::kFloat32};
  actorflow::Pipeline p;
  auto reader = p.AddStage("reader", {}, {batch}, [](const StageArgs& a) {
    for (int i = 0; i < 256; ++i) a.outputs[0].as<float>()[i] = float(a.iteration + i);
    return Status::Ok();
  });
  auto pre = p.AddStage("preprocess", {reader}, {batch}, [](const StageArgs& a) {
    for (int i = 0; i < 256; ++i) a.outputs[0].as<float>()[i] = a.inputs[0].as<float>()[i] * 0.5f;
    return Status::Ok();
  });
  auto slow = p.AddStage("slow_stage", {pre}, {batch}, [](const StageArgs& a) {
    std::this_thread::sleep_for(std::chrono::milliseconds(SLOW_MS));
    for (int i = 0; i < 256; ++i) a.outputs[0].as<float>()[i] = a.inputs[0].as<float>()[i] + 1;
    return Status::Ok();
  });
  double sum = 0;
  p.AddStage("writer", {slow}, {}, [&sum](const StageArgs& a) {
    for (int i = 0; i < 256; ++i) sum += a.inputs[0].as<float>()[i];
    return Status::Ok();
  });
  actorflow::PipelineOptions options;
  options.num_threads = 2;
  options.trace_path = argv[2];
  Status s = p.Start(options);
  if (!s.ok()) { std::fprintf(stderr, "start: %s\n", s.ToString().c_str()); return 1; }
  std::ofstream(argv[3]) << p.PlanText();
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < iterations; ++i) calls.push_back(p.PushAsync({}, {}));
  for (auto& c : calls) {
    Status r = c.get();
    if (!r.ok()) { std::fprintf(stderr, "call: %s\n", r.ToString().c_str()); return 1; }
  }
  s = p.Finish();
  if (!s.ok()) { std::fprintf(stderr, "finish: %s\n", s.ToString().c_str()); return 1; }
  std::printf("ran %d iterations, sum %g\n", iterations, sum);
  return 0;
}
""".replace("SLOW_MS", str(SLOW_MS))

CMAKELISTS = """
cmake_minimum_required(VERSION 3.22)
project(actorflow_trace_probe LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(actorflow CONFIG REQUIRED)
add_executable(slow_pipeline slow_pipeline.cc)
target_link_libraries(slow_pipeline PRIVATE actorflow::actors)
"""


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the viewer has no session, and conftest's needs the compiled runtime."""
    yield


def build_dir():
    candidates = [os.environ.get("ACTORFLOW_BUILD_DIR", "")]
    candidates += [os.path.dirname(os.path.abspath(p)) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                   if p and os.path.basename(os.path.normpath(p)) == "python"]
    for c in candidates:
        if c and os.path.exists(os.path.join(c, "CMakeCache.txt")):
            return c
    return None


def run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 400), **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory):
    build = build_dir()
    if build is None:
        pytest.fail("no actorflow build directory: set ACTORFLOW_BUILD_DIR or PYTHONPATH=<build>/python "
                    "(ctest sets the latter)")
    work = tmp_path_factory.mktemp("real")
    prefix, src, bld = work / "prefix", work / "src", work / "build"
    src.mkdir()
    (src / "slow_pipeline.cc").write_text(PROGRAM)
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    run(["cmake", "--install", build, "--prefix", prefix, "--component", "actorflow_runtime"])
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    configure = ["cmake", "-S", src, "-B", bld, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"]
    # A sanitizer build's library needs the sanitizer at link time too.
    flags = {"address": "-fsanitize=address,undefined", "thread": "-fsanitize=thread"}
    for kind, flag in flags.items():
        if f"ACTORFLOW_SANITIZE:STRING={kind}" in cache:
            configure += [f"-DCMAKE_CXX_FLAGS={flag}", f"-DCMAKE_EXE_LINKER_FLAGS={flag}"]
    if shutil.which("ccache"):
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    run(configure)
    run(["cmake", "--build", bld, "-j1"])
    trace, plan = work / "trace.json", work / "plan.txt"
    run([bld / "slow_pipeline", "150", trace, plan], timeout=120)
    return trace, plan


def test_real_trace_validates(real_trace):
    trace, _ = real_trace
    doc = read_json(str(trace))
    assert validate(doc) == []
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"reader", "preprocess", "slow_stage", "writer"} <= names
    reasons = {e["args"]["reason"] for e in doc["traceEvents"] if e.get("cat") == "wait"}
    # Worker waits too, when both workers were busy (e.g. the writer, ready while reader and
    # slow_stage run).
    assert {"input not ready", "output registers full"} <= reasons <= {"input not ready", "output registers full",
                                                                       "worker busy"}


def test_summary_names_the_slow_stage_and_its_producers_backpressure(real_trace):
    trace, _ = real_trace
    result = summarize(load(str(trace)))
    rows = {r["actor"]: r for r in result["actors"]}
    assert result["bottleneck"]["actor"] == "slow_stage", result
    assert rows["slow_stage"]["busy_pct"] > 80
    assert rows["slow_stage"]["mean_act_us"] >= SLOW_MS * 1000
    # preprocess runs register_num batches ahead, then waits for slow_stage to free a register.
    assert rows["preprocess"]["backpressure_pct"] > 50, rows["preprocess"]
    assert rows["writer"]["input_wait_pct"] > 50, rows["writer"]
    assert rows["slow_stage"]["acts"] == 150
    assert any("preprocess stalls on backpressure" in a and "slow_stage" in a for a in result["advice"])
    # About one iteration per slow act.
    assert result["iterations_per_second"] < 1000 / SLOW_MS * 1.05
    text = subprocess.run([*CLI, "summary", str(trace)], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "bottleneck: slow_stage" in text.stdout, text.stderr


def test_view_and_graph_of_real_trace(real_trace, tmp_path):
    trace, plan = real_trace
    page = tmp_path / "real.html"
    done = subprocess.run([*CLI, "view", str(trace), "-o", str(page)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = page.read_text()
    assert '"slow_stage"' in data and "<script src" not in data
    for source, out in ((trace, "from_trace.svg"), (plan, "from_plan.svg")):
        done = subprocess.run([*CLI, "graph", str(source), "-o", str(tmp_path / out)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        svg = (tmp_path / out).read_text()
        assert "slow_stage" in svg and "register_num 2" in svg
    assert "bottleneck" in (tmp_path / "from_trace.svg").read_text()
    json.dumps(summarize(load(str(trace))))  # JSON-ready
