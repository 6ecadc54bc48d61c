// The schedule of a ring all-reduce (reduce-scatter, then all-gather) over `ranks` processes,
// as one rank at `position` of the ring runs it (comm/data_plane.h runs it over the data plane's
// connections; docs/cluster.md, "All-reduce").
//
// The buffer is cut into `ranks` chunks of whole elements (the first `elements % ranks` one
// element longer). At step t (0 <= t < 2 (ranks - 1)) every rank sends chunk
// (position - t) mod ranks to the next rank and receives chunk (position - t - 1) mod ranks from
// the previous one. In the first ranks - 1 steps (reduce-scatter) it adds what it received into
// its own chunk; afterwards rank p holds the total of chunk (p + 1) mod ranks. In the last
// ranks - 1 steps (all-gather) it overwrites its chunk with what it received. So each rank sends
// and receives 2 (ranks - 1) / ranks of the buffer, whatever the number of ranks.
//
// The data plane needs no copy of the rank's input into its output: step 0 sends chunk
// `position` straight from the input, each reduce step writes output = input + received for
// its chunk, the all-gather steps write the remaining chunks; together they write every chunk
// of the output exactly once (chunk (position + 1) mod ranks, the one this rank finishes, by the
// last reduce step; the other ranks - 1 by the all-gather).
//
// Two properties the data plane relies on:
//  - What a rank sends at step t + 1 is the chunk it received at step t (step 0: its own chunk
//    `position`), so each received chunk triggers exactly one send, and the steps of one act are
//    independent of each other: they touch different chunks, in any order.
//  - Chunk c is summed in ring order starting at rank c: ((x_c + x_{c+1}) + ...) + x_{c-1}
//    (indices mod ranks). For 2 ranks every chunk is x_0 + x_1 (addition commutes); for 3 or more
//    the grouping differs between chunks, so results may differ from a left-to-right sum by
//    float rounding (a few ulps per addition).
#pragma once

#include <cstdint>

#include "actors/tensor.h"

namespace actorflow {

class RingSchedule {
 public:
  // ranks >= 2, 0 <= position < ranks, elements >= 0 (chunks may be empty).
  RingSchedule(int ranks, int position, int64_t elements, int64_t element_size);

  int ranks() const { return ranks_; }
  int position() const { return position_; }
  int steps() const { return 2 * (ranks_ - 1); }
  int SendChunk(int step) const { return Mod(position_ - step); }
  int ReceiveChunk(int step) const { return Mod(position_ - step - 1); }
  // Whether the chunk received at `step` is added (reduce-scatter) or copied (all-gather).
  bool Reduces(int step) const { return step < ranks_ - 1; }
  int64_t ChunkOffset(int chunk) const;  // in bytes
  int64_t ChunkBytes(int chunk) const;

 private:
  int Mod(int value) const { return ((value % ranks_) + ranks_) % ranks_; }
  int ranks_;
  int position_;
  int64_t elements_;
  int64_t element_size_;
};

// sum[i] += addend[i] over `bytes` bytes of float32 or float64 elements (the all-reduce's dtypes).
void AccumulateInto(void* sum, const void* addend, int64_t bytes, DType dtype);
// out[i] = a[i] + b[i] (out may be a): a reduce step writes the output register from the input
// register and the received chunk, so the input is never copied into the output first.
void AddInto(void* out, const void* a, const void* b, int64_t bytes, DType dtype);
// Whether the all-reduce sums this dtype.
bool AllReduceSupports(DType dtype);

}  // namespace actorflow
