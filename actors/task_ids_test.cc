#include "actors/task_ids.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace actorflow {
namespace {

Status BuildFrom(TaskIds& ids, const std::vector<int64_t>& of) {
  return ids.Build(static_cast<int>(of.size()), [&](int i) { return of[static_cast<size_t>(i)]; });
}

TEST(TaskIds, PositionsOfIdsInOrderAndOutOfOrder) {
  TaskIds ids;
  ASSERT_TRUE(BuildFrom(ids, {0, 1, 2, 3}).ok());
  EXPECT_TRUE(ids.dense());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ids.Find(i), i);
  ASSERT_TRUE(BuildFrom(ids, {5, 2, 9, 0}).ok());  // rebuilt: the old ids are gone
  EXPECT_TRUE(ids.dense());
  EXPECT_EQ(ids.Find(5), 0);
  EXPECT_EQ(ids.Find(2), 1);
  EXPECT_EQ(ids.Find(9), 2);
  EXPECT_EQ(ids.Find(0), 3);
  EXPECT_EQ(ids.Find(1), -1);
  EXPECT_EQ(ids.Find(3), -1);
}

TEST(TaskIds, UnknownIdsAreMinusOneInBothLayouts) {
  TaskIds dense, sparse;
  ASSERT_TRUE(BuildFrom(dense, {0, 1}).ok());
  ASSERT_TRUE(BuildFrom(sparse, {1000000007, -4}).ok());
  EXPECT_TRUE(dense.dense());
  EXPECT_FALSE(sparse.dense());
  for (int64_t unknown : {int64_t{-1}, int64_t{2}, int64_t{17}, int64_t{1} << 40}) {
    EXPECT_EQ(dense.Find(unknown), -1) << unknown;
    EXPECT_EQ(sparse.Find(unknown), -1) << unknown;
  }
  EXPECT_EQ(sparse.Find(1000000007), 0);
  EXPECT_EQ(sparse.Find(-4), 1);
  TaskIds empty;
  ASSERT_TRUE(BuildFrom(empty, {}).ok());
  EXPECT_EQ(empty.Find(0), -1);
}

TEST(TaskIds, DuplicateIdsAreRefusedNamingTheId) {
  TaskIds ids;
  Status dense = BuildFrom(ids, {0, 3, 3});
  EXPECT_FALSE(dense.ok());
  EXPECT_NE(dense.message().find("duplicate task id 3"), std::string::npos) << dense.message();
  Status sparse = BuildFrom(ids, {1 << 30, -7, 1 << 30});
  EXPECT_FALSE(sparse.ok());
  EXPECT_NE(sparse.message().find("duplicate task id 1073741824"), std::string::npos) << sparse.message();
}

}  // namespace
}  // namespace actorflow
