// SBP (split, broadcast, partial-sum) as data: how a logical tensor is laid out over N devices,
// the signatures an op declares over its inputs and outputs, and the physical (per-device)
// shapes a layout gives. The parallelism pass chooses among an op's signatures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

enum class SbpKind { kSplit, kBroadcast, kPartialSum };

struct Sbp {
  // kSplit over every axis i (the same i wherever it appears in one signature), e.g. the
  // elementwise ops' "S(i)->S(i)".
  static constexpr int64_t kEachAxis = -1;

  SbpKind kind = SbpKind::kBroadcast;
  int64_t axis = 0;  // kSplit only: the split axis (>= 0) or kEachAxis

  static Sbp Split(int64_t axis) { return Sbp{SbpKind::kSplit, axis}; }
  static Sbp Broadcast() { return Sbp{SbpKind::kBroadcast, 0}; }
  static Sbp PartialSum() { return Sbp{SbpKind::kPartialSum, 0}; }
  std::string ToString() const;  // "S(0)", "S(i)", "B", "P"
  bool operator==(const Sbp& other) const {
    return kind == other.kind && (kind != SbpKind::kSplit || axis == other.axis);
  }
};

// One way to run an op distributed: the layout of each input and each output.
struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
  // The last input's Sbp holds for every further input ("B,...->": ops with many inputs of
  // one layout, variadic ones included).
  bool repeat_last_input = false;
  // When it holds beyond the arity, for the pass to check against attributes ("i not reduced",
  // "groups=1"); "" = always.
  std::string condition;
  std::string ToString() const;  // the text ParseSbpSignature reads
};

// "S(0),B->S(0)", "S(i)->S(i) for i != axis", "B,...->", "->B": comma-separated inputs, "->",
// outputs, then optionally a space and the condition. A split axis that is not a number
// ("i", "i'", "perm[i]") is kEachAxis. InvalidArgument naming the text and the bad part.
StatusOr<SbpSignature> ParseSbpSignature(const std::string& text);

// InvalidArgument unless `signature` fits an op with `num_inputs` inputs (any number >= the
// listed ones when `variadic_inputs`) and `num_outputs` outputs.
Status ValidateSbpSignature(const SbpSignature& signature, size_t num_inputs, bool variadic_inputs, size_t num_outputs);

// Sizes of `size` split into `parts` (> 0): the first size % parts parts get one more
// (OneFlow's BalancedSplitter); e.g. 10 over 4 -> 3, 3, 2, 2.
std::vector<int64_t> BalancedSplit(int64_t size, int64_t parts);

// Shape on device `index` of `parts` of a tensor with `logical` shape laid out as `sbp`:
// split divides its axis as BalancedSplit does, broadcast and partial-sum keep the shape.
// InvalidArgument for an axis outside the rank, kEachAxis, or parts/index out of range.
StatusOr<Shape> PhysicalShape(const Shape& logical, const Sbp& sbp, int64_t parts, int64_t index);

}  // namespace actorflow
