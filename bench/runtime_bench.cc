// The runtime's overhead, side by side in one binary (Google Benchmark):
//  - ChainPipelined/N/trace/workers: source -> N no-op actors -> sink, many iterations in flight;
//    `per_actor_iteration` is wall time / (iterations * N), the figure the target is about
//    (<= 0.5 us pipelined for N = 100). trace=1 records a Chrome trace of the same run; workers as
//    in ChainLatency below (0: the default, 1: one worker).
//  - TraceOverhead/N/iterations/workers: the recorder's cost on a pipelined chain, measured so
//    that the shared machine's drift cancels: one runtime with a recorder runs blocks of
//    iterations (each drained) with recording paused and on, alternating in ABBA order; each
//    pair gives a ratio, and the counters are the median and quartiles of the pairs' slowdown
//    in percent (wall time, and process CPU time). With one CAF worker (what compiled jobs use)
//    and two.
//  - RecorderPerAct: what the recorder adds to one act, without actors: the clock reads and
//    the two appends (wait + act) that an observed act costs, in ns.
//  - ChainLatency/N/inline/workers: one iteration at a time (Run), wall time per iteration (and
//    the p10 and median of single iterations); through the actors (inline=0), or on the calling
//    thread (inline=1, RuntimeOptions::run_inline); workers=0 is the runtime's default (one per
//    thread of the budget: 2 here), 1 what a compiled one-device job uses on this budget.
//  - ChainLatencyPinned/N/worker_cpu: the same through the actors, the caller on CPU 0 and the
//    worker on `worker_cpu` (the runtime created from a thread pinned there): /N/0 is what a call
//    costs when the scheduler or a loaded host puts both on one core (a worker that polled
//    without yielding made it ~100 us for N = 10), /N/1 with a core each.
//  - CafPingPong: two raw CAF actors bouncing a message; `per_message` is one hop.
//  - FunctionCall: the same no-op kernel called through its std::function, no actors.
// Run with --benchmark_repetitions=N --benchmark_report_aggregates_only=true: the machine is
// shared and noisy, report medians.
#include <benchmark/benchmark.h>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <sched.h>
#include <future>
#include <memory>

#include "actors/runtime.h"
#include "actors/trace_recorder.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

const TensorDesc kScalar{{1}, DType::kFloat32};

// source -> `length` no-op compute tasks -> main sink; each edge a one-float register.
plan::Plan ChainPlan(int length, int register_num) {
  plan::Plan plan;
  plan.set_job_name("chain" + std::to_string(length));
  for (int id = 0; id <= length + 1; ++id) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name("task" + std::to_string(id));
    t->set_kind(id == 0 ? plan::SOURCE : id == length + 1 ? plan::SINK : plan::COMPUTE);
    t->set_op_type(t->kind() == plan::COMPUTE ? "noop" : "");
    if (id <= length) {
      plan::RegisterDesc* r = t->add_registers();
      r->set_register_num(register_num);
      r->add_consumer_task_ids(id + 1);
      plan::BlobDesc* b = r->add_blobs();
      b->add_shape(1);
      b->set_dtype(plan::DT_FLOAT32);
      b->set_byte_size(4);
    }
    if (id > 0) t->add_inputs()->set_producer_task_id(id - 1);
  }
  return plan;
}

Status Noop(KernelContext&) { return Status::Ok(); }

std::unique_ptr<Runtime> MakeChain(int length, RuntimeObserver* observer, int num_workers = 0, bool run_inline = false) {
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn(Noop); };
  RuntimeOptions options;
  options.observer = observer;
  options.num_workers = num_workers;
  options.run_inline = run_inline;
  auto runtime = Runtime::Create(ChainPlan(length, 2), hooks, options);
  if (!runtime.ok()) return nullptr;
  return std::move(runtime).value();
}

