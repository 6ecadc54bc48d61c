// The blocked channel layout (kernels/blocked_layout.h): every kernel that reads or writes
// nChw{B}c registers gives what its plain run gives, converted; B = 8 and 16 (whatever this
// CPU's own block), one call and several threads (batch chunks, plane blocks).
#include "kernels/blocked_layout.h"

#include <limits>

#include "kernels/testing/test_util.h"
#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

using Ints = std::vector<int64_t>;

// Index of plain element i of an (N,C,H,W) tensor in its nChw{block}c storage.
int64_t BlockedIndex(const Shape& s, int64_t i, int64_t block) {
  const int64_t plane = s[2] * s[3], p = i % plane, c = i / plane % s[1], n = i / plane / s[1];
  return ((n * (s[1] / block) + c / block) * plane + p) * block + c % block;
}

HostTensor ToBlocked(const HostTensor& t, int64_t block) {
  HostTensor out = t;
  for (int64_t i = 0; i < t.desc.num_elements(); ++i) out.set(BlockedIndex(t.desc.shape, i, block), t.at(i));
  return out;
}

HostTensor ToPlain(const HostTensor& t, int64_t block) {
  HostTensor out = t;
  for (int64_t i = 0; i < t.desc.num_elements(); ++i) out.set(i, t.at(BlockedIndex(t.desc.shape, i, block)));
  return out;
}

// All outputs of one CPU kernel call on `threads` threads, each output first filled with NaN
// (the kernel must write all of it).
StatusOr<std::vector<HostTensor>> Run(const std::string& type, std::vector<HostTensor> inputs, const Attrs& attrs, int threads) {
  RegisterAllOps();
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  InferContext ic;
  for (const HostTensor& t : inputs) ic.inputs.push_back(t.desc);
  ic.attrs = attrs;
  AF_RETURN_IF_ERROR(def->infer(ic));
  AF_ASSIGN_OR_RETURN(KernelFn kernel, def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads}));
  std::vector<HostTensor> outputs;
  for (const TensorDesc& d : ic.outputs)
    outputs.push_back(HostTensor::Of(d.shape, d.dtype, std::vector<double>(d.num_elements(), std::nan(""))));
  std::vector<TensorView> in, out;
  for (HostTensor& t : inputs) in.push_back(t.view());
  for (HostTensor& t : outputs) out.push_back(t.view());
  KernelContext ctx{&in, &out, 0};
  AF_RETURN_IF_ERROR(kernel(ctx));
  return outputs;
}

std::vector<HostTensor> MustRun(const std::string& type, const std::vector<HostTensor>& inputs, const Attrs& attrs, int threads) {
  auto out = Run(type, inputs, attrs, threads);
  EXPECT_TRUE(out.ok()) << type << ": " << out.status().ToString();
  return out.ok() ? out.value() : std::vector<HostTensor>{};
}

std::string ErrorOfRun(const std::string& type, const std::vector<HostTensor>& inputs, const Attrs& attrs) {
  auto out = Run(type, inputs, attrs, 1);
  return out.ok() ? std::string("(no error)") : out.status().message();
}

Attrs WithBlocks(Attrs attrs, int64_t block, const Ints& inputs, const Ints& outputs) {
  attrs.Set("channel_block", block);
  if (!inputs.empty()) attrs.Set("blocked_inputs", inputs);
  if (!outputs.empty()) attrs.Set("blocked_outputs", outputs);
  return attrs;
}

