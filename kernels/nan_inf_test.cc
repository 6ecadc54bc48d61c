// NaN and ±Inf through every registered op, against what NumPy (and PyTorch, for gradients)
// give: a NaN input makes a NaN output wherever the math reads it (relu, max, max pooling and
// argmax included), Inf follows IEEE arithmetic. The table has one case per op type; a newly
// registered op without a case (or an exemption saying why) fails the test by name.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Two float64 vectors covering NaN, ±Inf, a negative, zero and a positive in every position.
const std::vector<double> kA = {kNan, kInf, -kInf, -1.5, 0.0, 2.0};
const std::vector<double> kB = {1.25, kNan, 2.0, -kInf, kInf, -0.5};

// What the op observably produces: its outputs, then its inputs (in-place ops write those).
struct Observed {
  std::vector<HostTensor> outputs;
  std::vector<HostTensor> inputs;
};

StatusOr<Observed> RunObserved(const std::string& type, std::vector<HostTensor> inputs, const Attrs& attrs) {
  Observed observed;
  observed.inputs = std::move(inputs);
  AF_ASSIGN_OR_RETURN(observed.outputs, RunOpInPlace(type, observed.inputs, attrs));
  return observed;
}

// Same value, NaN equal to NaN, Inf to Inf of its sign; finite values within 1e-12 relative.
bool Same(double got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= 1e-12 * std::max(1.0, std::abs(want));
}

