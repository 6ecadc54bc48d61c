// The "boxing" op: one destination device's piece of a layout conversion (kernels/boxing.h).
#include "kernels/boxing.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/parallel_chunks.h"

namespace actorflow {
namespace {

// A partial sum whose task touches more than this (its shards' regions and its output) streams
// its output past the caches: the sources alone evict the output's lines before any reader
// comes, so a normal store's read-for-ownership (loading each output line before overwriting
// it) would only add traffic, a third more for two shards. Half this machine's L3.
constexpr size_t kStreamTouchedBytes = 16 << 20;

constexpr int64_t kSumBlock = 2048;  // elements: 8 KiB of float32, with the shards' reads well inside L1

// A partial sum's run is split over the kernel's threads (ParallelChunks) when it touches at
// least this many bytes (shards read and output written), waking sleeping helpers. Below it
// waking one can cost more than half the sum saves: a 1 MB all-reduce (1.25-1.5 MB touched per
// task, ~20-40 us of summing) split over two threads that way lost on a loaded 2-core host,
// where a woken helper waits for a core; 16 MB and more gained. Each chunk is a whole number of kSumBlock, so chunks never share an
// output cache line once the run's start is aligned, and every element is added in the same
// order as on one thread: the same bits whatever the thread count.
constexpr size_t kThreadedSumTouchedBytes = 4 << 20;

// From this many bytes touched up to kThreadedSumTouchedBytes a sum is split too, but only
// over helpers that are awake (WakeHelpers::kInStream: the previous split job ended within
// their spin time, as between the back-to-back sums of one all-reduce or after a step's GEMMs):
// a sleeping helper is not woken, so the sum costs no futex wake and runs on the acting thread
// alone when it comes by itself. A 1 MB all-reduce on 2 devices sharing one worker (the
// default on 2 cores) sums 1.5 MiB per device; with an awake helper each sum takes about half.
constexpr size_t kInStreamSumTouchedBytes = 512 << 10;

// block[0, length) = the sources in order, added in one pass: from the first `count` (2 to 4)
// when `first`, else block + each of `count` (1 to 3). One pass over up to four sources loads
// each of them once and the block once, where a pass per source reloads and stores the block
// every time (4 sources: 4 loads and 1 store per element instead of 6 and 3; the whole 1 MB
// four-device sum 1.4-2x faster from L3 here). The order of the additions is the same either
// way, ((x + y) + z) + w, so the result does not depend on how sources are grouped.
template <typename T>
__attribute__((always_inline)) inline void AddSources(T* __restrict block, const T* const* sources, size_t count, int64_t length, bool first) {
  const T* __restrict a = sources[0];
  const T* __restrict b = count > 1 ? sources[1] : nullptr;
  const T* __restrict c = count > 2 ? sources[2] : nullptr;
  const T* __restrict d = count > 3 ? sources[3] : nullptr;
  if (first) {
    switch (count) {
      case 2: for (int64_t i = 0; i < length; ++i) block[i] = a[i] + b[i]; return;
      case 3: for (int64_t i = 0; i < length; ++i) block[i] = (a[i] + b[i]) + c[i]; return;
      default: for (int64_t i = 0; i < length; ++i) block[i] = ((a[i] + b[i]) + c[i]) + d[i]; return;
    }
  }
  switch (count) {
    case 1: for (int64_t i = 0; i < length; ++i) block[i] += a[i]; return;
    case 2: for (int64_t i = 0; i < length; ++i) block[i] = (block[i] + a[i]) + b[i]; return;
    default: for (int64_t i = 0; i < length; ++i) block[i] = ((block[i] + a[i]) + b[i]) + c[i]; return;
  }
}

// AddSources for float, compiled also for AVX2 (chosen once, at the first call, where the CPU has
// it): the build targets baseline x86-64 (SSE2), whose 4-float vectors take twice the
// instructions per byte, and a sum of shards in L2/L3 is bound by how many loads per cycle
// issue, not by memory. Same loops, same order of additions, so the same bits either way. A
// plain run-time check, not an ifunc (target_clones): an ifunc resolver runs while the dynamic
// loader relocates the program, before a sanitizer's runtime is set up, and crashed there.
__attribute__((target("avx2"))) __attribute__((noinline)) void AddFloatSourcesAvx2(
    float* __restrict block, const float* const* sources, size_t count, int64_t length, bool first) {
  AddSources<float>(block, sources, count, length, first);
}

__attribute__((noinline)) void AddFloatSourcesBaseline(float* __restrict block, const float* const* sources,
                                                       size_t count, int64_t length, bool first) {
  AddSources<float>(block, sources, count, length, first);
}

void AddFloatSources(float* __restrict block, const float* const* sources, size_t count, int64_t length, bool first) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    AddFloatSourcesAvx2(block, sources, count, length, first);
  } else {
    AddFloatSourcesBaseline(block, sources, count, length, first);
  }
}

// block[0, length) = the sum of source(k) + begin over every k (count >= 2): the first four in
// one pass, then each further three in one more.
template <typename T, typename Source>
inline void SumBlock(T* block, Source source, size_t count, int64_t begin, int64_t length) {
  const T* group[4];
  size_t k = 0;
  bool first = true;
  while (k < count) {
    const size_t take = std::min(count - k, first ? size_t{4} : size_t{3});
    for (size_t j = 0; j < take; ++j) group[j] = source(k + j) + begin;
    if constexpr (std::is_same_v<T, float>) {
      AddFloatSources(block, group, take, length, first);
    } else {
      AddSources<T>(block, group, take, length, first);
    }
    k += take;
    first = false;
  }
}

// out[0, n) = the sum of sources[k][0, n) for every k, summed in blocks that stay in L1
// (SumBlock), so each output element goes to memory once whatever the number of sources. `stream`: the
// output is written with non-temporal stores (float and double on SSE2; others store normally).
// `source(k)`: the run's start in source k.
template <typename T, typename Source>
void SumRun(T* out, Source source, size_t count, int64_t n, bool stream) {
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (stream) {
      constexpr int64_t kLanes = 16 / sizeof(T);
      int64_t head = 0;  // scalar stores up to the first 16-byte boundary of the output
      while (head < n && reinterpret_cast<uintptr_t>(out + head) % 16 != 0) {
        T sum = source(0)[head];
        for (size_t k = 1; k < count; ++k) sum += source(k)[head];
        out[head++] = sum;
      }
      alignas(64) T block[kSumBlock];
      for (int64_t begin = head; begin < n; begin += kSumBlock) {
        const int64_t length = std::min(kSumBlock, n - begin);
        SumBlock<T>(block, source, count, begin, length);
        T* destination = out + begin;
        const int64_t vectors = length / kLanes * kLanes;
        for (int64_t i = 0; i < vectors; i += kLanes) {
          if constexpr (std::is_same_v<T, float>) {
            _mm_stream_ps(destination + i, _mm_load_ps(block + i));
          } else {
            _mm_stream_pd(destination + i, _mm_load_pd(block + i));
          }
        }
        for (int64_t i = vectors; i < length; ++i) destination[i] = block[i];
      }
      // Streaming stores are weakly ordered: make them visible before the task reports its
      // register ready (the message's release then publishes them).
      _mm_sfence();
      return;
    }
  }
#endif
  (void)stream;
  for (int64_t begin = 0; begin < n; begin += kSumBlock) {
    const int64_t length = std::min(kSumBlock, n - begin);
    SumBlock<T>(out + begin, source, count, begin, length);
  }
}

// A box of the logical tensor: [begin[a], end[a]) on every axis.
struct Box {
  Shape begin, end;
  bool empty() const {
    for (size_t a = 0; a < begin.size(); ++a)
      if (end[a] <= begin[a]) return true;
    return false;
  }
};

