// WithTimeout for kernel tests that start threads: a hang fails the test and ends the process
// instead of blocking the suite.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

namespace actorflow::testing {

// Runs `body` on its own thread; a hang fails the test and ends the process instead of blocking
// the suite (its threads could not be joined).
template <typename Body>
inline void WithTimeout(Body body, std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::packaged_task<void()> task(body);
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "timed out after " << limit.count() << " s";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  runner.join();
  done.get();
}

}  // namespace actorflow::testing
