// Gloo (Debian libgloo-dev, PyTorch's CPU collective engine) called directly between the
// processes of cluster_bench, as the baseline the data plane is measured against: a
// point-to-point round trip with unbound buffers and Gloo's ring and halving-doubling
// all-reduce. Rendezvous through a Gloo FileStore in a directory rank 0 creates (one host).
// Built only when CMake finds Gloo (ACTORFLOW_HAVE_GLOO); without it Available() is false.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace actorflow_bench {

class GlooBaseline {
 public:
  static bool Available();
  // Connects `world` ranks over loopback TCP (a full mesh), meeting in `store_directory`.
  // Dies with a message on failure (a benchmark).
  static std::unique_ptr<GlooBaseline> Connect(int rank, int world, const std::string& store_directory);
  ~GlooBaseline();

  // Rank 0 sends `bytes` from `buffer` to rank 1, which receives them into its `buffer` and
  // sends them back; `calls` round trips, the first 3 untimed. Returns rank 0's median round
  // trip in seconds (0 on rank 1). Ranks > 1 do nothing.
  double MedianRoundTrip(char* buffer, int64_t bytes, int calls);
  // Sums `count` floats across the ranks in place with Gloo's ring (halving_doubling: its
  // halving-doubling) algorithm object, built once per size as Gloo's users do; `calls` calls,
  // the first 2 untimed, `data` refilled from `input` before each, outside the timing unless
  // `time_copies`: then the refill and a copy of the result out to `output` are timed too (the
  // two copies a runtime call makes, its feed and its fetch). Returns the median call time in
  // seconds; the last result stays in `data` (and `output`).
  double MedianAllReduce(const float* input, float* data, float* output, int64_t count, int calls,
                         bool halving_doubling, bool time_copies);

 private:
  GlooBaseline() = default;
  struct State;
  std::unique_ptr<State> state_;
  int rank_ = 0;
};

}  // namespace actorflow_bench