Box FullBox(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

// The logical region of part `index` of `parts` under `sbp` (the whole tensor unless split).
Box PartBox(const Shape& logical, const Sbp& sbp, int64_t parts, int64_t index) {
  Box box = FullBox(logical);
  if (sbp.kind != SbpKind::kSplit || parts <= 1) return box;
  std::vector<int64_t> sizes = BalancedSplit(logical[sbp.axis], parts);
  int64_t offset = 0;
  for (int64_t i = 0; i < index; ++i) offset += sizes[i];
  box.begin[sbp.axis] = offset;
  box.end[sbp.axis] = offset + sizes[index];
  return box;
}

Box Intersect(const Box& a, const Box& b) {
  Box r = a;
  for (size_t i = 0; i < a.begin.size(); ++i) {
    r.begin[i] = std::max(a.begin[i], b.begin[i]);
    r.end[i] = std::min(a.end[i], b.end[i]);
  }
  return r;
}

// Applies `run(dst, src, elements)` to each contiguous run of `box`, where `src` is a tensor
// holding logical region `src_box` and `dst` one holding `dst_box` (row-major, both containing `box`).
template <typename T, typename Run>
void ForEachRun(const Box& box, T* dst, const Box& dst_box, const T* src, const Box& src_box, Run run) {
  const size_t rank = box.begin.size();
  if (rank == 0) {
    run(dst, src, 1);
    return;
  }
  Shape dst_extent(rank), src_extent(rank), extent(rank);
  for (size_t a = 0; a < rank; ++a) {
    dst_extent[a] = dst_box.end[a] - dst_box.begin[a];
    src_extent[a] = src_box.end[a] - src_box.begin[a];
    extent[a] = box.end[a] - box.begin[a];
  }
  // Innermost axes the box covers whole in both tensors merge into one contiguous run.
  size_t inner = rank - 1;
  int64_t run_length = extent[inner];
  while (inner > 0 && extent[inner] == dst_extent[inner] && extent[inner] == src_extent[inner]) {
    --inner;
    run_length *= extent[inner];
  }
  Shape dst_stride(rank, 1), src_stride(rank, 1);
  for (size_t a = rank - 1; a > 0; --a) {
    dst_stride[a - 1] = dst_stride[a] * dst_extent[a];
    src_stride[a - 1] = src_stride[a] * src_extent[a];
  }
  Shape index(inner, 0);  // odometer over the axes before `inner`
  while (true) {
    int64_t dst_offset = (box.begin[inner] - dst_box.begin[inner]) * dst_stride[inner];
    int64_t src_offset = (box.begin[inner] - src_box.begin[inner]) * src_stride[inner];
    for (size_t a = 0; a < inner; ++a) {
      dst_offset += (box.begin[a] + index[a] - dst_box.begin[a]) * dst_stride[a];
      src_offset += (box.begin[a] + index[a] - src_box.begin[a]) * src_stride[a];
    }
    run(dst + dst_offset, src + src_offset, run_length);
    size_t a = inner;
    while (a > 0) {
      --a;
      if (++index[a] < extent[a]) break;
      index[a] = 0;
      if (a == 0) return;
    }
    if (inner == 0) return;
  }
}

// SumRun over [0, n) split into chunks of whole kSumBlocks on up to `threads` threads.
template <typename T, typename Source>
void SumRunThreaded(T* out, const Source& source, size_t count, int64_t n, bool stream, int threads) {
  const size_t touched = static_cast<size_t>(n) * sizeof(T) * (count + 1);
  if (threads <= 1 || touched < kInStreamSumTouchedBytes || n < 2 * kSumBlock) {
    SumRun<T>(out, source, count, n, stream);
    return;
  }
  const WakeHelpers wake = touched >= kThreadedSumTouchedBytes ? WakeHelpers::kAlways : WakeHelpers::kInStream;
  // Two chunks per thread: a helper that starts late leaves less for the caller to wait on.
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  const int chunks = static_cast<int>(std::min<int64_t>(blocks, 2 * static_cast<int64_t>(threads)));
  const int64_t per_chunk = (blocks + chunks - 1) / chunks * kSumBlock;
  auto chunk = [&](int i) {
    const int64_t begin = i * per_chunk;
    if (begin >= n) return;
    const int64_t length = std::min(per_chunk, n - begin);
    SumRun<T>(out + begin, [&](size_t k) { return source(k) + begin; }, count, length, stream);
  };
  ParallelChunks(chunks, threads, chunk, wake);
}

template <typename T>
Status RunTyped(const BoxingSpec& spec, const std::vector<TensorView>& inputs, const TensorView& output, int threads) {
  T* out = output.as<T>();
  if (spec.out.kind == SbpKind::kPartialSum && spec.out_index != 0) {
    std::memset(out, 0, output.byte_size());
    return Status::Ok();
  }
  const Box out_box = PartBox(spec.logical_shape, spec.out, spec.out_parts, spec.out_index);
  auto copy = [](T* d, const T* s, int64_t n) { std::memcpy(d, s, static_cast<size_t>(n) * sizeof(T)); };
  switch (spec.in.kind) {
    case SbpKind::kBroadcast:
      ForEachRun<T>(out_box, out, out_box, inputs[0].as<const T>(), FullBox(spec.logical_shape), copy);
      break;
    case SbpKind::kPartialSum: {
      // Every shard holds the whole logical tensor, so one offset finds a run in all of them
      // (SumRun: blocked in L1, streamed past the caches when the task touches more than
      // they hold).
      const Box full = FullBox(spec.logical_shape);
      const T* first = inputs[0].as<const T>();
      if (inputs.size() == 1) {
        ForEachRun<T>(out_box, out, out_box, first, full, copy);
        break;
      }
      const bool stream = output.byte_size() * (inputs.size() + 1) > kStreamTouchedBytes;
      ForEachRun<T>(out_box, out, out_box, first, full, [&](T* d, const T* a, int64_t n) {
        const std::ptrdiff_t offset = a - first;
        SumRunThreaded<T>(d, [&](size_t k) { return inputs[k].as<const T>() + offset; }, inputs.size(), n, stream,
                          threads);
      });
      break;
    }
    case SbpKind::kSplit:
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Box in_box = PartBox(spec.logical_shape, spec.in, spec.in_parts, static_cast<int64_t>(i));
        const Box common = Intersect(out_box, in_box);
        if (!common.empty()) ForEachRun<T>(common, out, out_box, inputs[i].as<const T>(), in_box, copy);
      }
      break;
  }
  return Status::Ok();
}