void ExpectValues(const HostTensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.desc.num_elements(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(Same(got.at(static_cast<int64_t>(i)), want[i])) << what << " [" << i << "]: got " << got.at(i) << ", want " << want[i];
}

// NaN exactly at `positions` of `got` (other entries not NaN).
void ExpectNanAt(const HostTensor& got, const std::vector<int64_t>& positions, const std::string& what) {
  for (int64_t i = 0; i < got.desc.num_elements(); ++i) {
    bool expected = std::find(positions.begin(), positions.end(), i) != positions.end();
    EXPECT_EQ(std::isnan(got.at(i)), expected) << what << " [" << i << "] = " << got.at(i);
  }
}

std::vector<double> Map1(const std::vector<double>& x, const std::function<double(double)>& f) {
  std::vector<double> y;
  for (double v : x) y.push_back(f(v));
  return y;
}
std::vector<double> Map2(const std::vector<double>& a, const std::vector<double>& b, const std::function<double(double, double)>& f) {
  std::vector<double> y;
  for (size_t i = 0; i < a.size(); ++i) y.push_back(f(a[i], b[i]));
  return y;
}
// np.maximum semantics.
double NpMax(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNan : std::max(a, b); }

struct Case {
  std::vector<HostTensor> inputs;
  Attrs attrs;
  std::function<void(const Observed&)> check;
};

Case Unary(const std::function<double(double)>& f) {
  return Case{{F64({6}, kA)}, {}, [f](const Observed& o) { ExpectValues(o.outputs[0], Map1(kA, f), "out"); }};
}
// A `<op>_grad` taking (v, dy): v = kA, dy = kB.
Case UnaryGrad(const std::function<double(double, double)>& f) {
  return Case{{F64({6}, kA), F64({6}, kB)}, {}, [f](const Observed& o) { ExpectValues(o.outputs[0], Map2(kA, kB, f), "dx"); }};
}
Case Binary(const std::function<double(double, double)>& f) {
  return Case{{F64({6}, kA), F64({6}, kB)}, {}, [f](const Observed& o) { ExpectValues(o.outputs[0], Map2(kA, kB, f), "out"); }};
}
// Layout ops and others that move values: the output holds exactly the NaN count of the input.
Case Moves(std::vector<HostTensor> inputs, Attrs attrs = {}) {
  int64_t nans = 0;
  for (int64_t i = 0; i < inputs[0].desc.num_elements(); ++i) nans += std::isnan(inputs[0].at(i));
  return Case{std::move(inputs), std::move(attrs), [nans](const Observed& o) {
                int64_t got = 0;
                for (int64_t i = 0; i < o.outputs[0].desc.num_elements(); ++i) got += std::isnan(o.outputs[0].at(i));
                EXPECT_EQ(got, nans) << "NaN entries in out";
              }};
}
// Ops whose every output entry reads every input entry (norms, statistics): a NaN anywhere
// makes every entry of `observed` (output or in-place input `index`) NaN.
Case AllNan(std::vector<HostTensor> inputs, Attrs attrs, bool in_place, size_t index) {
  return Case{std::move(inputs), std::move(attrs), [in_place, index](const Observed& o) {
                const HostTensor& t = in_place ? o.inputs.at(index) : o.outputs.at(index);
                for (int64_t i = 0; i < t.desc.num_elements(); ++i) EXPECT_TRUE(std::isnan(t.at(i))) << "[" << i << "] = " << t.at(i);
              }};
}

// x(4,2) rows: NaN first, NaN second, +Inf with a finite, two -Inf.
const std::vector<double> kRows = {kNan, 5, 5, kNan, kInf, -1, -kInf, -kInf};

std::map<std::string, std::function<Case()>> Cases() {
  std::map<std::string, std::function<Case()>> c;
  c["relu"] = [] { return Unary([](double x) { return NpMax(x, 0.0); }); };
  c["sigmoid"] = [] { return Unary([](double x) { return 1.0 / (1.0 + std::exp(-x)); }); };
  c["tanh"] = [] { return Unary([](double x) { return std::tanh(x); }); };
  c["gelu"] = [] { return Unary([](double x) { return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2)); }); };
  c["exp"] = [] { return Unary([](double x) { return std::exp(x); }); };
  c["log"] = [] { return Unary([](double x) { return std::log(x); }); };
  c["sqrt"] = [] { return Unary([](double x) { return std::sqrt(x); }); };
  c["square"] = [] { return Unary([](double x) { return x * x; }); };
  c["negative"] = [] { return Unary([](double x) { return -x; }); };
  c["identity"] = [] { return Unary([](double x) { return x; }); };
  c["copy_h2d"] = [] { return Unary([](double x) { return x; }); };  // the CPU kernel: a copy
  c["copy_d2h"] = [] { return Unary([](double x) { return x; }); };
  c["boxing"] = [] {  // one device on both sides: a copy
    Case k = Unary([](double x) { return x; });
    k.attrs = Attrs{{"in_sbp", std::string("B")}, {"out_sbp", std::string("B")}};
    return k;
  };
  // relu_grad takes y: PyTorch's threshold_backward passes dy where y > 0, else 0.
  // clamp keeps NaN (torch.clamp); its gradient is 0 for a NaN x and outside the bounds.
  c["clamp"] = [] {
    Case k = Unary([](double x) { return std::isnan(x) ? x : std::min(std::max(x, -1.0), 1.0); });
    k.attrs = Attrs{{"min", -1.0}, {"max", 1.0}};
    return k;
  };
  c["clamp_grad"] = [] {
    Case k = UnaryGrad([](double x, double dy) { return x >= -1.0 && x <= 1.0 ? dy : 0.0; });
    k.attrs = Attrs{{"min", -1.0}, {"max", 1.0}};
    return k;
  };
  c["relu_grad"] = [] { return UnaryGrad([](double y, double dy) { return y > 0 ? dy : 0.0; }); };
  c["sigmoid_grad"] = [] { return UnaryGrad([](double y, double dy) { return dy * y * (1 - y); }); };
  c["tanh_grad"] = [] { return UnaryGrad([](double y, double dy) { return dy * (1 - y * y); }); };
  c["gelu_grad"] = [] {
    return UnaryGrad([](double x, double dy) {
      return dy * (0.5 * (1 + std::erf(x * M_SQRT1_2)) + x * std::exp(-0.5 * x * x) * 0.3989422804014327);
    });
  };
  c["exp_grad"] = [] { return UnaryGrad([](double y, double dy) { return dy * y; }); };
  c["log_grad"] = [] { return UnaryGrad([](double x, double dy) { return dy / x; }); };
  c["sqrt_grad"] = [] { return UnaryGrad([](double y, double dy) { return dy * 0.5 / y; }); };
  // math_ops.cc: NaN stays NaN through pow; the gradients follow PyTorch (abs's sign is 0 at NaN).
  auto with = [](Case k, Attrs attrs) {
    k.attrs = std::move(attrs);
    return k;
  };
  c["scalar_pow"] = [with] { return with(Unary([](double x) { return x * x * x; }), Attrs{{"exponent", 3.0}}); };
  c["scalar_pow_grad"] = [with] {
    return with(UnaryGrad([](double x, double dy) { return dy * 3 * x * x; }), Attrs{{"exponent", 3.0}});
  };
  c["abs"] = [] { return Unary([](double x) { return std::abs(x); }); };
  // abs_grad multiplies (dy * sign(x), as PyTorch: Inf or NaN dy at 0 gives NaN).
  c["abs_grad"] = [] { return UnaryGrad([](double x, double dy) { return dy * (x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0); }); };
  // Comparisons: NaN compares unequal to everything (IEEE, as NumPy).
  c["equal"] = [] { return Binary([](double a, double b) { return a == b ? 1.0 : 0.0; }); };
  c["not_equal"] = [] { return Binary([](double a, double b) { return a != b ? 1.0 : 0.0; }); };
  c["less"] = [] { return Binary([](double a, double b) { return a < b ? 1.0 : 0.0; }); };
  c["less_equal"] = [] { return Binary([](double a, double b) { return a <= b ? 1.0 : 0.0; }); };
  c["greater"] = [] { return Binary([](double a, double b) { return a > b ? 1.0 : 0.0; }); };
  c["greater_equal"] = [] { return Binary([](double a, double b) { return a >= b ? 1.0 : 0.0; }); };
  c["square_grad"] = [] { return UnaryGrad([](double x, double dy) { return dy * 2 * x; }); };
  c["add"] = [] { return Binary([](double a, double b) { return a + b; }); };
  c["sub"] = [] { return Binary([](double a, double b) { return a - b; }); };
  c["mul"] = [] { return Binary([](double a, double b) { return a * b; }); };
  c["div"] = [] { return Binary([](double a, double b) { return a / b; }); };
  c["add_n"] = [] { return Binary([](double a, double b) { return a + b; }); };
  c["scalar_add"] = [] {
    Case k = Unary([](double x) { return x + 0.5; });
    k.attrs = Attrs{{"scalar", 0.5}};
    return k;
  };
  c["scalar_mul"] = [] {
    Case k = Unary([](double x) { return x * 0.0; });  // NaN and ±Inf times 0 are NaN
    k.attrs = Attrs{{"scalar", 0.0}};
    return k;
  };
  auto rows = [](std::vector<double> want, Attrs attrs = Attrs{{"axis", std::vector<int64_t>{1}}}) {
    return Case{{F64({4, 2}, kRows)}, std::move(attrs), [want](const Observed& o) { ExpectValues(o.outputs[0], want, "out"); }};
  };
  c["reduce_max"] = [rows] { return rows({kNan, kNan, kInf, -kInf}); };
  c["reduce_sum"] = [rows] { return rows({kNan, kNan, kInf, -kInf}); };
  c["reduce_mean"] = [rows] { return rows({kNan, kNan, kInf, -kInf}); };
  c["argmax"] = [rows] {
    Case k = rows({}, Attrs{{"axis", int64_t{1}}});
    k.check = [](const Observed& o) { ExpectValues(o.outputs[0], {0, 1, 0, 0}, "argmax"); };  // np.argmax
    return k;
  };
  c["sum_of_squares"] = [rows] { return rows({kNan}, {}); };
  // Max's gradient goes where the max came from: the NaN entries of a NaN row.
  c["reduce_max_grad"] = [] {
    return Case{{F64({4, 2}, kRows), F64({4, 1}, {kNan, kNan, kInf, -kInf}), F64({4, 1}, {1, 2, 3, 4})},
                {{"axis", std::vector<int64_t>{1}}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {1, 0, 0, 2, 3, 0, 4, 4}, "dx"); }};
  };
  c["reduce_sum_like"] = [] {
    return Case{{F64({4, 2}, kRows), F64({2})}, {}, [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kNan}, "out"); }};
  };
  c["broadcast_like"] = [] {
    return Case{{F64({2}, {kNan, -kInf}), F64({3, 2})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, -kInf, kNan, -kInf, kNan, -kInf}, "out"); }};
  };
  // Rows: a NaN; +Inf (exp(Inf - Inf) is NaN in NumPy's max-subtracted form); a -Inf (its
  // probability is 0, the others finite).
  auto softmax_rows = std::vector<double>{kNan, 1, 2, kInf, 1, 2, 1, -kInf, 2};
  auto softmax_ref = [softmax_rows](bool log) {
    std::vector<double> out;
    for (int r = 0; r < 3; ++r) {
      double m = -kInf, sum = 0;
      for (int j = 0; j < 3; ++j) m = NpMax(m, softmax_rows[r * 3 + j]);
      for (int j = 0; j < 3; ++j) sum += std::exp(softmax_rows[r * 3 + j] - m);
      for (int j = 0; j < 3; ++j) {
        double z = softmax_rows[r * 3 + j] - m;
        out.push_back(log ? z - std::log(sum) : std::exp(z) / sum);
      }
    }
    return out;
  };
  c["softmax"] = [=] {
    return Case{{F64({3, 3}, softmax_rows)}, {}, [=](const Observed& o) { ExpectValues(o.outputs[0], softmax_ref(false), "out"); }};
  };
  c["log_softmax"] = [=] {
    return Case{{F64({3, 3}, softmax_rows)}, {}, [=](const Observed& o) { ExpectValues(o.outputs[0], softmax_ref(true), "out"); }};
  };
  c["sparse_softmax_cross_entropy"] = [=] {
    return Case{{I32({3}, {1, 0, 0}), F64({3, 3}, softmax_rows)}, {}, [=](const Observed& o) {
                  std::vector<double> log_p = softmax_ref(true);
                  ExpectValues(o.outputs[0], {-log_p[1], -log_p[3], -log_p[6]}, "loss");
                  ExpectValues(o.outputs[1], softmax_ref(false), "prob");
                }};
  };
  c["sparse_softmax_cross_entropy_grad"] = [] {
    return Case{{I32({2}, {0, 1}), F64({2, 3}, kA), F64({2}, {1, 2})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kInf, -kInf, -3, -2, 4}, "dlogits"); }};
  };
  // The fused form: the forward op's loss and the gradient op's dlogits, NaN and Inf alike.
  c["sparse_softmax_cross_entropy_with_grad"] = [] {
    return Case{{I32({2}, {0, 1}), F64({2, 3}, {kNan, 0, 1, 0, kInf, 0}), F64({2}, {1, 2})}, {}, [](const Observed& o) {
                  ExpectValues(o.outputs[0], {kNan, kNan}, "loss");
                  ExpectValues(o.outputs[1], {kNan, kNan, kNan, kNan, kNan, kNan}, "dlogits");
                }};
  };
  // Max pooling of a window holding a NaN is NaN (PyTorch); the fast 2x2 path and the generic
  // path (3x3 window, padding) both.
  const std::vector<double> image = {kNan, 1, 5, -kInf, 2, 3, 4, kInf};
  c["max_pool2d"] = [image] {
    return Case{{F64({1, 1, 2, 4}, image)}, {{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kInf}, "out"); }};
  };
  c["avg_pool2d"] = [image] {
    return Case{{F64({1, 1, 2, 4}, image)}, {{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kNan}, "out"); }};
  };
  c["max_pool2d_grad"] = [image] {
    return Case{{F64({1, 1, 2, 4}, image), F64({1, 1, 1, 2}, {kNan, kInf}), F64({1, 1, 1, 2}, {7, 9})},
                {{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {7, 0, 0, 0, 0, 0, 0, 9}, "dx"); }};
  };
  // Adaptive windows of 1x2 over a 2x4 image: a NaN or both infinities make NaN, like avg_pool2d.
  c["adaptive_avg_pool2d"] = [image] {
    return Case{{F64({1, 1, 2, 4}, image)}, {{"output_size", std::vector<int64_t>{2, 2}}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, -kInf, 2.5, kInf}, "out"); }};
  };
  c["adaptive_avg_pool2d_grad"] = [image] {
    return Case{{F64({1, 1, 1, 2}, {kNan, 4}), F64({1, 1, 2, 4}, image)}, {{"output_size", std::vector<int64_t>{1, 2}}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kNan, 1, 1, kNan, kNan, 1, 1}, "dx"); }};
  };
  c["avg_pool2d_grad"] = [image] {
    return Case{{F64({1, 1, 1, 2}, {kNan, 4}), F64({1, 1, 2, 4}, image)},
                {{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kNan, 1, 1, kNan, kNan, 1, 1}, "dx"); }};
  };
  // (2,2) . (2,2): a NaN reaches its whole row, Inf * 0 is NaN.
  c["matmul"] = [] {
    return Case{{F64({2, 2}, {kNan, 1, kInf, 0}), F64({2, 2}, {0, 2, 1, 3})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kNan, kNan, kInf}, "out"); }};
  };
  c["bias_add"] = [] {
    Case k{{F64({3, 2}, kA), F64({2}, {1, -kInf})}, {{"axis", int64_t{1}}, {"fuse_relu", true}}, nullptr};
    k.check = [](const Observed& o) {
      std::vector<double> want;
      for (int i = 0; i < 6; ++i) want.push_back(NpMax(kA[i] + (i % 2 ? -kInf : 1.0), 0.0));
      ExpectValues(o.outputs[0], want, "relu(x + bias)");
    };
    return k;
  };
  c["bias_add_grad"] = [] {
    return Case{{F64({3, 2}, kA)}, {{"axis", int64_t{1}}}, [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kInf}, "dbias"); }};
  };
  // 1x1 convolutions are elementwise scalings: exact NaN positions.
  c["conv2d"] = [] {
    return Case{{F64({1, 1, 2, 3}, kA), F64({1, 1, 1, 1}, {2})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], Map1(kA, [](double x) { return 2 * x; }), "out"); }};
  };
  c["conv2d_grad_data"] = [] {
    return Case{{F64({1, 1, 2, 3}, kA), F64({1, 1, 1, 1}, {2}), F64({1, 1, 2, 3})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], Map1(kA, [](double x) { return 2 * x; }), "dx"); }};
  };
  c["conv2d_grad_filter"] = [] {
    return Case{{F64({1, 1, 2, 3}, kA), F64({1, 1, 2, 3}, {1, 1, 1, 1, 1, 1}), F64({1, 1, 1, 1})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan}, "dfilter"); }};
  };
  c["zero_pad2d"] = [] { return Moves({F64({1, 1, 2, 3}, kA)}, {{"padding", int64_t{1}}}); };
  c["reflection_pad2d"] = [] {
    return Case{{F64({1, 1, 2, 3}, kA)}, {{"padding", int64_t{1}}},
                [](const Observed& o) { ExpectNanAt(o.outputs[0], {6, 16}, "out"); }};  // x[0,0] and its row reflection
  };
  c["zero_pad2d_grad"] = [] {
    return Case{{F64({1, 1, 3, 3}, {1, 1, 1, 1, kNan, 1, 1, 1, kInf}), F64({1, 1, 1, 1})}, {{"padding", int64_t{1}}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan}, "dx"); }};
  };
  c["reflection_pad2d_grad"] = [] {
    return Case{{F64({1, 1, 4, 5}, std::vector<double>(20, 1.0)), F64({1, 1, 2, 3}, kA)}, {{"padding", int64_t{1}}},
                [](const Observed& o) { ExpectNanAt(o.outputs[0], {}, "dx of a NaN-free dy"); }};
  };
  c["reshape"] = [] { return Moves({F64({2, 3}, kA)}, {{"shape", std::vector<int64_t>{3, 2}}}); };
  c["flatten"] = [] { return Moves({F64({2, 3}, kA)}); };
  c["transpose"] = [] { return Moves({F64({2, 3}, kA)}, {{"perm", std::vector<int64_t>{1, 0}}}); };
  c["concat"] = [] {
    return Case{{F64({6}, kA), F64({6}, kB)}, {}, [](const Observed& o) {
                  std::vector<double> want = kA;
                  want.insert(want.end(), kB.begin(), kB.end());
                  ExpectValues(o.outputs[0], want, "out");
                }};
  };
  c["slice"] = [] {
    return Case{{F64({6}, kA)}, {{"begin", std::vector<int64_t>{0}}, {"end", std::vector<int64_t>{3}}, {"stride", std::vector<int64_t>{1}}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kInf, -kInf}, "out"); }};
  };
  c["slice_grad"] = [] {
    return Case{{F64({3}, {kNan, kInf, -kInf}), F64({6})},
                {{"begin", std::vector<int64_t>{0}}, {"end", std::vector<int64_t>{3}}, {"stride", std::vector<int64_t>{1}}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kInf, -kInf, 0, 0, 0}, "dx"); }};
  };
  c["cast"] = [] {
    return Case{{F64({6}, kA)}, {{"dtype", std::string("float32")}}, [](const Observed& o) { ExpectValues(o.outputs[0], kA, "out"); }};
  };
  // zeros_like/ones_like read only the shape (np.zeros_like of a NaN array is zeros).
  c["zeros_like"] = [] { return Case{{F64({6}, kA)}, {}, [](const Observed& o) { ExpectValues(o.outputs[0], std::vector<double>(6, 0.0), "out"); }}; };
  c["ones_like"] = [] { return Case{{F64({6}, kA)}, {}, [](const Observed& o) { ExpectValues(o.outputs[0], std::vector<double>(6, 1.0), "out"); }}; };
  c["constant"] = [] {
    return Case{{}, {{"shape", std::vector<int64_t>{2}}, {"value", kNan}, {"dtype", std::string("float64")}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kNan}, "out"); }};
  };
  // Dropout keeps x * mask (NaN * 0 is NaN, as x * mask in NumPy): rate 0 keeps everything.
  c["dropout"] = [] { return Case{{F64({6}, kA)}, {{"rate", 0.0}}, [](const Observed& o) { ExpectValues(o.outputs[0], kA, "out"); }}; };
  // gather_flat copies elements (NaN and Inf with them); its gradient adds them up.
  c["gather_flat"] = [] {
    return Case{{F64({6}, kA), I64({3}, {1, 0, 1})}, {}, [](const Observed& o) { ExpectValues(o.outputs[0], {kA[1], kA[0], kA[1]}, "out"); }};
  };
  c["gather_flat_grad"] = [] {
    return Case{{F64({2}, {kInf, kNan}), I64({2}, {0, 0}), F64({3}, {0, 0, 0})}, {},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, 0, 0}, "dx"); }};
  };
  c["one_hot"] = [] {
    return Case{{I32({2}, {1, 0})}, {{"depth", int64_t{2}}, {"on_value", kInf}, {"off_value", kNan}, {"dtype", std::string("float64")}},
                [](const Observed& o) { ExpectValues(o.outputs[0], {kNan, kInf, kInf, kNan}, "out"); }};
  };
  // Batch statistics over a channel holding a NaN are NaN, and so are the moving statistics the
  // op writes in place (inputs 3 and 4).
  c["batch_normalization"] = [] {
    return Case{{F64({3, 2}, {kNan, 1, 2, 3, 4, 5}), F64({2}, {1, 1}), F64({2}, {0, 0}), F64({2}, {0, 0}), F64({2}, {1, 1})},
                {{"axis", int64_t{1}}, {"training", true}, {"momentum", 0.9}, {"epsilon", 1e-5}}, [](const Observed& o) {
                  ExpectNanAt(o.outputs[0], {0, 2, 4}, "out");
                  ExpectNanAt(o.inputs[3], {0}, "moving_mean");
                  ExpectNanAt(o.inputs[4], {0}, "moving_variance");
                }};
  };
  c["batch_normalization_grad"] = [] {
    return Case{{F64({3, 2}, {1, 1, 2, 3, 4, 5}), F64({3, 2}, {kNan, 1, 1, 1, 1, 1}), F64({2}, {2, 3}), F64({2}, {1, 1}), F64({2}, {1, 1})},
                {{"axis", int64_t{1}}, {"training", true}}, [](const Observed& o) {
                  ExpectNanAt(o.outputs[0], {0, 2, 4}, "dx");  // batch statistics: dx reads every dy of the channel
                  ExpectNanAt(o.outputs[1], {0}, "dgamma");
                  ExpectNanAt(o.outputs[2], {0}, "dbeta");
                }};
  };
  // Updates: a NaN gradient entry makes that variable entry NaN (and its state), never 0.
  auto update = [](const std::string& type, int states) {
    return [type, states] {
      std::vector<HostTensor> in = {F32({4}, {1, 2, 3, 4}), F32({4}, {kNan, 1, -1, 2})};  // updates are float32
      for (int s = 0; s < states; ++s) in.push_back(F32({4}, {0, 0, 0, 0}));
      in.push_back(F32({1}, {0.1}));
      return Case{std::move(in), {}, [type, states](const Observed& o) {
                    // LAMB's trust ratio is 1 unless both norms are positive (as in the reference
                    // implementations), so a NaN norm leaves the other entries finite there too.
                    ExpectNanAt(o.inputs[0], {0}, "var");
                    for (int s = 0; s < states; ++s) EXPECT_TRUE(std::isnan(o.inputs[2 + s].at(0))) << "state " << s;
                  }};
    };
  };
  c["sgd_update"] = update("sgd_update", 0);
  c["momentum_update"] = update("momentum_update", 1);
  c["rmsprop_update"] = update("rmsprop_update", 1);
  c["adam_update"] = update("adam_update", 2);
  c["lamb_update"] = update("lamb_update", 2);
  // The fused SGD of a matmul gradient: a NaN in row 0 of a poisons row 0 of a·b, hence of var.
  c["matmul_sgd_update"] = [] {
    return Case{{F32({2, 2}, {1, 2, 3, 4}), F32({2, 1}, {kNan, 1}), F32({1, 2}, {1, -1}), F32({1}, {0.1})}, {},
                [](const Observed& o) { ExpectNanAt(o.inputs[0], {0, 1}, "var"); }};
  };
  // The fused bias gradient and SGD: a NaN in column 1 of dy poisons that column's sum, hence bias 1.
  c["bias_add_grad_sgd_update"] = [] {
    return Case{{F32({3}, {1, 2, 3}), F32({2, 3}, {1, kNan, 2, 3, 4, 5}), F32({1}, {0.1})}, {},
                [](const Observed& o) { ExpectNanAt(o.inputs[0], {1}, "var"); }};
  };
  return c;
}

