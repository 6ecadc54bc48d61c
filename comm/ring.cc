#include "comm/ring.h"

namespace actorflow {

RingSchedule::RingSchedule(int ranks, int position, int64_t elements, int64_t element_size)
    : ranks_(ranks), position_(position), elements_(elements), element_size_(element_size) {}

int64_t RingSchedule::ChunkOffset(int chunk) const {
  const int64_t base = elements_ / ranks_, longer = elements_ % ranks_;
  return (chunk * base + (chunk < longer ? chunk : longer)) * element_size_;
}

int64_t RingSchedule::ChunkBytes(int chunk) const {
  const int64_t base = elements_ / ranks_, longer = elements_ % ranks_;
  return (base + (chunk < longer ? 1 : 0)) * element_size_;
}

namespace {

template <typename T>
void Accumulate(T* __restrict sum, const T* __restrict addend, int64_t count) {
  for (int64_t i = 0; i < count; ++i) sum[i] += addend[i];
}

}  // namespace

void AccumulateInto(void* sum, const void* addend, int64_t bytes, DType dtype) {
  if (dtype == DType::kFloat64)
    Accumulate(static_cast<double*>(sum), static_cast<const double*>(addend), bytes / 8);
  else
    Accumulate(static_cast<float*>(sum), static_cast<const float*>(addend), bytes / 4);
}

bool AllReduceSupports(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

}  // namespace actorflow
