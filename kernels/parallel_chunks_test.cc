// ParallelChunks: every chunk exactly once, whatever the threads and concurrent callers, and the
// helpers really take chunks. Its own executable, labelled runtime, so the TSan run covers the
// pool's hand-offs.
#include "kernels/parallel_chunks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

TEST(ParallelChunks, EveryChunkRunsExactlyOnce) {
  WithTimeout([] {
    for (int threads : {1, 2, 3, 4})
      for (int chunks : {0, 1, 2, 7, 64, 1000}) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
        for (int repeat = 0; repeat < 20; ++repeat) {
          auto body = [&](int chunk) { runs[static_cast<size_t>(chunk)].fetch_add(1); };
          ParallelChunks(chunks, threads, body);
        }
        for (int c = 0; c < chunks; ++c)
          ASSERT_EQ(runs[static_cast<size_t>(c)].load(), 20) << "threads " << threads << " chunks " << chunks << " chunk " << c;
      }
    EXPECT_GE(ParallelChunksHelpers(), 1);
  });
}

// Callers on several threads at once (actors on several workers): each call's chunks all run,
// once; a caller that finds the pool busy runs its own inline.
TEST(ParallelChunks, ConcurrentCallers) {
  WithTimeout([] {
    constexpr int kCallers = 4, kCalls = 300, kChunks = 16;
    std::vector<std::thread> callers;
    std::atomic<int> wrong{0};
    for (int caller = 0; caller < kCallers; ++caller)
      callers.emplace_back([&] {
        for (int call = 0; call < kCalls; ++call) {
          std::atomic<int> runs[kChunks] = {};
          auto body = [&](int chunk) { runs[chunk].fetch_add(1); };
          ParallelChunks(kChunks, 3, body);
          for (auto& r : runs)
            if (r.load() != 1) wrong.fetch_add(1);
        }
      });
    for (auto& t : callers) t.join();
    EXPECT_EQ(wrong.load(), 0);
  });
}

TEST(ParallelChunks, HelpersReallyRunChunks) {
  // On an idle host a helper takes some of many slow chunks; on a loaded one it may not get a
  // core in time, so only "at least one call saw a helper" over a few seconds is asserted.
  WithTimeout([] {
    const std::thread::id caller = std::this_thread::get_id();
    bool helped = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!helped && std::chrono::steady_clock::now() < until) {
      std::atomic<int> on_helper{0};
      auto body = [&](int) {
        if (std::this_thread::get_id() != caller) on_helper.fetch_add(1);
        const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
        while (std::chrono::steady_clock::now() < end) {
        }
      };
      ParallelChunks(32, 2, body);
      helped = on_helper.load() > 0;
    }
    EXPECT_TRUE(helped) << "no helper ran a chunk in 5 s";
  });
}

}  // namespace
}  // namespace actorflow::testing
