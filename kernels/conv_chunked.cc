// The three passes split over the batch: samples are independent in the forward and data
// gradient passes, and the filter gradient is a sum over samples (each chunk after the first
// writes its partial sum to its own scratch, added into the output after all ran). Each chunk
// of samples runs as its own single-threaded oneDNN convolution, claimed by the
// kernel helper threads (parallel_chunks.h) instead of one OpenMP team per call, which a busy
// host stalls whenever a member is descheduled. x and y (input or output, by index as in
// MakeConvKernel) are cut along axis 0 (N, in NCHW and NHWC alike); the filter, bias and batch
// norm inputs are read whole by every chunk. Used for float32 with more than one thread and
// at least two samples per thread; omp_team (disable_fusion("gemm_chunks")) keeps one call.
// The filter gradient's partial sums are added in chunk order, so its rounding differs from
// one call's only by that order. Where oneDNN computes in blocked weights, the chunks share one
// blocked copy of the weights (one reorder per act, not one per chunk) and the filter gradient
// is summed in the blocked layout, then reordered out once.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/conv_dnnl.h"
#include "kernels/conv_kernel.h"
#include "kernels/parallel_chunks.h"

namespace actorflow {

StatusOr<KernelFn> MakeBatchChunkedConv(const KernelInit& init, ConvPass pass, const ConvGeometry& g,
                                        const ConvEpilogue& epilogue, int x_at, int w_at, int y_at) {
  const int threads = std::max(1, init.num_threads);
  const int64_t n = g.win.n;
  const int64_t chunks = std::min<int64_t>(n, 4 * threads);
  const int64_t step = (n + chunks - 1) / chunks;
  const int64_t count = (n + step - 1) / step, last = n - (count - 1) * step;
  struct Chunked {
    std::vector<KernelFn> kernels;  // one per chunk (oneDNN state is per kernel: chunks run at once)
    std::vector<std::vector<TensorView>> inputs, outputs;
    int64_t x_stride = 0, y_stride = 0;  // bytes per sample
    std::vector<std::vector<float>> partial_filters;  // filter gradient: chunks 1.. write here
    std::vector<std::vector<float>> partial_biases;   // and their bias gradients (fuse_bias_grad)
    bool prepared = false;
    // Blocked weights shared by the chunks (weights_by_caller): forward and data gradient
    // reorder the plain weights once per act into chunk 0's blocked buffer, which every chunk
    // reads; the filter gradient's chunks each write their own blocked buffer, summed into
    // chunk 0's and reordered out once (instead of partial_filters).
    std::vector<std::shared_ptr<DnnlConv>> convs;
    bool shared_weights = false;
  };
  auto state = std::make_shared<Chunked>();
  const TensorDesc& x_desc = x_at >= 100 ? init.outputs[x_at - 100] : init.inputs[x_at];
  const TensorDesc& y_desc = y_at >= 100 ? init.outputs[y_at - 100] : init.inputs[y_at];
  state->x_stride = static_cast<int64_t>(x_desc.byte_size()) / n;
  state->y_stride = static_cast<int64_t>(y_desc.byte_size()) / n;
  const bool filter_gradient = pass == ConvPass::kBackwardFilter;
  if (filter_gradient)
    state->partial_filters.assign(count - 1, std::vector<float>(init.outputs[0].num_elements()));
  const bool bias_gradient = filter_gradient && epilogue.bias;
  if (bias_gradient) state->partial_biases.assign(count - 1, std::vector<float>(init.outputs[1].num_elements()));
  state->convs.resize(count);
  const std::shared_ptr<const std::atomic<int64_t>> weights_version = ConvInputVersion(init, w_at);
  for (int64_t i = 0; i < count; ++i) {
    ConvGeometry part = g;
    part.win.n = i + 1 < count ? step : last;
    AF_ASSIGN_OR_RETURN(KernelFn kernel,
                        MakeConvKernel(pass, part, epilogue, DType::kFloat32, 1, x_at, w_at, y_at, weights_version,
                                       &state->convs[i]));
    state->kernels.push_back(std::move(kernel));
  }
  bool shared = state->convs[0] && state->convs[0]->tensors[1].reorder;
  for (int64_t i = 1; i < count && shared; ++i)
    shared = state->convs[i] && state->convs[i]->tensors[1].reorder &&
             state->convs[i]->tensors[1].internal.get_desc() == state->convs[0]->tensors[1].internal.get_desc();
  if (shared) {
    for (int64_t i = 0; i < count; ++i) {
      DnnlConv& conv = *state->convs[i];
      conv.weights_by_caller = true;
      if (i > 0 && !filter_gradient) {
        conv.tensors[1].internal.set_data_handle(state->convs[0]->tensors[1].internal.get_data_handle());
        conv.weights = ConvWeightsCache{};  // chunk 0's blocked copy, kept by the caller
      }
    }
    std::vector<std::vector<float>>().swap(state->partial_filters);
  } else {
    std::vector<std::shared_ptr<DnnlConv>>().swap(state->convs);
  }
  state->shared_weights = shared;
  return KernelFn([state, count, step, x_at, w_at, y_at, threads, filter_gradient, bias_gradient](KernelContext& c) {
    Chunked& s = *state;
    if (!s.prepared) {  // first call: the views' descriptions, with the chunks' sample counts
      s.inputs.assign(count, *c.inputs);
      s.outputs.assign(count, *c.outputs);
      for (int64_t i = 0; i < count; ++i)
        for (int at : {x_at, y_at}) {
          TensorView& v = at >= 100 ? s.outputs[i][at - 100] : s.inputs[i][at];
          v.desc.shape[0] = std::min(step, v.desc.shape[0] - i * step);
        }
      s.prepared = true;
    }
    for (int64_t i = 0; i < count; ++i) {
      for (size_t k = 0; k < c.inputs->size(); ++k) s.inputs[i][k].data = (*c.inputs)[k].data;
      for (size_t k = 0; k < c.outputs->size(); ++k) s.outputs[i][k].data = (*c.outputs)[k].data;
      for (int at : {x_at, y_at}) {
        TensorView& v = at >= 100 ? s.outputs[i][at - 100] : s.inputs[i][at];
        v.data = static_cast<char*>(v.data) + i * step * (at == x_at ? s.x_stride : s.y_stride);
      }
      if (filter_gradient && i > 0 && !s.shared_weights) s.outputs[i][0].data = s.partial_filters[i - 1].data();
      if (bias_gradient && i > 0) s.outputs[i][1].data = s.partial_biases[i - 1].data();
    }
    auto run_weights_reorder = [&](DnnlConv& conv, void* plain) -> Status {
      BoundTensor& w = conv.tensors[1];
      dnnl_status_t status = dnnl_memory_set_data_handle(w.user.get(), plain);
      if (status == dnnl_success)
        status = dnnl_primitive_execute(w.reorder->get(), conv.stream.get(), static_cast<int>(w.reorder_args.size()),
                                        w.reorder_args.data());
      if (status == dnnl_success) status = dnnl_stream_wait(conv.stream.get());
      if (status == dnnl_success) return Status::Ok();
      conv.weights.valid = false;
      return Internal("oneDNN weight reorder failed with status " + std::to_string(status));
    };
    // The reorders below run on this thread: one OpenMP thread, as each chunk's primitive (a
    // reorder sizes its team by the calling thread's setting).
    if (s.shared_weights) omp_set_num_threads(1);
    if (s.shared_weights && !filter_gradient) {
      void* weights = c.input(w_at).data;
      if (WeightsNeedReorder(*s.convs[0], weights)) {
        AF_RETURN_IF_ERROR(run_weights_reorder(*s.convs[0], weights));
        CountWeightsReorder();
      }
    }
    std::atomic<bool> failed{false};
    Status first_error = Status::Ok();
    std::mutex error_mutex;
    auto run = [&](int i) {
      KernelContext part{&s.inputs[i], &s.outputs[i], c.iteration};
      part.threads = 1;
      Status status = s.kernels[i](part);
      if (!status.ok() && !failed.exchange(true)) {
        std::lock_guard<std::mutex> lock(error_mutex);
        first_error = status;
      }
    };
    ParallelChunks(static_cast<int>(count), c.threads > threads ? c.threads : threads, run);
    if (failed.load()) return first_error;
    if (filter_gradient && s.shared_weights) {
      const dnnl::memory& first = s.convs[0]->tensors[1].internal;
      float* __restrict sum = static_cast<float*>(first.get_data_handle());
      const int64_t elements = static_cast<int64_t>(first.get_desc().get_size() / sizeof(float));
      for (int64_t i = 1; i < count; ++i) {
        const float* __restrict p = static_cast<const float*>(s.convs[i]->tensors[1].internal.get_data_handle());
        for (int64_t e = 0; e < elements; ++e) sum[e] += p[e];
      }
      AF_RETURN_IF_ERROR(run_weights_reorder(*s.convs[0], c.output(0).data));
    } else if (filter_gradient) {
      float* __restrict out = c.output(0).as<float>();
      const int64_t elements = c.output(0).num_elements();
      for (const std::vector<float>& partial : s.partial_filters) {
        const float* __restrict p = partial.data();
        for (int64_t e = 0; e < elements; ++e) out[e] += p[e];
      }
    }
    if (bias_gradient) {
      float* __restrict out = c.output(1).as<float>();
      const int64_t elements = c.output(1).num_elements();
      for (const std::vector<float>& partial : s.partial_biases) {
        const float* __restrict p = partial.data();
        for (int64_t e = 0; e < elements; ++e) out[e] += p[e];
      }
    }
    return Status::Ok();
  });
}


}  // namespace actorflow
