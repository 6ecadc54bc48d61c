#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

// out[i] vs op(x[bx(i)], y[by(i)]) where bx/by map an output index to the broadcast sources.
void CheckBinary(const std::string& type, const Shape& xs, const Shape& ys, double (*f)(double, double)) {
  HostTensor x = F64(xs), y = F64(ys, Positive(NumElements(ys)));
  HostTensor z = Run1(type, {x, y});
  Shape out = z.desc.shape;
  size_t rank = out.size();
  for (int64_t i = 0; i < z.desc.num_elements(); ++i) {
    auto source = [&](const Shape& s) {
      int64_t rem = i, idx = 0, stride = 1;
      for (size_t d = 0; d < rank; ++d) {
        size_t od = rank - 1 - d;
        int64_t coord = rem % out[od];
        rem /= out[od];
        if (d < s.size()) {
          int64_t sd = s[s.size() - 1 - d];
          idx += (sd == 1 ? 0 : coord) * stride;
          stride *= sd;
        }
      }
      return idx;
    };
    ASSERT_NEAR(z.at(i), f(x.at(source(xs)), y.at(source(ys))), 1e-12) << type << " at " << i;
  }
}

TEST(Elementwise, ForwardBroadcasting) {
  auto add = [](double a, double b) { return a + b; };
  auto sub = [](double a, double b) { return a - b; };
  auto mul = [](double a, double b) { return a * b; };
  auto div = [](double a, double b) { return a / b; };
  for (auto [xs, ys] : std::vector<std::pair<Shape, Shape>>{{{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3, 1}, {1, 4}},
                                                            {{2, 1, 4}, {3, 1}}, {{5}, {}}, {{}, {2, 2}}, {{2, 3, 4, 5}, {3, 1, 5}}}) {
    CheckBinary("add", xs, ys, add);
    CheckBinary("sub", xs, ys, sub);
    CheckBinary("mul", xs, ys, mul);
    CheckBinary("div", xs, ys, div);
  }
  EXPECT_NE(ErrorOf("add", {F32({2, 3}), F32({4})}).find("cannot be broadcast"), std::string::npos);
  EXPECT_NE(ErrorOf("add", {F32({2}), F64({2})}).find("float64"), std::string::npos);
}

TEST(Elementwise, IntegersAndScalars) {
  HostTensor a = I32({3}, {1, 2, 3}), b = I32({3}, {4, 5, 6});
  HostTensor s = Run1("mul", {a, b});
  EXPECT_EQ(s.at(2), 18);
  EXPECT_EQ(Run1("div", {b, a}).at(2), 2);
  EXPECT_NE(ErrorOf("div", {a, I32({3}, {1, 0, 2})}).find("division by zero"), std::string::npos);
  EXPECT_NE(ErrorOf("div", {a, I32({1}, {0})}).find("division by zero"), std::string::npos);
  HostTensor x = F32({4});
  HostTensor y = Run1("scalar_mul", {x}, Attrs{{"scalar", 2.5}});
  HostTensor z = Run1("scalar_add", {x}, Attrs{{"scalar", -1.0}});
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y.at(i), x.at(i) * 2.5, 1e-6);
    EXPECT_NEAR(z.at(i), x.at(i) - 1, 1e-6);
  }
  HostTensor n = Run1("add_n", {x, x, x});
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(n.at(i), 3 * x.at(i), 1e-6);
}

TEST(Elementwise, Gradients) {
  EXPECT_LT(Grad("add", {F64({3, 4}), F64({4})}, {}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("sub", {F64({3, 1}), F64({3, 4})}, {}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("mul", {F64({2, 3, 4}), F64({3, 1})}, {}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("div", {F64({3, 4}), F64({3, 4}, Positive(12))}, {}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("div", {F64({2, 3}), F64({3}, Positive(3))}, {}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("scalar_mul", {F64({5})}, Attrs{{"scalar", 2.5}}, {0}), kGradTol);
  EXPECT_LT(Grad("scalar_add", {F64({5})}, Attrs{{"scalar", 2.5}}, {0}), kGradTol);
  EXPECT_LT(Grad("add_n", {F64({6}), F64({6}), F64({6})}, {}, {0, 1, 2}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing
