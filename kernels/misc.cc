// Constants: constant (no inputs; attrs shape, value, dtype), zeros_like / ones_like. A
// constant is a root of the plan; its kernel refills the output every iteration (registers
// are reused, so nothing may be assumed to survive between acts).
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

template <typename T>
KernelFn FillKernel(int64_t n, double value) {
  T v = static_cast<T>(value);
  return [n, v](KernelContext& c) {
    T* __restrict y = c.output(0).as<T>();
    for (int64_t i = 0; i < n; ++i) y[i] = v;
    return Status::Ok();
  };
}

StatusOr<KernelFn> Fill(const TensorDesc& desc, double value) {
  int64_t n = desc.num_elements();
  switch (desc.dtype) {
    case DType::kFloat32: return FillKernel<float>(n, value);
    case DType::kFloat64: return FillKernel<double>(n, value);
    case DType::kInt8: return FillKernel<int8_t>(n, value);
    case DType::kInt32: return FillKernel<int32_t>(n, value);
    case DType::kInt64: return FillKernel<int64_t>(n, value);
    case DType::kUInt8: return FillKernel<uint8_t>(n, value);
    default: return InvalidArgument("cannot fill a tensor of dtype invalid");
  }
}

void RegisterLike(OpRegistry& registry, const std::string& type, double value) {
  OpDef def;
  def.type = type;
  def.input_names = {"like"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [value](const KernelInit& init) -> StatusOr<KernelFn> { return Fill(init.outputs[0], value); };
  def.grad = [](GradBuilder&) { return Status::Ok(); };  // constant in `like`: no gradient flows
  // Only like's shape is read: its partial sums (same shape) give the whole output too.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = ElementwiseSbp(ctx, false);
    out.push_back(MakeSignature({Sbp::PartialSum()}, {Sbp::Broadcast()}));
    return out;
  };
  def.doc = "out = " + std::to_string(static_cast<int>(value)) + "s with like's shape and dtype";
  registry.Register(std::move(def));
}

}  // namespace

StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "float32" || name == "float") return DType::kFloat32;
  if (name == "float64" || name == "double") return DType::kFloat64;
  if (name == "int8") return DType::kInt8;
  if (name == "int32") return DType::kInt32;
  if (name == "int64") return DType::kInt64;
  if (name == "uint8") return DType::kUInt8;
  return BadChoice("dtype", name, "float32, float64, int8, int32, int64, uint8");
}

void RegisterMiscOps(OpRegistry& registry) {
  OpDef def;
  def.type = "constant";
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.attrs.GetInts("shape"));
    for (int64_t d : shape)
      if (d < 0) return InvalidArgument("constant: shape " + ShapeToString(shape) + " has a negative dimension");
    AF_ASSIGN_OR_RETURN(DType dtype, ParseDType(ctx.attrs.GetStringOr("dtype", "float32")));
    ctx.outputs = {TensorDesc{shape, dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    return Fill(init.outputs[0], init.attrs.GetFloatOr("value", 0));
  };
  // Whole on every device, or each device fills its share (the shape attribute is logical: the
  // hook gives each share its physical shape).
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    const Shape& shape = ctx.outputs[0].shape;
    for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
      if (CanSplit(shape[i], ctx.parts)) out.push_back(MakeSignature({}, {Sbp::Split(i)}));
    return out;
  };
  def.physical_attrs = [](const PhysicalContext& ctx) -> StatusOr<Attrs> {
    Attrs attrs = ctx.attrs;
    const Shape& shape = ctx.physical_outputs[0].shape;
    attrs.Set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
    return attrs;
  };
  def.doc = "out(shape) = value; attrs shape, value (float), dtype (string, default float32)";
  registry.Register(std::move(def));
  RegisterLike(registry, "zeros_like", 0);
  RegisterLike(registry, "ones_like", 1);
}

}  // namespace actorflow