Status CheckSpec(const BoxingSpec& spec) {
  auto check_sbp = [&](const Sbp& sbp, const char* what) -> Status {
    if (sbp.kind == SbpKind::kSplit && (sbp.axis < 0 || sbp.axis >= static_cast<int64_t>(spec.logical_shape.size())))
      return InvalidArgument(std::string("boxing: ") + what + " " + sbp.ToString() + " is outside the rank of " +
                             ShapeToString(spec.logical_shape));
    return Status::Ok();
  };
  AF_RETURN_IF_ERROR(check_sbp(spec.in, "source"));
  AF_RETURN_IF_ERROR(check_sbp(spec.out, "destination"));
  if (spec.in_parts < 1 || spec.out_parts < 1 || spec.out_index < 0 || spec.out_index >= spec.out_parts)
    return InvalidArgument("boxing: device index " + std::to_string(spec.out_index) + " of " +
                           std::to_string(spec.out_parts) + " from " + std::to_string(spec.in_parts) + " devices");
  return Status::Ok();
}

StatusOr<BoxingSpec> SpecFromInit(const KernelInit& init) {
  BoxingSpec spec;
  AF_ASSIGN_OR_RETURN(std::string in_text, init.attrs.GetString("in_sbp"));
  AF_ASSIGN_OR_RETURN(std::string out_text, init.attrs.GetString("out_sbp"));
  AF_ASSIGN_OR_RETURN(spec.in, ParseSbpText(in_text));
  AF_ASSIGN_OR_RETURN(spec.out, ParseSbpText(out_text));
  if (init.inputs.empty() || init.outputs.size() != 1)
    return InvalidArgument("boxing: expected at least one input and one output, got " +
                           std::to_string(init.inputs.size()) + " and " + std::to_string(init.outputs.size()));
  spec.dtype = init.outputs[0].dtype;
  spec.in_parts = init.attrs.GetIntOr("in_parts", 1);
  spec.out_parts = init.attrs.GetIntOr("out_parts", 1);
  spec.out_index = init.attrs.GetIntOr("out_index", 0);
  if (init.attrs.Has("logical_shape")) {
    AF_ASSIGN_OR_RETURN(spec.logical_shape, init.attrs.GetInts("logical_shape"));
  } else {
    spec.logical_shape = init.inputs[0].shape;  // one device on both sides: the shapes are logical
  }
  AF_RETURN_IF_ERROR(CheckSpec(spec));
  if (static_cast<int64_t>(init.inputs.size()) != BoxingInputCount(spec))
    return InvalidArgument("boxing " + spec.in.ToString() + "->" + spec.out.ToString() + ": expected " +
                           std::to_string(BoxingInputCount(spec)) + " source shards, got " +
                           std::to_string(init.inputs.size()));
  for (size_t i = 0; i < init.inputs.size(); ++i) {
    const int64_t index = spec.in.kind == SbpKind::kBroadcast ? 0 : static_cast<int64_t>(i);
    AF_ASSIGN_OR_RETURN(Shape want, PhysicalShape(spec.logical_shape, spec.in, spec.in_parts, index));
    if (init.inputs[i].shape != want || init.inputs[i].dtype != spec.dtype)
      return InvalidArgument("boxing: source shard " + std::to_string(i) + " is " + init.inputs[i].ToString() +
                             ", expected " + TensorDesc{want, spec.dtype}.ToString());
  }
  AF_ASSIGN_OR_RETURN(Shape want, PhysicalShape(spec.logical_shape, spec.out, spec.out_parts, spec.out_index));
  if (init.outputs[0].shape != want)
    return InvalidArgument("boxing: destination piece is " + init.outputs[0].ToString() + ", expected " +
                           TensorDesc{want, spec.dtype}.ToString());
  return spec;
}

}  // namespace

