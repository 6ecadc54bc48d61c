// Every registered op's SBP signatures, proved by running them. For each op, on representative
// instances (shapes chosen so that splits are uneven: 5 and 7 over 2 and 3 devices), for every
// signature its SBP function offers: the random logical inputs are laid out per the signature's
// input SBPs (S: BalancedSplit slices; B: the whole; P: random parts that sum to the whole), the
// op's CPU kernel runs once per device on the physical descriptions with the op's physical
// attributes, and the per-device outputs (and inputs the op writes in place) are assembled per
// the output SBPs (S: concatenated; B: each device must hold the whole; P: summed) and
// compared with the single-device run. The harness knows no op: a new op needs only an entry
// in Instances() (the test fails by name until it has one).
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest-spi.h>

#include "kernels/kernel_util.h"
#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

// ---- Inputs --------------------------------------------------------------------------------

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(20261123);
  return rng;
}
double Uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(Rng()); }

HostTensor Random(const Shape& s, DType dtype = DType::kFloat64, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<size_t>(NumElements(s)));
  for (double& x : v) x = Uniform(lo, hi);
  return HostTensor::Of(s, dtype, v);
}
HostTensor Positive(const Shape& s, DType dtype = DType::kFloat64) { return Random(s, dtype, 0.5, 1.5); }
// Integers in [0, bound): labels and indices.
HostTensor Indices(const Shape& s, int64_t bound, DType dtype = DType::kInt32) {
  std::vector<double> v(static_cast<size_t>(NumElements(s)));
  for (double& x : v) x = static_cast<double>(std::uniform_int_distribution<int64_t>(0, bound - 1)(Rng()));
  return HostTensor::Of(s, dtype, v);
}
HostTensor Output(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs, size_t index = 0) {
  auto out = RunOp(type, in, attrs);
  EXPECT_TRUE(out.ok()) << type << ": " << out.status().ToString();
  return out.ok() ? out.value()[index] : HostTensor{};
}

struct Instance {
  std::vector<HostTensor> inputs;
  Attrs attrs;
};

Attrs Axes(std::vector<int64_t> axes, bool keepdims) {
  Attrs a{{"keepdims", keepdims}};
  if (!axes.empty()) a.Set("axis", axes);
  return a;
}

