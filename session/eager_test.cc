// The eager engine: ops run at once through cached kernels, views share storage, mutable
// inputs are written in place, and backward runs the registry's gradient rules.
#include "session/eager.h"

#include <gtest/gtest.h>

#include <cmath>

#include "session/eager_autograd.h"

namespace actorflow {
namespace {

EagerTensorPtr Floats(const Shape& shape, std::vector<float> values) {
  return EagerTensor::FromBytes(TensorDesc{shape, DType::kFloat32}, values.data());
}

std::vector<float> Values(const EagerTensorPtr& t) {
  const float* p = static_cast<const float*>(t->data());
  return std::vector<float>(p, p + t->desc().num_elements());
}

EagerTensorPtr Run1(const std::string& type, const std::vector<EagerTensorPtr>& inputs, const Attrs& attrs = {}) {
  auto out = RunEagerOp(type, attrs, inputs);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.value()[0];
}

TEST(Eager, AddBroadcastsAndRunsAtOnce) {
  auto x = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto y = Floats({3}, {10, 20, 30});
  EXPECT_EQ(Values(Run1("add", {x, y})), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(Eager, PreparedOpReusesItsKernel) {
  auto op = EagerOp::Create("relu", {}).value();
  auto x = Floats({4}, {-1, 2, -3, 4});
  ASSERT_TRUE(op->Run({x}).ok());
  const int64_t builds = GetEagerKernelCacheStats().builds;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(op->Run({x}).ok());
  EXPECT_EQ(GetEagerKernelCacheStats().builds, builds) << "the same signature must not rebuild its kernel";
  // A second prepared op with the same type and attributes finds the cached kernel.
  auto again = EagerOp::Create("relu", {}).value();
  ASSERT_TRUE(again->Run({x}).ok());
  EXPECT_EQ(GetEagerKernelCacheStats().builds, builds);
  // Another shape is another kernel.
  ASSERT_TRUE(op->Run({Floats({2}, {1, -1})}).ok());
  EXPECT_EQ(GetEagerKernelCacheStats().builds, builds + 1);
}

TEST(Eager, KernelCacheIsBounded) {
  SetEagerKernelCacheCapacity(3);
  for (int n = 1; n <= 10; ++n) ASSERT_TRUE(RunEagerOp("relu", {}, {EagerTensor::Empty({{n}, DType::kFloat32}, true)}).ok());
  EXPECT_LE(GetEagerKernelCacheStats().entries, 3);
  SetEagerKernelCacheCapacity(4096);
}

TEST(Eager, ErrorsNameTheOpAndTheInputs) {
  auto x = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto y = Floats({4}, {1, 2, 3, 4});
  auto out = RunEagerOp("add", {}, {x, y});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("op 'add'"), std::string::npos) << out.status().ToString();
  EXPECT_NE(out.status().message().find("float32(2, 3)"), std::string::npos) << out.status().ToString();
  EXPECT_TRUE(RunEagerOp("add", {}, {x, x}).ok()) << "the next call works";
  EXPECT_FALSE(RunEagerOp("no_such_op", {}, {x}).ok());
  EXPECT_FALSE(RunEagerOp("relu", {}, {x, x}).ok());
}

TEST(Eager, ReshapeIsAViewOfTheSameStorage) {
  auto x = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = Run1("reshape", {x}, Attrs{{"shape", std::vector<int64_t>{3, 2}}});
  EXPECT_EQ(r->shape(), (Shape{3, 2}));
  EXPECT_EQ(r->data(), x->data());
}

TEST(Eager, MutableInputsAreWrittenInPlace) {
  auto var = Floats({3}, {1, 2, 3});
  auto grad = Floats({3}, {1, 1, 1});
  auto lr = Floats({1}, {0.5});
  auto out = RunEagerOp("sgd_update", {}, {var, grad, lr});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out.value().empty());
  EXPECT_EQ(Values(var), (std::vector<float>{0.5, 1.5, 2.5}));
}

TEST(Eager, StatefulKernelsDoNotLeakStateBetweenCalls) {
  // dropout keeps its random stream in the kernel: the same seed must give the same mask on
  // every call, whatever ran before (a cached kernel would continue its stream).
  auto x = EagerTensor::Empty({{64}, DType::kFloat32});
  x->Fill(1.0);
  Attrs attrs{{"rate", 0.5}, {"seed", int64_t{42}}};
  auto first = RunEagerOp("dropout", attrs, {x}).value();
  auto second = RunEagerOp("dropout", attrs, {x}).value();
  EXPECT_EQ(Values(first[1]), Values(second[1]));
  auto other = RunEagerOp("dropout", Attrs{{"rate", 0.5}, {"seed", int64_t{43}}}, {x}).value();
  EXPECT_NE(Values(first[1]), Values(other[1]));
}

TEST(EagerAutograd, MatmulReluSumGradients) {
  // L = sum(relu(x @ w)); dL/dw = x^T (relu'(xw)), dL/dx = relu'(xw) w^T.
  auto x = Floats({2, 2}, {1, -2, 3, 4});
  auto w = Floats({2, 2}, {0.5, -1, 1, 2});
  ASSERT_TRUE(w->SetRequiresGrad(true).ok());
  ASSERT_TRUE(x->SetRequiresGrad(true).ok());
  auto y = Run1("matmul", {x, w});
  EXPECT_FALSE(y->is_leaf());
  auto r = Run1("relu", {y});
  auto loss = Run1("reduce_sum", {r}, Attrs{{"axis", std::vector<int64_t>{}}, {"keepdims", false}});
  ASSERT_TRUE(Backward(loss, nullptr, false).ok());
  // xw = [[1*0.5-2*1, 1*-1-2*2], [3*0.5+4*1, 3*-1+4*2]] = [[-1.5, -5], [5.5, 5]]: mask [[0,0],[1,1]]
  ASSERT_TRUE(w->grad());
  EXPECT_EQ(Values(w->grad()), (std::vector<float>{3, 3, 4, 4}));
  EXPECT_EQ(Values(x->grad()), (std::vector<float>{0, 0, -0.5, 3}));
  // Freed without retain_graph: a second backward is a clear error.
  Status again = Backward(loss, nullptr, false);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("second time"), std::string::npos) << again.ToString();
}

TEST(EagerAutograd, AccumulatesAcrossUsesAndCalls) {
  auto x = Floats({3}, {1, 2, 3});
  ASSERT_TRUE(x->SetRequiresGrad(true).ok());
  // y = x * x + x: dy/dx = 2x + 1, gathered from three uses of x.
  auto y = Run1("add", {Run1("mul", {x, x}), x});
  auto loss = Run1("reduce_sum", {y}, Attrs{{"axis", std::vector<int64_t>{}}});
  ASSERT_TRUE(Backward(loss, nullptr, /*retain_graph=*/true).ok());
  EXPECT_EQ(Values(x->grad()), (std::vector<float>{3, 5, 7}));
  ASSERT_TRUE(Backward(loss, nullptr, false).ok());  // retained: runs again and accumulates
  EXPECT_EQ(Values(x->grad()), (std::vector<float>{6, 10, 14}));
}

TEST(EagerAutograd, NoHistoryWithoutGradModeOrRequiresGrad) {
  auto x = Floats({2}, {1, 2});
  auto y = Run1("relu", {x});
  EXPECT_TRUE(y->is_leaf());
  EXPECT_FALSE(y->requires_grad());
  ASSERT_TRUE(x->SetRequiresGrad(true).ok());
  SetEagerGradEnabled(false);
  auto z = Run1("relu", {x});
  SetEagerGradEnabled(true);
  EXPECT_TRUE(z->is_leaf());
  EXPECT_FALSE(Backward(z, nullptr, false).ok());
  EXPECT_FALSE(EagerTensor::Empty({{2}, DType::kInt64})->SetRequiresGrad(true).ok());
}

TEST(EagerAutograd, SharedGradientIsCopiedIntoEachLeaf) {
  // add's rule hands the same dy to both inputs; each leaf's .grad must be its own buffer.
  auto a = Floats({2}, {1, 2});
  auto b = Floats({2}, {3, 4});
  ASSERT_TRUE(a->SetRequiresGrad(true).ok());
  ASSERT_TRUE(b->SetRequiresGrad(true).ok());
  auto s = Run1("add", {a, b});
  ASSERT_TRUE(Backward(s, Floats({2}, {1, 1}), false).ok());
  EXPECT_NE(a->grad()->data(), b->grad()->data());
  a->grad()->Fill(0);
  EXPECT_EQ(Values(b->grad()), (std::vector<float>{1, 1}));
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

TEST(EagerAutograd, SavedTensorWrittenInPlaceIsRefusedWhenTheRuleReadsIt) {
  auto x = Floats({2}, {1, 2});
  auto w = Floats({2}, {3, 4});
  ASSERT_TRUE(w->SetRequiresGrad(true).ok());
  auto lr = Floats({1}, {0.1});
  // w's gradient (dy * x) reads x, not w: an update of w in place (a mutable input) is fine.
  auto y = Run1("mul", {x, w});
  ASSERT_TRUE(RunEagerOp("sgd_update", {}, {w, Floats({2}, {1, 1}), lr}).ok());
  ASSERT_TRUE(Backward(y, Floats({2}, {1, 1}), false).ok());
  EXPECT_EQ(Values(w->grad()), (std::vector<float>{1, 2}));
  // w * w reads w: the update is refused, naming the op.
  auto square = Run1("mul", {w, w});
  ASSERT_TRUE(RunEagerOp("sgd_update", {}, {w, Floats({2}, {1, 1}), lr}).ok());
  Status refused = Backward(square, Floats({2}, {1, 1}), false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("modified in place"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("op 'mul'"), std::string::npos) << refused.ToString();
  // Views share the version: a fill through a reshape view of x is seen too.
  auto z = Run1("mul", {x, w});
  auto view = Run1("reshape", {x}, Attrs{{"shape", std::vector<int64_t>{2, 1}}});
  view->Fill(0);
  EXPECT_FALSE(Backward(z, Floats({2}, {1, 1}), false).ok());
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

TEST(Eager, LargeOpsOnTheThreadBudgetGiveTheOneThreadResult) {
  // A GEMM big enough for the thread budget gives the one-thread result. (oneDNN's GEMM needs
  // the whole OpenMP team it asked for: with OpenMP's dynamic adjustment on, a team shrunk under
  // load left half of this output zero, so the engine leaves that setting alone.)
  std::vector<float> a(200 * 300), b(300 * 250);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
  auto x = Floats({200, 300}, a), y = Floats({300, 250}, b);
  SetEagerThreads(1);
  auto one = Values(Run1("matmul", {x, y}));
  SetEagerThreads(2);
  auto two = Values(Run1("matmul", {x, y}));
  SetEagerThreads(0);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) ASSERT_NEAR(one[i], two[i], 1e-4) << i;
}

}  // namespace
}  // namespace actorflow