StatusOr<Sbp> ParseSbpText(const std::string& text) {
  auto parsed = ParseSbpSignature("->" + text);
  if (!parsed.ok() || parsed->outputs.size() != 1 ||
      (parsed->outputs[0].kind == SbpKind::kSplit && parsed->outputs[0].axis == Sbp::kEachAxis))
    return InvalidArgument("'" + text + "' is not an SBP (expected S(<axis>), B or P)");
  return parsed->outputs[0];
}

Attrs BoxingTaskAttrs(const BoxingSpec& spec) {
  Attrs attrs;
  attrs.Set("in_sbp", spec.in.ToString());
  attrs.Set("out_sbp", spec.out.ToString());
  attrs.Set("logical_shape", spec.logical_shape);
  attrs.Set("in_parts", spec.in_parts);
  attrs.Set("out_parts", spec.out_parts);
  attrs.Set("out_index", spec.out_index);
  return attrs;
}

int64_t BoxingInputCount(const BoxingSpec& spec) { return spec.in.kind == SbpKind::kBroadcast ? 1 : spec.in_parts; }

Status RunBoxing(const BoxingSpec& spec, const std::vector<TensorView>& inputs, const TensorView& output, int threads) {
  switch (spec.dtype) {
    case DType::kFloat32: return RunTyped<float>(spec, inputs, output, threads);
    case DType::kFloat64: return RunTyped<double>(spec, inputs, output, threads);
    case DType::kInt32: return RunTyped<int32_t>(spec, inputs, output, threads);
    case DType::kInt64: return RunTyped<int64_t>(spec, inputs, output, threads);
    case DType::kInt8: return RunTyped<int8_t>(spec, inputs, output, threads);
    case DType::kUInt8: return RunTyped<uint8_t>(spec, inputs, output, threads);
    default: return InvalidArgument("boxing: unsupported dtype of " + output.desc.ToString());
  }
}

void RegisterBoxingOps(OpRegistry& registry) {
  OpDef def;
  def.type = "boxing";
  def.input_names = {"in"};
  def.output_names = {"out"};
  def.variadic_inputs = true;  // physically: one source shard per source device
  def.infer = [](InferContext& ctx) -> Status {
    if (ctx.inputs.size() != 1) return InvalidArgument("boxing takes one logical input, got " + std::to_string(ctx.inputs.size()));
    AF_ASSIGN_OR_RETURN(std::string in_text, ctx.attrs.GetString("in_sbp"));
    AF_ASSIGN_OR_RETURN(std::string out_text, ctx.attrs.GetString("out_sbp"));
    AF_RETURN_IF_ERROR(ParseSbpText(in_text).status());
    AF_RETURN_IF_ERROR(ParseSbpText(out_text).status());
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(BoxingSpec spec, SpecFromInit(init));
    // A partial sum uses the act's threads (its share, plus idle shares lent to it); copies and
    // slices stay on one (they are a fraction of a sum's traffic).
    const int threads = init.num_threads;
    return KernelFn([spec, threads](KernelContext& ctx) -> Status {
      return RunBoxing(spec, *ctx.inputs, ctx.output(0), ctx.threads > threads ? ctx.threads : threads);
    });
  };
  def.doc = "one device's piece of a layout conversion (compiler-inserted; see kernels/boxing.h)";
  registry.Register(std::move(def));
}

}  // namespace actorflow