// Representative instances per op type. Inputs a random generator cannot give (labels and
// indices in range, values that must be positive, a max the gradient must match) are built here.
std::map<std::string, std::vector<Instance>> Instances() {
  std::map<std::string, std::vector<Instance>> c;
  const Shape m = {5, 7};
  for (const char* type : {"relu", "sigmoid", "tanh", "gelu", "exp", "square", "negative", "identity", "copy_h2d", "copy_d2h"})
    c[type] = {{{Random(m)}, {}}, {{Random({7, 3, 5})}, {}}};
  c["relu"].push_back({{Random(m, DType::kFloat32)}, {}});
  c["clamp"] = {{{Random(m)}, {{"min", -0.3}, {"max", 0.4}}}, {{Random({7, 3, 5})}, {{"max", 0.1}}}};
  c["clamp_grad"] = {{{Random(m), Random(m)}, {{"min", -0.3}, {"max", 0.4}}}, {{Random(m), Random(m)}, {{"min", -0.3}, {"max", 0.4}, {"inclusive", false}}}};
  for (const char* type : {"log", "sqrt"}) c[type] = {{{Positive(m)}, {}}};
  for (const char* type : {"relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad", "exp_grad", "square_grad"})
    c[type] = {{{Random(m), Random(m)}, {}}};
  for (const char* type : {"log_grad", "sqrt_grad"}) c[type] = {{{Positive(m), Random(m)}, {}}};
  c["scalar_pow"] = {{{Positive(m)}, {{"exponent", 1.5}}}, {{Random({7, 3, 5})}, {{"exponent", 2.0}}}};
  c["scalar_pow_grad"] = {{{Positive(m), Random(m)}, {{"exponent", 1.5}}}};
  c["abs"] = {{{Random(m)}, {}}};
  c["abs_grad"] = {{{Random(m), Random(m)}, {}}};
  for (const char* type : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
    c[type] = {{{Random(m), Random(m)}, {}}, {{Random(m), Random({7})}, {}}, {{Indices(m, 3), Indices({5, 1}, 3)}, {}}};
  for (const char* type : {"add", "sub", "mul"})
    c[type] = {{{Random(m), Random(m)}, {}}, {{Random(m), Random({7})}, {}}, {{Random({5, 1}), Random({1, 7})}, {}},
               {{Random({3, 1, 5}), Random({7, 1})}, {}}};
  c["div"] = {{{Random(m), Positive(m)}, {}}, {{Random(m), Positive({7})}, {}}, {{Random({7}), Positive({5, 1})}, {}}};
  c["scalar_add"] = {{{Random(m)}, {{"scalar", 0.5}}}, {{Indices(m, 9)}, {{"scalar", int64_t{3}}}}};
  c["scalar_mul"] = {{{Random(m)}, {{"scalar", -1.5}}}};
  c["add_n"] = {{{Random(m), Random(m), Random(m)}, {}}, {{Indices(m, 5, DType::kInt64), Indices(m, 5, DType::kInt64)}, {}}};

  c["matmul"] = {{{Random({5, 7}), Random({7, 6})}, {}},
                 {{Random({7, 5}), Random({7, 6})}, {{"transpose_a", true}}},
                 {{Random({5, 7}), Random({6, 7})}, {{"transpose_b", true}}},
                 {{Random({7, 5}), Random({6, 7})}, {{"transpose_a", true}, {"transpose_b", true}}},
                 {{Random({3, 5, 7}), Random({7, 6})}, {}},
                 {{Random({3, 7, 5}), Random({3, 6, 7})}, {{"transpose_a", true}, {"transpose_b", true}}},
                 {{Random({5, 7}), Random({3, 7, 6})}, {}},
                 {{Random({5, 7}), Random({7, 6}), Random({6})}, {{"fuse_bias", true}}},
                 {{Random({5, 7}), Random({7, 6}), Random({6})}, {{"fuse_bias", true}, {"fuse_relu", true}}},
                 {{Random({5, 7}), Random({7, 6}), Random({5, 6})}, {{"fuse_relu_grad", true}}},
                 {{Random({5, 7}), Random({6, 7}), Random({5, 6})}, {{"transpose_b", true}, {"fuse_relu_grad", true}}},
                 {{Random({5, 7}), Random({7, 6}), Random({5, 6})}, {{"fuse_relu_grad", true}, {"fuse_bias_grad", true}}},
                 {{Random({3, 5, 7}), Random({7, 6})}, {{"fuse_bias_grad", true}}},
                 {{Random({5, 7}, DType::kFloat32), Random({7, 6}, DType::kFloat32)}, {{"fuse_bias_grad", true}}},
                 {{Random({5, 7}, DType::kFloat32), Random({7, 6}, DType::kFloat32)}, {}}};
  c["bias_add"] = {{{Random(m), Random({7})}, {{"axis", int64_t{1}}}},
                   {{Random({5, 4, 3, 2}), Random({4})}, {{"axis", int64_t{1}}}},
                   {{Random(m), Random({7})}, {{"axis", int64_t{1}}, {"fuse_relu", true}}}};
  c["bias_add_grad"] = {{{Random(m)}, {{"axis", int64_t{1}}}}, {{Random({5, 4, 3, 2})}, {{"axis", int64_t{1}}}}};

  const Shape cube = {5, 7, 4};
  for (const char* type : {"reduce_sum", "reduce_mean", "reduce_max"})
    c[type] = {{{Random(cube)}, Axes({1}, false)}, {{Random(cube)}, Axes({0, 2}, true)}, {{Random(cube)}, Axes({-1, 0}, false)},
               {{Random(cube)}, Axes({}, false)}};
  c["reduce_sum"].push_back({{Indices(cube, 9)}, Axes({0}, false)});
  c["reduce_max"].push_back({{Indices(cube, 1000, DType::kInt64)}, Axes({1}, true)});
  {
    HostTensor x = Random(m), y0 = Output("reduce_max", {x}, Axes({0}, true)), y1 = Output("reduce_max", {x}, Axes({1}, true));
    c["reduce_max_grad"] = {{{x, y0, Random({1, 7})}, Axes({0}, true)}, {{x, y1, Random({5, 1})}, Axes({1}, true)}};
  }
  c["sum_of_squares"] = {{{Random(m)}, {}}};
  c["reduce_sum_like"] = {{{Random(m), Random({7})}, {}}, {{Random(m), Random({5, 1})}, {}}};
  c["broadcast_like"] = {{{Random({7}), Random(m)}, {}}, {{Random({5, 1}), Random(m)}, {}}};

  c["softmax"] = {{{Random(m)}, {}}, {{Random(m)}, {{"axis", int64_t{0}}}}, {{Random({5, 4, 3})}, {{"axis", int64_t{1}}}}};
  c["log_softmax"] = c["softmax"];
  c["sparse_softmax_cross_entropy"] = {{{Indices({7}, 5), Random({7, 5})}, {}},
                                       {{Indices({5}, 7, DType::kInt64), Random({5, 7})}, {}}};
  {
    HostTensor prob = Output("softmax", {Random({7, 5})}, {});
    c["sparse_softmax_cross_entropy_grad"] = {{{Indices({7}, 5), prob, Random({7})}, {}}};
  }
  c["sparse_softmax_cross_entropy_with_grad"] = {{{Indices({7}, 5), Random({7, 5}), Random({7})}, {}},
                                                 {{Indices({5}, 7, DType::kInt64), Random({5, 7}), Random({5})}, {}}};

  c["reshape"] = {{{Random(cube)}, {{"shape", std::vector<int64_t>{5, 28}}}},
                  {{Random(cube)}, {{"shape", std::vector<int64_t>{35, -1}}}},
                  {{Random(cube)}, {{"shape", std::vector<int64_t>{7, 5, 4}}}},
                  {{Random(cube)}, {{"shape", std::vector<int64_t>{1, 5, 2, 14}}}},
                  {{Random(cube)}, {{"shape", std::vector<int64_t>{140}}}}};
  c["flatten"] = {{{Random({5, 3, 4})}, {{"start_dim", int64_t{1}}, {"end_dim", int64_t{2}}}},
                  {{Random({5, 3, 4})}, {{"start_dim", int64_t{0}}, {"end_dim", int64_t{1}}}},
                  {{Random({5, 3, 4})}, {}}};
  c["transpose"] = {{{Random(cube)}, {{"perm", std::vector<int64_t>{2, 0, 1}}}}, {{Random(m)}, {{"perm", std::vector<int64_t>{1, 0}}}}};
  c["concat"] = {{{Random(m), Random({5, 4})}, {{"axis", int64_t{1}}}},
                 {{Random(m), Random({3, 7}), Random({1, 7})}, {{"axis", int64_t{0}}}}};
  const Attrs slice_rows{{"begin", std::vector<int64_t>{0, 1}}, {"end", std::vector<int64_t>{100, 6}}, {"stride", std::vector<int64_t>{1, 2}}};
  const Attrs slice_cols{{"begin", std::vector<int64_t>{2, -7}}, {"end", std::vector<int64_t>{7, 7}}};
  c["slice"] = {{{Random(m)}, slice_rows}, {{Random({7, 7})}, slice_cols}, {{Random(m)}, {}}};
  c["slice_grad"] = {{{Random({5, 3}), Random(m)}, slice_rows}, {{Random({5, 7}), Random({7, 7})}, slice_cols}};

  c["argmax"] = {{{Random(m)}, {}}, {{Random(m)}, {{"axis", int64_t{0}}}}, {{Random({5, 4, 3})}, {{"axis", int64_t{1}}}}};
  c["one_hot"] = {{{Indices(m, 4)}, {{"depth", int64_t{4}}, {"dtype", std::string("float64")}}},
                  {{Indices({7}, 3, DType::kInt64)}, {{"depth", int64_t{3}}, {"on_value", 2.5}, {"dtype", std::string("int32")}}}};
  c["cast"] = {{{Random(m)}, {{"dtype", std::string("float32")}}},
               {{Random(m, DType::kFloat64, -20, 20)}, {{"dtype", std::string("int32")}}},
               {{Indices(m, 50)}, {{"dtype", std::string("float64")}}}};
  c["gather_flat"] = {{{Random(m), Indices({6}, 35, DType::kInt64)}, {}}, {{Indices(m, 9), Indices({2, 3}, 35, DType::kInt64)}, {}}};
  c["gather_flat_grad"] = {{{Random({6}), Indices({6}, 35, DType::kInt64), Random(m)}, {}}};
  c["constant"] = {{{}, {{"shape", std::vector<int64_t>{5, 7}}, {"value", 1.5}, {"dtype", std::string("float64")}}},
                   {{}, {{"shape", std::vector<int64_t>{7}}, {"value", 3.0}, {"dtype", std::string("int32")}}}};
  c["zeros_like"] = {{{Random(m)}, {}}};
  c["ones_like"] = {{{Random(m)}, {}}};

  const Shape image = {5, 3, 4, 4};
  for (const char* type : {"zero_pad2d", "reflection_pad2d"}) {
    c[type] = {{{Random(image)}, {{"padding", int64_t{1}}}}, {{Random(image)}, {{"padding", std::vector<int64_t>{1, 2, 0, 3}}}}};
    c[std::string(type) + "_grad"] = {{{Random({5, 3, 6, 6}), Random(image)}, {{"padding", int64_t{1}}}}};
  }
  const Attrs pool2{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}};
  const Attrs pool3{{"ksize", int64_t{3}}, {"strides", int64_t{1}}, {"padding", std::string("SAME")}};
  const Shape pool_in = {5, 3, 6, 6};
  for (const char* type : {"max_pool2d", "avg_pool2d"}) c[type] = {{{Random(pool_in)}, pool2}, {{Random(pool_in)}, pool3}};
  const Attrs adaptive{{"output_size", std::vector<int64_t>{4, 5}}};
  c["adaptive_avg_pool2d"] = {{{Random(pool_in)}, adaptive}};
  c["adaptive_avg_pool2d_grad"] = {{{Random({5, 3, 4, 5}), Random(pool_in)}, adaptive}};
  {
    HostTensor x = Random(pool_in), y2 = Output("max_pool2d", {x}, pool2), y3 = Output("max_pool2d", {x}, pool3);
    c["max_pool2d_grad"] = {{{x, y2, Random({5, 3, 3, 3})}, pool2}, {{x, y3, Random(pool_in)}, pool3}};
    c["avg_pool2d_grad"] = {{{Random({5, 3, 3, 3}), x}, pool2}, {{Random(pool_in), x}, pool3}};
  }
  const Attrs same{{"padding", std::string("SAME")}};
  const Attrs grouped{{"padding", std::string("VALID")}, {"groups", int64_t{2}}};
  c["conv2d"] = {{{Random({5, 4, 6, 6}), Random({3, 4, 3, 3})}, same},
                 {{Random({5, 4, 6, 6}), Random({6, 2, 3, 3})}, grouped},
                 {{Random({5, 4, 6, 6}, DType::kFloat32), Random({3, 4, 3, 3}, DType::kFloat32)}, same}};
  c["conv2d_grad_data"] = {{{Random({5, 3, 6, 6}), Random({3, 4, 3, 3}), Random({5, 4, 6, 6})}, same},
                           {{Random({5, 6, 4, 4}), Random({6, 2, 3, 3}), Random({5, 4, 6, 6})}, grouped}};
  c["conv2d_grad_filter"] = {{{Random({5, 3, 6, 6}), Random({5, 4, 6, 6}), Random({3, 4, 3, 3})}, same},
                             {{Random({5, 6, 4, 4}), Random({5, 4, 6, 6}), Random({6, 2, 3, 3})}, grouped}};

  auto bn = [](const Shape& x, int64_t axis, bool training) {
    const int64_t ch = x[static_cast<size_t>(axis)];
    return Instance{{Random(x), Random({ch}), Random({ch}), Random({ch}), Positive({ch})},
                    {{"axis", axis}, {"training", training}, {"momentum", 0.9}}};
  };
  c["batch_normalization"] = {bn({5, 4, 3, 2}, 1, true), bn({5, 4, 3, 2}, 1, false), bn(m, 1, true)};
  auto bn_grad = [](const Shape& x, int64_t axis, bool training) {
    const int64_t ch = x[static_cast<size_t>(axis)];
    return Instance{{Random(x), Random(x), Random({ch}), Positive({ch}), Random({ch})}, {{"axis", axis}, {"training", training}}};
  };
  c["batch_normalization_grad"] = {bn_grad({5, 4, 3, 2}, 1, true), bn_grad({5, 4, 3, 2}, 1, false), bn_grad(m, 1, false)};
  c["dropout"] = {{{Random(m)}, {{"rate", 0.5}, {"seed", int64_t{7}}}}, {{Random({7, 3, 2})}, {{"rate", 0.3}, {"seed", int64_t{11}}}}};

  // Updates are float32; second moments and mean squares are non-negative.
  auto update = [](std::vector<bool> state_positive, int64_t lr_size) {
    const DType f = DType::kFloat32;
    std::vector<HostTensor> in = {Random({5, 7}, f), Random({5, 7}, f)};
    for (bool positive : state_positive) in.push_back(positive ? Positive({5, 7}, f) : Random({5, 7}, f));
    in.push_back(lr_size == 1 ? HostTensor::Of({1}, f, {0.1}) : HostTensor::Of({3}, f, {0.1, 1.5, 1.2}));
    return Instance{in, {{"weight_decay", 0.01}, {"grad_scale", 0.5}}};
  };
  c["sgd_update"] = {update({}, 1)};
  c["momentum_update"] = {update({false}, 1)};
  c["rmsprop_update"] = {update({true}, 1)};
  c["adam_update"] = {update({false, true}, 1), update({false, true}, 3)};
  c["lamb_update"] = {update({false, true}, 1), update({false, true}, 3)};
  auto matmul_update = [](bool ta, bool tb) {
    const DType f = DType::kFloat32;
    return Instance{{Random({5, 7}, f), Random(ta ? Shape{4, 5} : Shape{5, 4}, f), Random(tb ? Shape{7, 4} : Shape{4, 7}, f),
                     HostTensor::Of({1}, f, {0.1})},
                    {{"weight_decay", 0.01}, {"grad_scale", 0.5}, {"transpose_a", ta}, {"transpose_b", tb}}};
  };
  c["matmul_sgd_update"] = {matmul_update(false, false), matmul_update(true, false), matmul_update(false, true)};
  c["bias_add_grad_sgd_update"] = {
      Instance{{Random({7}, DType::kFloat32), Random({5, 7}, DType::kFloat32), HostTensor::Of({1}, DType::kFloat32, {0.1})},
               {{"weight_decay", 0.01}, {"grad_scale", 0.5}}},
      Instance{{Random({4}, DType::kFloat32), Random({3, 4, 2}, DType::kFloat32), HostTensor::Of({1}, DType::kFloat32, {0.1})},
               {{"axis", int64_t{1}}}}};
  return c;
}

