// Cross-machine transfer over loopback, two processes (this binary starts its rank 1 itself):
//  - register round trip (the goal's measure): machine 0's register is sent to machine 1, whose
//    RECV register is sent straight back into machine 0's RECV register (two send/recv pairs of
//    comm/data_plane.h, runtimes on both sides, no feed, fetch or copy: RegisterRoundTripPlan);
//  - call round trip: the same through runtime calls, what a job pays: rank 0 feeds the bytes
//    and fetches them, a task on machine 1 copies its RECV register into the one it sends back;
//  - raw TCP round trip: the same bytes echoed over one loopback TCP connection (TCP_NODELAY,
//    the data plane's only socket option; blocking write/read of the whole buffer);
//  - Gloo point-to-point round trip (when built with Gloo): the same bytes sent and echoed with
//    Gloo's unbound buffers (bench/gloo_baseline.h), the engine the design first proposed.
// The measures interleave within each round (every other round in the opposite order); the
// ratios are taken per round (the same minute) and printed as median [min-max] over the rounds,
// the times as medians of the per-round medians; bandwidth = 2 * bytes / round trip.
//
//   cluster_bench [--sizes 4096,1048576,16777216] [--seconds 1] [--rounds 3] [--authenticate 1]
//     (--seconds: how long each raw TCP measure runs at least)
//   cluster_bench --all-reduce 2|3 [--sizes 1048576,16777216,67108864] [--rounds 3] [--authenticate 1]
//     [--funnel 1]
//     (--authenticate 1: the data plane tags and checks every frame, comm/data_plane_frames.h,
//     as with --tls; compare with a run without it for the cost)
//     (the ring all-reduce on registers next to Gloo's ring and halving-doubling run(), and
//     through runtime calls next to Gloo with a copy in and out; --funnel 1: also the funnel
//     through machine 0; see RunAllReduceBench)
//   --poll-attempts N (either mode): the CAF workers of both ranks poll their queues N times
//     after their last job before they sleep (work-stealing.aggressive-poll-attempts;
//     default: the actor environment's, 10000, actors/environment.cc): compare runs at a few
//     settings for the polling's cost.
//   Use an odd --rounds (5 or more) for a median that is one round's value.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "bench/cluster_bench_plans.h"
#include "bench/gloo_baseline.h"
#include "actors/runtime.h"
#include "comm/cluster.h"
#include "comm/data_plane.h"
#include "comm/ring.h"
#include "graph/passes.h"

extern char** environ;

