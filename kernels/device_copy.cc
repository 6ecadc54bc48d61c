// Copies between host and device memory, inserted by the compiler where a blob crosses between
// a CPU and a GPU (graph/device_placement.h): copy_h2d reads a (pinned) host register and writes
// a device register, copy_d2h the reverse. Their device kernels enqueue on the device's copy
// stream (KernelInit::device_stream), so transfers overlap the compute stream's kernels, and
// complete from the stream (actors/device.h). The CPU kernel is a plain copy (every op has one).
#include <cstring>

#include "actors/device.h"
#include "kernels/op_registry.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

OpDef CopyOp(const std::string& type, CopyDirection direction) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const size_t bytes = init.outputs.at(0).byte_size();
    return KernelFn([bytes](KernelContext& c) {
      std::memcpy(c.output(0).data, c.input(0).data, bytes);
      return Status::Ok();
    });
  };
  def.kernel_factories[kCudaDevice] = [type, direction](const KernelInit& init) -> StatusOr<KernelFn> {
    if (init.device_stream == nullptr)
      return InvalidArgument(type + " on " + init.device_type + ":" + std::to_string(init.device_id) +
                             ": KernelInit::device_stream is null (a copy runs on a device's copy stream)");
    if (init.inputs.size() != 1 || init.outputs.size() != 1 || init.inputs[0].byte_size() != init.outputs[0].byte_size())
      return InvalidArgument(type + ": one input and one output of the same size expected");
    return DeviceCopyKernel(init.device_stream, direction, init.outputs[0].byte_size());
  };
  // A copy keeps any layout, partial sums included (it is linear).
  def.sbp = [](const SbpContext& ctx) { return ElementwiseSbp(ctx, true); };
  def.doc = "out = x, copied " + std::string(direction == CopyDirection::kHostToDevice ? "host to device" : "device to host") +
            " (inserted by the compiler)";
  return def;
}

}  // namespace

void RegisterDeviceCopyOps(OpRegistry& registry) {
  registry.Register(CopyOp("copy_h2d", CopyDirection::kHostToDevice));
  registry.Register(CopyOp("copy_d2h", CopyDirection::kDeviceToHost));
}

}  // namespace actorflow
