// Cross-machine transfer over loopback, two processes (this binary starts its rank 1 itself):
//  - send/recv round trip: a plan whose source on machine 0 is sent to machine 1, whose recv is
//    sent back to machine 0's sink (two send/recv pairs, the data plane of comm/data_plane.h on
//    the control plane's connection, runtimes on both sides): one call = one round trip;
//  - raw TCP round trip: the same bytes echoed over one loopback TCP connection (TCP_NODELAY,
//    blocking read/write of the whole buffer): the transport's limit on this machine.
//  - Gloo point-to-point round trip (when built with Gloo): the same bytes sent and echoed with
//    Gloo's unbound buffers (bench/gloo_baseline.h), the engine the design first proposed.
// Prints one line per size: the median over rounds (they alternate) of each round's median
// round trip, and the bandwidth 2 * bytes / time, for each.
//
//   cluster_bench [--sizes 4096,1048576,16777216] [--seconds 1] [--rounds 3] [--authenticate 1]
//   cluster_bench --all-reduce 2|3 [--sizes 1048576,16777216,67108864] [--rounds 3] [--authenticate 1]
//     (--authenticate 1: the data plane tags and checks every frame, comm/data_plane_frames.h,
//     as with --tls; compare with a run without it for the cost)
//     (the ring all-reduce next to the funnel through machine 0 and Gloo's ring and
//     halving-doubling all-reduce; see RunAllReduceBench)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "bench/gloo_baseline.h"
#include "actors/runtime.h"
#include "comm/cluster.h"
#include "comm/data_plane.h"
#include "comm/ring.h"
#include "graph/passes.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using actorflow::Status;

void Die(const std::string& what) {
  std::fprintf(stderr, "cluster_bench: %s\n", what.c_str());
  std::_Exit(1);
}

void Check(const Status& status, const std::string& what) {
  if (!status.ok()) Die(what + ": " + status.ToString());
}

// One rank's actor environment, cluster (after the rendezvous) and data plane; any failure ends
// the process. Members in this order so the plane goes first, then the cluster.
struct BenchRank {
  std::shared_ptr<actorflow::ActorEnvironment> environment;
  std::unique_ptr<actorflow::Cluster> cluster;
  std::shared_ptr<actorflow::DataPlane> plane;
};

bool authenticate_frames = false;  // --authenticate 1

BenchRank JoinCluster(int rank, int world, int port, const std::string& job_id) {
  actorflow::ClusterOptions options;
  options.authenticate_data_frames = authenticate_frames;
  options.secret = "cluster_bench";
  options.rank = rank;
  options.world_size = world;
  options.coordinator_port = static_cast<uint16_t>(port);
  options.rendezvous_timeout = std::chrono::milliseconds(20000);
  options.connection_timeout = std::chrono::milliseconds(20000);
  options.job_id = job_id;
  actorflow::EnvironmentOptions environment_options;
  environment_options.num_threads = 1;
  actorflow::AddNetworkLayer(environment_options, options);
  BenchRank joined;
  auto environment = actorflow::ActorEnvironment::Create(environment_options);
  if (!environment.ok()) Die(environment.status().ToString());
  joined.environment = *environment;
  auto cluster = actorflow::Cluster::Create(options, joined.environment);
  if (!cluster.ok()) Die(cluster.status().ToString());
  joined.cluster = std::move(*cluster);
  Check(joined.cluster->Rendezvous(actorflow::PlanIdentity::FromOps({})), "rendezvous");
  auto plane = actorflow::DataPlane::Create(*joined.cluster, joined.environment, std::chrono::milliseconds(20000));
  if (!plane.ok()) Die(plane.status().ToString());
  joined.plane = *plane;
  return joined;
}

int FreePort() {
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) Die("bind");
  socklen_t length = sizeof address;
  getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  close(probe);
  return ntohs(address.sin_port);
}

// Rank 0 makes the directory Gloo's ranks meet in (FileStore) and removes it at the end.
std::string MakeGlooStore() {
  if (!actorflow_bench::GlooBaseline::Available()) return "-";
  char pattern[] = "/tmp/actorflow-cluster-bench-gloo-XXXXXX";
  if (mkdtemp(pattern) == nullptr) Die("mkdtemp");
  return pattern;
}

