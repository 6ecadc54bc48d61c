#include "session/eager.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <thread>
#include <unordered_map>

#include "session/eager_autograd.h"

namespace actorflow {
namespace {

constexpr size_t kAlignment = 64;

thread_local bool t_grad_enabled = true;
std::atomic<int> g_eager_threads{0};

// hardware_concurrency() reads /sys on every call: once per process.
int DefaultThreads() {
  static const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return threads;
}

// A kernel shared by every call with the same key; its closure may hold scratch memory, so
// one call at a time runs it.
struct CachedKernel {
  KernelFn fn;
  std::mutex mu;
};

// Bounded LRU map from "type, attrs, threads, input descs" to kernels.
class KernelCache {
 public:
  static KernelCache& Global() {
    static KernelCache* cache = new KernelCache();  // never destroyed: kernels may outlive static teardown
    return *cache;
  }

  StatusOr<std::shared_ptr<CachedKernel>> Get(const std::string& key, const std::string& type, const KernelInit& init) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        ++hits_;
        return it->second->second;
      }
    }
    // Built outside the lock (oneDNN primitive creation can take milliseconds); a racing
    // builder of the same key just loses its copy.
    AF_ASSIGN_OR_RETURN(KernelFn fn, MakeCpuKernel(type, init));
    auto made = std::make_shared<CachedKernel>();
    made->fn = std::move(fn);
    std::lock_guard<std::mutex> lock(mu_);
    ++builds_;
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    order_.emplace_front(key, made);
    index_[key] = order_.begin();
    Trim();
    return made;
  }

  void SetCapacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = std::max<size_t>(1, capacity);
    Trim();
  }

  EagerKernelCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(index_.size()), builds_, hits_};
  }

 private:
  void Trim() {
    while (index_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<CachedKernel>>> order_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, std::shared_ptr<CachedKernel>>>::iterator> index_;
  size_t capacity_ = 4096;
  int64_t builds_ = 0, hits_ = 0;
};

void AppendDouble(std::string* out, double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%a", v);  // exact: two attrs differing in the last bit are two kernels
  *out += buffer;
}

std::string AttrsKey(const Attrs& attrs) {
  std::string key;
  for (const auto& [name, value] : attrs.values()) {
    key += name;
    key += '=';
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) key += "i" + std::to_string(v);
          else if constexpr (std::is_same_v<T, double>) { key += 'f'; AppendDouble(&key, v); }
          else if constexpr (std::is_same_v<T, bool>) key += v ? "b1" : "b0";
          else if constexpr (std::is_same_v<T, std::string>) key += "s" + std::to_string(v.size()) + ":" + v;
          else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            key += "I[";
            for (int64_t x : v) key += std::to_string(x) + ",";
            key += ']';
          } else {
            key += "F[";
            for (double x : v) { AppendDouble(&key, x); key += ','; }
            key += ']';
          }
        },
        value);
    key += ';';
  }
  return key;
}

void AppendDesc(std::string* out, const TensorDesc& desc) {
  *out += std::to_string(static_cast<int>(desc.dtype));
  *out += '(';
  for (int64_t d : desc.shape) *out += std::to_string(d) + ",";
  *out += ')';
}

}  // namespace

std::shared_ptr<void> AllocateEagerStorage(size_t bytes, bool zero) {
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  // One allocation holds the reference count and the buffer, aligned inside it: half the
  // mallocs of aligned_alloc plus a separate control block, and malloc's fast path where
  // memalign splits chunks (a small op's output costs about as much to allocate as to compute).
  // Out of memory throws std::bad_alloc (MemoryError in Python).
  std::shared_ptr<unsigned char[]> block = std::make_shared_for_overwrite<unsigned char[]>(rounded + kAlignment);
  const auto address = reinterpret_cast<uintptr_t>(block.get());
  void* data = reinterpret_cast<void*>((address + kAlignment - 1) & ~static_cast<uintptr_t>(kAlignment - 1));
  if (zero) std::memset(data, 0, rounded);
  return std::shared_ptr<void>(std::move(block), data);
}

std::shared_ptr<EagerTensor> EagerTensor::Empty(const TensorDesc& desc, bool zero) {
  return std::make_shared<EagerTensor>(desc, AllocateEagerStorage(desc.byte_size(), zero));
}

std::shared_ptr<EagerTensor> EagerTensor::FromBytes(const TensorDesc& desc, const void* bytes) {
  auto t = Empty(desc);
  if (desc.byte_size() > 0) std::memcpy(t->data(), bytes, desc.byte_size());
  return t;
}

StatusOr<std::shared_ptr<EagerTensor>> EagerTensor::ViewAs(const Shape& shape) const {
  if (NumElements(shape) != desc_.num_elements())
    return InvalidArgument("view: shape " + ShapeToString(shape) + " has " + std::to_string(NumElements(shape)) +
                           " elements, the tensor " + desc_.ToString() + " has " + std::to_string(desc_.num_elements()));
  return std::make_shared<EagerTensor>(TensorDesc{shape, desc_.dtype}, storage_, version_);
}

Status EagerTensor::CopyFrom(const EagerTensor& src) {
  if (src.desc_ != desc_)
    return InvalidArgument("copy_: the source is " + src.desc_.ToString() + ", expected " + desc_.ToString() +
                           " like the destination");
  if (src.data() != data() && desc_.byte_size() > 0) std::memmove(data(), src.data(), desc_.byte_size());
  BumpVersion();
  return Status::Ok();
}

void EagerTensor::Fill(double value) {
  BumpVersion();
  const int64_t n = desc_.num_elements();
  auto fill = [&]<typename T>(T v) {
    T* p = static_cast<T*>(data());
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  };
  switch (desc_.dtype) {
    case DType::kFloat32: fill(static_cast<float>(value)); break;
    case DType::kFloat64: fill(value); break;
    case DType::kInt8: fill(static_cast<int8_t>(value)); break;
    case DType::kInt32: fill(static_cast<int32_t>(value)); break;
    case DType::kInt64: fill(static_cast<int64_t>(value)); break;
    case DType::kUInt8: fill(static_cast<uint8_t>(value)); break;
    default: break;
  }
}

Status EagerTensor::SetRequiresGrad(bool requires_grad) {
  if (!is_leaf()) {
    if (!requires_grad)
      return InvalidArgument("requires_grad_(False) on a tensor that is the output of an op (not a leaf); use detach()");
    return Status::Ok();
  }
  if (requires_grad && desc_.dtype != DType::kFloat32 && desc_.dtype != DType::kFloat64)
    return InvalidArgument(std::string("only floating point tensors can require gradients, this one is ") +
                           DTypeName(desc_.dtype));
  requires_grad_ = requires_grad;
  return Status::Ok();
}

Status EagerTensor::SetGrad(std::shared_ptr<EagerTensor> grad) {
  if (grad && grad->desc() != desc_)
    return InvalidArgument("grad: assigned a gradient of " + grad->desc().ToString() + " to a tensor of " + desc_.ToString());
  grad_ = std::move(grad);
  return Status::Ok();
}

bool EagerGradEnabled() { return t_grad_enabled; }
void SetEagerGradEnabled(bool enabled) { t_grad_enabled = enabled; }

void SetEagerThreads(int threads) { g_eager_threads.store(threads > 0 ? threads : 0); }
int EagerThreads() {
  const int t = g_eager_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : DefaultThreads();
}

EagerKernelCacheStats GetEagerKernelCacheStats() { return KernelCache::Global().Stats(); }
void SetEagerKernelCacheCapacity(size_t capacity) { KernelCache::Global().SetCapacity(capacity); }

struct EagerOp::Prepared {
  std::vector<TensorDesc> inputs, outputs;
  std::shared_ptr<CachedKernel> kernel;  // null for views and stateful kernels
  int threads = 0;
};

EagerOp::EagerOp(const OpDef* def, Attrs attrs, bool is_view)
    : def_(def), attrs_(std::move(attrs)), attrs_key_(AttrsKey(attrs_)), is_view_(is_view) {}

StatusOr<std::shared_ptr<EagerOp>> EagerOp::Create(const std::string& type, Attrs attrs) {
  RegisterAllOps();
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  if (!def->infer) return Unimplemented("op '" + type + "' has no shape inference");
  const bool is_view = type == "reshape" || type == "flatten";
  return std::shared_ptr<EagerOp>(new EagerOp(def, std::move(attrs), is_view));
}

// Ops reading fewer input elements than this run on one thread: waking an OpenMP team costs
// more than a 64x64 matmul (measured on 2 cores: 9.4 us on 1 thread, 13.2 us on 2). Ops whose
// kernels size their own threads (OpDef::sizes_own_threads: matmul splits a small GEMM over the
// kernels' pool, not an OpenMP team; 64x64: 6.2 -> 4.1 us on 2 cores) get the budget anyway.
constexpr int64_t kParallelElements = 32768;

