// Shared by the runtime's test binaries: bounded waits, and a guard that fails the binary when
// a Runtime's shutdown fallback (after shutdown_timeout) fired unexpectedly.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "actors/proto/plan.pb.h"
#include "actors/runtime.h"

namespace actorflow {
namespace testing_support {

// Tests that force the fallback on purpose add what they forced here.
inline int64_t& ExpectedForcedShutdowns() {
  static int64_t expected = 0;
  return expected;
}

class ForcedShutdownGuard : public ::testing::Environment {
 public:
  void TearDown() override {
    EXPECT_EQ(Runtime::forced_shutdown_count(), ExpectedForcedShutdowns())
        << "a Runtime shutdown timed out (see stderr)";
  }
};

inline const bool kGuardRegistered = (::testing::AddGlobalTestEnvironment(new ForcedShutdownGuard), true);

// Runs `body` on the calling thread under a watchdog: if it has not returned within `limit`,
// the test fails and the process exits (a wedged runtime cannot be torn down), so a hang is a
// failure, never a stall. (The body stays on the calling thread: CAF 0.17 must destroy an
// actor system on the thread that created it.)
template <typename Body>
void FinishesWithin(std::chrono::seconds limit, const char* what, Body body) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, limit, [&] { return done; })) {
      std::fprintf(stderr, "FAILURE: %s did not finish within %lld s; exiting\n", what,
                   static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::_Exit(1);
    }
  });
  body();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

// Plan building for runtime tests: a task with the next id, and a one-blob float32 register.
inline plan::Task* AddTask(plan::Plan& plan, const std::string& name, plan::TaskKind kind, const std::string& op = "") {
  plan::Task* t = plan.add_tasks();
  t->set_id(plan.tasks_size() - 1);
  t->set_name(name);
  t->set_kind(kind);
  t->set_op_type(op);
  return t;
}

inline plan::RegisterDesc* AddRegister(plan::Task* t, int64_t elements, int register_num) {
  plan::RegisterDesc* r = t->add_registers();
  r->set_name("out");
  r->set_register_num(register_num);
  plan::BlobDesc* b = r->add_blobs();
  b->add_shape(elements);
  b->set_dtype(plan::DT_FLOAT32);
  b->set_byte_size(elements * 4);
  return r;
}

}  // namespace testing_support
}  // namespace actorflow