void RemoveGlooStore(const std::string& directory) {
  std::error_code ignored;
  if (directory != "-") std::filesystem::remove_all(directory, ignored);
}

void AddRegister(actorflow::plan::Task* task, const char* name, int64_t bytes) {
  auto* reg = task->add_registers();
  reg->set_name(name);
  reg->set_register_num(2);
  if (bytes < 0) return;
  auto* blob = reg->add_blobs();
  blob->set_name(std::string(task->name()) + "/" + name);
  blob->add_shape(bytes);
  blob->set_dtype(actorflow::plan::DT_UINT8);
  blob->set_byte_size(bytes);
}

actorflow::plan::Task* AddTask(actorflow::plan::Plan& plan, const std::string& name, actorflow::plan::TaskKind kind,
                               int machine) {
  auto* task = plan.add_tasks();
  task->set_id(plan.tasks_size() - 1);
  task->set_name(name);
  task->set_kind(kind);
  task->set_device_type("cpu");
  task->set_machine_id(machine);
  return task;
}

void AddInput(actorflow::plan::Task* task, int64_t producer, bool control) {
  auto* in = task->add_inputs();
  in->set_producer_task_id(producer);
  in->set_producer_register(0);
  in->set_control(control);
}

// Round trips per measurement of the two-process bench, the same on both ranks.
int RoundTripsFor(int64_t bytes) { return bytes <= 65536 ? 400 : bytes <= (4 << 20) ? 60 : 12; }

// Calls per measurement, the same on every rank (they pair up by number).
int CallsFor(int64_t bytes) { return bytes <= (1 << 20) ? 40 : bytes <= (16 << 20) ? 12 : 6; }

// ---- All-reduce over `world` processes (cluster_bench --all-reduce N): per size, the ring
// (one ALL_REDUCE task per machine, comm/data_plane.h) next to the funnel the compiler made
// before (every machine sends its partial sum to machine 0, which adds them and sends the total
// back to every machine: send/recv pairs from graph::InsertCrossMachineTransfers), rounds
// alternating. Prints the median call time, the algorithm bandwidth (bytes / time) and rank 0's
// traffic per call (payload bytes sent plus received, counted by the data plane, in units of
// the buffer: the ring 4 (N - 1) / N, the funnel 2 (N - 1)).
actorflow::plan::Plan AllReducePlan(int world, int64_t bytes, bool ring) {
  actorflow::plan::Plan plan;
  plan.set_job_name(std::string(ring ? "ring_" : "funnel_") + std::to_string(bytes));
  auto add_float_register = [](actorflow::plan::Task* task) {
    auto* reg = task->add_registers();
    reg->set_name("out");
    reg->set_register_num(2);
    auto* blob = reg->add_blobs();
    blob->set_name(task->name() + "/out");
    blob->set_dtype(actorflow::plan::DT_FLOAT32);
    blob->add_shape(0);
  };
  auto set_bytes = [](actorflow::plan::Task* task, int64_t n) {
    auto* blob = task->mutable_registers(0)->mutable_blobs(0);
    blob->set_shape(0, n / 4);
    blob->set_byte_size(n);
  };
  std::vector<int64_t> sources;
  for (int m = 0; m < world; ++m) {
    auto* source = AddTask(plan, "partial@" + std::to_string(m), actorflow::plan::SOURCE, m);
    source->set_feed_index(0);
    add_float_register(source);
    set_bytes(source, bytes);
    sources.push_back(source->id());
  }
  std::vector<int64_t> totals;
  if (ring) {
    for (int m = 0; m < world; ++m) {
      auto* sum = AddTask(plan, "sum@" + std::to_string(m), actorflow::plan::COMPUTE, m);
      sum->set_op_type(actorflow::kAllReduceOp);
      sum->set_asynchronous(true);
      (*sum->mutable_attrs())["channel"].set_i(0);
      for (int r = 0; r < world; ++r) (*sum->mutable_attrs())["ring"].mutable_ints()->add_values(r);
      AddInput(sum, sources[m], false);
      add_float_register(sum);
      set_bytes(sum, bytes);
      totals.push_back(sum->id());
    }
  } else {
    auto* sum = AddTask(plan, "sum", actorflow::plan::COMPUTE, 0);
    sum->set_op_type("bench_sum");
    for (int64_t source : sources) AddInput(sum, source, false);
    add_float_register(sum);
    set_bytes(sum, bytes);
    totals.assign(world, sum->id());
  }
  for (int m = 0; m < world; ++m) {
    auto* sink = AddTask(plan, m == 0 ? "output" : "output@machine" + std::to_string(m), actorflow::plan::SINK, m);
    AddInput(sink, totals[m], false);
  }
  return plan;
}

