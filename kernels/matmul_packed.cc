#include "kernels/matmul_packed.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <cstdlib>

#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "kernels/parallel_chunks.h"

namespace actorflow {

namespace {
std::atomic<int64_t> total_packs{0};
}  // namespace

int64_t PackedGemm::TotalPacks() { return total_packs.load(std::memory_order_relaxed); }

struct PackedGemm::Impl {
  // One primitive per distinct piece height (the last piece may be shorter), each with the
  // packed B in its own layout (the same memory when the layouts agree).
  struct Shape {
    int64_t rows = 0;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
    int packed = 0;  // index into `packed`
  };
  struct Part {
    int shape = 0;
    int64_t row_begin = 0, row_end = 0;
    dnnl::stream stream;
    dnnl::memory a, b, c, scratchpad;  // b: in place only (each piece its own object)
    dnnl_exec_arg_t args[4];
  };
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  bool ta = false, tb = false;
  bool in_place = false;  // b read where it lies: no version, no pack
  int64_t m = 0, n = 0, k = 0;
  std::vector<Shape> shapes;
  std::vector<dnnl::memory> packed;  // distinct packed layouts, their buffers made by the first pack
  std::vector<std::unique_ptr<void, void (*)(void*)>> buffers;
  dnnl::memory source;               // b as stored (handle set per pack)
  std::vector<dnnl::reorder> reorders;  // source -> packed[i]
  dnnl::stream stream;
  std::vector<Part> parts;
  std::shared_ptr<const std::atomic<int64_t>> version;
  // The packed copy holds b as it was at packed_from when its version was packed_version (null:
  // no valid copy).
  int64_t packed_version = 0;
  const float* packed_from = nullptr;
  int64_t packs = 0;
};

PackedGemm::PackedGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedGemm::~PackedGemm() = default;

std::shared_ptr<PackedGemm> PackedGemm::Make(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int parts,
                                             std::shared_ptr<const std::atomic<int64_t>> version) {
  if (version == nullptr) return nullptr;
  return Build(ta, tb, m, n, k, parts, std::move(version));
}

std::shared_ptr<PackedGemm> PackedGemm::MakeInPlace(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int parts) {
  return Build(ta, tb, m, n, k, parts, nullptr);
}

std::shared_ptr<PackedGemm> PackedGemm::Build(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int parts,
                                              std::shared_ptr<const std::atomic<int64_t>> version) {
  if (m <= 0 || n <= 0 || k <= 0 || parts <= 0) return nullptr;
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  auto impl = std::make_unique<Impl>();
  impl->ta = ta;
  impl->tb = tb;
  impl->m = m;
  impl->n = n;
  impl->k = k;
  impl->in_place = version == nullptr;
  impl->version = std::move(version);
  const int64_t step = (m + parts - 1) / parts;
  // Made for the one thread each piece runs on (oneDNN sizes its blocking by the caller's team).
  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  bool made = true;
  try {
    const dnnl::memory::desc b_any({k, n}, f32, tag::any), b_md({k, n}, f32, tb ? tag::ba : tag::ab);
    for (int64_t r0 = 0; r0 < m; r0 += step) {
      const int64_t rows = std::min(step, m - r0);
      size_t s = 0;
      while (s < impl->shapes.size() && impl->shapes[s].rows != rows) ++s;
      if (s == impl->shapes.size()) {
        // op(A)'s rows are A's rows (A: m x k) or A's columns (A stored k x m); C's rows are n apart.
        dnnl::memory::desc a_md({rows, k}, f32, ta ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
        dnnl::memory::desc c_md({rows, n}, f32, dnnl::memory::dims{n, 1});
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, impl->in_place ? b_md : b_any, c_md), attr,
                                        impl->engine);
        Impl::Shape shape{rows, pd, dnnl::matmul(pd), 0};
        size_t p = 0;
        while (!impl->in_place && p < impl->packed.size() && impl->packed[p].get_desc() != pd.weights_desc()) ++p;
        if (!impl->in_place && p == impl->packed.size()) impl->packed.emplace_back(pd.weights_desc(), impl->engine, nullptr);
        shape.packed = static_cast<int>(p);
        impl->shapes.push_back(std::move(shape));
      }
      Impl::Part part;
      part.shape = static_cast<int>(s);
      part.row_begin = r0;
      part.row_end = r0 + rows;
      const dnnl::matmul::primitive_desc& pd = impl->shapes[s].pd;
      part.stream = dnnl::stream(impl->engine);
      part.a = dnnl::memory(pd.src_desc(), impl->engine, nullptr);
      part.c = dnnl::memory(pd.dst_desc(), impl->engine, nullptr);
      if (impl->in_place) part.b = dnnl::memory(b_md, impl->engine, nullptr);
      part.scratchpad = dnnl::memory(pd.scratchpad_desc(), impl->engine);
      impl->parts.push_back(std::move(part));
    }
    if (!impl->in_place) {
      // A plain layout is what dnnl_sgemm reads already: nothing to gain.
      for (const dnnl::memory& packed : impl->packed)
        if (packed.get_desc() == b_md) made = false;
      impl->source = dnnl::memory(b_md, impl->engine, nullptr);
      impl->stream = dnnl::stream(impl->engine);
      for (const dnnl::memory& packed : impl->packed)
        impl->reorders.emplace_back(dnnl::reorder::primitive_desc(impl->source, packed));
    }
    for (Impl::Part& part : impl->parts) {
      part.args[0] = {DNNL_ARG_SRC, part.a.get()};
      part.args[1] = {DNNL_ARG_WEIGHTS, impl->in_place ? part.b.get() : impl->packed[impl->shapes[part.shape].packed].get()};
      part.args[2] = {DNNL_ARG_DST, part.c.get()};
      part.args[3] = {DNNL_ARG_SCRATCHPAD, part.scratchpad.get()};
    }
  } catch (const dnnl::error&) {
    made = false;
  }
  omp_set_num_threads(previous_threads);
  if (!made) return nullptr;
  return std::shared_ptr<PackedGemm>(new PackedGemm(std::move(impl)));
}

