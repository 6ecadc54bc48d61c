// The blocked copy of a convolution's weights kept between acts (kernels/conv_dnnl.h,
// ConvWeightsCache): with the filter's version counter (KernelInit::input_versions) it is made
// again exactly when the counter's value or the filter's address changed, and the weights are
// not read to decide; without a counter, when the bytes differ from the last reorder's. The
// channels-last 1x1 convolution's GEMM keeps its filter packed (PackedGemm) by the same rule
// with a counter, and reads it in place without. Every result is compared with a kernel made
// for the call (which reorders or reads the weights it is given).
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/blocked_layout.h"
#include "kernels/conv_kernel.h"
#include "kernels/matmul_packed.h"
#include "kernels/testing/test_util.h"
#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

using Version = std::shared_ptr<std::atomic<int64_t>>;

// One conv2d (or conv2d_grad_data: `x` is then dy and `like` x's shape) with its inputs.
struct Variant {
  std::string name;
  std::string type = "conv2d";
  Shape x, w;
  Attrs attrs;
  int epilogue_inputs = 0;  // bias (1) or bias + batch norm statistics (5), (O,) each
  int threads = 1;
  Shape like = {};  // conv2d_grad_data only
};

std::vector<Variant> ForwardVariants() {
  const Attrs valid{{"padding", std::string("VALID")}};
  Attrs bias_relu = valid;
  bias_relu.Set("fuse_bias", true);
  bias_relu.Set("activation", std::string("relu"));
  Attrs batch_norm = valid;
  batch_norm.Set("fuse_bias", true);
  batch_norm.Set("fuse_batch_norm", true);
  Attrs depthwise{{"padding", std::string("SAME")}, {"groups", int64_t{16}}};
  Attrs nhwc{{"padding", std::string("SAME")}, {"data_format", std::string("NHWC")}};
  std::vector<Variant> variants = {
      {"nchw (LeNet's 5x5)", "conv2d", {2, 6, 14, 14}, {16, 6, 5, 5}, valid},
      {"nchw, batch chunks", "conv2d", {8, 6, 14, 14}, {16, 6, 5, 5}, valid, 0, 2},
      {"fuse_bias + relu", "conv2d", {2, 6, 14, 14}, {16, 6, 5, 5}, bias_relu, 1},
      {"fuse_batch_norm", "conv2d", {2, 6, 14, 14}, {16, 6, 5, 5}, batch_norm, 5},
      {"fuse_batch_norm, batch chunks", "conv2d", {8, 6, 14, 14}, {16, 6, 5, 5}, batch_norm, 5, 2},
      {"depthwise", "conv2d", {2, 16, 9, 9}, {16, 1, 3, 3}, depthwise},
      {"channels last", "conv2d", {2, 9, 9, 8}, {16, 8, 3, 3}, nhwc},
      {"channels last, batch chunks", "conv2d", {8, 9, 9, 8}, {16, 8, 3, 3}, nhwc, 0, 2},
  };
  if (NativeChannelBlock() > 0) {  // x and out stored blocked (the compiler's blocked layout)
    Attrs blocked = valid;
    blocked.Set("channel_block", NativeChannelBlock());
    blocked.Set("blocked_inputs", std::vector<int64_t>{0});
    blocked.Set("blocked_outputs", std::vector<int64_t>{0});
    variants.push_back({"blocked x and out", "conv2d", {2, 16, 14, 14}, {32, 16, 5, 5}, blocked});
    variants.push_back({"blocked x and out, batch chunks", "conv2d", {8, 16, 14, 14}, {32, 16, 5, 5}, blocked, 0, 2});
  }
  return variants;
}

// Channels-last 1x1 convolutions (one GEMM; 72 rows): plain, with the epilogues, rows split
// over two threads.
std::vector<Variant> PointwiseVariants() {
  Attrs nhwc{{"padding", std::string("VALID")}, {"data_format", std::string("NHWC")}};
  Attrs bias_relu = nhwc;
  bias_relu.Set("fuse_bias", true);
  bias_relu.Set("activation", std::string("relu"));
  Attrs batch_norm = nhwc;
  batch_norm.Set("fuse_bias", true);
  batch_norm.Set("fuse_batch_norm", true);
  return {
      {"1x1 channels last", "conv2d", {2, 6, 6, 16}, {24, 16, 1, 1}, nhwc},
      {"1x1 channels last, 2 threads", "conv2d", {2, 6, 6, 16}, {24, 16, 1, 1}, nhwc, 0, 2},
      {"1x1 channels last, fuse_bias + relu", "conv2d", {2, 6, 6, 16}, {24, 16, 1, 1}, bias_relu, 1, 2},
      {"1x1 channels last, fuse_batch_norm", "conv2d", {2, 6, 6, 16}, {24, 16, 1, 1}, batch_norm, 5, 2},
  };
}

struct Kernel {
  KernelFn fn;
  TensorDesc out;
};

