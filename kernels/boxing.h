// Boxing: converting a logical tensor from one layout (SBP over a placement of n devices) to
// another. In one process every device's register is host memory, so the op "boxing" is a
// kernel that reads the source's physical shards in place and writes one destination
// device's physical piece; the compiler makes one such task per destination device.
//
// One destination task, given the source shards (one per source device; a broadcast source
// passes only the shard it reads), writes:
//   destination S(k) or B : the logical region of its piece, copied from the intersecting source
//                           shards (S source), read from the one shard (B source), or summed
//                           over every shard (P source: each task sums only its own region, so
//                           P->S(k) is a reduce-scatter whose work is split over the devices)
//   destination P          : index 0 as for B; every other index zeros (their sum is the value)
//
// Attributes of the logical op (the compiler's): "in_sbp", "out_sbp" (Sbp::ToString text).
// Attributes of one physical task: those plus "logical_shape", "in_parts", "out_parts", "out_index".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"
#include "kernels/op_registry.h"
#include "kernels/sbp.h"

namespace actorflow {

// "S(3)" / "B" / "P" -> Sbp; InvalidArgument naming the text otherwise.
StatusOr<Sbp> ParseSbpText(const std::string& text);

struct BoxingSpec {
  Shape logical_shape;
  DType dtype = DType::kFloat32;
  Sbp in, out;
  int64_t in_parts = 1, out_parts = 1, out_index = 0;
};

// The attributes of one physical boxing task.
Attrs BoxingTaskAttrs(const BoxingSpec& spec);
// How many inputs the task of `spec` reads: 1 for a broadcast source, in_parts otherwise.
int64_t BoxingInputCount(const BoxingSpec& spec);

// The destination piece of `spec` from the source shards (views of the physical shapes, in
// source device order; one for a broadcast source). Thread-safe: touches only its arguments.
// `threads` > 1: a partial sum of at least 4 MiB of traffic is split over that many threads
// (the calling one and the kernels' helpers, kernels/parallel_chunks.h), with the same bits;
// one of 512 KiB to 4 MiB only over helpers still awake from a previous split job (none is
// woken for it).
Status RunBoxing(const BoxingSpec& spec, const std::vector<TensorView>& inputs, const TensorView& output,
                 int threads = 1);

}  // namespace actorflow
