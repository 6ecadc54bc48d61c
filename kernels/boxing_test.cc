#include "kernels/boxing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/parallel_chunks.h"

namespace actorflow {
namespace {

using Buffer = std::vector<double>;

// Logical tensor of shape (7, 5): 7 rows over 2 devices are 4/3, over 3 devices 3/2/2; 5
// columns 3/2 and 2/2/1, so every split is uneven. Integer values keep sums exact.
const Shape kLogical = {7, 5};

Buffer LogicalValues() {
  Buffer v(35);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i * 7 % 23) - 9.0;
  return v;
}

double At(const Buffer& b, const Shape& shape, int64_t r, int64_t c) { return b[r * shape[1] + c]; }

// The physical shards of `logical` laid out as `sbp` over `parts` devices. Partial sums get
// arbitrary integer pieces whose sum is the logical value.
std::vector<Buffer> Shards(const Buffer& logical, const Sbp& sbp, int64_t parts) {
  std::vector<Buffer> shards;
  for (int64_t p = 0; p < parts; ++p) {
    Shape shape = PhysicalShape(kLogical, sbp, parts, p).value();
    Buffer shard(NumElements(shape));
    int64_t row0 = 0, col0 = 0;
    if (sbp.kind == SbpKind::kSplit) {
      auto sizes = BalancedSplit(kLogical[sbp.axis], parts);
      for (int64_t i = 0; i < p; ++i) (sbp.axis == 0 ? row0 : col0) += sizes[i];
    }
    for (int64_t r = 0; r < shape[0]; ++r)
      for (int64_t c = 0; c < shape[1]; ++c) {
        double value = At(logical, kLogical, row0 + r, col0 + c);
        if (sbp.kind == SbpKind::kPartialSum) {
          const double piece = static_cast<double>((r * 3 + c + p * 5) % 4) - 1.0;
          value = p + 1 < parts ? piece : value;
          if (p + 1 == parts)
            for (int64_t q = 0; q + 1 < parts; ++q) value -= static_cast<double>((r * 3 + c + q * 5) % 4) - 1.0;
        }
        shard[r * shape[1] + c] = value;
      }
    shards.push_back(std::move(shard));
  }
  return shards;
}

// The logical tensor the destination pieces represent.
Buffer Assemble(const std::vector<Buffer>& pieces, const Sbp& sbp, int64_t parts) {
  Buffer logical(35, 0.0);
  int64_t offset = 0;
  for (int64_t p = 0; p < parts; ++p) {
    Shape shape = PhysicalShape(kLogical, sbp, parts, p).value();
    for (int64_t r = 0; r < shape[0]; ++r)
      for (int64_t c = 0; c < shape[1]; ++c) {
        int64_t lr = r, lc = c;
        if (sbp.kind == SbpKind::kSplit) (sbp.axis == 0 ? lr : lc) += offset;
        double v = pieces[p][r * shape[1] + c];
        double& slot = logical[lr * kLogical[1] + lc];
        if (sbp.kind == SbpKind::kPartialSum) slot += v;
        else if (sbp.kind == SbpKind::kBroadcast && p > 0) EXPECT_EQ(slot, v) << "broadcast piece " << p << " differs";
        else slot = v;
      }
    if (sbp.kind == SbpKind::kSplit) offset += shape[sbp.axis];
  }
  return logical;
}

// Runs the boxing op's CPU kernel for every destination device.
std::vector<Buffer> Box(const std::vector<Buffer>& sources, const Sbp& in, int64_t in_parts, const Sbp& out,
                        int64_t out_parts) {
  std::vector<Buffer> pieces;
  for (int64_t d = 0; d < out_parts; ++d) {
    BoxingSpec spec{kLogical, DType::kFloat64, in, out, in_parts, out_parts, d};
    KernelInit init;
    init.attrs = BoxingTaskAttrs(spec);
    std::vector<TensorView> inputs;
    // A broadcast source is read from one shard: the one of the destination's device if any.
    const int64_t first = in.kind == SbpKind::kBroadcast ? std::min(d, in_parts - 1) : 0;
    for (int64_t s = first; s < first + BoxingInputCount(spec); ++s) {
      TensorDesc desc{PhysicalShape(kLogical, in, in_parts, s).value(), DType::kFloat64};
      init.inputs.push_back(desc);
      inputs.push_back(TensorView{const_cast<double*>(sources[s].data()), desc});
    }
    TensorDesc out_desc{PhysicalShape(kLogical, out, out_parts, d).value(), DType::kFloat64};
    init.outputs = {out_desc};
    Buffer piece(NumElements(out_desc.shape), -1234.0);
    std::vector<TensorView> outputs = {TensorView{piece.data(), out_desc}};
    auto kernel = MakeCpuKernel("boxing", init);
    EXPECT_TRUE(kernel.ok()) << kernel.status().ToString();
    if (!kernel.ok()) return {};
    KernelContext ctx;
    ctx.inputs = &inputs;
    ctx.outputs = &outputs;
    Status run = kernel.value()(ctx);
    EXPECT_TRUE(run.ok()) << run.ToString();
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

TEST(BoxingTest, EveryKindOnTwoAndThreeDevicesMatchesTheLogicalTensor) {
  RegisterAllOps();
  const Buffer logical = LogicalValues();
  const std::vector<Sbp> layouts = {Sbp::Split(0), Sbp::Split(1), Sbp::Broadcast(), Sbp::PartialSum()};
  int checked = 0;
  for (const Sbp& in : layouts)
    for (const Sbp& out : layouts)
      for (int64_t in_parts : {1, 2, 3})
        for (int64_t out_parts : {1, 2, 3}) {
          SCOPED_TRACE(in.ToString() + " over " + std::to_string(in_parts) + " -> " + out.ToString() + " over " +
                       std::to_string(out_parts));
          auto pieces = Box(Shards(logical, in, in_parts), in, in_parts, out, out_parts);
          ASSERT_EQ(static_cast<int64_t>(pieces.size()), out_parts);
          EXPECT_EQ(Assemble(pieces, out, out_parts), logical);
          ++checked;
        }
  EXPECT_EQ(checked, 4 * 4 * 3 * 3);
}

TEST(BoxingTest, PartialSumDestinationPutsTheValueOnTheFirstDevice) {
  RegisterAllOps();
  const Buffer logical = LogicalValues();
  auto pieces = Box(Shards(logical, Sbp::Split(0), 3), Sbp::Split(0), 3, Sbp::PartialSum(), 3);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], logical);
  EXPECT_EQ(pieces[1], Buffer(35, 0.0));
  EXPECT_EQ(pieces[2], Buffer(35, 0.0));
}

TEST(BoxingTest, ReduceScatterSumsOnlyItsOwnSlice) {
  // P -> S(0) over 2 devices: device 1's piece is rows 4..6 of the sum, nothing else.
  RegisterAllOps();
  const Buffer logical = LogicalValues();
  auto pieces = Box(Shards(logical, Sbp::PartialSum(), 2), Sbp::PartialSum(), 2, Sbp::Split(0), 2);
  ASSERT_EQ(pieces.size(), 2u);
  ASSERT_EQ(pieces[1].size(), 15u);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(pieces[1][r * 5 + c], At(logical, kLogical, 4 + r, c));
}

TEST(BoxingTest, ReduceOfManyShardsOverLongRunsIsExact) {
  // Runs longer than the sum's block (rows of 5000 float32), several runs per piece (P -> S(1)
  // cuts every row), 2 to 8 shards (summed four, then three more, at a time): each element of
  // every piece is the sum of its shards added in shard order, ((s0 + s1) + s2) + ..., bit for
  // bit (the values are not integers, so another order would round differently somewhere).
  const Shape logical = {3, 5000};
  const int64_t elements = NumElements(logical);
  for (int64_t shards : {2, 3, 4, 5, 6, 7, 8})
    for (const Sbp& out : {Sbp::Split(0), Sbp::Split(1), Sbp::Broadcast()}) {
      SCOPED_TRACE(std::to_string(shards) + " shards -> " + out.ToString());
      std::vector<std::vector<float>> sources(shards, std::vector<float>(elements));
      std::vector<TensorView> inputs;
      for (int64_t k = 0; k < shards; ++k) {
        for (int64_t i = 0; i < elements; ++i)
          sources[k][i] = static_cast<float>((i * (k + 3)) % 97 - 40 * k) * (1.0f + 0.37f * static_cast<float>(k)) / 3.0f;
        inputs.push_back({sources[k].data(), {logical, DType::kFloat32}});
      }
      const int64_t parts = out.kind == SbpKind::kBroadcast ? 1 : 2;
      for (int64_t index = 0; index < parts; ++index) {
        BoxingSpec spec{logical, DType::kFloat32, Sbp::PartialSum(), out, shards, parts, index};
        const Shape shape = PhysicalShape(logical, out, parts, index).value();
        std::vector<float> piece(NumElements(shape), -1.0f);
        ASSERT_TRUE(RunBoxing(spec, inputs, {piece.data(), {shape, DType::kFloat32}}).ok());
        const int64_t row0 = out == Sbp::Split(0) && index == 1 ? 2 : 0;
        const int64_t col0 = out == Sbp::Split(1) && index == 1 ? 2500 : 0;
        for (int64_t r = 0; r < shape[0]; ++r)
          for (int64_t c = 0; c < shape[1]; ++c) {
            float want = 0;
            for (int64_t k = 0; k < shards; ++k) want += sources[k][(row0 + r) * 5000 + col0 + c];
            ASSERT_EQ(piece[r * shape[1] + c], want) << r << "," << c;
          }
      }
    }
}

TEST(BoxingTest, ThreadedReduceIsBitIdenticalToOneThread) {
  // Sums past the threading threshold (4 MiB touched), on 2 and 3 threads: chunks of whole
  // sum blocks, a run length that is no multiple of a block, and outputs at an odd offset (a
  // scalar head before the first aligned block), each element the same bits as on one thread
  // (the additions keep their order). The helper pool must have run some chunks.
  for (int64_t shards : {2, 4, 5})
    for (int64_t elements : {int64_t{65536 + 77}, int64_t{600001}})
      for (int threads : {2, 3})
        for (int64_t shift : {0, 1}) {
          SCOPED_TRACE(std::to_string(shards) + " shards, " + std::to_string(elements) + " elements, " +
                       std::to_string(threads) + " threads, output shifted " + std::to_string(shift));
          const Shape logical = {elements};
          std::vector<std::vector<float>> sources(shards, std::vector<float>(elements));
          std::vector<TensorView> inputs;
          for (int64_t k = 0; k < shards; ++k) {
            for (int64_t i = 0; i < elements; ++i)
              sources[k][i] = static_cast<float>((i * (k + 5)) % 101 - 30 * k) * (1.0f + 0.29f * static_cast<float>(k)) / 7.0f;
            inputs.push_back({sources[k].data(), {logical, DType::kFloat32}});
          }
          const BoxingSpec spec{logical, DType::kFloat32, Sbp::PartialSum(), Sbp::Broadcast(), shards, 1, 0};
          std::vector<float> one(elements, -1.0f), many(elements + shift, -1.0f);
          ASSERT_TRUE(RunBoxing(spec, inputs, {one.data(), {logical, DType::kFloat32}}, 1).ok());
          ASSERT_TRUE(RunBoxing(spec, inputs, {many.data() + shift, {logical, DType::kFloat32}}, threads).ok());
          ASSERT_EQ(std::memcmp(one.data(), many.data() + shift, elements * sizeof(float)), 0);
          if (shift == 1) ASSERT_EQ(many[0], -1.0f);  // nothing written before the piece
        }
  EXPECT_GT(ParallelChunksHelpers(), 0);
}

TEST(BoxingTest, AMidSizeSumUsesOnlyHelpersAlreadyAwake) {
  // 1 MB over 2 shards (3 MiB touched, under the 4 MiB that wakes helpers) after the helpers
  // fell asleep: no futex wake, the caller sums alone; the same bits as one thread. Then, right
  // after a split job (helpers still spinning), the same sum is split again.
  const int64_t elements = 262144;
  const Shape logical = {elements};
  std::vector<std::vector<float>> sources(2, std::vector<float>(elements));
  std::vector<TensorView> inputs;
  for (int64_t k = 0; k < 2; ++k) {
    for (int64_t i = 0; i < elements; ++i) sources[k][i] = static_cast<float>((i * (k + 3)) % 97) / 9.0f - static_cast<float>(k);
    inputs.push_back({sources[k].data(), {logical, DType::kFloat32}});
  }
  const BoxingSpec spec{logical, DType::kFloat32, Sbp::PartialSum(), Sbp::Broadcast(), 2, 1, 0};
  std::vector<float> one(elements), many(elements);
  ASSERT_TRUE(RunBoxing(spec, inputs, {one.data(), {logical, DType::kFloat32}}, 1).ok());
  ParallelChunks(4, 2, [](void*, int) {}, nullptr);  // at least one helper exists
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ParallelChunksSleepingHelpers() < ParallelChunksHelpers() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(ParallelChunksSleepingHelpers(), ParallelChunksHelpers()) << "helpers did not fall asleep within 20 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the helpers' spin time since that job
  const ParallelChunksCounters before = ParallelChunksCounts();
  ASSERT_TRUE(RunBoxing(spec, inputs, {many.data(), {logical, DType::kFloat32}}, 2).ok());
  const ParallelChunksCounters asleep = ParallelChunksCounts();
  EXPECT_EQ(asleep.wake_ups, before.wake_ups);
  EXPECT_EQ(asleep.jobs, before.jobs + 1);
  EXPECT_EQ(asleep.caller_only_jobs, before.caller_only_jobs + 1);
  ASSERT_EQ(std::memcmp(one.data(), many.data(), elements * sizeof(float)), 0);
  // In a stream of sums (the previous one ended within the spin time) the split job may wake
  // helpers; the bits stay the same.
  for (int call = 0; call < 3; ++call) {
    std::fill(many.begin(), many.end(), -1.0f);
    ASSERT_TRUE(RunBoxing(spec, inputs, {many.data(), {logical, DType::kFloat32}}, 2).ok());
    ASSERT_EQ(std::memcmp(one.data(), many.data(), elements * sizeof(float)), 0);
  }
  EXPECT_EQ(ParallelChunksCounts().jobs, before.jobs + 4);
}

TEST(BoxingTest, ReduceLargerThanTheCachesStreamsItsOutputExactly) {
  // Pieces whose task touches more than 16 MiB stream their output (non-temporal stores):
  // outputs starting off a 16-byte boundary, runs of odd lengths (P -> S(1) of rows of 700001),
  // float and double, 2 and 3 shards; every element is the sum of its shards.
  const Shape logical = {3, 700001};
  const int64_t elements = NumElements(logical);
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (int64_t shards : {2, 3})
      for (const Sbp& out : {Sbp::Split(1), Sbp::Broadcast()}) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + ", " + std::to_string(shards) + " shards -> " + out.ToString());
        std::vector<std::vector<double>> sources(shards, std::vector<double>(elements));
        std::vector<std::vector<float>> single(shards, std::vector<float>(elements));
        std::vector<TensorView> inputs;
        for (int64_t k = 0; k < shards; ++k) {
          for (int64_t i = 0; i < elements; ++i) {
            sources[k][i] = static_cast<double>((i * (k + 3)) % 97 - 40 * k);
            single[k][i] = static_cast<float>(sources[k][i]);
          }
          inputs.push_back({dtype == DType::kFloat32 ? static_cast<void*>(single[k].data()) : sources[k].data(),
                            {logical, dtype}});
        }
        const int64_t parts = out.kind == SbpKind::kBroadcast ? 1 : 2;
        for (int64_t index = 0; index < parts; ++index) {
          BoxingSpec spec{logical, dtype, Sbp::PartialSum(), out, shards, parts, index};
          const Shape shape = PhysicalShape(logical, out, parts, index).value();
          const int64_t n = NumElements(shape);
          // One element in: the output starts 4 or 8 bytes past an aligned block.
          std::vector<double> wide(n + 1, -1.0);
          std::vector<float> narrow(n + 1, -1.0f);
          void* data = dtype == DType::kFloat32 ? static_cast<void*>(narrow.data() + 1) : wide.data() + 1;
          ASSERT_TRUE(RunBoxing(spec, inputs, {data, {shape, dtype}}).ok());
          const int64_t col0 = out == Sbp::Split(1) && index == 1 ? 350001 : 0;
          for (int64_t r = 0; r < shape[0]; ++r)
            for (int64_t c = 0; c < shape[1]; ++c) {
              double want = 0;
              for (int64_t k = 0; k < shards; ++k) want += sources[k][r * 700001 + col0 + c];
              const double got = dtype == DType::kFloat32 ? narrow[1 + r * shape[1] + c] : wide[1 + r * shape[1] + c];
              ASSERT_EQ(got, want) << r << "," << c;
            }
          EXPECT_EQ(dtype == DType::kFloat32 ? narrow[0] : wide[0], -1.0) << "wrote before its output";
        }
      }
}

TEST(BoxingTest, WrongShardsAreErrorsNamingTheLayout) {
  RegisterAllOps();
  BoxingSpec spec{kLogical, DType::kFloat64, Sbp::Split(0), Sbp::Broadcast(), 3, 1, 0};
  KernelInit init;
  init.attrs = BoxingTaskAttrs(spec);
  init.inputs = {TensorDesc{{3, 5}, DType::kFloat64}, TensorDesc{{2, 5}, DType::kFloat64}};  // one missing
  init.outputs = {TensorDesc{kLogical, DType::kFloat64}};
  auto kernel = MakeCpuKernel("boxing", init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_NE(kernel.status().message().find("S(0)->B: expected 3 source shards, got 2"), std::string::npos)
      << kernel.status().message();
  init.inputs.push_back(TensorDesc{{3, 5}, DType::kFloat64});  // 3/2/2 expected: the last is wrong
  kernel = MakeCpuKernel("boxing", init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_NE(kernel.status().message().find("source shard 2"), std::string::npos) << kernel.status().message();
  EXPECT_FALSE(ParseSbpText("S(x)").ok());
  EXPECT_EQ(ParseSbpText("S(1)").value(), Sbp::Split(1));
}

}  // namespace
}  // namespace actorflow
