#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

using Ints = std::vector<int64_t>;

TEST(ShapeOps, ReshapeFlattenIdentity) {
  HostTensor x = F32({2, 3, 4});
  HostTensor r = Run1("reshape", {x}, Attrs{{"shape", Ints{4, -1}}});
  EXPECT_EQ(r.desc.shape, (Shape{4, 6}));
  EXPECT_EQ(r.at(23), x.at(23));
  EXPECT_NE(ErrorOf("reshape", {x}, Attrs{{"shape", Ints{5, -1}}}).find("cannot reshape (2, 3, 4)"), std::string::npos);
  EXPECT_NE(ErrorOf("reshape", {x}, Attrs{{"shape", Ints{-1, -1}}}).find("more than one -1"), std::string::npos);
  EXPECT_EQ(Run1("flatten", {x}, Attrs{{"start_dim", int64_t{1}}}).desc.shape, (Shape{2, 12}));
  EXPECT_EQ(Run1("flatten", {x}).desc.shape, (Shape{24}));
  EXPECT_EQ(Run1("flatten", {x}, Attrs{{"start_dim", int64_t{0}}, {"end_dim", int64_t{1}}}).desc.shape, (Shape{6, 4}));
  EXPECT_EQ(Run1("identity", {x}).at(5), x.at(5));
}

TEST(ShapeOps, TransposeMatchesIndexMap) {
  HostTensor x = F32({2, 3, 4});
  HostTensor y = Run1("transpose", {x}, Attrs{{"perm", Ints{2, 0, 1}}});
  ASSERT_EQ(y.desc.shape, (Shape{4, 2, 3}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(y.at((k * 2 + i) * 3 + j), x.at((i * 3 + j) * 4 + k));
  HostTensor ints = Run1("transpose", {I64({2, 2}, {1, 2, 3, 4})}, Attrs{{"perm", Ints{1, 0}}});
  EXPECT_EQ(ints.at(1), 3);
  EXPECT_NE(ErrorOf("transpose", {x}, Attrs{{"perm", Ints{0, 0, 1}}}).find("not a permutation"), std::string::npos);
}

TEST(ShapeOps, ConcatAndSlice) {
  HostTensor a = F32({2, 2}), b = F32({2, 3}, Ramp(6, 3.0));
  HostTensor c = Run1("concat", {a, b}, Attrs{{"axis", int64_t{1}}});
  ASSERT_EQ(c.desc.shape, (Shape{2, 5}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(c.at(i * 5 + j), a.at(i * 2 + j));
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(c.at(i * 5 + 2 + j), b.at(i * 3 + j));
  }
  EXPECT_NE(ErrorOf("concat", {a, F32({3, 3})}, Attrs{{"axis", int64_t{1}}}).find("input 1 is float32(3, 3)"), std::string::npos);

  HostTensor x = F32({4, 6});
  HostTensor s = Run1("slice", {x}, Attrs{{"begin", Ints{1, -5}}, {"end", Ints{100, 6}}, {"stride", Ints{2, 2}}});
  ASSERT_EQ(s.desc.shape, (Shape{2, 3}));  // rows 1,3; cols 1,3,5
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(s.at(i * 3 + j), x.at((1 + 2 * i) * 6 + 1 + 2 * j));
  EXPECT_NE(ErrorOf("slice", {x}, Attrs{{"begin", Ints{1}}}).find("has 1 entries but x has rank 2"), std::string::npos);
}

TEST(ShapeOps, Gradients) {
  EXPECT_LT(Grad("reshape", {F64({2, 6})}, Attrs{{"shape", Ints{3, -1}}}, {0}), kGradTol);
  EXPECT_LT(Grad("flatten", {F64({2, 3, 2})}, Attrs{{"start_dim", int64_t{1}}}, {0}), kGradTol);
  EXPECT_LT(Grad("identity", {F64({3})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("transpose", {F64({2, 3, 4})}, Attrs{{"perm", Ints{1, 2, 0}}}, {0}), kGradTol);
  EXPECT_LT(Grad("concat", {F64({2, 2}), F64({2, 3}), F64({2, 1})}, Attrs{{"axis", int64_t{-1}}}, {0, 1, 2}), kGradTol);
  EXPECT_LT(Grad("slice", {F64({4, 5})}, Attrs{{"begin", Ints{1, 0}}, {"end", Ints{4, 5}}, {"stride", Ints{2, 3}}}, {0}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing
