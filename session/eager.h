// Eager execution: tensors that hold their data, ops that run at once through the registered
// CPU kernel (no plan, no actors), and the autograd record that lets a tensor's backward() run
// the same gradient rules (OpDef::grad) the compiler uses (session/eager_autograd.h).
//
// An EagerTensor is a TensorDesc plus a shared, 64-byte aligned host buffer (`storage`). Views
// (reshape, flatten) share the buffer of their input; a session variable may alias it too, so
// whoever writes it (an in-place op, an optimizer update, a compiled job) is ordered by the
// caller. Kernels come from MakeCpuKernel and are cached by (op type, attributes, input
// descriptions) in a bounded LRU cache, so a repeated small op does not rebuild its kernel.
// Ops whose kernels keep state between calls (OpDef::stateful_kernel, e.g. dropout's random
// stream) get a fresh kernel per call: the caller passes the state (a seed) as an attribute,
// so results never depend on which unrelated call ran before.
//
// Threads: a kernel gets num_threads = the eager thread budget (SetEagerThreads; default the
// number of cores, as compiled jobs default to), or 1 when its inputs are small (see eager.cc). Eager kernels run on the calling thread; the
// oneDNN/OpenMP setting is per calling thread, so the runtime's actor threads keep theirs.
//
// Thread-safety: tensors are not synchronized (like NumPy arrays: the caller orders writes).
// RunEagerOp may be called from several threads at once: the kernel cache is locked, and a
// cached kernel (which may keep scratch memory) runs under its entry's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"
#include "kernels/op_registry.h"

namespace actorflow {

struct GradNode;  // session/eager_autograd.h

// A 64-byte aligned host buffer of at least `bytes` bytes (one cache line when 0), zeroed
// when `zero`.
std::shared_ptr<void> AllocateEagerStorage(size_t bytes, bool zero = false);

class EagerTensor {
 public:
  EagerTensor(TensorDesc desc, std::shared_ptr<void> storage)
      : desc_(std::move(desc)), storage_(std::move(storage)), version_(std::make_shared<std::atomic<int64_t>>(0)) {}
  // A view: another desc over the same storage, sharing its version counter.
  EagerTensor(TensorDesc desc, std::shared_ptr<void> storage, std::shared_ptr<std::atomic<int64_t>> version)
      : desc_(std::move(desc)), storage_(std::move(storage)), version_(std::move(version)) {}
  // A new tensor of `desc` with its own (uninitialized or zeroed) storage.
  static std::shared_ptr<EagerTensor> Empty(const TensorDesc& desc, bool zero = false);
  // A tensor with its own storage holding a copy of `bytes` (desc.byte_size() of them).
  static std::shared_ptr<EagerTensor> FromBytes(const TensorDesc& desc, const void* bytes);

  const TensorDesc& desc() const { return desc_; }
  const Shape& shape() const { return desc_.shape; }
  DType dtype() const { return desc_.dtype; }
  void* data() const { return storage_.get(); }
  const std::shared_ptr<void>& storage() const { return storage_; }
  TensorView view() const { return TensorView{storage_.get(), desc_}; }

  // The same storage and desc, without autograd history (detach()).
  std::shared_ptr<EagerTensor> Detached() const { return std::make_shared<EagerTensor>(desc_, storage_, version_); }
  // Counts in-place writes of the storage (shared by its views): autograd refuses to use a saved
  // tensor written after it was saved. Every in-place writer calls BumpVersion.
  int64_t version() const { return version_->load(std::memory_order_relaxed); }
  void BumpVersion() { version_->fetch_add(1, std::memory_order_relaxed); }
  const std::shared_ptr<std::atomic<int64_t>>& version_counter() const { return version_; }
  // The same storage seen with another shape of the same element count.
  StatusOr<std::shared_ptr<EagerTensor>> ViewAs(const Shape& shape) const;
  // Writes (bumping the version): a copy of src's data (same desc: InvalidArgument otherwise),
  // or `value` everywhere.
  Status CopyFrom(const EagerTensor& src);
  void Fill(double value);

