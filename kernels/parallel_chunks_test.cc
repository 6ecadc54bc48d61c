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

#include "actors/call_wait.h"
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

// Waits (up to 5 s) until every helper has slept for 2 ms, so the next job comes alone. (A helper
// counts itself asleep just before it waits, and may find a job then: seen twice, 2 ms apart.)
bool HelpersAsleep() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    if (ParallelChunksSleepingHelpers() < ParallelChunksHelpers()) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (ParallelChunksSleepingHelpers() == ParallelChunksHelpers()) return true;
  }
  return false;
}

// A short job that comes alone leaves sleeping helpers asleep (its chunks still all run); one
// that follows another at once wakes them; a long job (the default) always wakes them.
TEST(ParallelChunks, ShortJobsWakeHelpersOnlyInAStream) {
  WithTimeout([] {
    std::atomic<int> runs{0};
    auto body = [&](int) { runs.fetch_add(1); };
    ParallelChunks(2, 2, body);  // at least one helper exists
    ASSERT_GE(ParallelChunksHelpers(), 1);
    bool stream_seen = false;
    for (int attempt = 0; attempt < 20 && !stream_seen; ++attempt) {
      ASSERT_TRUE(HelpersAsleep()) << "the helpers did not go to sleep within 5 s";
      const int64_t before = ParallelChunksWakeUps();
      runs = 0;
      ParallelChunks(2, 2, body, WakeHelpers::kInStream);
      EXPECT_EQ(runs.load(), 2);
      EXPECT_EQ(ParallelChunksWakeUps(), before) << "a short job after 2 ms idle woke the helpers";
      const auto alone_end = std::chrono::steady_clock::now();
      ParallelChunks(2, 2, body, WakeHelpers::kInStream);
      const auto stream_end = std::chrono::steady_clock::now();
      const bool woke = ParallelChunksWakeUps() == before + 1;
      // Within a helper's spin time (100 us) of the previous job this is a stream. A test
      // thread descheduled before the job decided (a loaded host) makes the try inconclusive.
      if (woke || stream_end - alone_end < std::chrono::microseconds(50)) {
        stream_seen = true;
        EXPECT_TRUE(woke) << "the second short job in a row did not wake the helpers";
      }
      EXPECT_EQ(runs.load(), 4);
    }
    EXPECT_TRUE(stream_seen) << "no two jobs ran within 50 us of each other in 20 attempts";
    ASSERT_TRUE(HelpersAsleep());
    const int64_t before = ParallelChunksWakeUps();
    ParallelChunks(2, 2, body);
    EXPECT_EQ(ParallelChunksWakeUps(), before + 1) << "a long job after idle did not wake the helpers";
  });
}

// A caller polling for its iteration (CallWait) takes a helper's share of a split job: the
// chunk the job's owner leaves runs on the waiting thread. A helper that was going to sleep as
// the job came may take it first (a loaded host), so the try is repeated; with the caller's
// assist off (ACTORFLOW_CALLER_ASSIST=0) no try succeeds.
TEST(ParallelChunks, APollingCallerTakesAHelpersShare) {
  WithTimeout([] {
    std::atomic<int> warm{0};
    auto count = [&](int) { warm.fetch_add(1); };
    ParallelChunks(2, 2, count);  // at least one helper exists
    bool caller_took_it = false;
    for (int attempt = 0; attempt < 20 && !caller_took_it; ++attempt) {
      ASSERT_TRUE(HelpersAsleep()) << "the helpers did not go to sleep within 5 s";
      std::atomic<bool> owner_in{false}, second_done{false};
      std::atomic<std::thread::id> second_chunk{};
      auto body = [&](int chunk) {
        if (chunk == 1) {
          second_chunk = std::this_thread::get_id();
          second_done = true;
          return;
        }
        // The owner's chunk holds the job open until another thread took chunk 1 (bounded).
        owner_in = true;
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!second_done && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      };
      CallWait wait;
      Completion done = wait.completion();
      std::thread owner([&] {
        ParallelChunks(2, 2, body, WakeHelpers::kInStream);  // a short job after idle wakes nobody
        done(0, Status::Ok());
      });
      while (!owner_in) std::this_thread::yield();  // the job is published: the caller starts polling
      EXPECT_TRUE(wait.Wait().ok());
      owner.join();
      caller_took_it = second_chunk.load() == std::this_thread::get_id();
    }
    EXPECT_TRUE(caller_took_it) << "in 20 tries the second chunk never ran on the polling caller";
  });
}

}  // namespace
}  // namespace actorflow::testing