namespace {

using namespace actorflow_bench;  // the plans of the measures
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
int64_t poll_attempts = -1;        // --poll-attempts N; -1: the environment's default

std::string PollText() {
  return poll_attempts < 0 ? "as the environment sets" : std::to_string(poll_attempts) + " times before sleeping";
}
bool with_funnel = false;          // --funnel 1 (all-reduce): also the funnel through machine 0

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
  if (poll_attempts >= 0) {
    auto network_layer = environment_options.configure_system;
    environment_options.configure_system = [network_layer](caf::actor_system_config& config) {
      network_layer(config);
      config.set("work-stealing.aggressive-poll-attempts", static_cast<size_t>(poll_attempts));
    };
  }
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

// Round trips per measurement of the two-process bench, the same on both ranks.
int RoundTripsFor(int64_t bytes) { return bytes <= 65536 ? 400 : bytes <= (4 << 20) ? 60 : 12; }

// Calls per measurement, the same on every rank (they pair up by number).
int CallsFor(int64_t bytes) { return bytes <= (1 << 20) ? 40 : bytes <= (16 << 20) ? 12 : 6; }

// ---- All-reduce over `world` processes (cluster_bench --all-reduce N): per size, the ring
// (one ALL_REDUCE task per machine, comm/data_plane.h) on registers and through calls, Gloo's
// algorithms called directly (run() alone and with a copy in and out), and with --funnel 1 the
// funnel the compiler made before (every machine sends its partial sum to machine 0, which adds
// them and sends the total back to every machine: send/recv pairs from
// graph::InsertCrossMachineTransfers), interleaved per round. Prints the median call time, the
// algorithm bandwidth (bytes / time), rank 0's traffic per call (payload bytes sent plus
// received, counted by the data plane, in units of the buffer: the ring 4 (N - 1) / N, the
// funnel 2 (N - 1)) and the per-round ratios like with like: the ring on registers vs the
// best Gloo run(), the ring through calls vs the best Gloo with the same two copies.
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
                                            authenticate_frames ? "1" : "0", "--funnel", with_funnel ? "1" : "0",
                                            "--poll-attempts", std::to_string(poll_attempts)};
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
  double copied = 0;   // of the last measure: the share of rank 0's received bytes that came before their act
  const float expected = static_cast<float>(world * (world + 1) / 2);
  auto measure = [&](int64_t bytes, AllReduceMode mode) {
    const bool ring = mode != AllReduceMode::kFunnelCall, registers = mode == AllReduceMode::kRingRegisters;
    const int calls = CallsFor(bytes);
    const int64_t count = bytes / 4;
    const actorflow::plan::Plan plan = AllReducePlan(world, bytes, mode);
    auto global = actorflow::graph::InsertCrossMachineTransfers(plan, 2);
    if (!global.ok()) Die(global.status().ToString());
    auto local = actorflow::graph::ExtractMachinePlan(*global, rank);
    if (!local.ok()) Die(local.status().ToString());
    std::vector<const void*> filled;  // origin registers already filled
    actorflow::RuntimeHooks hooks;
    hooks.make_kernel = [&](const actorflow::plan::Task& task) -> actorflow::StatusOr<actorflow::KernelFn> {
      if (actorflow::DataPlane::Handles(task.op_type())) return plane.MakeKernel(plan.job_name(), task);
      // The origin's values: rank + 1 everywhere, and at both ends (rank + 1) * (iteration + 1),
      // so that each call's sum is told apart from an earlier one's (exact in float32).
      if (task.op_type() == "origin")
        return actorflow::KernelFn([this_rank = rank, count, &filled](actorflow::KernelContext& ctx) {
          float* values = static_cast<float*>(ctx.output(0).data);
          if (std::find(filled.begin(), filled.end(), values) == filled.end()) {  // each register once
            std::fill(values, values + count, static_cast<float>(this_rank + 1));
            filled.push_back(values);
          }
          values[0] = values[count - 1] = static_cast<float>((this_rank + 1) * (ctx.iteration + 1));
          return Status::Ok();
        });
      if (task.op_type() == "check")
        return actorflow::KernelFn([expected, count, calls](actorflow::KernelContext& ctx) {
          const float* sum = static_cast<const float*>(ctx.input(0).data);
          const float ends = expected * static_cast<float>(ctx.iteration + 1);
          if (sum[0] != ends || sum[count - 1] != ends)
            return actorflow::Internal("all-reduce " + std::to_string(ctx.iteration) + ": not this call's sum");
          if (ctx.iteration == calls - 1)
            for (int64_t k = 1; k < count - 1; ++k)
              if (sum[k] != expected) return actorflow::Internal("all-reduce: wrong sum at " + std::to_string(k));
          return Status::Ok();
        });
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
    std::vector<float> in(registers ? 0 : static_cast<size_t>(count), static_cast<float>(rank + 1)),
        out(in.size(), 0.f);
    actorflow::TensorDesc desc{{count}, actorflow::DType::kFloat32};
    std::vector<actorflow::TensorView> feeds, fetches;
    if (!registers) {
      feeds.push_back({in.data(), desc});
      fetches.push_back({out.data(), desc});
    }
    std::vector<double> times;
    const auto traffic_before = plane.PayloadBytes();
    const uint64_t copied_before = plane.CopiedPayloadBytes();
    for (int i = 0; i < calls; ++i) {
      auto start = Clock::now();
      Check((*runtime)->Run(feeds, fetches), ring ? "ring all-reduce" : "funnel");
      // Registers: the last call checks every element, not timed.
      if (i >= 2 && !(registers && i == calls - 1))
        times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    for (float v : out)
      if (v != expected) Die(std::string(ring ? "ring" : "funnel") + ": wrong sum");
    Check((*runtime)->Shutdown(), "shutdown");
    const auto traffic_after = plane.PayloadBytes();
    // Rank 0's sent + received bytes per call, in units of the buffer.
    traffic = static_cast<double>(traffic_after.first - traffic_before.first + traffic_after.second -
                                  traffic_before.second) / calls / static_cast<double>(bytes);
    const uint64_t received = traffic_after.second - traffic_before.second;
    copied = received == 0 ? 0.0 : static_cast<double>(plane.CopiedPayloadBytes() - copied_before) / received;
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  // Gloo's all-reduce on the same values: ring, then halving-doubling.
  auto measure_gloo = [&](int64_t bytes, bool halving_doubling, bool time_copies) {
    std::vector<float> in(static_cast<size_t>(bytes / 4), static_cast<float>(rank + 1)), data(in.size()),
        out(in.size());
    const double time = gloo->MedianAllReduce(in.data(), data.data(), out.data(), bytes / 4, CallsFor(bytes),
                                              halving_doubling, time_copies);
    for (float v : data)
      if (v != expected) Die(std::string("gloo ") + (halving_doubling ? "halving-doubling" : "ring") + ": wrong sum");
    return time;
  };
  std::vector<std::vector<double>> ring_times(sizes.size()), funnel_times(sizes.size()), register_times(sizes.size()),
      gloo_ring(sizes.size()), gloo_halving_doubling(sizes.size()), gloo_ring_copies(sizes.size()),
      gloo_halving_doubling_copies(sizes.size());
  std::vector<double> ring_traffic(sizes.size()), funnel_traffic(sizes.size());
  std::vector<std::vector<double>> ring_copied(sizes.size()), register_copied(sizes.size());
  const int kinds = 6;
  for (int round = 0; round < rounds; ++round)
    for (size_t s = 0; s < sizes.size(); ++s)
      // Every other round in the opposite order, so that no measure always follows another.
      for (int step = 0; step < kinds; ++step) switch (const int k = round % 2 == 0 ? step : kinds - 1 - step; k) {
          case 0:
            register_times[s].push_back(measure(sizes[s], AllReduceMode::kRingRegisters));
            register_copied[s].push_back(copied);
            break;
          case 1:
            ring_times[s].push_back(measure(sizes[s], AllReduceMode::kRingCall));
            ring_traffic[s] = traffic;
            ring_copied[s].push_back(copied);
            if (with_funnel) {
              funnel_times[s].push_back(measure(sizes[s], AllReduceMode::kFunnelCall));
              funnel_traffic[s] = traffic;
            }
            break;
          default:
            if (!with_gloo) break;
            const bool halving_doubling = k % 2 == 1, copies = k >= 4;
            auto& times = halving_doubling ? (copies ? gloo_halving_doubling_copies : gloo_halving_doubling)
                                           : (copies ? gloo_ring_copies : gloo_ring);
            times[s].push_back(measure_gloo(sizes[s], halving_doubling, copies));
        }
  if (rank == 0) {
    auto median_of = [](std::vector<double> values) {
      std::sort(values.begin(), values.end());
      return values[values.size() / 2];
    };
    // Per round, best Gloo / ours (both in the same minute); median [range] over the rounds.
    auto versus = [&](const std::vector<double>& ours, const std::vector<double>& a, const std::vector<double>& b) {
      std::vector<double> ratios;
      for (int round = 0; round < rounds; ++round) ratios.push_back(std::min(a[round], b[round]) / ours[round]);
      return SpreadOf(ratios);
    };
    std::printf("all-reduce over %d processes (float32; medians of %d rounds; frame authentication %s; workers poll %s)\n",
                world, rounds, authenticate_frames ? "on" : "off", PollText().c_str());
    for (size_t s = 0; s < sizes.size(); ++s) {
      const double ring = median_of(ring_times[s]), on_registers = median_of(register_times[s]);
      const double bytes = static_cast<double>(sizes[s]);
      std::printf("%10lld bytes  ring on registers %9.2f ms %6.2f GB/s   ring through calls (feed + fetch) %9.2f ms "
                  "%6.2f GB/s (rank 0 moves %.2fx the bytes)\n",
                  static_cast<long long>(sizes[s]), on_registers * 1e3, bytes / on_registers / 1e9, ring * 1e3,
                  bytes / ring / 1e9, ring_traffic[s]);
      std::printf("%10s        rank 0's received bytes that came before their act (added from a buffer): on registers "
                  "%.0f%%, through calls %.0f%% (medians)\n",
                  "", 100 * median_of(register_copied[s]), 100 * median_of(ring_copied[s]));
      if (with_funnel) {
        const double funnel = median_of(funnel_times[s]);
        std::printf("%10s        funnel through calls %9.2f ms %6.2f GB/s (rank 0 moves %.2fx)   time funnel/ring %.2f\n",
                    "", funnel * 1e3, bytes / funnel / 1e9, funnel_traffic[s], funnel / ring);
      }
      if (with_gloo) {
        const double gring = median_of(gloo_ring[s]), ghd = median_of(gloo_halving_doubling[s]);
        const Spread like = versus(register_times[s], gloo_ring[s], gloo_halving_doubling[s]);
        const Spread calls = versus(ring_times[s], gloo_ring_copies[s], gloo_halving_doubling_copies[s]);
        std::printf("%10s        gloo run(): ring %9.2f ms, halving-doubling %9.2f ms   ring on registers vs best "
                    "gloo %.0f%% [%.0f-%.0f%%]\n",
                    "", gring * 1e3, ghd * 1e3, 100 * like.median, 100 * like.low, 100 * like.high);
        std::printf("%10s        gloo with a copy in and out: ring %9.2f ms, halving-doubling %9.2f ms   ring through "
                    "calls vs best of them %.0f%% [%.0f-%.0f%%]\n",
                    "", median_of(gloo_ring_copies[s]) * 1e3, median_of(gloo_halving_doubling_copies[s]) * 1e3,
                    100 * calls.median, 100 * calls.low, 100 * calls.high);
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
    else if (flag == "--poll-attempts") poll_attempts = std::atoll(argv[i + 1]);
    else if (flag == "--funnel") with_funnel = std::atoi(argv[i + 1]) == 1;
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
                                          authenticate_frames ? "1" : "0", "--poll-attempts",
                                          std::to_string(poll_attempts)};
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
  // One size, register to register (RegisterRoundTripPlan): rank 0 returns the median round
  // trip. Rank 0 calls synchronously, one round trip per call; rank 1 pushes all its calls at
  // once, so its RECV registers are posted before the bytes come, as raw TCP's rank 1 waits in
  // read() before they come (the receiving side of a pipeline; memory stays bounded by the
  // registers: ticks wait for a free RECV register).
  auto measure_registers = [&](size_t s) {
    const int64_t bytes = sizes[s];
    const int calls = RoundTripsFor(bytes);
    auto made = RegisterRoundTripPlan(bytes, rank);
    if (!made.ok()) Die(made.status().ToString());
    const actorflow::plan::Plan& local = *made;
    const std::string job = "register_round_trip_" + std::to_string(bytes);
    std::vector<const void*> filled;  // origin registers already filled (register_num of them)
    actorflow::RuntimeHooks hooks;
    hooks.make_kernel = [&](const actorflow::plan::Task& task) -> actorflow::StatusOr<actorflow::KernelFn> {
      if (actorflow::DataPlane::Handles(task.op_type())) return plane.MakeKernel(job, task);
      if (task.op_type() == "origin")
        return actorflow::KernelFn([bytes, &filled](actorflow::KernelContext& ctx) {
          char* data = static_cast<char*>(ctx.output(0).data);
          if (std::find(filled.begin(), filled.end(), data) == filled.end()) {
            std::memset(data, 0x5a, static_cast<size_t>(bytes));
            filled.push_back(data);
          }
          Stamp(data, bytes, ctx.iteration);
          return Status::Ok();
        });
      return actorflow::KernelFn([bytes, calls](actorflow::KernelContext& ctx) {  // "check"
        const char* data = static_cast<const char*>(ctx.input(0).data);
        if (!Stamped(data, bytes, ctx.iteration))
          return actorflow::Internal("round trip " + std::to_string(ctx.iteration) + ": another iteration's bytes came back");
        if (ctx.iteration == calls - 1)
          for (int64_t k = 8; k < bytes - 8; ++k)
            if (data[k] != 0x5a) return actorflow::Internal("the bytes came back changed at " + std::to_string(k));
        return Status::Ok();
      });
    };
    auto runtime = actorflow::Runtime::Create(local, hooks, {}, environment);
    if (!runtime.ok()) Die(runtime.status().ToString());
    std::vector<double> times;
    if (rank == 0) {
      for (int i = 0; i < calls; ++i) {
        auto start = Clock::now();
        Check((*runtime)->Run({}, {}), "register round trip");
        // The last call checks every byte: not timed.
        if (i >= 3 && i < calls - 1) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
    } else {
      std::atomic<int> failed{0};
      for (int i = 0; i < calls; ++i) {
        auto pushed = (*runtime)->Push({}, {}, [&failed](int64_t, const Status& status) {
          if (!status.ok()) failed.fetch_add(1);
        });
        Check(pushed.status(), "register round trip (rank 1)");
      }
      (*runtime)->Drain();
      if (failed.load() != 0) Die("register round trip failed on rank 1");
    }
    Check((*runtime)->Shutdown(), "shutdown");
    std::sort(times.begin(), times.end());
    return rank == 0 ? times[times.size() / 2] : 0.0;
  };
  // Rounds alternate the two (the machine is shared: conditions drift); the medians of the
  // per-round medians are printed.
  std::vector<std::vector<double>> tcp(sizes.size()), plane_times(sizes.size()), gloo_times(sizes.size()),
      register_times(sizes.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t s = 0; s < sizes.size(); ++s) {
      // Every other round in the opposite order, so that no measure always follows another.
      for (int k = 0; k < 4; ++k) switch (round % 2 == 0 ? k : 3 - k) {
          case 0: tcp[s].push_back(measure_tcp(s)); break;
          case 1: register_times[s].push_back(measure_registers(s)); break;
          case 2: plane_times[s].push_back(measure_data_plane(s)); break;
          default:
            if (with_gloo) {
              std::vector<char> buffer(static_cast<size_t>(sizes[s]), 5);
              gloo_times[s].push_back(gloo->MedianRoundTrip(buffer.data(), sizes[s], RoundTripsFor(sizes[s])));
            }
        }
    }
  if (rank == 0) {
    auto median_of = [](std::vector<double> values) {
      std::sort(values.begin(), values.end());
      return values[values.size() / 2];
    };
    std::printf("send/recv round trips (medians of %d rounds; frame authentication %s; workers poll %s)\n", rounds,
                authenticate_frames ? "on" : "off", PollText().c_str());
    // The goal's measure: register to register next to raw TCP, the ratio taken per round (both
    // measured in the same minute), its median and range over the rounds.
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<double> ratios;
      for (int round = 0; round < rounds; ++round) ratios.push_back(tcp[s][round] / register_times[s][round]);
      const Spread ratio = SpreadOf(ratios), ours = SpreadOf(register_times[s]), raw = SpreadOf(tcp[s]);
      const double bytes = static_cast<double>(sizes[s]);
      std::printf("%10lld bytes  register round trip %9.1f us [%.1f-%.1f] %6.2f GB/s   raw TCP %9.1f us [%.1f-%.1f] "
                  "%6.2f GB/s   registers vs raw TCP %.0f%% [%.0f-%.0f%%]\n",
                  static_cast<long long>(sizes[s]), ours.median * 1e6, ours.low * 1e6, ours.high * 1e6,
                  2.0 * bytes / ours.median / 1e9, raw.median * 1e6, raw.low * 1e6, raw.high * 1e6,
                  2.0 * bytes / raw.median / 1e9, 100 * ratio.median, 100 * ratio.low, 100 * ratio.high);
    }
    std::printf("and through runtime calls (rank 0 feeds and fetches, a task on rank 1 copies the received bytes "
                "into the register it sends back; rank 1 calls synchronously):\n");
    for (size_t s = 0; s < sizes.size(); ++s) {
      const double ours = median_of(plane_times[s]), raw = median_of(tcp[s]);
      const double bytes = static_cast<double>(sizes[s]);
      std::vector<double> ratios;
      for (int round = 0; round < rounds; ++round) ratios.push_back(tcp[s][round] / plane_times[s][round]);
      const Spread ratio = SpreadOf(ratios);
      std::printf("%10lld bytes  call round trip %9.1f us  %6.2f GB/s   vs raw TCP %.0f%% [%.0f-%.0f%%]\n",
                  static_cast<long long>(sizes[s]), ours * 1e6, 2.0 * bytes / ours / 1e9, 100 * ratio.median,
                  100 * ratio.low, 100 * ratio.high);
      if (with_gloo) {
        const double direct = median_of(gloo_times[s]);
        std::vector<double> versus_gloo;
        for (int round = 0; round < rounds; ++round) versus_gloo.push_back(gloo_times[s][round] / register_times[s][round]);
        const Spread gloo_ratio = SpreadOf(versus_gloo);
        std::printf("%10s        gloo point-to-point %9.1f us  %6.2f GB/s   gloo vs raw TCP %.0f%%   registers vs gloo "
                    "%.0f%% [%.0f-%.0f%%]\n",
                    "", direct * 1e6, 2.0 * bytes / direct / 1e9, 100.0 * raw / direct, 100 * gloo_ratio.median,
                    100 * gloo_ratio.low, 100 * gloo_ratio.high);
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
