// A float32 GEMM C = op(A) · B' whose right operand is a variable the job only reads (or a saved
// model's weight): B kept in the layout oneDNN's matmul primitive computes from (blocked for its
// micro-kernel), packed once and again only when the variable's version counter
// (KernelInit::input_versions) or B's address changed. dnnl_sgemm packs B into that kind of
// layout inside every call; a predict job's dense layer (the seed MLP's 784x512 weights at batch
// 100: 1.6 MB) then pays the pack on every call and reads B twice. Measured on 2 cores, rows
// split over two threads: 100x512x784 in 202 us against 221 us through dnnl_sgemm's column
// blocks.
//
// The rows of C are split into `parts` pieces (one thread runs each: ParallelChunks), every
// piece reading all of the packed B. Each piece has its own primitive arguments, stream and
// scratchpad, so pieces run side by side; the kernel owning the object runs one act at a time.
// The packed copy is memory beside the variable's (as large), kept while the kernel lives;
// disable_fusion("packed_weights") keeps dnnl_sgemm on the variable itself.
//
// MakeInPlace builds the same pieces over b where it lies, read by every act (no version, no
// copy): matmul's small GEMMs, where a primitive generated for the shapes beats dnnl_sgemm's
// choice per call (64x64x64 on one core: 4.9 us against 5.3; (100,512)x(512,10): 14 against 24)
// and b is small enough that packing it inside the primitive costs little.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "actors/status.h"

namespace actorflow {

class PackedGemm {
 public:
  // Null when oneDNN has no primitive for these shapes on this CPU (the caller keeps sgemm).
  // op(A) is m x k (A stored k x m when transpose_a), B k x n (stored n x k when transpose_b).
  static std::shared_ptr<PackedGemm> Make(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                                          int parts, std::shared_ptr<const std::atomic<int64_t>> version);
  static std::shared_ptr<PackedGemm> MakeInPlace(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                                                 int parts);
  ~PackedGemm();

  int parts() const;
  int64_t row_begin(int part) const;
  int64_t row_end(int part) const;
  // Packs b when its version or address changed since the last pack (on the acting thread,
  // before the parts run); in place, points the pieces at b. Counts packs (tests: a version
  // bump repacks, an unchanged one not).
  Status Refresh(const float* b);
  int64_t packs() const;
  // Packs by every PackedGemm of the process so far (tests: which calls packed).
  static int64_t TotalPacks();
  // Writes rows [row_begin(part), row_end(part)) of C (ldc n); false when oneDNN failed.
  bool RunPart(int part, const float* a, float* c);
  // One act: Refresh(b), then every part, on this thread (one OpenMP thread) or spread over the
  // threads (ParallelChunks), each followed by after_part(row_begin, row_end) on the thread that
  // just wrote those rows (an epilogue). Internal error "<what> failed" when oneDNN failed.
  template <typename AfterPart>
  Status Run(const float* b, const float* a, float* c, AfterPart& after_part, const char* what) {
    return Run(b, a, c, [](void* context, int64_t begin, int64_t end) { (*static_cast<AfterPart*>(context))(begin, end); },
               &after_part, what);
  }
  Status Run(const float* b, const float* a, float* c, void (*after_part)(void* context, int64_t begin, int64_t end),
             void* context, const char* what);

 private:
  struct Impl;
  explicit PackedGemm(std::unique_ptr<Impl> impl);
  static std::shared_ptr<PackedGemm> Build(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                                           int parts, std::shared_ptr<const std::atomic<int64_t>> version);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorflow
