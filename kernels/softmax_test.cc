#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(Softmax, ForwardMatchesFormula) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    HostTensor x = HostTensor::Of({3, 5}, dtype, Ramp(15));
    HostTensor p = Run1("softmax", {x}), lp = Run1("log_softmax", {x});
    for (int64_t r = 0; r < 3; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < 5; ++j) sum += std::exp(x.at(r * 5 + j));
      for (int64_t j = 0; j < 5; ++j) {
        EXPECT_NEAR(p.at(r * 5 + j), std::exp(x.at(r * 5 + j)) / sum, 1e-6);
        EXPECT_NEAR(lp.at(r * 5 + j), x.at(r * 5 + j) - std::log(sum), 1e-6);
      }
    }
  }
}

// Any axis: every (outer, inner) fibre along the axis sums to one, and log_softmax is its log.
TEST(Softmax, AnyAxis) {
  const Shape shape{2, 3, 4};
  HostTensor x = F64(shape, Ramp(24, 0.9));
  for (int64_t axis : {0, 1, 2, -2}) {
    Attrs attrs{{"axis", axis}};
    HostTensor p = Run1("softmax", {x}, attrs), lp = Run1("log_softmax", {x}, attrs);
    const int64_t a = axis < 0 ? axis + 3 : axis;
    int64_t stride = 1;
    for (int64_t d = a + 1; d < 3; ++d) stride *= shape[d];
    for (int64_t i = 0; i < 24; ++i) {
      // The fibre through element i along `a`: its first element, then every `stride`.
      const int64_t first = i - ((i / stride) % shape[a]) * stride;
      double sum = 0;
      for (int64_t j = 0; j < shape[a]; ++j) sum += std::exp(x.at(first + j * stride));
      EXPECT_NEAR(p.at(i), std::exp(x.at(i)) / sum, 1e-12) << "axis " << axis << " element " << i;
      EXPECT_NEAR(lp.at(i), x.at(i) - std::log(sum), 1e-12) << "axis " << axis << " element " << i;
    }
    EXPECT_LT(Grad("softmax", {x}, attrs, {0}), kGradTol) << axis;
    EXPECT_LT(Grad("log_softmax", {x}, attrs, {0}), kGradTol) << axis;
  }
  EXPECT_NE(ErrorOf("softmax", {x}, Attrs{{"axis", int64_t{3}}}).find("axis"), std::string::npos);
}

TEST(Softmax, SparseCrossEntropyForward) {
  HostTensor logits = F32({2, 3}, {1, 2, 3, 0, 0, 5});
  for (HostTensor labels : {I32({2}, {2, 0}), I64({2}, {2, 0})}) {
    auto out = RunOp("sparse_softmax_cross_entropy", {labels, logits}, {});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_NEAR(out.value()[0].at(0), -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3))), 1e-5);
    EXPECT_NEAR(out.value()[0].at(1), -(0 - std::log(2 + std::exp(5))), 1e-5);
    EXPECT_NEAR(out.value()[1].at(5), std::exp(5) / (2 + std::exp(5)), 1e-5);  // prob
  }
  EXPECT_NE(ErrorOf("sparse_softmax_cross_entropy", {I32({2}, {2, 7}), logits}).find("label 7"), std::string::npos);
  EXPECT_NE(ErrorOf("sparse_softmax_cross_entropy", {I32({3}, {0, 1, 2}), logits}).find("labels must have shape (2,)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sparse_softmax_cross_entropy", {F32({2}), logits}).find("int32 or int64"), std::string::npos);
}

// The compiler's fusion of the loss and its gradient: loss equal to the forward op's and dlogits
// to the gradient op's (fed the forward's prob), bit for bit, both dtypes and label types.
TEST(Softmax, SparseCrossEntropyWithGradEqualsTheTwoOps) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (bool labels64 : {false, true}) {
      const std::vector<double> label_values = {3, 0, 9, 4, 4, 1, 7};
      HostTensor labels = labels64 ? I64({7}, label_values) : I32({7}, label_values);
      HostTensor logits = HostTensor::Of({7, 10}, dtype, Ramp(70, 1.7));
      HostTensor dloss = HostTensor::Of({7}, dtype, Positive(7));
      auto forward = RunOp("sparse_softmax_cross_entropy", {labels, logits}, {});
      ASSERT_TRUE(forward.ok()) << forward.status().ToString();
      HostTensor dlogits = Run1("sparse_softmax_cross_entropy_grad", {labels, forward.value()[1], dloss});
      auto fused = RunOp("sparse_softmax_cross_entropy_with_grad", {labels, logits, dloss}, {});
      ASSERT_TRUE(fused.ok()) << fused.status().ToString();
      for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(fused.value()[0].at(i), forward.value()[0].at(i)) << "loss " << i;
      for (int64_t i = 0; i < 70; ++i) EXPECT_EQ(fused.value()[1].at(i), dlogits.at(i)) << "dlogits " << i;
    }
  HostTensor logits = F32({2, 3});
  EXPECT_NE(ErrorOf("sparse_softmax_cross_entropy_with_grad", {I32({2}, {2, 3}), logits, F32({2})}).find("label 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sparse_softmax_cross_entropy_with_grad", {I32({2}, {2, 0}), logits, F32({3})}).find("dloss must be"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sparse_softmax_cross_entropy_with_grad", {F32({2}), logits, F32({2})}).find("int32 or int64"),
            std::string::npos);
}

TEST(Softmax, Gradients) {
  EXPECT_LT(Grad("softmax", {F64({3, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("log_softmax", {F64({3, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("sparse_softmax_cross_entropy", {I32({3}, {0, 4, 2}), F64({3, 5})}, {}, {1}, /*weighted_outputs=*/1),
            kGradTol);
  EXPECT_LT(Grad("sparse_softmax_cross_entropy", {I64({3}, {1, 0, 3}), F64({3, 5})}, {}, {1}, /*weighted_outputs=*/1),
            kGradTol);
}

}  // namespace
}  // namespace actorflow::testing