// ---- Layouts -------------------------------------------------------------------------------

// Bytes of `t` viewed as (outer, extent, inner) around `axis`.
struct Layout {
  int64_t outer = 1, extent = 1, inner_bytes = 1;
};
Layout LayoutOf(const TensorDesc& d, int64_t axis) {
  AxisSplit s = SplitAt(d.shape, axis);
  return Layout{s.outer, s.channels, s.inner * static_cast<int64_t>(DTypeSize(d.dtype))};
}

HostTensor SliceAxis(const HostTensor& t, int64_t axis, int64_t begin, int64_t length) {
  Shape shape = t.desc.shape;
  shape[static_cast<size_t>(axis)] = length;
  HostTensor out = HostTensor::Of(shape, t.desc.dtype, {});
  const Layout l = LayoutOf(t.desc, axis);
  for (int64_t o = 0; o < l.outer; ++o)
    std::memcpy(out.bytes.data() + o * length * l.inner_bytes, t.bytes.data() + (o * l.extent + begin) * l.inner_bytes,
                static_cast<size_t>(length * l.inner_bytes));
  return out;
}

HostTensor ConcatAxis(const std::vector<HostTensor>& parts, int64_t axis) {
  Shape shape = parts[0].desc.shape;
  int64_t total = 0;
  for (const HostTensor& p : parts) total += p.desc.shape[static_cast<size_t>(axis)];
  shape[static_cast<size_t>(axis)] = total;
  HostTensor out = HostTensor::Of(shape, parts[0].desc.dtype, {});
  const Layout l = LayoutOf(out.desc, axis);
  int64_t begin = 0;
  for (const HostTensor& p : parts) {
    const int64_t length = p.desc.shape[static_cast<size_t>(axis)];
    for (int64_t o = 0; o < l.outer; ++o)
      std::memcpy(out.bytes.data() + (o * l.extent + begin) * l.inner_bytes, p.bytes.data() + o * length * l.inner_bytes,
                  static_cast<size_t>(length * l.inner_bytes));
    begin += length;
  }
  return out;
}

bool IsFloat(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

// The logical `whole` laid out as `sbp` over `parts` devices: one tensor per device.
std::vector<HostTensor> Distribute(const HostTensor& whole, const Sbp& sbp, int64_t parts) {
  std::vector<HostTensor> out;
  if (sbp.kind == SbpKind::kBroadcast) return std::vector<HostTensor>(static_cast<size_t>(parts), whole);
  if (sbp.kind == SbpKind::kSplit) {
    int64_t begin = 0;
    for (int64_t size : BalancedSplit(whole.desc.shape[static_cast<size_t>(sbp.axis)], parts)) {
      out.push_back(SliceAxis(whole, sbp.axis, begin, size));
      begin += size;
    }
    return out;
  }
  // Partial sums: random parts (integers for integer tensors), the last one the remainder.
  HostTensor last = whole;
  for (int64_t p = 0; p + 1 < parts; ++p) {
    HostTensor part = whole;
    for (int64_t i = 0; i < whole.desc.num_elements(); ++i) {
      const double v = IsFloat(whole.desc.dtype) ? Uniform(-1, 1) : std::floor(Uniform(-3, 4));
      part.set(i, v);
      last.set(i, last.at(i) - v);
    }
    out.push_back(part);
  }
  out.push_back(last);
  return out;
}

// Compares `got` with the single-device `want`: integers exactly, floats within 1e-5 (float32)
// or 1e-10 (float64) relative, absolute below magnitude 1.
void ExpectClose(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.desc, want.desc) << what;
  const double tolerance = want.desc.dtype == DType::kFloat32 ? 1e-5 : 1e-10;
  int reported = 0;
  for (int64_t i = 0; i < want.desc.num_elements(); ++i) {
    const double g = got.at(i), w = want.at(i);
    const bool ok = IsFloat(want.desc.dtype) ? std::abs(g - w) <= tolerance * std::max(1.0, std::abs(w)) : g == w;
    if (!ok && reported++ < 3) ADD_FAILURE() << what << " [" << i << "]: got " << g << ", want " << w;
  }
}

// Checks device tensors laid out as `sbp` against the logical `want`.
void ExpectAssembled(const std::vector<HostTensor>& devices, const Sbp& sbp, const HostTensor& want, const std::string& what) {
  if (sbp.kind == SbpKind::kSplit) return ExpectClose(ConcatAxis(devices, sbp.axis), want, what + " (concatenated)");
  if (sbp.kind == SbpKind::kBroadcast) {
    for (size_t d = 0; d < devices.size(); ++d) ExpectClose(devices[d], want, what + " on device " + std::to_string(d));
    return;
  }
  HostTensor sum = devices[0];
  for (size_t d = 1; d < devices.size(); ++d)
    for (int64_t i = 0; i < sum.desc.num_elements(); ++i) sum.set(i, sum.at(i) + devices[d].at(i));
  ExpectClose(sum, want, what + " (summed)");
}

// ---- The harness ---------------------------------------------------------------------------

// One kernel and the tensors it acts on (inputs written in place where the op does).
struct Runner {
  KernelFn kernel;
  std::vector<HostTensor> inputs, outputs;
  Status Act(int64_t iteration) {
    std::vector<TensorView> in_views, out_views;
    for (HostTensor& t : inputs) in_views.push_back(t.view());
    for (HostTensor& t : outputs) out_views.push_back(t.view());
    KernelContext context{&in_views, &out_views, iteration};
    return kernel(context);
  }
};

StatusOr<Runner> MakeRunner(const OpDef& def, std::vector<HostTensor> inputs, const std::vector<TensorDesc>& outputs, const Attrs& attrs) {
  KernelInit init;
  for (const HostTensor& t : inputs) init.inputs.push_back(t.desc);
  init.outputs = outputs;
  init.attrs = attrs;
  Runner runner;
  AF_ASSIGN_OR_RETURN(runner.kernel, MakeCpuKernel(def.type, init));
  runner.inputs = std::move(inputs);
  for (const TensorDesc& d : outputs) runner.outputs.push_back(HostTensor::Of(d.shape, d.dtype, {}));
  return runner;
}

// Kernels keep state between acts (a dropout stream, in-place statistics and optimizer state):
// each signature runs this many acts, every one compared.
constexpr int64_t kActs = 2;

// One signature on `parts` devices against the single-device run; `what` names the case.
void CheckSignature(const OpDef& def, const Instance& instance, const SbpSignature& signature, int64_t parts, const std::string& what) {
  std::vector<TensorDesc> input_descs, output_descs;
  for (const HostTensor& t : instance.inputs) input_descs.push_back(t.desc);
  InferContext logical_infer;
  logical_infer.inputs = input_descs;
  logical_infer.attrs = instance.attrs;
  Status inferred_logical = def.infer(logical_infer);
  ASSERT_TRUE(inferred_logical.ok()) << what << ": " << inferred_logical.ToString();
  output_descs = logical_infer.outputs;
  auto logical = MakeRunner(def, instance.inputs, output_descs, instance.attrs);
  ASSERT_TRUE(logical.ok()) << what << ": single-device kernel: " << logical.status().ToString();

  // distributed[i][d]: input i on device d.
  std::vector<std::vector<HostTensor>> distributed;
  for (size_t i = 0; i < instance.inputs.size(); ++i) distributed.push_back(Distribute(instance.inputs[i], signature.inputs[i], parts));
  std::vector<Runner> devices;
  for (int64_t d = 0; d < parts; ++d) {
    const std::string on = what + " device " + std::to_string(d);
    PhysicalContext physical;
    physical.logical_inputs = input_descs;
    physical.logical_outputs = output_descs;
    physical.attrs = instance.attrs;
    physical.signature = signature;
    physical.parts = parts;
    physical.index = d;
    std::vector<HostTensor> inputs;
    for (size_t i = 0; i < input_descs.size(); ++i) {
      auto shape = PhysicalShape(input_descs[i].shape, signature.inputs[i], parts, d);
      ASSERT_TRUE(shape.ok()) << on << " input " << i << ": " << shape.status().ToString();
      ASSERT_EQ(shape.value(), distributed[i][d].desc.shape) << on << " input " << i;
      physical.physical_inputs.push_back(TensorDesc{shape.value(), input_descs[i].dtype});
      inputs.push_back(distributed[i][d]);
    }
    for (size_t o = 0; o < output_descs.size(); ++o) {
      auto shape = PhysicalShape(output_descs[o].shape, signature.outputs[o], parts, d);
      ASSERT_TRUE(shape.ok()) << on << " output " << o << ": " << shape.status().ToString();
      physical.physical_outputs.push_back(TensorDesc{shape.value(), output_descs[o].dtype});
    }
    auto attrs = PhysicalAttrs(def, physical);
    ASSERT_TRUE(attrs.ok()) << on << ": physical attributes: " << attrs.status().ToString();
    // Shape inference on the share agrees with the physical shapes the layout gives.
    InferContext infer;
    infer.inputs = physical.physical_inputs;
    infer.attrs = attrs.value();
    Status inferred = def.infer(infer);
    ASSERT_TRUE(inferred.ok()) << on << ": inference on the physical inputs: " << inferred.ToString();
    EXPECT_EQ(infer.outputs, physical.physical_outputs) << on << ": inferred physical outputs differ from the layout's";
    auto runner = MakeRunner(def, std::move(inputs), physical.physical_outputs, attrs.value());
    ASSERT_TRUE(runner.ok()) << on << ": " << runner.status().ToString();
    devices.push_back(std::move(runner).value());
  }
  for (int64_t act = 0; act < kActs; ++act) {
    const std::string at = what + " act " + std::to_string(act);
    Status ran = logical.value().Act(act);
    ASSERT_TRUE(ran.ok()) << at << ": single-device run: " << ran.ToString();
    for (int64_t d = 0; d < parts; ++d) {
      Status device_ran = devices[static_cast<size_t>(d)].Act(act);
      ASSERT_TRUE(device_ran.ok()) << at << " device " << d << ": " << device_ran.ToString();
    }
    auto gather = [&](bool output, size_t index) {
      std::vector<HostTensor> parts_of;
      for (const Runner& r : devices) parts_of.push_back(output ? r.outputs[index] : r.inputs[index]);
      return parts_of;
    };
    for (size_t o = 0; o < output_descs.size(); ++o)
      ExpectAssembled(gather(true, o), signature.outputs[o], logical.value().outputs[o],
                      at + " output " + (o < def.output_names.size() ? def.output_names[o] : std::to_string(o)));
    for (int i : def.mutable_inputs) {
      const size_t index = static_cast<size_t>(i);
      const Sbp& sbp = signature.inputs[index];
      EXPECT_NE(sbp.kind, SbpKind::kPartialSum) << what << ": in-place input " << i << " cannot be a partial sum";
      if (sbp.kind != SbpKind::kPartialSum)
        ExpectAssembled(gather(false, index), sbp, logical.value().inputs[index], at + " in-place input " + def.input_names[index]);
    }
  }
}

