// The runtime's overhead, side by side in one binary (Google Benchmark):
//  - ChainPipelined/N/trace: source -> N no-op actors -> sink, many iterations in flight;
//    `per_actor_iteration` is wall time / (iterations * N), the figure the target is about
//    (<= 2 us pipelined). trace=1 records a Chrome trace of the same run.
//  - ChainLatency/N: one iteration at a time (Run), wall time per iteration.
//  - CafPingPong: two raw CAF actors bouncing a message; `per_message` is one hop.
//  - FunctionCall: the same no-op kernel called through its std::function, no actors.
// Run with --benchmark_repetitions=N --benchmark_report_aggregates_only=true: the machine is
// shared and noisy, report medians.
#include <benchmark/benchmark.h>

#include <caf/all.hpp>

#include <future>
#include <memory>

#include "actors/runtime.h"
#include "actors/trace_recorder.h"
#include "graph/proto/plan.pb.h"

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

std::unique_ptr<Runtime> MakeChain(int length, RuntimeObserver* observer) {
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn(Noop); };
  RuntimeOptions options;
  options.observer = observer;
  auto runtime = Runtime::Create(ChainPlan(length, 2), hooks, options);
  if (!runtime.ok()) return nullptr;
  return std::move(runtime).value();
}

void ChainPipelined(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  std::unique_ptr<ChromeTraceRecorder> recorder;
  if (state.range(1) != 0) recorder = std::make_unique<ChromeTraceRecorder>();
  auto runtime = MakeChain(length, recorder.get());
  if (!runtime) return state.SkipWithError("Runtime::Create failed");
  float in = 1, out = 0;
  std::vector<TensorView> inputs{{&in, kScalar}}, outputs{{&out, kScalar}};
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
BENCHMARK(ChainPipelined)->Args({1, 0})->Args({1, 1})->Iterations(50000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(ChainPipelined)->Args({10, 0})->Args({10, 1})->Iterations(20000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(ChainPipelined)->Args({100, 0})->Args({100, 1})->Iterations(2000)->UseRealTime()->Unit(benchmark::kMicrosecond);

void ChainLatency(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  auto runtime = MakeChain(length, nullptr);
  if (!runtime) return state.SkipWithError("Runtime::Create failed");
  float in = 1, out = 0;
  std::vector<TensorView> inputs{{&in, kScalar}}, outputs{{&out, kScalar}};
  for (auto _ : state)
    if (!runtime->Run(inputs, outputs).ok()) return state.SkipWithError("Run failed");
}
BENCHMARK(ChainLatency)->Arg(1)->Arg(10)->Arg(100)->UseRealTime()->Unit(benchmark::kMicrosecond);

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