TEST(NanInfTest, EveryOpFollowsNumPy) {
  RegisterAllOps();
  const auto cases = Cases();
  for (const std::string& type : OpRegistry::Global().Types()) {
    auto it = cases.find(type);
    if (it == cases.end()) {
      ADD_FAILURE() << "op '" << type << "' has no NaN/Inf case in kernels/nan_inf_test.cc: add one";
      continue;
    }
    SCOPED_TRACE("op " + type);
    Case k = it->second();
    auto observed = RunObserved(type, k.inputs, k.attrs);
    if (!observed.ok()) {
      ADD_FAILURE() << type << ": " << observed.status().ToString();
      continue;
    }
    k.check(observed.value());
  }
  for (const auto& [type, unused] : cases) EXPECT_TRUE(OpRegistry::Global().Find(type).ok()) << "case for unknown op " << type;
}

// Max pooling's generic path (3x3 windows, SAME padding) and float32 fast loops keep NaN too.
TEST(NanInfTest, MaxPoolGenericPathAndFloat32) {
  std::vector<double> x(16, 1.0);
  x[5] = kNan;  // (1,1): inside every 3x3 SAME window centred on rows/cols 0..2
  HostTensor y = Run1("max_pool2d", {F64({1, 1, 4, 4}, x)}, {{"ksize", int64_t{3}}, {"strides", int64_t{1}}, {"padding", std::string("SAME")}});
  ExpectNanAt(y, {0, 1, 2, 4, 5, 6, 8, 9, 10}, "max_pool2d 3x3 SAME");
  HostTensor relu = Run1("relu", {F32({6}, kA)});
  ExpectValues(relu, Map1(kA, [](double v) { return NpMax(v, 0.0); }), "relu float32");
  HostTensor max = Run1("reduce_max", {F32({4, 2}, kRows)}, {{"axis", std::vector<int64_t>{1}}});
  ExpectValues(max, {kNan, kNan, kInf, -kInf}, "reduce_max float32");
}

}  // namespace
}  // namespace actorflow::testing