bool AllBroadcastSignature(const SbpSignature& s) {
  for (const auto* list : {&s.inputs, &s.outputs})
    for (const Sbp& sbp : *list)
      if (sbp.kind != SbpKind::kBroadcast) return false;
  return true;
}

TEST(SbpShardedTest, EveryOpsSignaturesMatchOneDevice) {
  RegisterAllOps();
  const auto instances = Instances();
  // AF_PRINT_SBP=1 prints each op's signatures on its first instance over 3 devices.
  const bool print = std::getenv("AF_PRINT_SBP") != nullptr;
  int64_t checked = 0;
  for (const std::string& type : OpRegistry::Global().Types()) {
    // The compiler's layout conversion reads every device's shard: kernels/boxing_test.cc.
    if (type == "boxing") continue;
    const OpDef& def = *OpRegistry::Global().Find(type).value();
    auto it = instances.find(type);
    if (it == instances.end()) {
      ADD_FAILURE() << "op '" << type << "' has no instance in kernels/sbp_sharded_test.cc: add one";
      continue;
    }
    EXPECT_TRUE(def.sbp) << "op '" << type << "' declares no SBP function";
    std::set<std::string> distributed;  // signatures other than all-broadcast, over every instance
    for (size_t n = 0; n < it->second.size(); ++n) {
      const Instance& instance = it->second[n];
      std::vector<HostTensor> scratch = instance.inputs;
      auto logical = RunOpInPlace(type, scratch, instance.attrs);
      ASSERT_TRUE(logical.ok()) << type << " instance " << n << ": " << logical.status().ToString();
      for (int64_t parts : {2, 3}) {
        SbpContext context;
        for (const HostTensor& t : instance.inputs) context.inputs.push_back(t.desc);
        for (const HostTensor& t : logical.value()) context.outputs.push_back(t.desc);
        context.attrs = instance.attrs;
        context.parts = parts;
        auto signatures = CandidateSbpSignatures(def, context);
        ASSERT_TRUE(signatures.ok()) << type << " instance " << n << ": " << signatures.status().ToString();
        bool has_broadcast = false;
        std::set<std::string> seen;
        std::string listed;
        for (const SbpSignature& signature : signatures.value()) {
          const std::string text = signature.ToString();
          EXPECT_TRUE(seen.insert(text).second) << type << " instance " << n << " lists " << text << " twice";
          has_broadcast |= AllBroadcastSignature(signature);
          if (!AllBroadcastSignature(signature)) distributed.insert(text);
          listed += (listed.empty() ? "" : "  ") + text;
          CheckSignature(def, instance, signature, parts,
                         type + " instance " + std::to_string(n) + " " + text + " on " + std::to_string(parts) + " devices");
          ++checked;
        }
        EXPECT_TRUE(has_broadcast) << type << " instance " << n << ": no all-broadcast signature";
        if (print && n == 0 && parts == 3) std::cout << type << ": " << listed << "\n";
      }
    }
    // Every op but the ones that are only correct whole has some distributed signature.
    if (type != "lamb_update") EXPECT_FALSE(distributed.empty()) << type << " offers only all-broadcast";
  }
  for (const auto& [type, unused] : instances) EXPECT_TRUE(OpRegistry::Global().Find(type).ok()) << "instance for unknown op " << type;
  EXPECT_GT(checked, 500);
}