StatusOr<std::shared_ptr<EagerOp::Prepared>> EagerOp::Prepare(const std::vector<EagerTensorPtr>& inputs) const {
  int64_t elements = 0;
  for (const EagerTensorPtr& t : inputs)
    if (t) elements += t->desc().num_elements();
  const int threads = elements >= kParallelElements || def_->sizes_own_threads ? EagerThreads() : 1;
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    if (memo_ && memo_->threads == threads && memo_->inputs.size() == inputs.size()) {
      bool same = true;
      for (size_t i = 0; same && i < inputs.size(); ++i) same = memo_->inputs[i] == inputs[i]->desc();
      if (same) return memo_;
    }
  }
  const std::string& type = def_->type;
  if (!def_->variadic_inputs && inputs.size() != def_->input_names.size()) {
    std::string names;
    for (const std::string& n : def_->input_names) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("op '" + type + "' takes " + std::to_string(def_->input_names.size()) + " inputs (" + names +
                           "), got " + std::to_string(inputs.size()));
  }
  auto prepared = std::make_shared<Prepared>();
  prepared->threads = threads;
  InferContext infer;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) return InvalidArgument("op '" + type + "': input " + std::to_string(i) + " is None");
    infer.inputs.push_back(inputs[i]->desc());
  }
  infer.attrs = attrs_;
  Status inferred = def_->infer(infer);
  if (!inferred.ok()) {
    std::string got;
    for (const TensorDesc& d : infer.inputs) got += (got.empty() ? "" : ", ") + d.ToString();
    return Status(inferred.code(), "op '" + type + "' on inputs (" + got + "): " + inferred.message());
  }
  prepared->inputs = std::move(infer.inputs);
  prepared->outputs = std::move(infer.outputs);
  if (!is_view_ && !def_->stateful_kernel) {
    std::string key = type;
    key += '|';
    key += attrs_key_;
    key += '|';
    key += std::to_string(threads);
    for (const TensorDesc& d : prepared->inputs) AppendDesc(&key, d);
    KernelInit init{prepared->inputs, prepared->outputs, attrs_, threads};
    auto kernel = KernelCache::Global().Get(key, type, init);
    if (!kernel.ok()) return kernel.status().WithContext("op '" + type + "'");
    prepared->kernel = std::move(kernel).value();
  }
  std::lock_guard<std::mutex> lock(memo_mu_);
  memo_ = prepared;
  return prepared;
}

StatusOr<std::vector<EagerTensorPtr>> EagerOp::Run(const std::vector<EagerTensorPtr>& inputs) const {
  AF_ASSIGN_OR_RETURN(std::vector<EagerTensorPtr> outputs, RunWithoutHistory(inputs));
  if (EagerGradEnabled() && def_->grad) RecordGradNode(*def_, attrs_, inputs, outputs);
  return outputs;
}

StatusOr<std::vector<EagerTensorPtr>> EagerOp::RunWithoutHistory(const std::vector<EagerTensorPtr>& inputs) const {
  AF_ASSIGN_OR_RETURN(std::shared_ptr<Prepared> prepared, Prepare(inputs));
  std::vector<EagerTensorPtr> outputs;
  outputs.reserve(prepared->outputs.size());
  if (is_view_) {
    outputs.push_back(std::make_shared<EagerTensor>(prepared->outputs[0], inputs[0]->storage(), inputs[0]->version_counter()));
    return outputs;
  }
  // The views vectors are reused per thread: a small op allocates only its outputs.
  thread_local std::vector<TensorView> in_views, out_views;
  in_views.clear();
  out_views.clear();
  for (const EagerTensorPtr& t : inputs) in_views.push_back(t->view());
  for (const TensorDesc& d : prepared->outputs) {
    outputs.push_back(EagerTensor::Empty(d));
    out_views.push_back(outputs.back()->view());
  }
  KernelContext context{&in_views, &out_views, 0};
  Status status;
  if (prepared->kernel) {
    std::lock_guard<std::mutex> lock(prepared->kernel->mu);
    status = prepared->kernel->fn(context);
  } else {
    KernelInit init{prepared->inputs, prepared->outputs, attrs_, prepared->threads};
    auto kernel = MakeCpuKernel(def_->type, init);
    if (!kernel.ok()) return kernel.status().WithContext("op '" + def_->type + "'");
    status = kernel.value()(context);
  }
  if (!status.ok()) return status.WithContext("op '" + def_->type + "'");
  for (int i : def_->mutable_inputs)
    if (i < static_cast<int>(inputs.size())) inputs[i]->BumpVersion();
  return outputs;
}

StatusOr<std::vector<EagerTensorPtr>> RunEagerOp(const std::string& type, const Attrs& attrs,
                                                 const std::vector<EagerTensorPtr>& inputs, bool record_history) {
  AF_ASSIGN_OR_RETURN(std::shared_ptr<EagerOp> op, EagerOp::Create(type, attrs));
  return record_history ? op->Run(inputs) : op->RunWithoutHistory(inputs);
}

}  // namespace actorflow