// `got` (blocked when `blocked`) against the plain result `want`, within `tolerance` of the
// largest magnitude in `want` (a sum's rounding scales with its terms, not with its result).
void ExpectSame(const HostTensor& want, const HostTensor& got, bool blocked, int64_t block, double tolerance,
                const std::string& what) {
  ASSERT_EQ(want.desc.shape, got.desc.shape) << what;
  const HostTensor plain = blocked ? ToPlain(got, block) : got;
  double largest = 0;
  for (int64_t i = 0; i < want.desc.num_elements(); ++i)
    if (!std::isnan(want.at(i))) largest = std::max(largest, std::abs(want.at(i)));
  for (int64_t i = 0; i < want.desc.num_elements(); ++i) {
    const double a = want.at(i), b = plain.at(i);
    if (std::isnan(a)) {
      ASSERT_TRUE(std::isnan(b)) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(b, a, tolerance * (1 + largest)) << what << " element " << i;
  }
}

// Sums of a few hundred float32 products: another block size may run another oneDNN kernel, and
// sample chunks split the filter gradient's sum, summing in another order (a wrong layout would
// miss by about the largest value).
constexpr double kConvTolerance = 2e-4;

struct ConvCase {
  Shape x, w;
  Attrs attrs;
};

std::vector<ConvCase> ConvCases() {
  return {{{6, 16, 10, 10}, {32, 16, 5, 5}, Attrs{{"padding", std::string("SAME")}}},
          {{5, 32, 9, 9}, {16, 32, 3, 3}, Attrs{{"padding", std::string("VALID")}, {"strides", int64_t{2}}}},
          {{4, 16, 8, 8}, {16, 8, 3, 3}, Attrs{{"padding", std::string("SAME")}, {"groups", int64_t{2}}}}};
}

// conv2d (x, out), conv2d_grad_data (dy, dx) and conv2d_grad_filter (dy, x) with every
// combination of their activation tensors blocked or plain, the bias + relu epilogue and the
// fused bias gradient included, on 1 and 2 threads (batch chunks), B = 8 and 16.
TEST(BlockedLayout, ConvolutionsMatchPlain) {
  WithTimeout([] {
    for (const ConvCase& k : ConvCases())
      for (int64_t block : {8, 16})
        for (int threads : {1, 2}) {
          const std::string where = ShapeToString(k.x) + " block " + std::to_string(block) + " threads " + std::to_string(threads);
          HostTensor x = F32(k.x, Ramp(NumElements(k.x), 0.3)), w = F32(k.w, Ramp(NumElements(k.w), 1.1));
          HostTensor bias = F32({k.w[0]}, Ramp(k.w[0], 2.0));
          Attrs epilogue = k.attrs;
          epilogue.Set("fuse_bias", true);
          epilogue.Set("activation", std::string("relu"));
          // The plain results of one call (threads 1); on 2 threads the sample chunks share one
          // blocked copy of the weights and sum blocked filter gradients (plain and blocked runs).
          const HostTensor y = MustRun("conv2d", {x, w}, k.attrs, 1).at(0);
          const HostTensor y_fused = MustRun("conv2d", {x, w, bias}, epilogue, 1).at(0);
          const HostTensor dy = F32(y.desc.shape, Ramp(y.desc.num_elements(), 0.8));
          const HostTensor dx = MustRun("conv2d_grad_data", {dy, w, x}, k.attrs, 1).at(0);
          Attrs bias_grad = k.attrs;
          bias_grad.Set("fuse_bias_grad", true);
          const std::vector<HostTensor> dw = MustRun("conv2d_grad_filter", {dy, x, w}, bias_grad, 1);
          ExpectSame(y, MustRun("conv2d", {x, w}, k.attrs, threads).at(0), false, block, kConvTolerance, "conv2d plain " + where);
          ExpectSame(dx, MustRun("conv2d_grad_data", {dy, w, x}, k.attrs, threads).at(0), false, block, kConvTolerance,
                     "conv2d_grad_data plain " + where);
          const std::vector<HostTensor> dw_threads = MustRun("conv2d_grad_filter", {dy, x, w}, bias_grad, threads);
          ExpectSame(dw[0], dw_threads.at(0), false, block, kConvTolerance, "conv2d_grad_filter plain " + where);
          ExpectSame(dw[1], dw_threads.at(1), false, block, kConvTolerance, "conv2d_grad_filter bias plain " + where);
          const HostTensor xb = ToBlocked(x, block), dyb = ToBlocked(dy, block);
          for (bool in : {false, true})
            for (bool out : {false, true}) {
              if (!in && !out) continue;
              const std::string tag = where + (in ? " in" : "") + (out ? " out" : "");
              const Ints ins = in ? Ints{0} : Ints{}, outs = out ? Ints{0} : Ints{};
              ExpectSame(y, MustRun("conv2d", {in ? xb : x, w}, WithBlocks(k.attrs, block, ins, outs), threads).at(0), out, block,
                         kConvTolerance, "conv2d " + tag);
              ExpectSame(y_fused, MustRun("conv2d", {in ? xb : x, w, bias}, WithBlocks(epilogue, block, ins, outs), threads).at(0),
                         out, block, kConvTolerance, "conv2d epilogue " + tag);
              ExpectSame(dx, MustRun("conv2d_grad_data", {in ? dyb : dy, w, x}, WithBlocks(k.attrs, block, ins, outs), threads).at(0),
                         out, block, kConvTolerance, "conv2d_grad_data " + tag);
              // grad_filter: dy (input 0) and x (input 1); `in`/`out` pick which is blocked.
              Ints filter_ins;
              if (in) filter_ins.push_back(0);
              if (out) filter_ins.push_back(1);
              const std::vector<HostTensor> got =
                  MustRun("conv2d_grad_filter", {in ? dyb : dy, out ? xb : x, w}, WithBlocks(bias_grad, block, filter_ins, {}), threads);
              ASSERT_EQ(got.size(), 2u);
              ExpectSame(dw[0], got[0], false, block, kConvTolerance, "conv2d_grad_filter " + tag);
              ExpectSame(dw[1], got[1], false, block, kConvTolerance, "conv2d_grad_filter bias " + tag);
            }
        }
  });
}

TEST(BlockedLayout, ConvolutionErrors) {
  const HostTensor x = F32({2, 16, 6, 6}), w = F32({16, 16, 3, 3});
  const Attrs same{{"padding", std::string("SAME")}};
  EXPECT_NE(ErrorOfRun("conv2d", {x, w}, WithBlocks(same, 12, {0}, {})).find("channel_block must be 8 or 16"), std::string::npos);
  EXPECT_NE(ErrorOfRun("conv2d", {F32({2, 12, 6, 6}), F32({16, 12, 3, 3})}, WithBlocks(same, 8, {0}, {})).find("multiple of 8"),
            std::string::npos);
  EXPECT_NE(ErrorOfRun("conv2d", {x, w}, WithBlocks(same, 16, {1}, {})).find("input 1 cannot be stored blocked"), std::string::npos);
  EXPECT_NE(ErrorOfRun("conv2d", {x, w}, WithBlocks(same, 16, {}, {3})).find("lists output 3, the op has 1"), std::string::npos);
  Attrs nhwc = same;
  nhwc.Set("data_format", std::string("NHWC"));
  EXPECT_NE(ErrorOfRun("conv2d", {F32({2, 6, 6, 16}), w}, WithBlocks(nhwc, 16, {0}, {})).find("needs data_format NCHW"),
            std::string::npos);
  EXPECT_NE(ErrorOfRun("conv2d", {F64({2, 16, 6, 6}), F64({16, 16, 3, 3})}, WithBlocks(same, 16, {0}, {})).find("float32"),
            std::string::npos);
}

// Pooling, forward and backward, max (with relu_mask, NaN in x) and average, tiling / padded /
// overlapping windows, odd sizes (vector rows and columns of windows, then the edges), out
// (forward) and dy (backward) blocked or plain; 2 threads on a tensor
// large enough to split its planes.
TEST(BlockedLayout, PoolsMatchPlain) {
  WithTimeout([] {
    Attrs tiled{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
    Attrs padded{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", Ints{1, 0, 1, 0}}};
    Attrs overlap{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
    for (const Shape& shape : {Shape{3, 16, 10, 10}, Shape{2, 16, 9, 11}, Shape{4, 48, 30, 30}})
      for (const Attrs& attrs : {tiled, padded, overlap})
        for (int64_t block : {8, 16})
          for (const std::string type : {"max_pool2d", "avg_pool2d"}) {
            const bool max = type == "max_pool2d";
            const int threads = shape[1] == 48 ? 2 : 1;
            std::vector<double> values = Ramp(NumElements(shape), 0.2);
            for (double& v : values) v = v < 0.3 ? 0.0 : v;  // a relu's output: zeros, for relu_mask
            values[37] = std::nan("");
            const HostTensor x = F32(shape, values), xb = ToBlocked(x, block);
            const HostTensor y = MustRun(type, {x}, attrs, threads).at(0);
            const HostTensor dy = F32(y.desc.shape, Ramp(y.desc.num_elements(), 1.3)), dyb = ToBlocked(dy, block);
            const std::string where = type + " " + ShapeToString(shape) + " block " + std::to_string(block);
            for (bool out : {false, true})
              ExpectSame(y, MustRun(type, {xb}, WithBlocks(attrs, block, {0}, out ? Ints{0} : Ints{}), threads).at(0), out, block, 0,
                         where + (out ? " out blocked" : " out plain"));
            for (bool relu_mask : {false, true}) {
              if (relu_mask && !max) continue;
              Attrs grad = attrs;
              if (relu_mask) grad.Set("relu_mask", true);
              const std::vector<HostTensor> plain_in = max ? std::vector<HostTensor>{x, y, dy} : std::vector<HostTensor>{dy, x};
              const HostTensor want = MustRun(type + "_grad", plain_in, grad, threads).at(0);
              for (bool dy_blocked : {false, true}) {
                const HostTensor& d = dy_blocked ? dyb : dy;
                const std::vector<HostTensor> in = max ? std::vector<HostTensor>{xb, y, d} : std::vector<HostTensor>{d, x};
                Ints ins = max ? Ints{0} : Ints{};
                if (dy_blocked) ins.push_back(max ? 2 : 0);
                ExpectSame(want, MustRun(type + "_grad", in, WithBlocks(grad, block, ins, {0}), threads).at(0), true, block, 1e-6,
                           where + " grad" + (relu_mask ? " relu_mask" : "") + (dy_blocked ? " dy blocked" : " dy plain"));
              }
            }
          }
  });
}

TEST(BlockedLayout, PoolErrors) {
  const Attrs two{{"ksize", int64_t{2}}};
  const HostTensor x = F32({1, 16, 4, 4}), y = F32({1, 16, 2, 2});
  EXPECT_NE(ErrorOfRun("max_pool2d", {x}, WithBlocks(two, 16, {}, {0})).find("blocked output needs a blocked input"),
            std::string::npos);
  EXPECT_NE(ErrorOfRun("max_pool2d_grad", {x, y, y}, WithBlocks(two, 16, {0}, {})).find("x and dx must be both"), std::string::npos);
  EXPECT_NE(ErrorOfRun("max_pool2d_grad", {x, y, y}, WithBlocks(two, 16, {1}, {})).find("blocked y needs a blocked dx"),
            std::string::npos);
  EXPECT_NE(ErrorOfRun("avg_pool2d_grad", {y, x}, WithBlocks(two, 16, {0}, {})).find("blocked dy needs a blocked dx"),
            std::string::npos);
  EXPECT_NE(ErrorOfRun("max_pool2d", {F32({1, 4, 4, 4})}, WithBlocks(two, 8, {0}, {})).find("multiple of 8"), std::string::npos);
}

}  // namespace
}  // namespace actorflow::testing