Kernel Make(const Variant& v, const std::vector<HostTensor>& inputs, Version version) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find(v.type).value();
  InferContext ic;
  for (const HostTensor& t : inputs) ic.inputs.push_back(t.desc);
  ic.attrs = v.attrs;
  Status inferred = def->infer(ic);
  EXPECT_TRUE(inferred.ok()) << v.name << ": " << inferred.ToString();
  KernelInit init{ic.inputs, ic.outputs, v.attrs, v.threads};
  if (version) init.SetInputVersion(1, version);
  auto kernel = def->kernel_factories.at(kCpuDevice)(init);
  EXPECT_TRUE(kernel.ok()) << v.name << ": " << kernel.status().ToString();
  return Kernel{kernel.ok() ? kernel.value() : KernelFn(), inferred.ok() ? ic.outputs[0] : TensorDesc{}};
}

// The inputs with `weights` as the filter (its data where it lies: the kernel sees its address).
std::vector<TensorView> Views(std::vector<HostTensor>& inputs, HostTensor& weights) {
  std::vector<TensorView> views;
  for (HostTensor& t : inputs) views.push_back(t.view());
  views[1] = weights.view();
  return views;
}

// One act; `reorders` receives how many copies of the weights it made (blocked or packed).
HostTensor Act(Kernel& kernel, std::vector<TensorView> inputs, int64_t& reorders) {
  HostTensor out = HostTensor::Of(kernel.out.shape, kernel.out.dtype, {});
  std::vector<TensorView> outputs = {out.view()};
  KernelContext context{&inputs, &outputs, 0};
  const int64_t before = ConvWeightsReorders() + PackedGemm::TotalPacks();
  Status status = kernel.fn(context);
  reorders = ConvWeightsReorders() + PackedGemm::TotalPacks() - before;
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

// The result of a kernel made for this call alone.
HostTensor Fresh(const Variant& v, std::vector<HostTensor> inputs, HostTensor& weights) {
  Kernel kernel = Make(v, inputs, nullptr);
  int64_t reorders = 0;
  return Act(kernel, Views(inputs, weights), reorders);
}

void ExpectNear(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.desc.num_elements(), want.desc.num_elements()) << what;
  for (int64_t i = 0; i < want.desc.num_elements(); ++i)
    ASSERT_NEAR(got.at(i), want.at(i), 1e-4 * (1 + std::abs(want.at(i)))) << what << ", element " << i;
}

// The two weight values the tests switch between, and their results; the results differ (a
// stale blocked copy would show).
struct Weights {
  HostTensor a, b, out_a, out_b;
};

Weights TwoWeights(const Variant& v, std::vector<HostTensor>& inputs) {
  Weights w{F32(v.w, Ramp(NumElements(v.w), 1.3)), F32(v.w, Ramp(NumElements(v.w), 2.9)), {}, {}};
  w.out_a = Fresh(v, inputs, w.a);
  w.out_b = Fresh(v, inputs, w.b);
  double largest = 0;
  for (int64_t i = 0; i < w.out_a.desc.num_elements(); ++i) largest = std::max(largest, std::abs(w.out_a.at(i) - w.out_b.at(i)));
  EXPECT_GT(largest, 0.1) << v.name << ": the two weights give the same result";
  return w;
}

std::vector<HostTensor> Inputs(const Variant& v) {
  std::vector<HostTensor> inputs = {F32(v.x, Ramp(NumElements(v.x), 0.3)), F32(v.w)};
  if (!v.like.empty()) inputs.push_back(F32(v.like));
  for (int i = 0; i < v.epilogue_inputs; ++i) inputs.push_back(F32({v.w[0]}, Positive(v.w[0])));
  return inputs;
}

void Copy(HostTensor& to, const HostTensor& from) { std::memcpy(to.bytes.data(), from.bytes.data(), from.bytes.size()); }

TEST(ConvWeights, WithAVersionReorderedExactlyWhenTheVersionOrTheAddressChanges) {
  WithTimeout([] {
    std::vector<Variant> variants = ForwardVariants();
    for (const Variant& v : PointwiseVariants()) variants.push_back(v);
    for (const Variant& v : variants) {
      SCOPED_TRACE(v.name);
      std::vector<HostTensor> inputs = Inputs(v);
      Weights w = TwoWeights(v, inputs);
      Version version = std::make_shared<std::atomic<int64_t>>(0);
      Kernel kernel = Make(v, inputs, version);
      HostTensor first = w.a, second = w.a;  // two addresses
      int64_t reorders = -1;
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_a, "first act");
      EXPECT_EQ(reorders, 1) << "the first act must reorder the weights";
      for (int act = 0; act < 2; ++act) {
        ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_a, "unchanged");
        EXPECT_EQ(reorders, 0) << "reordered again with the same version and address";
      }
      // Written without a bump: the kernel does not look at the bytes (the session bumps the
      // counter on every write, so this does not happen there).
      Copy(first, w.b);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_a, "written without a bump");
      EXPECT_EQ(reorders, 0) << "the weights were read to decide";
      version->fetch_add(1);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "after the bump");
      EXPECT_EQ(reorders, 1) << "a version bump must reorder";
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "after the bump, again");
      EXPECT_EQ(reorders, 0);
      ExpectNear(Act(kernel, Views(inputs, second), reorders), w.out_a, "another address");
      EXPECT_EQ(reorders, 1) << "a new address must reorder";
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "back to the first address");
      EXPECT_EQ(reorders, 1);
    }
  });
}

