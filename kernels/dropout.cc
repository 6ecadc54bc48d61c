// dropout (training only; a predict job simply does not add it): x -> out = x * mask,
// mask = 0 with probability attr rate, else 1 / (1 - rate) (inverted dropout, so inference is
// the identity). The mask is an output of x's dtype so the gradient is mul(dy, mask). The
// generator (splitmix64, seeded by attr seed) lives in the kernel closure: one stream per op
// instance, reproducible across runs with the same seed.
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
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
    // Keep when the top 53 random bits, as a fraction of 2^53, are >= rate.
    uint64_t threshold = static_cast<uint64_t>(rate * 9007199254740992.0);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      T scale = static_cast<T>(1.0 / (1.0 - rate));
      return KernelFn([=, state = seed](KernelContext& c) mutable {
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
  // Only whole: every device draws the same stream from the same seed, as one device would. A
  // split would give each share the stream's first elements instead of its own positions.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return std::vector<SbpSignature>{AllBroadcast(ctx)}; };
  def.doc = "out, mask = x * mask, mask in {0, 1/(1-rate)}; attrs rate (0.5), seed (0)";
  registry.Register(std::move(def));
}

}  // namespace actorflow
