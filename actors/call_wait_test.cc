#include "actors/call_wait.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace actorflow {
namespace {

TEST(CallWait, ACompletionThatRanBeforeTheWaitIsReturnedAtOnce) {
  CallWait wait;
  wait.completion()(0, InvalidArgument("op 'x' failed"));
  const Status status = wait.Wait();
  EXPECT_EQ(status.ToString(), InvalidArgument("op 'x' failed").ToString());
}

TEST(CallWait, ALateCompletionIsWaitedForPastThePolling) {
  // Past the 200 us of polling the caller blocks; the completion still reaches it.
  CallWait wait;
  Completion done = wait.completion();
  std::thread late([&done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    done(0, Internal("late"));
  });
  const Status status = wait.Wait();
  late.join();
  EXPECT_EQ(status.ToString(), Internal("late").ToString());
}

TEST(CallWait, EachWaitOutlivesItsCompletionsTouch) {
  // A caller returns from Wait and destroys its CallWait while the completing thread may still
  // be inside the completion: the completion's last touch must come before Wait returns (the
  // sanitizer builds see a touch after). Completions immediate, a few microseconds late and
  // past the polling; every status reaches its own caller.
  for (int round = 0; round < 300; ++round) {
    auto wait = std::make_unique<CallWait>();
    Completion done = wait->completion();
    const int delay_us = round % 3 == 0 ? 0 : round % 3 == 1 ? 20 : 400;
    std::thread completing([&done, round, delay_us] {
      if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      done(round, round % 2 == 0 ? Status::Ok() : Internal("call " + std::to_string(round)));
    });
    const Status status = wait->Wait();
    wait.reset();
    completing.join();
    ASSERT_EQ(status.ok(), round % 2 == 0) << "call " << round << ": " << status.ToString();
    if (round % 2 == 1) {
      ASSERT_EQ(status.ToString(), Internal("call " + std::to_string(round)).ToString());
    }
  }
}

}  // namespace
}  // namespace actorflow