  // Autograd (see eager_autograd.h for the rules).
  bool requires_grad() const { return requires_grad_; }
  // Leaves only; InvalidArgument for a non-floating dtype or a non-leaf (its flag follows its inputs).
  Status SetRequiresGrad(bool requires_grad);
  bool is_leaf() const { return grad_fn_ == nullptr; }
  const std::shared_ptr<GradNode>& grad_fn() const { return grad_fn_; }
  int output_index() const { return output_index_; }
  const std::shared_ptr<EagerTensor>& grad() const { return grad_; }
  // InvalidArgument when `grad` does not match this tensor's desc.
  Status SetGrad(std::shared_ptr<EagerTensor> grad);
  bool retains_grad() const { return retains_grad_; }
  void RetainGrad() { retains_grad_ = true; }

  // Set by the engine when this tensor is an op's output recorded for autograd.
  void SetHistory(std::shared_ptr<GradNode> node, int output_index) {
    grad_fn_ = std::move(node);
    output_index_ = output_index;
    requires_grad_ = true;
  }

 private:
  TensorDesc desc_;
  std::shared_ptr<void> storage_;
  std::shared_ptr<std::atomic<int64_t>> version_;
  bool requires_grad_ = false;
  bool retains_grad_ = false;
  int output_index_ = 0;
  std::shared_ptr<GradNode> grad_fn_;
  std::shared_ptr<EagerTensor> grad_;
};

using EagerTensorPtr = std::shared_ptr<EagerTensor>;

// Whether ops record autograd history (per thread, like PyTorch's grad mode). Default on.
bool EagerGradEnabled();
void SetEagerGradEnabled(bool enabled);

// The intra-op threads an eager kernel may use (>= 1); 0 resets to the number of cores.
void SetEagerThreads(int threads);
int EagerThreads();

// One op type with fixed attributes, prepared once (the registry lookup and the attributes'
// conversion happen here, not per call). Run() infers output descriptions, takes the kernel
// from the cache, allocates the outputs and calls the kernel on this thread. Inputs listed in
// OpDef::mutable_inputs are written in place. reshape and flatten return views (no copy).
// Thread-safe.
class EagerOp {
 public:
  static StatusOr<std::shared_ptr<EagerOp>> Create(const std::string& type, Attrs attrs);
  const std::string& type() const { return def_->type; }
  const OpDef& def() const { return *def_; }
  const Attrs& attrs() const { return attrs_; }

  // Errors name the op and say what was expected and what came.
  StatusOr<std::vector<EagerTensorPtr>> Run(const std::vector<EagerTensorPtr>& inputs) const;
  // Run without recording autograd history (used by backward itself).
  StatusOr<std::vector<EagerTensorPtr>> RunWithoutHistory(const std::vector<EagerTensorPtr>& inputs) const;

 private:
  struct Prepared;  // one input signature's output descs and kernel
  EagerOp(const OpDef* def, Attrs attrs, bool is_view);
  StatusOr<std::shared_ptr<Prepared>> Prepare(const std::vector<EagerTensorPtr>& inputs) const;

  const OpDef* def_;
  Attrs attrs_;
  std::string attrs_key_;  // canonical text of attrs_, part of the kernel cache key
  bool is_view_;
  mutable std::mutex memo_mu_;
  mutable std::shared_ptr<Prepared> memo_;  // the last signature seen (most calls repeat it)
};

// Runs `type` with `attrs` once (a prepared op made for the call); for rare ops and backward.
StatusOr<std::vector<EagerTensorPtr>> RunEagerOp(const std::string& type, const Attrs& attrs,
                                                 const std::vector<EagerTensorPtr>& inputs, bool record_history = true);

// Kernel cache statistics (tests and benchmarks): entries held, kernels built, hits.
struct EagerKernelCacheStats {
  int64_t entries = 0, builds = 0, hits = 0;
};
EagerKernelCacheStats GetEagerKernelCacheStats();
// Bounds the cache (least recently used entries go first); the default holds 4096 kernels.
void SetEagerKernelCacheCapacity(size_t capacity);

}  // namespace actorflow
