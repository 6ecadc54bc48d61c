#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(Misc, ConstantAndLikes) {
  HostTensor c = Run1("constant", {}, Attrs{{"shape", std::vector<int64_t>{2, 3}}, {"value", 0.25}});
  ASSERT_EQ(c.desc, (TensorDesc{{2, 3}, DType::kFloat32}));
  EXPECT_EQ(c.at(5), 0.25);
  HostTensor i = Run1("constant", {}, Attrs{{"shape", std::vector<int64_t>{1}}, {"value", 7.0}, {"dtype", std::string("int64")}});
  EXPECT_EQ(i.desc.dtype, DType::kInt64);
  EXPECT_EQ(i.at(0), 7);
  EXPECT_NE(ErrorOf("constant", {}, Attrs{{"shape", std::vector<int64_t>{1}}, {"dtype", std::string("half")}}).find("'dtype'"),
            std::string::npos);
  HostTensor x = F64({3});
  EXPECT_EQ(Run1("ones_like", {x}).at(2), 1.0);
  EXPECT_EQ(Run1("zeros_like", {x}).at(2), 0.0);
}

TEST(Registry, UnknownOpAndAttrErrors) {
  RegisterAllOps();
  auto missing = OpRegistry::Global().Find("matmull");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("did you mean: matmul"), std::string::npos) << missing.status().message();
  Attrs attrs{{"n", int64_t{3}}, {"s", std::string("x")}};
  EXPECT_NE(attrs.GetString("n").status().message().find("'n' must be a string"), std::string::npos);
  EXPECT_NE(attrs.GetInt("m").status().message().find("missing attribute 'm'"), std::string::npos);
  EXPECT_EQ(attrs.GetFloat("n").value(), 3.0);
  // Every differentiable op documents itself.
  for (const std::string& type : OpRegistry::Global().Types()) EXPECT_FALSE(OpRegistry::Global().Find(type).value()->doc.empty()) << type;
}

}  // namespace
}  // namespace actorflow::testing