TEST(ConvWeights, WithoutAVersionTheBytesDecide) {
  WithTimeout([] {
    for (const Variant& v : ForwardVariants()) {
      SCOPED_TRACE(v.name);
      std::vector<HostTensor> inputs = Inputs(v);
      Weights w = TwoWeights(v, inputs);
      Kernel kernel = Make(v, inputs, nullptr);
      HostTensor first = w.a, second = w.a;
      int64_t reorders = -1;
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_a, "first act");
      EXPECT_EQ(reorders, 1);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_a, "unchanged");
      EXPECT_EQ(reorders, 0);
      ExpectNear(Act(kernel, Views(inputs, second), reorders), w.out_a, "the same bytes elsewhere");
      EXPECT_EQ(reorders, 0) << "without a version the bytes decide, not the address";
      Copy(first, w.b);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "written in place");
      EXPECT_EQ(reorders, 1);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "written in place, again");
      EXPECT_EQ(reorders, 0);
      // Changed on two acts in a row (a train job): reordered on every act from then on.
      Copy(first, w.a);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_a, "changed once");
      Copy(first, w.b);
      ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "changed twice");
      for (int act = 0; act < 2; ++act) {
        ExpectNear(Act(kernel, Views(inputs, first), reorders), w.out_b, "after training-like changes");
        EXPECT_EQ(reorders, 1) << "caching should have ended";
      }
    }
  });
}

// The 1x1 GEMM without a version, or with packed_weights=false: the filter is read where it
// lies on every act (nothing packed), so a write in place shows at once.
TEST(ConvWeights, The1x1GemmReadsItsFilterInPlaceWithoutAVersionOrWithPackedWeightsOff) {
  WithTimeout([] {
    for (Variant v : PointwiseVariants())
      for (bool with_version : {false, true}) {
        if (with_version) v.attrs.Set("packed_weights", false);
        SCOPED_TRACE(v.name + (with_version ? ", packed_weights=false" : ", no version"));
        std::vector<HostTensor> inputs = Inputs(v);
        Weights w = TwoWeights(v, inputs);
        Kernel kernel = Make(v, inputs, with_version ? std::make_shared<std::atomic<int64_t>>(0) : nullptr);
        HostTensor weights = w.a;
        int64_t reorders = -1;
        ExpectNear(Act(kernel, Views(inputs, weights), reorders), w.out_a, "first act");
        EXPECT_EQ(reorders, 0);
        Copy(weights, w.b);
        ExpectNear(Act(kernel, Views(inputs, weights), reorders), w.out_b, "written in place");
        EXPECT_EQ(reorders, 0);
      }
  });
}

// The data gradient's weights: kept with a version (a job computing the input's gradient
// through weights it does not train), reordered on every act without one.
TEST(ConvWeights, TheDataGradientKeepsItsWeightsOnlyWithAVersion) {
  WithTimeout([] {
    for (int threads : {1, 2}) {
      Variant v{"conv2d_grad_data", "conv2d_grad_data", {8, 16, 10, 10}, {16, 6, 5, 5}, Attrs{{"padding", std::string("VALID")}},
                0, threads, {8, 6, 14, 14}};
      SCOPED_TRACE(threads);
      std::vector<HostTensor> inputs = Inputs(v);
      Weights w = TwoWeights(v, inputs);
      Version version = std::make_shared<std::atomic<int64_t>>(0);
      Kernel kept = Make(v, inputs, version), plain = Make(v, inputs, nullptr);
      HostTensor weights = w.a;
      int64_t reorders = -1;
      for (int act = 0; act < 3; ++act) {
        ExpectNear(Act(kept, Views(inputs, weights), reorders), w.out_a, "with a version");
        EXPECT_EQ(reorders, act == 0 ? 1 : 0) << "act " << act;
        ExpectNear(Act(plain, Views(inputs, weights), reorders), w.out_a, "without a version");
        EXPECT_EQ(reorders, 1) << "act " << act;
      }
      Copy(weights, w.b);
      version->fetch_add(1);
      ExpectNear(Act(kept, Views(inputs, weights), reorders), w.out_b, "after the bump");
      EXPECT_EQ(reorders, 1);
    }
  });
}

}  // namespace
}  // namespace actorflow::testing
