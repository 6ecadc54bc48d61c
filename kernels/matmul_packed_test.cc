// The matmul kernel with a right operand in oneDNN's packed layout (kernels/matmul_packed.h):
// taken when the kernel is told b only changes with a version counter (KernelInit::input_versions).
#include <atomic>
#include <cmath>
#include <cstring>

#include "kernels/matmul_packed.h"
#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

// op(a)(m,k) . op(b)(k,n) (+ bias, relu) in double.
std::vector<double> Reference(const HostTensor& a, const HostTensor& b, const HostTensor* bias, bool ta, bool tb,
                              int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a.at(ta ? p * m + i : i * k + p) * b.at(tb ? j * k + p : p * n + j);
      if (bias != nullptr) acc = std::max(0.0, acc + bias->at(j));
      c[i * n + j] = acc;
    }
  return c;
}

struct Kernel {
  KernelFn fn;
  std::vector<TensorDesc> outputs;
};

Kernel Make(const std::vector<HostTensor>& in, const Attrs& attrs, int threads,
            std::shared_ptr<const std::atomic<int64_t>> version) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  InferContext ic{{}, attrs, {}};
  for (const HostTensor& t : in) ic.inputs.push_back(t.desc);
  EXPECT_TRUE(def->infer(ic).ok());
  KernelInit init{ic.inputs, ic.outputs, attrs, threads};
  if (version) init.input_versions = {nullptr, version};
  auto kernel = def->kernel_factories.at(kCpuDevice)(init);
  EXPECT_TRUE(kernel.ok()) << kernel.status().ToString();
  return Kernel{kernel.ok() ? kernel.value() : KernelFn(), ic.outputs};
}

// Runs the kernel over `in` into an output prefilled with 1e30 (every element must be written).
HostTensor Act(Kernel& kernel, std::vector<HostTensor>& in) {
  std::vector<TensorView> iv;
  for (HostTensor& t : in) iv.push_back(t.view());
  HostTensor c = HostTensor::Of(kernel.outputs[0].shape, DType::kFloat32,
                                std::vector<double>(kernel.outputs[0].num_elements(), 1e30));
  std::vector<TensorView> ov = {c.view()};
  KernelContext ctx{&iv, &ov, 0};
  Status status = kernel.fn(ctx);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return c;
}

void ExpectNear(const HostTensor& c, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(c.desc.num_elements(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(c.at(static_cast<int64_t>(i)), want[i], 1e-4 * (1 + std::abs(want[i]))) << what << ", element " << i;
}

// Every transpose, with and without the fused bias and relu, rows split unevenly (37 rows in two
// pieces) and evenly, on one and two threads, repeated (pieces run on either thread).
TEST(MatmulPacked, EqualsTheReferenceForEveryTransposeRowSplitAndThreadCount) {
  const int64_t n = 96, k = 120;
  auto version = std::make_shared<const std::atomic<int64_t>>(0);
  for (int64_t m : {16, 37, 100})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool fuse : {false, true})
          for (int threads : {1, 2}) {
            HostTensor a = HostTensor::Of(ta ? Shape{k, m} : Shape{m, k}, DType::kFloat32, Ramp(m * k, 0.3));
            HostTensor b = HostTensor::Of(tb ? Shape{n, k} : Shape{k, n}, DType::kFloat32, Ramp(n * k, 1.5));
            HostTensor bias = HostTensor::Of({n}, DType::kFloat32, Ramp(n, 2.7));
            Attrs attrs{{"transpose_a", ta}, {"transpose_b", tb}};
            std::vector<HostTensor> in = {a, b};
            if (fuse) {
              attrs.Set("fuse_bias", true);
              attrs.Set("fuse_relu", true);
              in.push_back(bias);
            }
            Kernel kernel = Make(in, attrs, threads, version);
            const std::vector<double> want = Reference(a, b, fuse ? &bias : nullptr, ta, tb, m, n, k);
            for (int repeat = 0; repeat < 5; ++repeat)
              ExpectNear(Act(kernel, in), want,
                         "m " + std::to_string(m) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) +
                             " fuse " + std::to_string(fuse) + " threads " + std::to_string(threads));
          }
}

// The contract: b's data is read again when the version moves or b's address changes, not
// otherwise. Without a version (or with packed_weights=false) every act reads b as it is.
TEST(MatmulPacked, ReadsTheRightOperandAgainOnlyWhenItsVersionOrAddressChanges) {
  const int64_t m = 100, n = 64, k = 96;
  HostTensor a = F32({m, k}, Ramp(m * k, 0.2));
  HostTensor b0 = F32({k, n}, Ramp(k * n, 0.9)), b1 = F32({k, n}, Ramp(k * n, 2.1)), b2 = F32({k, n}, Ramp(k * n, 3.3));
  const std::vector<double> want0 = Reference(a, b0, nullptr, false, false, m, n, k),
                            want1 = Reference(a, b1, nullptr, false, false, m, n, k),
                            want2 = Reference(a, b2, nullptr, false, false, m, n, k);
  for (int threads : {1, 2}) {
    auto version = std::make_shared<std::atomic<int64_t>>(7);
    std::vector<HostTensor> in = {a, b0};
    Kernel kernel = Make(in, Attrs{}, threads, version);
    ExpectNear(Act(kernel, in), want0, "first act");
    std::memcpy(in[1].bytes.data(), b1.bytes.data(), b1.bytes.size());  // written without a bump
    ExpectNear(Act(kernel, in), want0, "b written in place, version unchanged: the packed copy");
    version->fetch_add(1);
    ExpectNear(Act(kernel, in), want1, "after the bump");
    std::vector<HostTensor> moved = {a, b2};  // another buffer, same version
    ExpectNear(Act(kernel, moved), want2, "b at another address");

    for (bool versioned : {false, true}) {
      std::vector<HostTensor> plain = {a, b0};
      Kernel unpacked = Make(plain, versioned ? Attrs{{"packed_weights", false}} : Attrs{}, threads,
                             versioned ? version : nullptr);
      ExpectNear(Act(unpacked, plain), want0, "unpacked, first act");
      std::memcpy(plain[1].bytes.data(), b1.bytes.data(), b1.bytes.size());
      ExpectNear(Act(unpacked, plain), want1, versioned ? "packed_weights=false" : "no version");
    }
  }
}

// The pieces cover the rows exactly once, in order; Refresh packs once per (version, address).
TEST(PackedGemm, PiecesCoverTheRowsAndPacksFollowTheVersion) {
  auto version = std::make_shared<std::atomic<int64_t>>(0);
  auto g = PackedGemm::Make(false, true, 37, 64, 96, 2, version);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->parts(), 2);
  EXPECT_EQ(g->row_begin(0), 0);
  EXPECT_EQ(g->row_end(0), g->row_begin(1));
  EXPECT_EQ(g->row_end(1), 37);
  std::vector<float> b(64 * 96, 1.0f), other(64 * 96, 2.0f);
  ASSERT_TRUE(g->Refresh(b.data()).ok());
  ASSERT_TRUE(g->Refresh(b.data()).ok());
  EXPECT_EQ(g->packs(), 1);
  version->fetch_add(1);
  ASSERT_TRUE(g->Refresh(b.data()).ok());
  EXPECT_EQ(g->packs(), 2);
  ASSERT_TRUE(g->Refresh(other.data()).ok());
  EXPECT_EQ(g->packs(), 3);
  EXPECT_EQ(PackedGemm::Make(false, false, 16, 8, 8, 1, nullptr), nullptr);  // no version: nothing to key on
}

}  // namespace
}  // namespace actorflow::testing
