#include "kernels/blocked_layout.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>

namespace actorflow {

int64_t NativeChannelBlock() {
  static const int64_t block = [] {
    // The ISA values are bit sets, each containing those it extends.
    const unsigned isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return int64_t{16};
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) return int64_t{8};
    return int64_t{0};
  }();
  return block;
}

namespace {

Status ReadSlots(const std::string& op, const Attrs& attrs, const char* name, const std::vector<TensorDesc>& descs,
                 const std::vector<int>& allowed, int64_t block, std::vector<bool>& out) {
  out.assign(descs.size(), false);
  if (!attrs.Has(name)) return Status::Ok();
  AF_ASSIGN_OR_RETURN(std::vector<int64_t> slots, attrs.GetInts(name));
  const std::string what = std::string(name) == "blocked_inputs" ? "input" : "output";
  for (int64_t slot : slots) {
    if (slot < 0 || slot >= static_cast<int64_t>(descs.size()))
      return InvalidArgument(op + ": " + name + " lists " + what + " " + std::to_string(slot) + ", the op has " +
                             std::to_string(descs.size()));
    if (std::find(allowed.begin(), allowed.end(), static_cast<int>(slot)) == allowed.end())
      return InvalidArgument(op + ": " + what + " " + std::to_string(slot) + " cannot be stored blocked (" + name + ")");
    const TensorDesc& d = descs[slot];
    if (d.shape.size() != 4 || d.dtype != DType::kFloat32 || d.shape[1] % block != 0)
      return InvalidArgument(op + ": " + what + " " + std::to_string(slot) + " is " + d.ToString() +
                             ", a blocked layout needs float32 (N,C,H,W) with C a multiple of " + std::to_string(block));
    out[slot] = true;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<BlockedLayout> ReadBlockedLayout(const std::string& op, const Attrs& attrs, const std::vector<TensorDesc>& inputs,
                                          const std::vector<TensorDesc>& outputs, const std::vector<int>& allowed_inputs,
                                          const std::vector<int>& allowed_outputs) {
  BlockedLayout layout;
  if (!attrs.Has("blocked_inputs") && !attrs.Has("blocked_outputs")) return layout;
  layout.block = attrs.GetIntOr("channel_block", 0);
  if (layout.block != 8 && layout.block != 16)
    return InvalidArgument(op + ": channel_block must be 8 or 16 with blocked_inputs/blocked_outputs, got " +
                           std::to_string(layout.block));
  AF_RETURN_IF_ERROR(ReadSlots(op, attrs, "blocked_inputs", inputs, allowed_inputs, layout.block, layout.inputs));
  AF_RETURN_IF_ERROR(ReadSlots(op, attrs, "blocked_outputs", outputs, allowed_outputs, layout.block, layout.outputs));
  return layout;
}

void PlainToBlocked(const float* plain, float* blocked, int64_t n, int64_t c, int64_t plane, int64_t block) {
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < plane; ++p)
        blocked[((s * (c / block) + ch / block) * plane + p) * block + ch % block] = plain[(s * c + ch) * plane + p];
}

void BlockedToPlain(const float* blocked, float* plain, int64_t n, int64_t c, int64_t plane, int64_t block) {
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < plane; ++p)
        plain[(s * c + ch) * plane + p] = blocked[((s * (c / block) + ch / block) * plane + p) * block + ch % block];
}

}  // namespace actorflow
