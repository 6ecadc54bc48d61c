// In-place write ordering over a plan: which tasks read the registers some task writes in
// place, and the control edges that run each writer after those readers (graph/lowering.cc
// uses them; VerifyInPlaceOrder, declared in passes.h, checks every plan).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace graph {

// Which of a chosen set of nodes (the candidates: readers of in-place-written blobs) each node
// depends on, transitively through data and control edges: one bit per candidate per node,
// filled in one sweep in topological order. Time O(edges x candidates / 64), memory O(nodes x
// candidates / 8): a word operation per edge and 64 candidates instead of a search per writer.
class CandidateAncestors {
 public:
  CandidateAncestors(size_t nodes, const std::vector<int>& candidates)
      : words_((candidates.size() + 63) / 64), bits_(nodes * words_, 0), bit_of_(nodes, -1) {
    for (int c : candidates)
      if (bit_of_[c] < 0) bit_of_[c] = next_bit_++;
  }
  // node's ancestors += from and from's ancestors.
  void Merge(size_t node, size_t from) {
    if (words_ == 0) return;  // no candidates: nothing to track (and no storage to index)
    uint64_t* to = &bits_[node * words_];
    const uint64_t* source = &bits_[from * words_];
    for (size_t w = 0; w < words_; ++w) to[w] |= source[w];
    const int bit = bit_of_[from];
    if (bit >= 0) to[bit / 64] |= uint64_t{1} << (bit % 64);
  }
  // Whether `candidate` (one of the constructor's) is an ancestor of `node`.
  bool Has(size_t node, size_t candidate) const {
    const int bit = bit_of_[candidate];
    return bit >= 0 && (bits_[node * words_ + bit / 64] >> (bit % 64) & 1) != 0;
  }

 private:
  size_t words_;
  std::vector<uint64_t> bits_;
  std::vector<int> bit_of_;
  int next_bit_ = 0;
};

// Each in-place writer runs after every task reading the bytes of the register it writes, in
// the same iteration: `add_control(writer, reader)` for each reader not already its ancestor.
// The ordering pass guarantees it for one device; spread over several, readers on other
// devices (a boxing slicing a variable, another device's matmul reading the shared buffer) get
// their control edge here. Readers and writers of disjoint parts (InputDesc.part: the shards of
// a variable stored split) need none. Tasks are in topological order.
void OrderInPlaceWriters(plan::Plan& plan, const std::function<void(plan::Task*, int)>& add_control);

}  // namespace graph
}  // namespace actorflow
