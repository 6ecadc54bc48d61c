#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(IndexOps, Argmax) {
  HostTensor x = F32({2, 3}, {1, 5, 2, 7, 0, 7});
  HostTensor last = Run1("argmax", {x});
  ASSERT_EQ(last.desc, (TensorDesc{{2}, DType::kInt64}));
  EXPECT_EQ(last.at(0), 1);
  EXPECT_EQ(last.at(1), 0);  // first maximum wins
  HostTensor first = Run1("argmax", {x}, Attrs{{"axis", int64_t{0}}});
  EXPECT_EQ(first.desc.shape, (Shape{3}));
  EXPECT_EQ(first.at(0), 1);
  EXPECT_EQ(first.at(1), 0);
  EXPECT_NE(ErrorOf("argmax", {x}, Attrs{{"axis", int64_t{2}}}).find("axis 2 is out of range"), std::string::npos);
}

TEST(IndexOps, OneHot) {
  HostTensor y = Run1("one_hot", {I32({3}, {2, 0, 1})}, Attrs{{"depth", int64_t{4}}, {"on_value", 5.0}, {"off_value", -1.0}});
  ASSERT_EQ(y.desc, (TensorDesc{{3, 4}, DType::kFloat32}));
  const int64_t hot[] = {2, 0, 1};
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(y.at(i * 4 + j), j == hot[i] ? 5 : -1);
  HostTensor z = Run1("one_hot", {I64({1}, {3})}, Attrs{{"depth", int64_t{4}}, {"dtype", std::string("int32")}});
  EXPECT_EQ(z.desc.dtype, DType::kInt32);
  EXPECT_EQ(z.at(3), 1);
  EXPECT_NE(ErrorOf("one_hot", {I32({1}, {4})}, Attrs{{"depth", int64_t{4}}}).find("index 4"), std::string::npos);
}

TEST(IndexOps, CastAndGradient) {
  HostTensor x = F32({4}, {1.7, -2.2, 3, 0.4});
  HostTensor i = Run1("cast", {x}, Attrs{{"dtype", std::string("int32")}});
  EXPECT_EQ(i.desc.dtype, DType::kInt32);
  EXPECT_EQ(i.at(0), 1);
  EXPECT_EQ(i.at(1), -2);
  HostTensor d = Run1("cast", {i}, Attrs{{"dtype", std::string("float64")}});
  EXPECT_EQ(d.at(2), 3.0);
  std::string e = ErrorOf("cast", {x}, Attrs{{"dtype", std::string("float16")}});
  EXPECT_NE(e.find("valid values: float32"), std::string::npos) << e;
  EXPECT_LT(Grad("cast", {F64({3})}, Attrs{{"dtype", std::string("float64")}}, {0}), kGradTol);
}

TEST(IndexOps, GatherFlatAndGradient) {
  HostTensor x = F64({2, 3}, {10, 11, 12, 13, 14, 15});
  HostTensor out = Run1("gather_flat", {x, I64({2, 2}, {5, 0, 5, 2})});
  ASSERT_EQ(out.desc.shape, (Shape{2, 2}));
  EXPECT_EQ(out.at(0), 15);
  EXPECT_EQ(out.at(1), 10);
  EXPECT_EQ(out.at(3), 12);
  // Repeated indices add their gradients up.
  HostTensor dx = Run1("gather_flat_grad", {F64({3}, {1, 2, 4}), I64({3}, {1, 1, 3}), x});
  ASSERT_EQ(dx.desc.shape, (Shape{2, 3}));
  EXPECT_EQ(dx.at(1), 3);
  EXPECT_EQ(dx.at(3), 4);
  EXPECT_EQ(dx.at(0), 0);
  EXPECT_LT(Grad("gather_flat", {F64({4, 3}), I64({5}, {11, 0, 4, 4, 7})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("gather_flat_grad", {F64({3}), I64({3}, {2, 0, 2}), F64({2, 2})}, {}, {0}), kGradTol);
  EXPECT_NE(ErrorOf("gather_flat", {x, I64({2}, {1, 6})}).find("index 6 at position 1 is out of range [0, 6)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("gather_flat", {x, I64({1}, {-1})}).find("index -1"), std::string::npos);
  EXPECT_NE(ErrorOf("gather_flat", {x, I32({1}, {0})}).find("indices must be int64"), std::string::npos);
}

}  // namespace
}  // namespace actorflow::testing
