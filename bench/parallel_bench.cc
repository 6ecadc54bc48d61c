// Several devices in one process (Google Benchmark):
//  - Memcpy/bytes: one thread copying `bytes` between two touched buffers; GB/s of bytes copied.
//    The physical limit the all-reduce is compared with, measured in the same run.
//  - AllReduce/bytes/devices: the compiler's all-reduce as a plan of real tasks: per device a
//    partial-sum shard (a read-only variable) and a reduce-scatter boxing task (P->S(0): each
//    sums its 1/n slice of every shard) whose register is a slice of one block (device 0's
//    register reserves it), so the S(0)->B gather costs nothing: the reader (here the sink,
//    which waits for every slice) finds B whole in the block. On the process's thread budget
//    (2 threads, min(devices, 2) workers). GB/s = bytes / time per all-reduce, one iteration at
//    a time. AllReduceGatherTask/bytes/devices: the same with the gather as one task copying
//    the slices into its register (how P->B was lowered before), for comparison.
//  - AllReduceKernel/bytes/devices/stage: the all-reduce's two kernels alone on one thread
//    (stage 0: one device's reduce-scatter, stage 1: the gather), to see where its time goes.
//    Compare cpu_time on a shared machine: real time there includes waiting for a core.
//  - MlpTrainStep/devices: the seed MLP (784-512-10, batch 100, SGD) one train step through the
//    session, data-parallel on 1 or 2 devices at the same budget of 2 threads; the ratio of the
//    two is the machinery's overhead (boxing tasks, extra hops) where devices add no cores.
//    Second argument: CAF workers (0: the session's default, DefaultWorkerCount); third: the
//    thread budget (1: the machinery's cost alone, both runs on one thread; 2: this machine's
//    cores). Listed ABBA since the machine drifts.
//  - MlpTwoOverOneDevice/threads: the ratio itself, both jobs in one process, ABBA blocks.
//  - FanOutAfterIdle/spin_us: one producer read by two kernels of spin_us each (two devices'
//    first kernels), on 2 workers, each call after an idle gap long enough for the second
//    worker to fall asleep; the scheduler this project installs (actors/environment.cc: a job
//    made runnable behind another goes to a sleeping worker) against CAF's own work stealing
//    (the job waits on the sender's worker until the sleeper's periodic steal), alternated in
//    one process. Counters: each one's median and quartiles of the call time past one spin
//    (us: 0 would be both kernels in parallel and free hand-offs; spin_us, one after the other).
// Run with --benchmark_repetitions=N --benchmark_report_aggregates_only=true (shared machine).
#include <benchmark/benchmark.h>
#include <caf/all.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "actors/environment.h"
#include "actors/runtime.h"
#include "actors/trace_recorder.h"
#include "actors/proto/plan.pb.h"
#include "graph/attr_convert.h"
#include "kernels/boxing.h"
#include "bench/seed_mlp.h"
#include "session/session.h"

namespace actorflow {
namespace {

constexpr int kThreads = 2;

void Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> from(bytes, 1), to(bytes, 0);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(Memcpy)->Arg(1 << 20)->Arg(16 << 20)->Arg(128 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);

plan::Task* AddTask(plan::Plan& plan, const std::string& name, plan::TaskKind kind, int device) {
  plan::Task* t = plan.add_tasks();
  t->set_id(plan.tasks_size() - 1);
  t->set_name(name);
  t->set_kind(kind);
  t->set_device_type("cpu");
  t->set_device_id(device);
  return t;
}

void AddRegister(plan::Task* t, const Shape& shape) {
  plan::RegisterDesc* r = t->add_registers();
  r->set_name("out");
  r->set_register_num(t->kind() == plan::VARIABLE ? 1 : 2);
  plan::BlobDesc* b = r->add_blobs();
  for (int64_t d : shape) b->add_shape(d);
  b->set_dtype(plan::DT_FLOAT32);
  b->set_byte_size(NumElements(shape) * 4);
}

void AddInput(plan::Task* t, int64_t producer, bool control = false) {
  plan::InputDesc* in = t->add_inputs();
  in->set_producer_task_id(producer);
  in->set_control(control);
}

// trigger -> `tasks` reduce-scatter tasks (each reading the n shards and summing its 1/tasks;
// 0: one per device) -> [one gather task] -> sink.
plan::Plan AllReducePlan(int64_t elements, int devices, bool gather_task, int tasks = 0) {
  if (tasks <= 0) tasks = devices;
  plan::Plan plan;
  plan.set_job_name("all_reduce");
  plan::Task* trigger = AddTask(plan, "trigger", plan::SOURCE, 0);
  AddRegister(trigger, {1});
  for (int d = 0; d < devices; ++d) {
    plan::Task* shard = AddTask(plan, "shard@" + std::to_string(d), plan::VARIABLE, d);
    shard->set_variable_name("shard" + std::to_string(d));
    shard->set_read_only(true);
    AddRegister(shard, {elements});
  }
  const Shape logical = {elements};
  // As the compiler lowers P->B: a reduce-scatter task per device (or per chunk) writing its
  // slice of one block (or, with gather_task, into its own register, then one gather task
  // copying).
  for (int stage = 0; stage < (gather_task ? 2 : 1); ++stage)
    for (int d = 0; d < (stage == 0 ? tasks : 1); ++d) {
      BoxingSpec spec{logical, DType::kFloat32, stage == 0 ? Sbp::PartialSum() : Sbp::Split(0),
                      stage == 0 && tasks > 1 ? Sbp::Split(0) : Sbp::Broadcast(), devices, stage == 0 ? tasks : 1, d};
      if (stage == 1) spec.in_parts = tasks;
      if (stage == 1 && tasks == 1) spec.in = Sbp::Broadcast();
      plan::Task* t = AddTask(plan, (stage == 0 ? "reduce_scatter@" : "all_gather@") + std::to_string(d), plan::COMPUTE, d);
      t->set_op_type("boxing");
      graph::AttrsToProto(BoxingTaskAttrs(spec), t->mutable_attrs());
      const int64_t first_source = stage == 0 ? 1 : 1 + devices;
      for (int s = 0; s < (stage == 0 ? devices : tasks); ++s) AddInput(t, first_source + s);
      if (stage == 0) AddInput(t, 0, /*control=*/true);
      AddRegister(t, PhysicalShape(logical, spec.out, spec.out_parts, d).value());
      if (stage == 0 && !gather_task && tasks > 1) {
        plan::RegisterDesc* r = t->mutable_registers(0);
        if (d == 0) {
          r->set_reserved_byte_size(elements * 4);
        } else {
          int64_t offset = 0;
          for (int before = 0; before < d; ++before)
            offset += NumElements(PhysicalShape(logical, spec.out, tasks, before).value()) * 4;
          r->mutable_slice_of()->set_task_id(1 + devices);
          r->mutable_slice_of()->set_byte_offset(offset);
        }
      }
    }
  plan::Task* sink = AddTask(plan, "output", plan::SINK, 0);
  if (gather_task) {
    AddInput(sink, 1 + devices + tasks, /*control=*/true);
  } else {
    for (int d = 0; d < tasks; ++d) AddInput(sink, 1 + devices + d, /*control=*/true);
  }
  for (const plan::Task& t : plan.tasks()) {
    std::set<int64_t> seen;
    for (const plan::InputDesc& in : t.inputs())
      if (seen.insert(in.producer_task_id()).second)
        plan.mutable_tasks(in.producer_task_id())->mutable_registers(in.producer_register())->add_consumer_task_ids(t.id());
  }
  return plan;
}

// A runtime running AllReducePlan over `devices` read-only shards of 0.5f, on the process's
// thread budget (2 threads, min(devices, 2) workers).
struct AllReduceRun {
  plan::Plan plan;
  std::vector<std::vector<float>> shards;
  std::unique_ptr<Runtime> runtime;
  float trigger = 0;
  std::vector<TensorView> inputs;
  std::unique_ptr<ChromeTraceRecorder> recorder;  // set with a trace path (declared before runtime)
  std::string trace_path;
  ~AllReduceRun() {
    if (recorder == nullptr) return;
    runtime.reset();
    Status written = recorder->Write(trace_path);
    if (!written.ok()) std::fprintf(stderr, "trace %s: %s\n", trace_path.c_str(), written.ToString().c_str());
  }
  Status Once() { return runtime->Run(inputs, {}); }
  // `calls` all-reduces pushed back to back (backpressure bounds the calls in flight by the
  // trigger's two registers), then waits for the last: the all-reduce inside a pipeline, its
  // caller's hand-offs overlapped.
  Status Pipelined(int calls) {
    std::atomic<bool> failed{false};
    for (int i = 0; i < calls; ++i) {
      auto pushed = runtime->Push(inputs, {}, [&failed](int64_t, const Status& status) {
        if (!status.ok()) failed = true;
      });
      if (!pushed.ok()) return pushed.status();
    }
    runtime->Drain();
    return failed ? Internal("an all-reduce failed") : Status::Ok();
  }
};

// `one_worker`: the session's default on this budget instead (DefaultWorkerCount: one worker
// for 2 threads), each kernel act on both threads (a sum split over the kernel helper).
// `trace_path`: record the actors' acts and waits there (written when the run is destroyed).
StatusOr<std::unique_ptr<AllReduceRun>> MakeAllReduceRun(int64_t bytes, int devices, bool gather_task, int tasks,
                                                         bool one_worker = false, const std::string& trace_path = "") {
  auto run = std::make_unique<AllReduceRun>();
  const int64_t elements = bytes / 4;
  run->plan = AllReducePlan(elements, devices, gather_task, tasks);
  run->shards.assign(devices, std::vector<float>(elements, 0.5f));
  const plan::Plan* plan = &run->plan;
  const int threads = one_worker ? kThreads / DefaultWorkerCount(kThreads, devices) : 1;
  RuntimeHooks hooks;
  hooks.make_kernel = [plan, threads](const plan::Task& task) -> StatusOr<KernelFn> {
    KernelInit init;
    for (const plan::InputDesc& in : task.inputs()) {
      if (in.control()) continue;
      const plan::BlobDesc& blob = plan->tasks(static_cast<int>(in.producer_task_id())).registers(in.producer_register()).blobs(0);
      init.inputs.push_back(TensorDesc{Shape(blob.shape().begin(), blob.shape().end()), DType::kFloat32});
    }
    const plan::BlobDesc& out = task.registers(0).blobs(0);
    init.outputs.push_back(TensorDesc{Shape(out.shape().begin(), out.shape().end()), DType::kFloat32});
    init.attrs = graph::AttrsFromProto(task.attrs());
    init.num_threads = threads;
    return MakeCpuKernel("boxing", init);
  };
  AllReduceRun* raw = run.get();
  hooks.variable_buffer = [raw](const plan::Task& task) -> StatusOr<void*> {
    return static_cast<void*>(raw->shards[std::stoi(task.variable_name().substr(5))].data());
  };
  RuntimeOptions options;
  options.num_threads = kThreads;
  options.num_workers = one_worker ? DefaultWorkerCount(kThreads, devices) : std::min(devices, kThreads);
  options.kernel_threads = kThreads / options.num_workers;
  if (!trace_path.empty()) {
    run->recorder = std::make_unique<ChromeTraceRecorder>();
    run->trace_path = trace_path;
    options.observer = run->recorder.get();
  }
  RegisterAllOps();
  AF_ASSIGN_OR_RETURN(run->runtime, Runtime::Create(run->plan, hooks, options));
  run->inputs = {{&run->trigger, {{1}, DType::kFloat32}}};
  return run;
}

void RunAllReduce(benchmark::State& state, bool gather_task, int tasks = 0) {
  const int64_t bytes = state.range(0);
  auto run = MakeAllReduceRun(bytes, static_cast<int>(state.range(1)), gather_task, tasks);
  if (!run.ok()) return state.SkipWithError(run.status().ToString().c_str());
  for (auto _ : state) {
    Status ran = run.value()->Once();
    if (!ran.ok()) return state.SkipWithError(ran.ToString().c_str());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}
void AllReduce(benchmark::State& state) { RunAllReduce(state, false); }
void AllReduceGatherTask(benchmark::State& state) { RunAllReduce(state, true); }

// The all-reduce against memcpy, drift cancelled: the modes below in blocks rotated every round
// within one process, each all-reduce called one at a time (Run: the caller's push and wake-up
// included) and pipelined (calls pushed back to back), with one reduce-scatter task per device
// and with one task summing everything. Two comparisons, both per round against memcpy in the
// same round:
//  - "_pct": GB/s of the logical buffer (bytes / time per all-reduce: the algorithm bandwidth,
//    as collective benchmarks count it) over memcpy of the same bytes (bytes copied / time).
//    The two move different amounts of memory: memcpy reads and writes the buffer once (2
//    bytes of traffic per byte), the all-reduce reads every device's partial buffer and writes
//    the sum once (n + 1 per byte; each device reads the sum in place, no copy). So on a
//    memory-bound host its ceiling is 2 / (n + 1) of memcpy on one thread: 67% for 2 devices,
//    40% for 4, more only as far as the second core adds bandwidth.
//  - "_traffic_pct": like with like: the time of a memcpy moving the same bytes as the
//    all-reduce (copying (n + 1) / 2 x bytes: n x bytes read + bytes written, so the same
//    footprint in the caches too) over the all-reduce's time; 100% = the all-reduce moves its
//    bytes as fast as memcpy moves as many.
// Two more modes bound what the runtime could reach:
//  - "per_core": one reduce-scatter task per core (min(devices, 2) tasks of 1/2 each), one call
//    at a time: the same sum with half the hops and messages of "per_device" on 4 devices.
//  - "one_worker": per_device's tasks as a job on this budget runs them by default: one worker
//    (DefaultWorkerCount for 2 threads), each task's sum split over both threads.
//  - "kernels_serial": every device's reduce-scatter kernel (RunBoxing, the code the tasks run)
//    called in turn on the calling thread, no runtime: the summing work alone. Its _pct is the
//    measured ceiling of one core; twice it is the ceiling on two cores if they add bandwidth
//    (they do not at all where DRAM is the limit, fully where each core reads its own caches).
//  - "kernels_two_threads": the same calls on both threads (RunBoxing with 2 threads: the
//    caller and a kernel helper, as a task's act on one worker of a 2-thread job; at 1 MB the
//    helper joins only while awake, which back-to-back calls keep it): the ceiling of two cores.
// Counters: each mode's median GB/s over the rounds (memcpy_same_traffic: bytes copied) and the
// medians of the rounds' percentages.
void AllReduceVsMemcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int devices = static_cast<int>(state.range(1));
  auto per_device = MakeAllReduceRun(bytes, devices, false, 0), one_task = MakeAllReduceRun(bytes, devices, false, 1);
  auto per_core = MakeAllReduceRun(bytes, devices, false, std::min(devices, kThreads));
  // ACTORFLOW_BENCH_TRACE=prefix: one_worker's actors traced to prefix.<bytes>.<devices>dev.json.
  const char* trace = std::getenv("ACTORFLOW_BENCH_TRACE");
  auto one_worker = MakeAllReduceRun(
      bytes, devices, false, 0, /*one_worker=*/true,
      trace == nullptr ? "" : std::string(trace) + "." + std::to_string(bytes) + "." + std::to_string(devices) + "dev.json");
  for (auto* made : {&per_device, &one_task, &per_core, &one_worker})
    if (!made->ok()) return state.SkipWithError(made->status().ToString().c_str());
  // kernels_serial: the shards of per_device's run (0.5f each) and one output block.
  const Shape logical = {bytes / 4};
  std::vector<TensorView> shard_views;
  for (int d = 0; d < devices; ++d)
    shard_views.push_back({per_device.value()->shards[d].data(), {logical, DType::kFloat32}});
  std::vector<float> summed(static_cast<size_t>(bytes / 4), 0.0f);
  auto kernels_serial = [&](int threads) -> bool {
    int64_t offset = 0;
    for (int d = 0; d < devices; ++d) {
      const BoxingSpec spec{logical, DType::kFloat32, Sbp::PartialSum(), Sbp::Split(0), devices, devices, d};
      const Shape piece = PhysicalShape(logical, spec.out, devices, d).value();
      if (!RunBoxing(spec, shard_views, {summed.data() + offset, {piece, DType::kFloat32}}, threads).ok()) return false;
      offset += NumElements(piece);
    }
    benchmark::ClobberMemory();
    return true;
  };
  const int64_t same_traffic_bytes = bytes * (devices + 1) / 2;
  std::vector<char> from(static_cast<size_t>(same_traffic_bytes), 1), to(static_cast<size_t>(same_traffic_bytes), 0);
  const int calls = static_cast<int>(std::max<int64_t>(4, (64 << 20) / bytes));  // ~64 MB a block
  constexpr int kModes = 10;
  static const char* kNames[kModes] = {"memcpy",   "per_device",          "one_task", "per_device_pipelined",
                                       "one_task_pipelined", "memcpy_same_traffic", "per_core", "kernels_serial",
                                       "one_worker", "kernels_two_threads"};
  auto block = [&](int mode) {  // seconds per call of one block
    const auto start = std::chrono::steady_clock::now();
    AllReduceRun& run =
        *(mode == 1 || mode == 3 ? per_device : mode == 6 ? per_core : mode == 8 ? one_worker : one_task).value();
    if (mode == 7 || mode == 9) {
      for (int i = 0; i < calls; ++i)
        if (!kernels_serial(mode == 7 ? 1 : kThreads)) return -1.0;
    } else if (mode == 0 || mode == 5) {
      const size_t copied = static_cast<size_t>(mode == 0 ? bytes : same_traffic_bytes);
      for (int i = 0; i < calls; ++i) {
        std::memcpy(to.data(), from.data(), copied);
        benchmark::DoNotOptimize(to.data());
        benchmark::ClobberMemory();
      }
    } else if (mode <= 2 || mode == 6 || mode == 8) {
      for (int i = 0; i < calls; ++i)
        if (!run.Once().ok()) return -1.0;
    } else if (!run.Pipelined(calls).ok()) {
      return -1.0;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
  };
  for (int mode = 0; mode < kModes; ++mode) block(mode);  // warm-up
  std::vector<double> gbs[kModes], percent[kModes], traffic_percent[kModes];
  for (auto _ : state) {
    for (int round = 0; round < 10; ++round) {
      double seconds[kModes];
      for (int k = 0; k < kModes; ++k) {
        const int mode = (round + k) % kModes;
        seconds[mode] = block(mode);
        if (seconds[mode] <= 0) return state.SkipWithError("all-reduce failed");
      }
      for (int mode = 0; mode < kModes; ++mode) {
        gbs[mode].push_back(static_cast<double>(mode == 5 ? same_traffic_bytes : bytes) / seconds[mode] / 1e9);
        percent[mode].push_back(100 * seconds[0] / seconds[mode]);
        traffic_percent[mode].push_back(100 * seconds[5] / seconds[mode]);
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int mode = 0; mode < kModes; ++mode) {
    state.counters[std::string(kNames[mode]) + "_GBps"] = median(gbs[mode]);
    if (mode == 0 || mode == 5) continue;
    state.counters[std::string(kNames[mode]) + "_pct"] = median(percent[mode]);
    state.counters[std::string(kNames[mode]) + "_traffic_pct"] = median(traffic_percent[mode]);
  }
}
BENCHMARK(AllReduceVsMemcpy)
    ->ArgsProduct({{1 << 20, 4 << 20, 16 << 20, 128 << 20}, {2, 4}})
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(AllReduce)
    ->ArgsProduct({{1 << 20, 16 << 20, 128 << 20}, {2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(AllReduceGatherTask)
    ->ArgsProduct({{1 << 20, 16 << 20, 128 << 20}, {2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The all-reduce's two kernels alone, on one thread, outside the runtime: where its time goes.
// Stage 0: device 0's reduce-scatter task (sums its 1/n of the n shards); stage 1: the gather
// (S(0)->B, all n chunks into one buffer). GB/s of the logical bytes.
void AllReduceKernel(benchmark::State& state) {
  const int64_t bytes = state.range(0), elements = bytes / 4;
  const int devices = static_cast<int>(state.range(1));
  const bool gather = state.range(2) == 1;
  const Shape logical = {elements};
  BoxingSpec spec{logical, DType::kFloat32, gather ? Sbp::Split(0) : Sbp::PartialSum(),
                  gather ? Sbp::Broadcast() : Sbp::Split(0), devices, gather ? 1 : devices, 0};
  std::vector<std::vector<float>> sources(devices);
  std::vector<TensorView> inputs;
  for (int d = 0; d < devices; ++d) {
    const Shape shape = PhysicalShape(logical, spec.in, devices, d).value();
    sources[d].assign(static_cast<size_t>(NumElements(shape)), 0.5f);
    inputs.push_back({sources[d].data(), {shape, DType::kFloat32}});
  }
  const Shape out_shape = PhysicalShape(logical, spec.out, spec.out_parts, 0).value();
  std::vector<float> out(static_cast<size_t>(NumElements(out_shape)), 0.0f);
  const TensorView output{out.data(), {out_shape, DType::kFloat32}};
  for (auto _ : state) {
    Status ran = RunBoxing(spec, inputs, output);
    if (!ran.ok()) return state.SkipWithError(ran.ToString().c_str());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}
BENCHMARK(AllReduceKernel)
    ->ArgsProduct({{1 << 20, 16 << 20, 128 << 20}, {2, 4}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// trigger -> spin@0, spin@1 (devices 0 and 1, each a kernel busy for `spin_us`) -> sink.
plan::Plan FanOutPlan() {
  plan::Plan plan;
  plan.set_job_name("fan_out");
  plan::Task* trigger = AddTask(plan, "trigger", plan::SOURCE, 0);
  AddRegister(trigger, {1});
  for (int d = 0; d < 2; ++d) {
    plan::Task* t = AddTask(plan, "spin@" + std::to_string(d), plan::COMPUTE, d);
    t->set_op_type("spin");
    AddInput(t, 0);
    AddRegister(t, {1});
  }
  plan::Task* sink = AddTask(plan, "output", plan::SINK, 0);
  AddInput(sink, 1, /*control=*/true);
  AddInput(sink, 2, /*control=*/true);
  plan.mutable_tasks(0)->mutable_registers(0)->add_consumer_task_ids(1);
  plan.mutable_tasks(0)->mutable_registers(0)->add_consumer_task_ids(2);
  plan.mutable_tasks(1)->mutable_registers(0)->add_consumer_task_ids(3);
  plan.mutable_tasks(2)->mutable_registers(0)->add_consumer_task_ids(3);
  return plan;
}

struct FanOutRun {
  plan::Plan plan;
  std::shared_ptr<ActorEnvironment> environment;
  std::unique_ptr<Runtime> runtime;
  float trigger = 0;
};

// `stock`: CAF's own work-stealing scheduler instead of the one ActorEnvironment installs.
StatusOr<std::unique_ptr<FanOutRun>> MakeFanOutRun(int64_t spin_us, bool stock) {
  auto run = std::make_unique<FanOutRun>();
  run->plan = FanOutPlan();
  EnvironmentOptions environment_options;
  environment_options.num_threads = 2;
  environment_options.num_workers = 2;
  environment_options.kernel_threads = 1;
  if (stock) {
    // A scheduler module given later replaces the one given first.
    environment_options.configure_system = [](caf::actor_system_config& config) {
      config.module_factories.push_back([](caf::actor_system& system) -> caf::actor_system::module* {
        return new caf::scheduler::coordinator<caf::policy::work_stealing>(system);
      });
    };
  }
  AF_ASSIGN_OR_RETURN(run->environment, ActorEnvironment::Create(environment_options));
  RuntimeHooks hooks;
  hooks.make_kernel = [spin_us](const plan::Task&) -> StatusOr<KernelFn> {
    return KernelFn([spin_us](KernelContext&) -> Status {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
      while (std::chrono::steady_clock::now() < until) {
      }
      return Status::Ok();
    });
  };
  RuntimeOptions options;
  options.kernel_threads = 1;
  AF_ASSIGN_OR_RETURN(run->runtime, Runtime::Create(run->plan, hooks, options, run->environment));
  return run;
}

void FanOutAfterIdle(benchmark::State& state) {
  const int64_t spin_us = state.range(0);
  auto ours = MakeFanOutRun(spin_us, false), stock = MakeFanOutRun(spin_us, true);
  if (!ours.ok() || !stock.ok()) return state.SkipWithError((ours.ok() ? stock.status() : ours.status()).ToString().c_str());
  std::vector<double> past_spin[2];
  for (auto _ : state) {
    for (int round = 0; round < 40; ++round) {
      for (int k = 0; k < 2; ++k) {
        const int which = (round + k) % 2;  // ABBA
        FanOutRun& run = *(which == 0 ? ours : stock).value();
        for (int call = 0; call < 5; ++call) {
          // Past the workers' polling (~0.1 ms): the second worker is asleep when the call comes.
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          const auto start = std::chrono::steady_clock::now();
          Status ran = run.runtime->Run({{&run.trigger, {{1}, DType::kFloat32}}}, {});
          if (!ran.ok()) return state.SkipWithError(ran.ToString().c_str());
          past_spin[which].push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() -
              static_cast<double>(spin_us));
        }
      }
    }
  }
  const char* names[2] = {"ours", "caf_stock"};
  for (int which = 0; which < 2; ++which) {
    std::vector<double>& v = past_spin[which];
    std::sort(v.begin(), v.end());
    state.counters[std::string(names[which]) + "_q1_us"] = v[v.size() / 4];
    state.counters[std::string(names[which]) + "_median_us"] = v[v.size() / 2];
    state.counters[std::string(names[which]) + "_q3_us"] = v[v.size() * 3 / 4];
  }
}
BENCHMARK(FanOutAfterIdle)->Arg(300)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

using bench::kBatch;
using bench::kClasses;
using bench::kHidden;
using bench::kIn;

// The seeds' LeNet (bench/bench_lenet.py's, without dropout: conv 5x5x32 SAME + bias + relu,
// max pool 2x2, conv 5x5x64 + bias + relu, max pool, flatten, dense 3136-512 + relu, dense
// 512-10, sparse softmax cross entropy, SGD) on batch kBatch of 1x28x28 images, built as the
// Python front end builds it (the fusion passes fuse what they fuse there too).
struct VariableSpec {
  std::string name;
  Shape shape;
};
const std::vector<VariableSpec>& LenetVariables() {
  static const std::vector<VariableSpec> variables = {
      {"conv1-weight", {32, 1, 5, 5}}, {"conv1-bias", {32}},     {"conv2-weight", {64, 32, 5, 5}},
      {"conv2-bias", {64}},            {"dense1-weight", {3136, 512}}, {"dense1-bias", {512}},
      {"dense2-weight", {512, 10}},    {"dense2-bias", {10}}};
  return variables;
}
StatusOr<graph::JobBuilder> SeedLenetJob(const std::string& name, int devices) {
  AF_ASSIGN_OR_RETURN(graph::JobBuilder b, graph::JobBuilder::Create(name, "train"));
  AF_RETURN_IF_ERROR(b.SetDeviceNum(devices));
  AF_ASSIGN_OR_RETURN(std::string x, b.AddInput("x", {kBatch, 1, 28, 28}, DType::kFloat32, "bench"));
  AF_ASSIGN_OR_RETURN(std::string labels, b.AddInput("labels", {kBatch}, DType::kInt32, "bench"));
  std::map<std::string, std::string> v;
  for (const VariableSpec& spec : LenetVariables()) {
    AF_ASSIGN_OR_RETURN(v[spec.name], b.AddVariable(spec.name, spec.shape, DType::kFloat32, "bench"));
  }
  std::string t = x;
  auto op = [&](const std::string& type, const std::string& op_name, std::vector<std::string> inputs,
                Attrs attrs) -> Status {
    AF_ASSIGN_OR_RETURN(const graph::Node* n, b.AddOp(type, op_name, inputs, attrs, "bench"));
    t = n->output_ref(0);
    return Status::Ok();
  };
  for (const std::string layer : {"conv1", "conv2"}) {
    AF_RETURN_IF_ERROR(op("conv2d", layer, {t, v[layer + "-weight"]}, Attrs{{"padding", std::string("SAME")}}));
    AF_RETURN_IF_ERROR(op("bias_add", layer + "-bias_add", {t, v[layer + "-bias"]}, Attrs{{"axis", int64_t{1}}}));
    AF_RETURN_IF_ERROR(op("relu", layer + "-relu", {t}, {}));
    AF_RETURN_IF_ERROR(op("max_pool2d", layer + "-pool", {t},
                          Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}}));
  }
  AF_RETURN_IF_ERROR(op("reshape", "reshape", {t}, Attrs{{"shape", Shape{kBatch, -1}}}));
  for (const std::string layer : {"dense1", "dense2"}) {
    AF_RETURN_IF_ERROR(op("matmul", layer, {t, v[layer + "-weight"]}, {}));
    AF_RETURN_IF_ERROR(op("bias_add", layer + "-bias_add", {t, v[layer + "-bias"]}, {}));
    if (layer == "dense1") AF_RETURN_IF_ERROR(op("relu", layer + "-relu", {t}, {}));
  }
  AF_RETURN_IF_ERROR(op("sparse_softmax_cross_entropy", "loss", {labels, t}, {}));
  AF_RETURN_IF_ERROR(b.AddLoss(t));
  graph::OptimizerSpec spec;
  spec.type = "sgd";
  AF_RETURN_IF_ERROR(b.SetOptimizer(spec));
  AF_RETURN_IF_ERROR(b.SetOutputs({t}));
  return b;
}

enum class Model { kMlp, kLenet };

// A compiled train job (the seed MLP or LeNet) on `devices` devices and a budget of
// `threads`, with its feeds.
struct TrainJob {
  std::unique_ptr<Session> session;
  std::shared_ptr<CompiledJob> job;
  std::vector<float> x, loss;
  std::vector<int32_t> labels;
  float learning_rate = 0.01f;
  std::vector<TensorView> inputs, outputs;
  Status Step() { return job->Run(inputs, outputs); }
};

// kernel_threads > 0 fixes each kernel's share (and turns off lending idle shares).
StatusOr<std::unique_ptr<TrainJob>> MakeTrainJob(Model model, int devices, int workers, int threads,
                                                 int kernel_threads = 0, const std::string& trace_path = "") {
  auto made = std::make_unique<TrainJob>();
  made->session = std::make_unique<Session>();
  std::vector<VariableSpec> variables = {
      {"w1", {kIn, kHidden}}, {"b1", {kHidden}}, {"w2", {kHidden, kClasses}}, {"b2", {kClasses}}};
  if (model == Model::kLenet) variables = LenetVariables();
  for (const VariableSpec& spec : variables) {
    std::vector<float> init(NumElements(spec.shape));
    // Small weights (LeNet's fan-ins reach 3136): the step's arithmetic, not its values, is timed.
    const float scale = model == Model::kLenet ? 0.05f / std::sqrt(static_cast<float>(init.size() / spec.shape[0]))
                                               : 0.01f;
    for (size_t i = 0; i < init.size(); ++i) init[i] = scale * std::sin(static_cast<float>(i));
    AF_RETURN_IF_ERROR(made->session->CreateVariable(spec.name, {spec.shape, DType::kFloat32}, init.data()));
  }
  const std::string name = (model == Model::kLenet ? "lenet" : "mlp") + std::to_string(devices);
  AF_ASSIGN_OR_RETURN(graph::JobBuilder builder, model == Model::kLenet ? SeedLenetJob(name, devices)
                                                                        : bench::SeedMlpJob(name, devices, 0));
  JobOptions options;
  options.num_threads = threads;
  options.num_workers = workers;
  options.kernel_threads = kernel_threads;
  options.trace_path = trace_path;
  AF_ASSIGN_OR_RETURN(made->job, made->session->Compile(builder, options));
  const Shape x_shape = model == Model::kLenet ? Shape{kBatch, 1, 28, 28} : Shape{kBatch, kIn};
  made->x.resize(NumElements(x_shape));
  for (size_t i = 0; i < made->x.size(); ++i) made->x[i] = std::sin(0.37f * static_cast<float>(i));
  made->labels.resize(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) made->labels[i] = static_cast<int32_t>(i % kClasses);
  made->loss.resize(kBatch);
  made->inputs = {{made->x.data(), {x_shape, DType::kFloat32}},
                  {made->labels.data(), {{kBatch}, DType::kInt32}},
                  {&made->learning_rate, {{1}, DType::kFloat32}}};
  made->outputs = {{made->loss.data(), {{kBatch}, DType::kFloat32}}};
  return made;
}

void MlpTrainStep(benchmark::State& state) {
  auto job = MakeTrainJob(Model::kMlp, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                          static_cast<int>(state.range(2)));
  if (!job.ok()) return state.SkipWithError(job.status().ToString().c_str());
  for (auto _ : state) {
    Status ran = job.value()->Step();
    if (!ran.ok()) return state.SkipWithError(ran.ToString().c_str());
  }
}

// The 2-device over 1-device step time at one budget, drift cancelled: both jobs in one
// process, blocks of `steps` steps alternating ABBA; counters: median and quartiles of the
// blocks' ratios, and each side's median step (us), and the median ratio of the blocks' CPU
// time per step. Second argument 0: the 2-device job's
// kernels keep their share (threads / 2), no lending of idle shares (how it ran before lending).
// Third argument: the 2-device job's CAF workers (0: the session's default, DefaultWorkerCount in
// actors/environment.h: one worker for both devices on 2 threads; 1: one worker running both
// devices' tasks, each kernel on the whole budget; 2: a worker per device, lending idle shares,
// the default before).
// ACTORFLOW_BENCH_TRACE=prefix writes each job's trace to prefix.<job>.json.
void TwoOverOneDevice(benchmark::State& state, Model model, int steps, int rounds) {
  const int threads = static_cast<int>(state.range(0));
  const bool lend = state.range(1) != 0;
  const int two_device_workers = state.range(2) > 0 ? static_cast<int>(state.range(2)) : 0;
  const char* trace = std::getenv("ACTORFLOW_BENCH_TRACE");
  auto trace_path = [&](int devices) {
    return trace == nullptr ? std::string() : std::string(trace) + "." + std::to_string(devices) + "dev.json";
  };
  auto one = MakeTrainJob(model, 1, 0, threads, 0, trace_path(1));
  auto two = MakeTrainJob(model, 2, two_device_workers, threads,
                          lend ? 0 : std::max(1, threads / (two_device_workers > 0 ? two_device_workers : DefaultWorkerCount(threads, 2))),
                          trace_path(2));
  if (!one.ok() || !two.ok())
    return state.SkipWithError((one.ok() ? two.status() : one.status()).ToString().c_str());
  // One block: its steps' mean real time and the process's CPU time per step (us). On a loaded
  // host the CPU time is the steadier measure of the machinery's work (it misses waits for a
  // core, but counts the workers' polling).
  auto cpu_us = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
  };
  auto block = [steps, &cpu_us](TrainJob& job, double* cpu) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_us();
    for (int i = 0; i < steps; ++i)
      if (!job.Step().ok()) return -1.0;
    *cpu = (cpu_us() - cpu_start) / steps;
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / steps;
  };
  // Warm-up (first-call primitive creation, page faults) outside the blocks.
  double unused;
  if (block(*one.value(), &unused) <= 0 || block(*two.value(), &unused) <= 0) return state.SkipWithError("step failed");
  std::vector<double> ratios, ones, twos, cpu_ratios;
  for (auto _ : state) {
    for (int round = 0; round < rounds; ++round) {
      const bool one_first = round % 2 == 0;
      double cpu_a = 0, cpu_b = 0;
      double a = one_first ? block(*one.value(), &cpu_a) : block(*two.value(), &cpu_a);
      double b = one_first ? block(*two.value(), &cpu_b) : block(*one.value(), &cpu_b);
      const double t1 = one_first ? a : b, t2 = one_first ? b : a;
      const double c1 = one_first ? cpu_a : cpu_b, c2 = one_first ? cpu_b : cpu_a;
      if (t1 <= 0 || t2 <= 0) return state.SkipWithError("step failed");
      ratios.push_back(t2 / t1);
      cpu_ratios.push_back(c2 / c1);
      ones.push_back(t1);
      twos.push_back(t2);
    }
  }
  auto quantile = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  state.counters["ratio_median"] = quantile(ratios, 0.5);
  state.counters["ratio_q1"] = quantile(ratios, 0.25);
  state.counters["ratio_q3"] = quantile(ratios, 0.75);
  state.counters["one_device_us"] = quantile(ones, 0.5);
  state.counters["two_devices_us"] = quantile(twos, 0.5);
  state.counters["cpu_ratio_median"] = quantile(cpu_ratios, 0.5);
}
void MlpTwoOverOneDevice(benchmark::State& state) { TwoOverOneDevice(state, Model::kMlp, 20, 30); }
void LenetTwoOverOneDevice(benchmark::State& state) { TwoOverOneDevice(state, Model::kLenet, 2, 10); }
BENCHMARK(MlpTwoOverOneDevice)->Args({1, 1, 0})->Args({2, 1, 0})->Args({2, 1, 2})->Args({2, 0, 2})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(LenetTwoOverOneDevice)->Args({1, 1, 0})->Args({2, 1, 0})->Args({2, 1, 2})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK(MlpTrainStep)
    ->Args({1, 0, 1})
    ->Args({2, 0, 1})
    ->Args({2, 0, 1})
    ->Args({1, 0, 1})
    ->Args({1, 0, 2})
    ->Args({2, 0, 2})
    ->Args({2, 1, 2})
    ->Args({2, 0, 2})
    ->Args({1, 0, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace actorflow

BENCHMARK_MAIN();
