#include "actors/job_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace actorflow {
namespace {

struct Job {
  int id = 0;
};

TEST(JobQueue, HeadIsNewestPrependedTailIsOldest) {
  JobQueue<Job> queue(4);
  Job a{1}, b{2}, c{3}, d{4};
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.take_head(), nullptr);
  EXPECT_EQ(queue.take_tail(), nullptr);
  queue.prepend(&a);  // [a]
  queue.prepend(&b);  // [b a]
  queue.append(&c);   // [b a c]
  queue.prepend(&d);  // [d b a c]
  EXPECT_EQ(queue.size(), 4u);
  EXPECT_EQ(queue.take_head(), &d);
  EXPECT_EQ(queue.take_tail(), &c);
  EXPECT_EQ(queue.take_tail(), &a);
  EXPECT_EQ(queue.take_head(), &b);
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.take_head(), nullptr);
  EXPECT_EQ(queue.take_tail(), nullptr);
}

// Growth with the counters wrapped below zero (prepends first) and mixed ends keeps the order.
TEST(JobQueue, GrowingKeepsTheOrder) {
  JobQueue<Job> queue(2);
  std::vector<Job> jobs(1000);
  for (int i = 0; i < 1000; ++i) jobs[i].id = i;
  // Even ids prepended, odd ids appended: head to tail 998 996 ... 2 0 1 3 ... 999.
  for (int i = 0; i < 1000; ++i) {
    if (i % 2 == 0) queue.prepend(&jobs[i]);
    else queue.append(&jobs[i]);
  }
  ASSERT_EQ(queue.size(), 1000u);
  for (int i = 998; i >= 0; i -= 2) {
    Job* job = queue.take_head();
    ASSERT_NE(job, nullptr);
    EXPECT_EQ(job->id, i);
  }
  for (int i = 999; i >= 1; i -= 2) {
    Job* job = queue.take_tail();
    ASSERT_NE(job, nullptr);
    EXPECT_EQ(job->id, i);
  }
  EXPECT_TRUE(queue.empty());
}

// One owner putting and taking at the head, appenders and thieves at the tail: every job is
// taken exactly once, none is lost, none comes twice.
TEST(JobQueue, EveryJobIsTakenOnceUnderConcurrentThieves) {
  constexpr int kOwnerJobs = 200000, kAppenderJobs = 100000, kThieves = 2;
  JobQueue<Job> queue;
  std::vector<Job> jobs(kOwnerJobs + kAppenderJobs);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].id = static_cast<int>(i);
  std::vector<std::atomic<int>> taken(jobs.size());
  std::atomic<int> total{0};
  auto take = [&](Job* job) {
    taken[job->id].fetch_add(1, std::memory_order_relaxed);
    total.fetch_add(1, std::memory_order_relaxed);
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto done = [&] {
    return total.load() == static_cast<int>(jobs.size()) || std::chrono::steady_clock::now() > deadline;
  };
  std::vector<std::thread> threads;
  threads.emplace_back([&] {  // the owner: pushes in bursts, takes some back
    for (int i = 0; i < kOwnerJobs; ++i) {
      queue.prepend(&jobs[i]);
      if (i % 3 == 0)
        if (Job* job = queue.take_head()) take(job);
    }
    while (!done())
      if (Job* job = queue.take_head()) take(job);
  });
  threads.emplace_back([&] {  // another thread appending (a message from outside the workers)
    for (int i = 0; i < kAppenderJobs; ++i) queue.append(&jobs[kOwnerJobs + i]);
  });
  for (int t = 0; t < kThieves; ++t)
    threads.emplace_back([&] {
      while (!done())
        if (Job* job = queue.take_tail()) take(job);
    });
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(total.load(), static_cast<int>(jobs.size())) << "jobs lost (or the 60 s deadline passed)";
  for (size_t i = 0; i < jobs.size(); ++i) ASSERT_EQ(taken[i].load(), 1) << "job " << i;
  EXPECT_TRUE(queue.empty());
}

}  // namespace
}  // namespace actorflow