int RunAllReduceBench(int rank, int world, int port, const std::vector<int64_t>& sizes, int rounds, char* self,
                      std::string gloo_store) {
  std::vector<pid_t> children;
  if (rank == 0) {
    port = FreePort();
    gloo_store = MakeGlooStore();
    std::string size_text;
    for (int64_t s : sizes) size_text += (size_text.empty() ? "" : ",") + std::to_string(s);
    for (int r = 1; r < world; ++r) {
      std::vector<std::string> arguments = {self, "--all-reduce", std::to_string(world), "--rank", std::to_string(r),
                                            "--port", std::to_string(port), "--sizes", size_text, "--rounds",
                                            std::to_string(rounds), "--gloo-store", gloo_store, "--authenticate",
                                            authenticate_frames ? "1" : "0"};
      std::vector<char*> child_argv;
      for (auto& a : arguments) child_argv.push_back(a.data());
      child_argv.push_back(nullptr);
      pid_t child = -1;
      if (posix_spawn(&child, self, nullptr, nullptr, child_argv.data(), environ) != 0) Die("spawn a rank");
      children.push_back(child);
    }
  }
  BenchRank joined = JoinCluster(rank, world, port, "cluster_bench_all_reduce");
  const std::shared_ptr<actorflow::ActorEnvironment>& environment = joined.environment;
  actorflow::Cluster& cluster = *joined.cluster;
  actorflow::DataPlane& plane = *joined.plane;
  const bool with_gloo = gloo_store != "-";
  auto gloo = with_gloo ? actorflow_bench::GlooBaseline::Connect(rank, world, gloo_store) : nullptr;
  double traffic = 0;  // of the last measure
  auto measure = [&](int64_t bytes, bool ring) {
    const actorflow::plan::Plan plan = AllReducePlan(world, bytes, ring);
    auto global = actorflow::graph::InsertCrossMachineTransfers(plan, 2);
    if (!global.ok()) Die(global.status().ToString());
    auto local = actorflow::graph::ExtractMachinePlan(*global, rank);
    if (!local.ok()) Die(local.status().ToString());
    actorflow::RuntimeHooks hooks;
    hooks.make_kernel = [&](const actorflow::plan::Task& task) -> actorflow::StatusOr<actorflow::KernelFn> {
      if (actorflow::DataPlane::Handles(task.op_type())) return plane.MakeKernel(plan.job_name(), task);
      return actorflow::KernelFn([](actorflow::KernelContext& ctx) {  // the funnel's sum on machine 0
        const int64_t n = static_cast<int64_t>(ctx.output(0).byte_size());
        std::memcpy(ctx.output(0).data, ctx.input(0).data, static_cast<size_t>(n));
        for (size_t k = 1; k < ctx.num_inputs(); ++k)
          actorflow::AccumulateInto(ctx.output(0).data, ctx.input(k).data, n, actorflow::DType::kFloat32);
        return Status::Ok();
      });
    };
    auto runtime = actorflow::Runtime::Create(local->plan, hooks, {}, environment);
    if (!runtime.ok()) Die(runtime.status().ToString());
    std::vector<float> in(static_cast<size_t>(bytes / 4), static_cast<float>(rank + 1)), out(in.size(), 0.f);
    actorflow::TensorDesc desc{{bytes / 4}, actorflow::DType::kFloat32};
    std::vector<double> times;
    const int calls = CallsFor(bytes);
    const auto traffic_before = plane.PayloadBytes();
    for (int i = 0; i < calls; ++i) {
      auto start = Clock::now();
      Check((*runtime)->Run({{in.data(), desc}}, {{out.data(), desc}}), ring ? "ring all-reduce" : "funnel");
      if (i >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    const float expected = static_cast<float>(world * (world + 1) / 2);
    for (float v : out)
      if (v != expected) Die(std::string(ring ? "ring" : "funnel") + ": wrong sum");
    Check((*runtime)->Shutdown(), "shutdown");
    const auto traffic_after = plane.PayloadBytes();
    // Rank 0's sent + received bytes per call, in units of the buffer.
    traffic = static_cast<double>(traffic_after.first - traffic_before.first + traffic_after.second -
                                  traffic_before.second) / calls / static_cast<double>(bytes);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  // Gloo's all-reduce on the same values: ring, then halving-doubling.
  auto measure_gloo = [&](int64_t bytes, bool halving_doubling, bool time_copies) {
    std::vector<float> in(static_cast<size_t>(bytes / 4), static_cast<float>(rank + 1)), data(in.size()),
        out(in.size());
    const double time = gloo->MedianAllReduce(in.data(), data.data(), out.data(), bytes / 4, CallsFor(bytes),
                                              halving_doubling, time_copies);
    const float expected = static_cast<float>(world * (world + 1) / 2);
    for (float v : data)
      if (v != expected) Die(std::string("gloo ") + (halving_doubling ? "halving-doubling" : "ring") + ": wrong sum");
    return time;
  };
  std::vector<std::vector<double>> ring_times(sizes.size()), funnel_times(sizes.size()), gloo_ring(sizes.size()),
      gloo_halving_doubling(sizes.size()), gloo_halving_doubling_copies(sizes.size());
  std::vector<double> ring_traffic(sizes.size()), funnel_traffic(sizes.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t s = 0; s < sizes.size(); ++s) {
      ring_times[s].push_back(measure(sizes[s], true));
      ring_traffic[s] = traffic;
      funnel_times[s].push_back(measure(sizes[s], false));
      funnel_traffic[s] = traffic;
      if (with_gloo) {
        gloo_ring[s].push_back(measure_gloo(sizes[s], false, false));
        gloo_halving_doubling[s].push_back(measure_gloo(sizes[s], true, false));
        gloo_halving_doubling_copies[s].push_back(measure_gloo(sizes[s], true, true));
      }
    }
  if (rank == 0) {
    auto median_of = [](std::vector<double> values) {
      std::sort(values.begin(), values.end());
      return values[values.size() / 2];
    };
    std::printf("all-reduce over %d processes (float32; medians of %d rounds; frame authentication %s)\n", world, rounds,
                authenticate_frames ? "on" : "off");
    for (size_t s = 0; s < sizes.size(); ++s) {
      const double ring = median_of(ring_times[s]), funnel = median_of(funnel_times[s]);
      const double bytes = static_cast<double>(sizes[s]);
      std::printf("%10lld bytes  ring %9.2f ms %6.2f GB/s (rank 0 moves %.2fx the bytes)   funnel %9.2f ms %6.2f GB/s "
                  "(rank 0 moves %.2fx)   time funnel/ring %.2f\n",
                  static_cast<long long>(sizes[s]), ring * 1e3, bytes / ring / 1e9, ring_traffic[s], funnel * 1e3,
                  bytes / funnel / 1e9, funnel_traffic[s], funnel / ring);
      if (with_gloo) {
        const double gring = median_of(gloo_ring[s]), ghd = median_of(gloo_halving_doubling[s]);
        const double ghd_copies = median_of(gloo_halving_doubling_copies[s]);
        const double best = std::min(gring, ghd);
        std::printf("%10s        gloo ring %9.2f ms %6.2f GB/s   gloo halving-doubling %9.2f ms %6.2f GB/s   "
                    "ring vs best gloo %.0f%%\n",
                    "", gring * 1e3, bytes / gring / 1e9, ghd * 1e3, bytes / ghd / 1e9, 100.0 * best / ring);
        std::printf("%10s        gloo halving-doubling with a copy in and out (as a call's feed and fetch) %9.2f ms   "
                    "ring vs it %.0f%%\n",
                    "", ghd_copies * 1e3, 100.0 * ghd_copies / ring);
      }
    }
    std::fflush(stdout);
  }
  Check(cluster.Shutdown(std::chrono::milliseconds(20000)), "cluster shutdown");
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("a rank failed");
  }
  gloo.reset();
  if (rank == 0) RemoveGlooStore(gloo_store);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, port = 0, tcp_port = 0, all_reduce_world = 0;
  double seconds = 1;
  int rounds = 3;
  std::vector<int64_t> sizes = {4096, 1 << 20, 16 << 20};
  std::string gloo_store = "-";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--rank") rank = std::atoi(argv[i + 1]);
    else if (flag == "--port") port = std::atoi(argv[i + 1]);
    else if (flag == "--tcp-port") tcp_port = std::atoi(argv[i + 1]);
    else if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (flag == "--all-reduce") all_reduce_world = std::atoi(argv[i + 1]);
    else if (flag == "--gloo-store") gloo_store = argv[i + 1];
    else if (flag == "--authenticate") authenticate_frames = std::atoi(argv[i + 1]) == 1;
    else if (flag == "--sizes") {
      sizes.clear();
      for (char* item = std::strtok(argv[i + 1], ","); item; item = std::strtok(nullptr, ",")) sizes.push_back(std::atoll(item));
    } else Die("unknown flag " + flag);
  }
  if (all_reduce_world >= 2)
    return RunAllReduceBench(rank, all_reduce_world, port, sizes, rounds, argv[0], gloo_store);
  std::string size_text;
  for (int64_t s : sizes) size_text += (size_text.empty() ? "" : ",") + std::to_string(s);
  pid_t child = -1;
  if (rank == 0) {
    port = FreePort();
    tcp_port = FreePort();
    gloo_store = MakeGlooStore();
    std::vector<std::string> arguments = {argv[0], "--rank", "1", "--port", std::to_string(port), "--tcp-port",
                                          std::to_string(tcp_port), "--sizes", size_text, "--seconds",
                                          std::to_string(seconds), "--rounds", std::to_string(rounds),
                                          "--gloo-store", gloo_store, "--authenticate",
                                          authenticate_frames ? "1" : "0"};
    std::vector<char*> child_argv;
    for (auto& a : arguments) child_argv.push_back(a.data());
    child_argv.push_back(nullptr);
    if (posix_spawn(&child, argv[0], nullptr, nullptr, child_argv.data(), environ) != 0) Die("spawn rank 1");
  }

  // ---- raw TCP echo: rank 1 listens, rank 0 connects and sends, rank 1 echoes.
  int connection = -1;
  if (rank == 1) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(tcp_port));
    if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listener, 1) != 0)
      Die("rank 1 cannot listen");
    connection = accept(listener, nullptr, nullptr);
    close(listener);
  } else {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(tcp_port));
    for (int attempt = 0; attempt < 200; ++attempt) {
      connection = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(connection, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) break;
      close(connection);
      connection = -1;
      usleep(20000);
    }
    if (connection < 0) Die("rank 0 cannot reach rank 1's echo port");
  }
  int one = 1;
  setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto write_all = [&](const char* data, int64_t n) {
    while (n > 0) {
      ssize_t wrote = write(connection, data, static_cast<size_t>(n));
      if (wrote <= 0) Die("tcp write");
      data += wrote;
      n -= wrote;
    }
  };
  auto read_all = [&](char* data, int64_t n) {
    while (n > 0) {
      ssize_t got = read(connection, data, static_cast<size_t>(n));
      if (got <= 0) Die("tcp read");
      data += got;
      n -= got;
    }
  };
  // ---- the data plane.
  BenchRank joined = JoinCluster(rank, 2, port, "cluster_bench");
  const std::shared_ptr<actorflow::ActorEnvironment>& environment = joined.environment;
  actorflow::Cluster& cluster = *joined.cluster;
  actorflow::DataPlane& plane = *joined.plane;
  const bool with_gloo = gloo_store != "-";
  auto gloo = with_gloo ? actorflow_bench::GlooBaseline::Connect(rank, 2, gloo_store) : nullptr;
  // One size over raw TCP: rank 0 returns the median round trip.
  auto measure_tcp = [&](size_t s) {
    double median = 0;
    std::vector<char> buffer(static_cast<size_t>(sizes[s]), 1);
    // Rank 0 decides the number of round trips (warm-up, then until `seconds` passed) and
    // sends it first, so that rank 1 echoes exactly that many.
    int64_t count = 0;
    std::vector<double> times;
    if (rank == 0) {
      auto run = [&] {
        auto start = Clock::now();
        write_all(buffer.data(), sizes[s]);
        read_all(buffer.data(), sizes[s]);
        return std::chrono::duration<double>(Clock::now() - start).count();
      };
      int64_t continue_flag = 1;
      auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
      for (int i = 0; ; ++i) {
        continue_flag = (i < 5 + 3 || Clock::now() < deadline) && i < 100000 ? 1 : 0;
        write_all(reinterpret_cast<char*>(&continue_flag), sizeof continue_flag);
        if (!continue_flag) break;
        double t = run();
        if (i >= 5) times.push_back(t);
      }
      std::sort(times.begin(), times.end());
      median = times[times.size() / 2];
    } else {
      for (;;) {
        read_all(reinterpret_cast<char*>(&count), sizeof count);
        if (!count) break;
        read_all(buffer.data(), sizes[s]);
        write_all(buffer.data(), sizes[s]);
      }
    }
    return median;
  };
  // Of the bytes a rank received in the last measure of each size, the fraction that came before
  // their RECV register was posted and was copied in afterwards.
  std::vector<double> copied_fraction(sizes.size(), 0.0);
  // One size through the data plane: rank 0 returns the median round trip.
  auto measure_data_plane = [&](size_t s) {
    const int64_t bytes = sizes[s];
    // source (0) -> machine 1's main sink, and back: machine 0's sink reads what machine 1's
    // recv received, through the compiler's pass (two pairs).
    actorflow::plan::Plan plan;
    plan.set_job_name("round_trip_" + std::to_string(bytes));
    auto* source = AddTask(plan, "source", actorflow::plan::SOURCE, 0);
    AddRegister(source, "out", bytes);
    auto* relay = AddTask(plan, "relay", actorflow::plan::COMPUTE, 1);  // a kernel that copies nothing:
    relay->set_op_type("relay");                                          // it announces its input's register
    AddInput(relay, source->id(), false);
    AddRegister(relay, "out", bytes);
    auto* sink0 = AddTask(plan, "output", actorflow::plan::SINK, 0);
    AddInput(sink0, relay->id(), false);
    auto* sink1 = AddTask(plan, "output@machine1", actorflow::plan::SINK, 1);
    AddInput(sink1, relay->id(), true);
    auto global = actorflow::graph::InsertCrossMachineTransfers(plan, 2);
    if (!global.ok()) Die(global.status().ToString());
    auto local = actorflow::graph::ExtractMachinePlan(*global, rank);
    if (!local.ok()) Die(local.status().ToString());
    actorflow::RuntimeHooks hooks;
    hooks.make_kernel = [&](const actorflow::plan::Task& task) -> actorflow::StatusOr<actorflow::KernelFn> {
      if (actorflow::DataPlane::Handles(task.op_type())) return plane.MakeKernel(plan.job_name(), task);
      // The relay copies recv -> its register: one memcpy, what a compute task reading the
      // bytes would at least cost.
      return actorflow::KernelFn([](actorflow::KernelContext& ctx) {
        std::memcpy(ctx.output(0).data, ctx.input(0).data, ctx.input(0).byte_size());
        return Status::Ok();
      });
    };
    auto runtime = actorflow::Runtime::Create(local->plan, hooks, {}, environment);
    if (!runtime.ok()) Die(runtime.status().ToString());
    const uint64_t copied_before = plane.CopiedPayloadBytes(), received_before = plane.PayloadBytes().second;
    std::vector<char> in(static_cast<size_t>(bytes), 7), out(static_cast<size_t>(bytes), 0);
    actorflow::TensorDesc desc{{bytes}, actorflow::DType::kUInt8};
    std::vector<double> times;
    // Both ranks run the same number of calls: a fixed count per size, sized for ~`seconds`.
    const int calls = RoundTripsFor(bytes);
    for (int i = 0; i < calls; ++i) {
      auto start = Clock::now();
      Status done = rank == 0 ? (*runtime)->Run({{in.data(), desc}}, {{out.data(), desc}}) : (*runtime)->Run({}, {});
      Check(done, "round trip");
      if (i >= 3) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (rank == 0 && std::memcmp(in.data(), out.data(), in.size()) != 0) Die("the bytes came back changed");
    Check((*runtime)->Shutdown(), "shutdown");
    const uint64_t received = plane.PayloadBytes().second - received_before;
    copied_fraction[s] = received == 0 ? 0.0 : static_cast<double>(plane.CopiedPayloadBytes() - copied_before) / received;
    std::sort(times.begin(), times.end());
    return rank == 0 ? times[times.size() / 2] : 0.0;
  };
  // Rounds alternate the two (the machine is shared: conditions drift); the medians of the
  // per-round medians are printed.
  std::vector<std::vector<double>> tcp(sizes.size()), plane_times(sizes.size()), gloo_times(sizes.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t s = 0; s < sizes.size(); ++s) {
      tcp[s].push_back(measure_tcp(s));
      plane_times[s].push_back(measure_data_plane(s));
      if (with_gloo) {
        std::vector<char> buffer(static_cast<size_t>(sizes[s]), 5);
        gloo_times[s].push_back(gloo->MedianRoundTrip(buffer.data(), sizes[s], RoundTripsFor(sizes[s])));
      }
    }
  if (rank == 0) {
    auto median_of = [](std::vector<double> values) {
      std::sort(values.begin(), values.end());
      return values[values.size() / 2];
    };
    std::printf("send/recv round trips (medians of %d rounds; frame authentication %s)\n", rounds,
                authenticate_frames ? "on" : "off");
    for (size_t s = 0; s < sizes.size(); ++s) {
      const double ours = median_of(plane_times[s]), raw = median_of(tcp[s]);
      const double bytes = static_cast<double>(sizes[s]);
      std::printf("%10lld bytes  send/recv round trip %9.1f us  %6.2f GB/s   raw TCP %9.1f us  %6.2f GB/s   (%.0f%%)\n",
                  static_cast<long long>(sizes[s]), ours * 1e6, 2.0 * bytes / ours / 1e9, raw * 1e6,
                  2.0 * bytes / raw / 1e9, 100.0 * raw / ours);
      if (with_gloo) {
        const double direct = median_of(gloo_times[s]);
        std::printf("%10s        gloo point-to-point %9.1f us  %6.2f GB/s   send/recv vs gloo %.0f%%   gloo vs raw TCP "
                    "%.0f%%\n",
                    "", direct * 1e6, 2.0 * bytes / direct / 1e9, 100.0 * direct / ours, 100.0 * raw / direct);
      }
    }
    std::fflush(stdout);
  }
  if (rank == 1) {  // the rank whose recv races its bytes (rank 0 posts before it sends)
    std::string text;
    for (size_t s = 0; s < sizes.size(); ++s)
      text += " " + std::to_string(sizes[s]) + " B: " + std::to_string(static_cast<int>(100 * copied_fraction[s] + 0.5)) + "%";
    std::printf("rank 1: received bytes copied after arrival (came before their RECV register):%s\n", text.c_str());
    std::fflush(stdout);
  }
  close(connection);
  Check(cluster.Shutdown(std::chrono::milliseconds(20000)), "cluster shutdown");
  if (rank == 0) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("rank 1 failed");
  }
  gloo.reset();
  if (rank == 0) RemoveGlooStore(gloo_store);
  return 0;
}