int PackedGemm::parts() const { return static_cast<int>(impl_->parts.size()); }
int64_t PackedGemm::row_begin(int part) const { return impl_->parts[part].row_begin; }
int64_t PackedGemm::row_end(int part) const { return impl_->parts[part].row_end; }
int64_t PackedGemm::packs() const { return impl_->packs; }

Status PackedGemm::Refresh(const float* b) {
  Impl& g = *impl_;
  if (g.in_place) {  // each piece reads b itself
    for (Impl::Part& part : g.parts) dnnl_memory_set_data_handle(part.b.get(), const_cast<float*>(b));
    return Status::Ok();
  }
  const int64_t version = g.version->load(std::memory_order_acquire);
  if (g.packed_from != nullptr && version == g.packed_version && b == g.packed_from) return Status::Ok();
  g.packed_from = nullptr;
  // The copies' memory only once the kernel runs (a job's inline copy and its actors' copy
  // each have this kernel; often one of them never acts).
  while (g.buffers.size() < g.packed.size()) {
    dnnl::memory& target = g.packed[g.buffers.size()];
    const size_t bytes = target.get_desc().get_size();
    void* buffer = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (buffer == nullptr)
      return Internal("matmul: out of memory for the packed copy of the right operand (" + std::to_string(bytes) +
                               " bytes)");
    g.buffers.emplace_back(buffer, std::free);
    target.set_data_handle(buffer);
  }
  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Status status;
  try {
    g.source.set_data_handle(const_cast<float*>(b));
    for (size_t i = 0; i < g.packed.size(); ++i) g.reorders[i].execute(g.stream, g.source, g.packed[i]);
    g.stream.wait();
  } catch (const dnnl::error& e) {
    status = Internal(std::string("matmul: packing the right operand failed in oneDNN: ") + e.what());
  }
  omp_set_num_threads(previous_threads);
  if (!status.ok()) return status;
  g.packed_version = version;
  g.packed_from = b;
  ++g.packs;
  total_packs.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status PackedGemm::Run(const float* b, const float* a, float* c, void (*after_part)(void*, int64_t, int64_t),
                       void* context, const char* what) {
  AF_RETURN_IF_ERROR(Refresh(b));
  std::atomic<bool> failed{false};
  auto piece = [&](int part) {
    if (!RunPart(part, a, c)) failed.store(true);
    else after_part(context, row_begin(part), row_end(part));
  };
  if (parts() == 1) {
    omp_set_num_threads(1);
    piece(0);
  } else {
    ParallelChunks(parts(), parts(), piece);
  }
  if (failed.load()) return Internal(std::string(what) + " failed");
  return Status::Ok();
}

bool PackedGemm::RunPart(int index, const float* a, float* c) {
  Impl& g = *impl_;
  Impl::Part& part = g.parts[index];
  dnnl_memory_set_data_handle(part.a.get(), const_cast<float*>(a) + (g.ta ? part.row_begin : part.row_begin * g.k));
  dnnl_memory_set_data_handle(part.c.get(), c + part.row_begin * g.n);
  return dnnl_primitive_execute(g.shapes[part.shape].primitive.get(), part.stream.get(), 4, part.args) == dnnl_success;
}

}  // namespace actorflow
