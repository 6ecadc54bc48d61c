#include "bench/gloo_baseline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#if ACTORFLOW_HAVE_GLOO
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace actorflow_bench {

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "cluster_bench (gloo): %s\n", what.c_str());
  std::_Exit(1);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

}  // namespace

#if ACTORFLOW_HAVE_GLOO

struct GlooBaseline::State {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

bool GlooBaseline::Available() { return true; }

std::unique_ptr<GlooBaseline> GlooBaseline::Connect(int rank, int world, const std::string& store_directory) {
  std::unique_ptr<GlooBaseline> baseline(new GlooBaseline());
  baseline->rank_ = rank;
  baseline->state_ = std::make_unique<State>();
  try {
    gloo::transport::tcp::attr attr("127.0.0.1");
    baseline->state_->device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_directory);
    gloo::rendezvous::PrefixStore prefix("cluster_bench", store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(std::chrono::seconds(60));
    context->connectFullMesh(prefix, baseline->state_->device);
    baseline->state_->context = std::move(context);
  } catch (const std::exception& error) {
    Die(std::string("connecting the ranks: ") + error.what());
  }
  return baseline;
}

GlooBaseline::~GlooBaseline() = default;

double GlooBaseline::MedianRoundTrip(char* buffer, int64_t bytes, int calls) {
  if (rank_ > 1) return 0;
  auto unbound = state_->context->createUnboundBuffer(buffer, static_cast<size_t>(bytes));
  const int peer = 1 - rank_;
  std::vector<double> times;
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (rank_ == 0) {
      unbound->send(peer, /*slot=*/i);
      unbound->waitSend();
      unbound->recv(peer, /*slot=*/i);
      unbound->waitRecv();
    } else {
      unbound->recv(peer, /*slot=*/i);
      unbound->waitRecv();
      unbound->send(peer, /*slot=*/i);
      unbound->waitSend();
    }
    if (i >= 3) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return rank_ == 0 ? Median(times) : 0.0;
}

double GlooBaseline::MedianAllReduce(const float* input, float* data, float* output, int64_t count, int calls,
                                     bool halving_doubling, bool time_copies) {
  std::unique_ptr<gloo::Algorithm> algorithm;
  const std::vector<float*> pointers = {data};
  if (halving_doubling)
    algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(state_->context, pointers, static_cast<int>(count));
  else
    algorithm = std::make_unique<gloo::AllreduceRing<float>>(state_->context, pointers, static_cast<int>(count));
  std::vector<double> times;
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  for (int i = 0; i < calls; ++i) {
    if (!time_copies) std::memcpy(data, input, bytes);
    const auto start = std::chrono::steady_clock::now();
    if (time_copies) std::memcpy(data, input, bytes);
    algorithm->run();
    if (time_copies) std::memcpy(output, data, bytes);
    if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return Median(times);
}

#else  // no Gloo

struct GlooBaseline::State {};
bool GlooBaseline::Available() { return false; }
std::unique_ptr<GlooBaseline> GlooBaseline::Connect(int, int, const std::string&) {
  Die("built without Gloo (install libgloo-dev and reconfigure)");
}
GlooBaseline::~GlooBaseline() = default;
double GlooBaseline::MedianRoundTrip(char*, int64_t, int) { return 0; }
double GlooBaseline::MedianAllReduce(const float*, float*, float*, int64_t, int, bool, bool) { return 0; }

#endif

}  // namespace actorflow_bench
