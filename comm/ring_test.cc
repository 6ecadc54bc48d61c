// The ring schedule run in memory: N ranks exchanging chunks by the schedule give every rank the
// sum, each rank moves 2 (N - 1) / N of the buffer, and the steps of one rank may run in any
// order (what the data plane relies on when a step's bytes arrive before the act).
#include "comm/ring.h"

#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

namespace actorflow {
namespace {

// Every rank's buffer after the all-reduce; `bytes_sent` gets each rank's sent bytes. The
// messages of each step are delivered in a random order across ranks and steps, as long as a
// chunk is sent only after it arrived (the schedule's causality).
std::vector<std::vector<float>> RunRing(const std::vector<std::vector<float>>& inputs, std::vector<int64_t>& bytes_sent,
                                        unsigned seed) {
  const int ranks = static_cast<int>(inputs.size());
  const int64_t elements = static_cast<int64_t>(inputs[0].size());
  // As the data plane runs it: outputs start as garbage (NaN), step 0 sends from the input,
  // reduce steps write output = input + received; every output element must be written.
  std::vector<std::vector<float>> buffers(ranks, std::vector<float>(inputs[0].size(), std::nanf("")));
  std::vector<RingSchedule> schedules;
  for (int p = 0; p < ranks; ++p) schedules.emplace_back(ranks, p, elements, sizeof(float));
  struct Message {
    int to, step;
    std::vector<float> payload;
  };
  std::vector<Message> in_flight;
  bytes_sent.assign(ranks, 0);
  auto send = [&](int from, int step) {
    const RingSchedule& s = schedules[from];
    const int chunk = s.SendChunk(step);
    const float* begin = (step == 0 ? inputs[from].data() : buffers[from].data()) + s.ChunkOffset(chunk) / 4;
    in_flight.push_back({(from + 1) % ranks, step, std::vector<float>(begin, begin + s.ChunkBytes(chunk) / 4)});
    bytes_sent[from] += s.ChunkBytes(chunk);
  };
  for (int p = 0; p < ranks; ++p) send(p, 0);
  std::mt19937 random(seed);
  while (!in_flight.empty()) {
    const size_t pick = std::uniform_int_distribution<size_t>(0, in_flight.size() - 1)(random);
    Message message = std::move(in_flight[pick]);
    in_flight.erase(in_flight.begin() + static_cast<long>(pick));
    const RingSchedule& s = schedules[message.to];
    const int chunk = s.ReceiveChunk(message.step);
    EXPECT_EQ(static_cast<int64_t>(message.payload.size() * 4), s.ChunkBytes(chunk));
    float* destination = buffers[message.to].data() + s.ChunkOffset(chunk) / 4;
    if (s.Reduces(message.step))
      AddInto(destination, inputs[message.to].data() + s.ChunkOffset(chunk) / 4, message.payload.data(),
              s.ChunkBytes(chunk), DType::kFloat32);
    else if (s.ChunkBytes(chunk) > 0)
      std::memcpy(destination, message.payload.data(), static_cast<size_t>(s.ChunkBytes(chunk)));
    if (message.step + 1 < s.steps()) {
      EXPECT_EQ(s.SendChunk(message.step + 1), chunk);  // the received chunk goes on
      send(message.to, message.step + 1);
    }
  }
  return buffers;
}

TEST(RingScheduleTest, EveryRankGetsTheSumAndSendsTwiceItsShareOfTheBuffer) {
  for (int ranks : {2, 3, 4, 5}) {
    for (int64_t elements : {0, 1, 2, 7, 1000, 1001}) {
      std::vector<std::vector<float>> inputs(ranks, std::vector<float>(static_cast<size_t>(elements)));
      std::vector<float> expected(static_cast<size_t>(elements), 0.f);
      for (int p = 0; p < ranks; ++p)
        for (int64_t i = 0; i < elements; ++i) {
          inputs[p][i] = static_cast<float>((p + 1) * 1000 + i);  // integers: every order sums exactly
          expected[i] += inputs[p][i];
        }
      std::vector<int64_t> sent;
      auto results = RunRing(inputs, sent, static_cast<unsigned>(ranks * 7919 + elements));
      for (int p = 0; p < ranks; ++p) {
        EXPECT_EQ(results[p], expected) << ranks << " ranks, " << elements << " elements, rank " << p;
        // 2 (N - 1) chunks, each within one element of elements / N.
        const double share = 2.0 * (ranks - 1) * elements * 4 / ranks;
        EXPECT_NEAR(static_cast<double>(sent[p]), share, 2.0 * (ranks - 1) * 4) << ranks << " ranks, rank " << p;
      }
    }
  }
}

TEST(RingScheduleTest, ChunksTileTheBufferInWholeElements) {
  RingSchedule s(3, 1, 10, 8);
  EXPECT_EQ(s.ChunkOffset(0), 0);
  EXPECT_EQ(s.ChunkBytes(0), 32);  // 10 = 4 + 3 + 3
  EXPECT_EQ(s.ChunkOffset(1), 32);
  EXPECT_EQ(s.ChunkBytes(1), 24);
  EXPECT_EQ(s.ChunkOffset(2), 56);
  EXPECT_EQ(s.ChunkBytes(2), 24);
  EXPECT_EQ(s.steps(), 4);
  EXPECT_EQ(s.SendChunk(0), 1);     // its own chunk first
  EXPECT_EQ(s.ReceiveChunk(0), 0);  // the previous rank's
  EXPECT_TRUE(s.Reduces(1));
  EXPECT_FALSE(s.Reduces(2));
}

TEST(RingScheduleTest, TwoRanksSumEveryChunkAsZeroPlusOne) {
  // Bit-identical to the one-process boxing's x_0 + x_1: values whose sum rounds.
  std::vector<std::vector<float>> inputs = {{0.1f, 1e8f, 3.3f, -7.7f, 1e-8f}, {0.2f, 1.f, 1e-3f, 7.7000001f, 1.f}};
  std::vector<int64_t> sent;
  auto results = RunRing(inputs, sent, 3);
  for (size_t i = 0; i < inputs[0].size(); ++i) {
    const float expected = inputs[0][i] + inputs[1][i];
    EXPECT_EQ(results[0][i], expected);
    EXPECT_EQ(results[1][i], expected);
  }
}

TEST(RingScheduleTest, AccumulatesFloat64) {
  std::vector<double> sum = {1.5, 2.5}, addend = {0.25, -2.5};
  AccumulateInto(sum.data(), addend.data(), 16, DType::kFloat64);
  EXPECT_EQ(sum, (std::vector<double>{1.75, 0.0}));
  std::vector<double> out(2, 9.0);
  AddInto(out.data(), sum.data(), addend.data(), 16, DType::kFloat64);
  EXPECT_EQ(out, (std::vector<double>{2.0, -2.5}));
  std::vector<float> in_place = {1.0f, 2.0f}, b = {0.5f, 0.25f};
  AddInto(in_place.data(), in_place.data(), b.data(), 8, DType::kFloat32);  // out aliasing a
  EXPECT_EQ(in_place, (std::vector<float>{1.5f, 2.25f}));
  EXPECT_TRUE(AllReduceSupports(DType::kFloat64));
  EXPECT_FALSE(AllReduceSupports(DType::kInt32));
}

}  // namespace
}  // namespace actorflow
