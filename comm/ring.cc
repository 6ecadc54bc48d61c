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

template <typename T>
void Add(T* out, const T* a, const T* __restrict b, int64_t count) {  // out may alias a, element by element
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

}  // namespace

void AddInto(void* out, const void* a, const void* b, int64_t bytes, DType dtype) {
  if (dtype == DType::kFloat64)
    Add(static_cast<double*>(out), static_cast<const double*>(a), static_cast<const double*>(b), bytes / 8);
  else
    Add(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), bytes / 4);
}

void AccumulateInto(void* sum, const void* addend, int64_t bytes, DType dtype) {
  if (dtype == DType::kFloat64)
    Accumulate(static_cast<double*>(sum), static_cast<const double*>(addend), bytes / 8);
  else
    Accumulate(static_cast<float*>(sum), static_cast<const float*>(addend), bytes / 4);
}

bool AllReduceSupports(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

}  // namespace actorflow
