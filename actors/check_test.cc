// CHECK aborts with file:line and the message; StatusOr::value() of an error CHECK-fails.
#include "actors/check.h"

#include <gtest/gtest.h>

#include <memory>

#include "actors/status.h"

namespace actorflow {
namespace {

TEST(CheckDeathTest, CheckPrintsFileLineConditionAndMessage) {
  int registers = 2;
  EXPECT_DEATH(AF_CHECK(registers > 3) << "register count of '" << "relu" << "'",
               "check_test.cc:[0-9]+: CHECK failed: registers > 3: register count of 'relu'");
}

TEST(CheckDeathTest, BinaryChecksPrintBothValues) {
  int a = 3, b = 4;
  EXPECT_DEATH(AF_CHECK_EQ(a, b) << "acks", "CHECK failed: a == b \\(3 vs 4\\): acks");
  EXPECT_DEATH(AF_CHECK_GT(a, b), "CHECK failed: a > b \\(3 vs 4\\)");
}

TEST(CheckDeathTest, CheckOkPrintsTheStatus) {
  EXPECT_DEATH(AF_CHECK_OK(InvalidArgument("shape (2, 3) is wrong")), "is OK: shape \\(2, 3\\) is wrong");
}

TEST(CheckDeathTest, ValueOfAnErrorCheckFailsWithItsMessage) {
  StatusOr<int> error = NotFound("no op named 'w'");
  EXPECT_DEATH((void)error.value(), "value\\(\\) of a StatusOr holding an error: no op named 'w'");
  StatusOr<std::unique_ptr<int>> moved = Internal("gone");
  EXPECT_DEATH((void)std::move(moved).value(), "holding an error: gone");
}

TEST(CheckDeathTest, StatusOrFromOkStatusCheckFails) {
  EXPECT_DEATH(StatusOr<int>{Status::Ok()}, "StatusOr constructed from an OK status");
}

TEST(Check, PassingChecksDoNothing) {
  int a = 1;
  AF_CHECK(a == 1) << "never printed";
  AF_CHECK_EQ(a, 1);
  AF_CHECK_LE(a, 2);
  AF_CHECK_OK(Status::Ok());
  StatusOr<int> value = 7;
  EXPECT_EQ(value.value(), 7);
  EXPECT_EQ(*value, 7);
}

}  // namespace
}  // namespace actorflow