// The harness itself: a wrong signature must fail it. These are also the restrictions the
// ops' SBP functions make: relu is not linear (no P->P); a max over a split axis is no partial
// sum; softmax cannot split its own axis; batch-norm training statistics span the whole batch;
// a grouped convolution's channel split breaks its groups; and the hooks are needed (the cases
// run without them): a dropout share must draw its own place in the stream, reduce_mean's share
// must divide by the logical count.
TEST(SbpShardedTest, HarnessRejectsWrongSignatures) {
  RegisterAllOps();
  struct Wrong {
    std::string type, signature;
    Instance instance;
  };
  const std::vector<Wrong> wrong = {
      {"relu", "P->P", {{Random({5, 7})}, {}}},
      {"reduce_max", "S(1)->P", {{Random({5, 7})}, Axes({1}, false)}},
      {"matmul", "S(0),S(1)->S(0)", {{Random({5, 7}), Random({7, 6})}, {}}},
      {"reduce_mean", "S(0)->P", {{Random({5, 7})}, Axes({0}, false)}},
      {"softmax", "S(1)->S(1)", {{Random({5, 7})}, {}}},
      {"batch_normalization",
       "S(0),B,B,B,B->S(0),B,B",
       {{Random({5, 4}), Random({4}), Random({4}), Random({4}), Positive({4})}, {{"axis", int64_t{1}}, {"training", true}}}},
      {"dropout", "S(0)->S(0),S(0)", {{Random({5, 7})}, {{"rate", 0.5}, {"seed", int64_t{7}}}}},
      {"conv2d", "B,S(0)->S(1)", {{Random({5, 4, 6, 6}), Random({6, 2, 3, 3})}, {{"padding", std::string("VALID")}, {"groups", int64_t{2}}}}},
  };
  for (const Wrong& w : wrong) {
    const OpDef& def = *OpRegistry::Global().Find(w.type).value();
    OpDef unhooked = def;
    unhooked.physical_attrs = nullptr;
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD,
                                                           &failures);
      CheckSignature(unhooked, w.instance, ParseSbpSignature(w.signature).value(), 3, w.type + " " + w.signature);
    }
    EXPECT_GT(failures.size(), 0) << w.type << " " << w.signature << " passed the harness";
  }
}

}  // namespace
}  // namespace actorflow::testing