void ChainPipelined(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  std::unique_ptr<ChromeTraceRecorder> recorder;
  if (state.range(1) != 0) recorder = std::make_unique<ChromeTraceRecorder>();
  auto runtime = MakeChain(length, recorder.get(), static_cast<int>(state.range(2)));
  if (!runtime) return state.SkipWithError("Runtime::Create failed");
  float in = 1, out = 0;
  std::vector<TensorView> inputs{{&in, kScalar}}, outputs{{&out, kScalar}};
  // Warm-up, untimed: the workers' first wake-ups and the first touch of every actor's state
  // otherwise land in the timed run, and they weigh most in the short runs of long chains.
  for (int i = 0; i < 200; ++i)
    if (!runtime->Push(inputs, outputs, nullptr).ok()) return state.SkipWithError("Push failed");
  runtime->Drain();
  for (auto _ : state) {
    // Push blocks while the source's registers are all in flight: steady-state pipelining.
    if (!runtime->Push(inputs, outputs, nullptr).ok()) return state.SkipWithError("Push failed");
  }
  runtime->Drain();  // the tail of the pipeline counts too
  const double actor_iterations = static_cast<double>(state.iterations()) * length;
  state.counters["per_actor_iteration"] =
      benchmark::Counter(actor_iterations, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (recorder) state.counters["trace_events"] = static_cast<double>(recorder->num_events());
}
// Fixed iteration counts: trace on and off do the same work, and the recorder's memory stays small.
BENCHMARK(ChainPipelined)->Args({1, 0, 0})->Args({1, 1, 0})->Iterations(50000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(ChainPipelined)->Args({10, 0, 0})->Args({10, 1, 0})->Args({10, 0, 1})->Iterations(20000)->UseRealTime()->Unit(benchmark::kMicrosecond);
// 100 actors: 10000 iterations (~0.4 s) so that one descheduling of a worker on a shared host
// does not decide the run.
BENCHMARK(ChainPipelined)->Args({100, 0, 0})->Args({100, 1, 0})->Args({100, 0, 1})->Iterations(10000)->UseRealTime()->Unit(benchmark::kMicrosecond);

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One timed block of `iterations` through a live chain, drained at the end: {wall s, CPU s}.
std::pair<double, double> TimedBlock(Runtime& runtime, int64_t iterations) {
  float in = 1, out = 0;
  std::vector<TensorView> inputs{{&in, kScalar}}, outputs{{&out, kScalar}};
  const double cpu0 = CpuSeconds();
  const int64_t t0 = NowNs();
  for (int64_t i = 0; i < iterations; ++i)
    if (!runtime.Push(inputs, outputs, nullptr).ok()) return {-1, -1};
  runtime.Drain();
  return {1e-9 * static_cast<double>(NowNs() - t0), CpuSeconds() - cpu0};
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

void TraceOverhead(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  const int64_t iterations = state.range(1);
  const int workers = static_cast<int>(state.range(2));
  constexpr int kPairs = 60;
  std::vector<double> wall_pct, cpu_pct;
  for (auto _ : state) {
    ChromeTraceRecorder recorder;
    auto runtime = MakeChain(length, &recorder, workers);
    if (!runtime) return state.SkipWithError("Runtime::Create failed");
    TimedBlock(*runtime, iterations);  // warm-up: thread start-up, first touch
    for (int pair = 0; pair < kPairs; ++pair) {
      const bool trace_first = pair % 4 == 1 || pair % 4 == 2;  // ABBA BAAB ...
      recorder.set_recording(trace_first);
      auto first = TimedBlock(*runtime, iterations);
      recorder.set_recording(!trace_first);
      auto second = TimedBlock(*runtime, iterations);
      if (first.first < 0 || second.first < 0) return state.SkipWithError("chain run failed");
      auto on = trace_first ? first : second, off = trace_first ? second : first;
      wall_pct.push_back(100.0 * (on.first / off.first - 1.0));
      cpu_pct.push_back(100.0 * (on.second / off.second - 1.0));
    }
    state.counters["trace_events"] = static_cast<double>(recorder.num_events());
  }
  state.counters["wall_pct_median"] = Quantile(wall_pct, 0.5);
  state.counters["wall_pct_q1"] = Quantile(wall_pct, 0.25);
  state.counters["wall_pct_q3"] = Quantile(wall_pct, 0.75);
  // 95% confidence interval of the median: order statistics n/2 -+ 0.98 sqrt(n).
  std::sort(wall_pct.begin(), wall_pct.end());
  const double n = static_cast<double>(wall_pct.size()), half = 0.98 * std::sqrt(n);
  state.counters["wall_pct_ci_lo"] = wall_pct[static_cast<size_t>(std::max(0.0, std::floor(n / 2 - half)))];
  state.counters["wall_pct_ci_hi"] = wall_pct[static_cast<size_t>(std::min(n - 1, std::ceil(n / 2 + half)))];
  state.counters["cpu_pct_median"] = Quantile(cpu_pct, 0.5);
}
// Args: chain length, iterations per run, CAF workers (compiled jobs default to one).
BENCHMARK(TraceOverhead)->Args({10, 2000, 1})->Args({10, 2000, 2})->Args({100, 300, 1})->Args({100, 300, 2})->Repetitions(1)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// What an observed act adds, without actors: what TaskState does per act (the recording
// check, two clock reads, the act with the wait it ended appended to its lane).
void RecorderPerAct(benchmark::State& state) {
  ChromeTraceRecorder recorder;
  RuntimeObserver* observer = &recorder;
  const int lanes = static_cast<int>(state.range(0));
  observer->OnPlan(ChainPlan(lanes, 2));
  std::vector<TraceLane*> lane(lanes);
  for (int t = 0; t < lanes; ++t) lane[t] = observer->LaneFor(t + 1);
  std::vector<int64_t> last_end(lanes, trace_clock::Now());
  int64_t iteration = 0;
  int task = 0;
  for (auto _ : state) {
    const int64_t start = observer->recording() ? trace_clock::Now() : 0;
    const int64_t end = trace_clock::Now();
    lane[task]->Act(iteration, true, last_end[task], WaitReason::kInputNotReady, start, end);
    last_end[task] = end;
    if (++task == lanes) task = 0, ++iteration;  // the actors of a chain take turns
  }
  state.counters["events"] = static_cast<double>(recorder.num_events());
}
// Writing a trace: ToJson of 1M recorded acts (10 actors, each act after a 2 us wait, so about
// 2M JSON events). The reader's side is bench/bench_trace_summary.py.
void RecorderToJson(benchmark::State& state) {
  ChromeTraceRecorder recorder;
  RuntimeObserver* observer = &recorder;
  observer->OnPlan(ChainPlan(8, 2));
  const int64_t step = trace_clock::kTscTicks ? 3000 : 1000;  // ~1 us
  std::vector<int64_t> last_end(10, trace_clock::Now());
  for (int64_t i = 0; i < 100000; ++i)
    for (int task = 0; task < 10; ++task) {
      const int64_t t = last_end[task];
      observer->LaneFor(task)->Act(i, true, t, WaitReason::kInputNotReady, t + 2 * step, t + 5 * step);
      last_end[task] = t + 5 * step;
    }
  size_t bytes = 0;
  for (auto _ : state) bytes = recorder.ToJson().size();
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}
BENCHMARK(RecorderToJson)->Iterations(1)->Repetitions(1)->Unit(benchmark::kMillisecond);

BENCHMARK(RecorderPerAct)->Arg(1)->Arg(10)->Arg(100)->Iterations(2000000);

void TimeSingleCalls(benchmark::State& state, Runtime* runtime);

void ChainLatency(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  auto runtime = MakeChain(length, nullptr, static_cast<int>(state.range(2)), state.range(1) != 0);
  if (!runtime) return state.SkipWithError("Runtime::Create failed");
  if (state.range(1) != 0 && !runtime->inline_refusal().empty()) return state.SkipWithError("not inline");
  TimeSingleCalls(state, runtime.get());
}
// inline=1: RuntimeOptions::run_inline, Run executes the chain on the calling thread.
BENCHMARK(ChainLatency)->ArgsProduct({{1, 10, 100}, {0, 1}, {0}})->Args({1, 0, 1})->Args({10, 0, 1})->Args({100, 0, 1})->UseRealTime()->Unit(benchmark::kMicrosecond);

// /N/worker_cpu: the runtime (its worker) created on CPU `worker_cpu`, the caller on CPU 0.
void ChainLatencyPinned(benchmark::State& state) {
  cpu_set_t before, cpu;
  if (sched_getaffinity(0, sizeof(before), &before) != 0) return state.SkipWithError("sched_getaffinity failed");
  auto pin = [&cpu](int c) {
    CPU_ZERO(&cpu);
    CPU_SET(c, &cpu);
    return sched_setaffinity(0, sizeof(cpu), &cpu) == 0;
  };
  if (!pin(static_cast<int>(state.range(1)))) return state.SkipWithError("sched_setaffinity failed");
  auto runtime = MakeChain(static_cast<int>(state.range(0)), nullptr, 1);  // its worker inherits the CPU
  if (!pin(0)) return state.SkipWithError("sched_setaffinity failed");
  if (runtime) TimeSingleCalls(state, runtime.get());
  else state.SkipWithError("Runtime::Create failed");
  runtime.reset();
  sched_setaffinity(0, sizeof(before), &before);
}
BENCHMARK(ChainLatencyPinned)->Args({1, 0})->Args({10, 0})->Args({1, 1})->Args({10, 1})->UseRealTime()->Unit(benchmark::kMicrosecond);

void TimeSingleCalls(benchmark::State& state, Runtime* runtime) {
  float in = 1, out = 0;
  std::vector<TensorView> inputs{{&in, kScalar}}, outputs{{&out, kScalar}};
  // Each Run timed alone too: on a shared host the low percentile is the cost when the chain's
  // threads were not descheduled meanwhile (counters p10_us, median_us).
  std::vector<double> single;
  single.reserve(1 << 20);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    if (!runtime->Run(inputs, outputs).ok()) return state.SkipWithError("Run failed");
    if (single.size() < single.capacity())
      single.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  if (single.empty()) return;
  std::sort(single.begin(), single.end());
  state.counters["p10_us"] = single[single.size() / 10];
  state.counters["median_us"] = single[single.size() / 2];
}

// Two raw CAF actors bounce a countdown; the last one fulfils the host's promise. The exit
// message at the end terminates both, which drops their behaviours and so the handles they hold.
using buddy_atom = caf::atom_constant<caf::atom("buddy")>;

caf::behavior Bouncer(caf::event_based_actor* self, std::promise<void>* done) {
  auto buddy = std::make_shared<caf::actor>();
  return {
      [=](buddy_atom, caf::actor other) { *buddy = std::move(other); },
      [=](int64_t remaining) {
        if (remaining == 0)
          done->set_value();
        else
          self->send(*buddy, remaining - 1);
      },
  };
}

void CafPingPong(benchmark::State& state) {
  constexpr int64_t kHops = 10000;
  caf::actor_system_config config;
  config.set("scheduler.max-threads", static_cast<size_t>(2));
  config.set("work-stealing.moderate-poll-attempts", static_cast<size_t>(0));
  caf::actor_system system(config);
  std::promise<void> done;
  auto a = system.spawn(Bouncer, &done);
  auto b = system.spawn(Bouncer, &done);
  caf::anon_send(a, buddy_atom::value, b);
  caf::anon_send(b, buddy_atom::value, a);
  for (auto _ : state) {
    done = std::promise<void>();
    auto finished = done.get_future();
    caf::anon_send(a, kHops);
    finished.wait();
  }
  state.counters["per_message"] = benchmark::Counter(static_cast<double>(state.iterations()) * kHops,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}
BENCHMARK(CafPingPong)->UseRealTime()->Unit(benchmark::kMicrosecond);

void FunctionCall(benchmark::State& state) {
  KernelFn kernel = Noop;
  std::vector<TensorView> inputs(1), outputs(1);
  KernelContext ctx;
  ctx.inputs = &inputs;
  ctx.outputs = &outputs;
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernel(ctx));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(FunctionCall);

}  // namespace
}  // namespace actorflow

BENCHMARK_MAIN();
