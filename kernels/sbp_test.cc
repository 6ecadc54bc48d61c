#include "kernels/sbp.h"

#include <gtest/gtest.h>

#include "kernels/op_registry.h"

namespace actorflow {
namespace {

TEST(SbpTest, ParsesAndPrintsSignatures) {
  SbpSignature s = ParseSbpSignature("S(0),B->S(1),P (groups=1)").value();
  ASSERT_EQ(s.inputs.size(), 2u);
  ASSERT_EQ(s.outputs.size(), 2u);
  EXPECT_EQ(s.inputs[0], Sbp::Split(0));
  EXPECT_EQ(s.inputs[1], Sbp::Broadcast());
  EXPECT_EQ(s.outputs[0], Sbp::Split(1));
  EXPECT_EQ(s.outputs[1], Sbp::PartialSum());
  EXPECT_EQ(s.condition, "(groups=1)");
  EXPECT_EQ(s.ToString(), "S(0),B->S(1),P (groups=1)");
  SbpSignature each = ParseSbpSignature("S(i),...->").value();
  EXPECT_EQ(each.inputs[0].axis, Sbp::kEachAxis);
  EXPECT_TRUE(each.repeat_last_input);
  EXPECT_TRUE(each.outputs.empty());
  EXPECT_TRUE(ParseSbpSignature("->B").value().inputs.empty());
  auto bad = ParseSbpSignature("S(0),Q->B");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("got 'Q'"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseSbpSignature("S(0)").ok());
  // Arity: two listed inputs do not fit a one-input op; "..." fits any count.
  EXPECT_FALSE(ValidateSbpSignature(ParseSbpSignature("B,B->B").value(), 1, false, 1).ok());
  EXPECT_FALSE(ValidateSbpSignature(ParseSbpSignature("B->B,B").value(), 1, false, 1).ok());
  EXPECT_TRUE(ValidateSbpSignature(ParseSbpSignature("B,...->").value(), 5, false, 0).ok());
  EXPECT_TRUE(ValidateSbpSignature(ParseSbpSignature("S(0),S(0)->S(0)").value(), 1, true, 1).ok());
}

TEST(SbpTest, BalancedSplitGivesTheRemainderToTheFirstParts) {
  EXPECT_EQ(BalancedSplit(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(BalancedSplit(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(BalancedSplit(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(BalancedSplit(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(SbpTest, PhysicalShapes) {
  const Shape logical = {7, 5};
  std::vector<int64_t> rows;
  for (int64_t d = 0; d < 3; ++d) rows.push_back(PhysicalShape(logical, Sbp::Split(0), 3, d).value()[0]);
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(PhysicalShape(logical, Sbp::Split(1), 3, 2).value(), (Shape{7, 1}));
  EXPECT_EQ(PhysicalShape(logical, Sbp::Broadcast(), 3, 1).value(), logical);
  EXPECT_EQ(PhysicalShape(logical, Sbp::PartialSum(), 3, 1).value(), logical);
  auto bad_axis = PhysicalShape(logical, Sbp::Split(2), 3, 0);
  ASSERT_FALSE(bad_axis.ok());
  EXPECT_NE(bad_axis.status().message().find("rank-2"), std::string::npos) << bad_axis.status().message();
  EXPECT_FALSE(PhysicalShape(logical, Sbp::Split(Sbp::kEachAxis), 3, 0).ok());
  EXPECT_FALSE(PhysicalShape(logical, Sbp::Split(0), 3, 3).ok());
  EXPECT_FALSE(PhysicalShape(logical, Sbp::Split(0), 0, 0).ok());
}

}  // namespace
}  // namespace actorflow
