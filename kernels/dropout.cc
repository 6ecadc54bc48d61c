// dropout (training only; a predict job simply does not add it): x -> out = x * mask,
// mask = 0 with probability attr rate, else 1 / (1 - rate) (inverted dropout, so inference is
// the identity). The mask is an output of x's dtype so the gradient is mul(dy, mask). The
// generator (splitmix64, seeded by attr seed) lives in the kernel closure: one stream per op
// instance, reproducible across runs with the same seed.
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's state increment per draw

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += kGolden);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void RegisterDropoutOps(OpRegistry& registry) {
  OpDef def;
  def.type = "dropout";
  def.input_names = {"x"};
  def.output_names = {"out", "mask"};
  def.stateful_kernel = true;
  def.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    double rate = ctx.attrs.GetFloatOr("rate", 0.5);
    if (!(rate >= 0 && rate < 1)) return InvalidArgument("dropout: rate must be in [0, 1), got " + std::to_string(rate));
    ctx.outputs = {ctx.inputs[0], ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    double rate = init.attrs.GetFloatOr("rate", 0.5);
    uint64_t seed = static_cast<uint64_t>(init.attrs.GetIntOr("seed", 0));
    int64_t n = init.inputs[0].num_elements();
    // Act t draws numbers t * stride + offset + [0, n) of the seed's stream (splitmix64 is a
    // counter: skipping ahead is an add). One device: offset 0, stride n. A device's share of a
    // split gets its elements' place in the logical tensor (the SBP hook below), so every
    // element draws what it would on one device.
    const int64_t offset = init.attrs.GetIntOr("stream_offset", 0), stride = init.attrs.GetIntOr("stream_stride", n);
    if (offset < 0 || stride < offset + n)
      return InvalidArgument("dropout: stream_offset " + std::to_string(offset) + " and stream_stride " + std::to_string(stride) +
                             " do not hold a share of " + std::to_string(n) + " elements");
    // Keep when the top 53 random bits, as a fraction of 2^53, are >= rate.
    uint64_t threshold = static_cast<uint64_t>(rate * 9007199254740992.0);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      T scale = static_cast<T>(1.0 / (1.0 - rate));
      return KernelFn([=, next = seed + static_cast<uint64_t>(offset) * kGolden](KernelContext& c) mutable {
        uint64_t state = next;
        next += static_cast<uint64_t>(stride) * kGolden;
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict y = c.output(0).as<T>();
        T* __restrict mask = c.output(1).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          mask[i] = (SplitMix64(state) >> 11) >= threshold ? scale : T(0);
          y[i] = x[i] * mask[i];
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (g.output_grad(0).empty()) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("mul", {g.output_grad(0), g.output(1)}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // Whole: every device draws the same stream from the same seed, as one device would. Split on
  // axis 0: each share is one contiguous run of the logical elements and draws that run of the
  // stream (stream_offset/stream_stride); another axis would interleave the runs.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    const Shape& x = ctx.inputs[0].shape;
    if (!x.empty() && CanSplit(x[0], ctx.parts)) out.push_back(UniformSignature(1, 2, Sbp::Split(0)));
    return out;
  };
  def.physical_attrs = [](const PhysicalContext& ctx) -> StatusOr<Attrs> {
    Attrs attrs = ctx.attrs;
    const Sbp& sbp = ctx.signature.inputs[0];
    if (sbp.kind == SbpKind::kBroadcast) return attrs;
    if (sbp.kind != SbpKind::kSplit || sbp.axis != 0)
      return InvalidArgument("dropout runs split only on axis 0, got " + ctx.signature.ToString());
    const Shape& x = ctx.logical_inputs[0].shape;
    const int64_t total = NumElements(x), inner = x[0] > 0 ? total / x[0] : 0;
    int64_t rows_before = 0;
    const std::vector<int64_t> rows = BalancedSplit(x[0], ctx.parts);
    for (int64_t d = 0; d < ctx.index; ++d) rows_before += rows[static_cast<size_t>(d)];
    attrs.Set("stream_offset", rows_before * inner);
    attrs.Set("stream_stride", total);
    return attrs;
  };
  def.doc = "out, mask = x * mask, mask in {0, 1/(1-rate)}; attrs rate (0.5), seed (0); stream_offset, stream_stride (a "
            "device's share of a split: its place in the logical stream)";
  registry.Register(std::move(def));
}

}  // namespace actorflow
