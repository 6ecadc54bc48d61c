// "cuda" factories of reduce_sum / reduce_mean, softmax and sparse softmax cross-entropy (+grad)
// over the launchers of softmax_cuda.cu.
#include <memory>

#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

void Add(OpRegistry& registry, const std::string& type, KernelFactory factory) {
  Status added = registry.AddKernelFactory(type, kCudaDevice, std::move(factory));
  if (!added.ok()) throw std::logic_error(added.message());
}

struct ReduceSplit {
  int64_t outer = 1, reduced = 1, inner = 1;
};
// The input as (outer, reduced, inner): the reduced axes (attr `axis`, all when missing or empty)
// must be one contiguous run once size-1 axes are ignored; Unimplemented naming the op otherwise.
StatusOr<ReduceSplit> SplitReduce(const std::string& type, const Shape& in, const Attrs& attrs) {
  std::vector<int64_t> axes;
  if (attrs.Has("axis")) { AF_ASSIGN_OR_RETURN(axes, attrs.GetInts("axis")); }
  std::vector<bool> reduce(in.size(), axes.empty());
  for (int64_t a : axes) {
    const int64_t r = a < 0 ? a + static_cast<int64_t>(in.size()) : a;
    if (r < 0 || r >= static_cast<int64_t>(in.size()))
      return InvalidArgument(type + ": axis " + std::to_string(a) + " is out of range for " + ShapeToString(in));
    reduce[r] = true;
  }
  ReduceSplit s;
  int phase = 0;  // 0: before the reduced run, 1: in it, 2: after it
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == 1) continue;
    if (reduce[i]) {
      if (phase == 2)
        return Unimplemented(type + " on cuda: the reduced axes of " + ShapeToString(in) + " are not contiguous");
      phase = 1;
      s.reduced *= in[i];
    } else {
      if (phase == 1) phase = 2;
      (phase == 0 ? s.outer : s.inner) *= in[i];
    }
  }
  return s;
}

KernelFactory ReduceFactory(const std::string& type, bool mean) {
  return [type, mean](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(ReduceSplit s, SplitReduce(type, init.inputs[0].shape, init.attrs));
    float scale = 1.0f;
    if (mean) {
      // A device's share of a mean split on a reduced axis divides by the logical count.
      const int64_t count = init.attrs.GetIntOr("mean_count", s.reduced);
      if (count <= 0) return InvalidArgument(type + ": mean_count must be positive, got " + std::to_string(count));
      scale = 1.0f / static_cast<float>(count);
    }
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchReduceSum(c.input(0).as<float>(), c.output(0).as<float>(), s.outer, s.reduced, s.inner, scale, stream);
    });
  };
}

// Device-visible host memory where the cross-entropy kernel records a row with a bad label: one
// slot per in-flight iteration (iteration % kSlots; an actor has far fewer acts in flight), -1
// when none. Reset by the host before the launch, read after the act's completion.
class BadLabelSlots {
 public:
  static constexpr int kSlots = 64;
  static StatusOr<std::shared_ptr<BadLabelSlots>> Create() {
    void* memory = nullptr;
    AF_RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&memory, kSlots * sizeof(int64_t), cudaHostAllocMapped | cudaHostAllocPortable),
                                  "sparse_softmax_cross_entropy on cuda: cudaHostAlloc"));
    auto slots = std::shared_ptr<BadLabelSlots>(new BadLabelSlots(static_cast<int64_t*>(memory)));
    for (int i = 0; i < kSlots; ++i) slots->host_[i] = -1;
    return slots;
  }
  ~BadLabelSlots() { cudaFreeHost(host_); }
  int64_t* slot(int64_t iteration) { return host_ + (iteration % kSlots + kSlots) % kSlots; }

 private:
  explicit BadLabelSlots(int64_t* host) : host_(host) {}
  int64_t* host_;  // mapped: with unified addressing the device uses the same pointer
};

}  // namespace

void RegisterSoftmaxCudaKernels(OpRegistry& registry) {
  Add(registry, "reduce_sum", ReduceFactory("reduce_sum", false));
  Add(registry, "reduce_mean", ReduceFactory("reduce_mean", true));
  Add(registry, "softmax", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("softmax", init.inputs, "input"));
    const Shape& x = init.inputs[0].shape;
    const int64_t axis = init.attrs.GetIntOr("axis", -1);
    if (x.empty() || (axis != -1 && axis != static_cast<int64_t>(x.size()) - 1))
      return Unimplemented("softmax on cuda: only over the last axis so far, got axis " + std::to_string(axis) + " of " +
                           ShapeToString(x));
    const int64_t classes = x.back(), rows = NumElements(x) / std::max<int64_t>(1, classes);
    return CudaKernel("softmax", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchSoftmax(c.input(0).as<float>(), c.output(0).as<float>(), rows, classes, stream);
    });
  });
  Add(registry, "sparse_softmax_cross_entropy", [](const KernelInit& init) -> StatusOr<KernelFn> {
    const std::string type = "sparse_softmax_cross_entropy";
    AF_RETURN_IF_ERROR(ExpectFloat32(type, {init.inputs.at(1)}, "logits"));
    const bool labels64 = init.inputs[0].dtype == DType::kInt64;
    const int64_t rows = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    if (init.device_stream == nullptr) return CudaKernel(type, init, nullptr);  // the stream error
    AF_ASSIGN_OR_RETURN(std::shared_ptr<BadLabelSlots> slots, BadLabelSlots::Create());
    return CudaKernel(
        type, init,
        [=](KernelContext& c, cudaStream_t stream) {
          int64_t* slot = slots->slot(c.iteration);
          *slot = -1;
          return LaunchSparseSoftmaxCrossEntropy(c.input(0).data, labels64, c.input(1).as<float>(), c.output(0).as<float>(),
                                                 c.output(1).as<float>(), rows, classes, slot, stream);
        },
        [slots, classes](int64_t iteration) -> Status {
          const int64_t row = *slots->slot(iteration);
          if (row < 0) return Status::Ok();
          return InvalidArgument("the label at position " + std::to_string(row) + " is out of range [0, " +
                                 std::to_string(classes) + ")");
        });
  });
  Add(registry, "sparse_softmax_cross_entropy_grad", [](const KernelInit& init) -> StatusOr<KernelFn> {
    const std::string type = "sparse_softmax_cross_entropy_grad";
    AF_RETURN_IF_ERROR(ExpectFloat32(type, {init.inputs.at(1), init.inputs.at(2)}, "prob/dloss"));
    const bool labels64 = init.inputs[0].dtype == DType::kInt64;
    const int64_t rows = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchSparseSoftmaxCrossEntropyGrad(c.input(0).data, labels64, c.input(1).as<float>(), c.input(2).as<float>(),
                                                 c.output(0).as<float>(), rows, classes, stream);
    });
  });
}

}  // namespace actorflow::cuda
