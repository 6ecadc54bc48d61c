// The op registry: every op type's definition (inputs, outputs, attributes, shape/dtype
// inference, SBP signatures, gradient rule) and its kernels by device type. One file per op family
// (kernels/<family>.cc) fills it through Register<Family>Ops(); all_ops.cc lists them.
// The compiler (graph/) reads the registry; the runtime never sees it (it gets KernelFn).
//
// Thread-safety: the registry is filled once by RegisterAllOps() (idempotent, thread-safe)
// and read-only afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "actors/kernel.h"
#include "actors/status.h"
#include "actors/tensor.h"
#include "kernels/sbp.h"

namespace actorflow {

class DeviceStream;  // actors/device.h

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

// Op attributes by name. Getters return an InvalidArgument Status that names the attribute
// when it is missing or of the wrong kind; the *Or forms return a default when missing.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}
  void Set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  const std::map<std::string, AttrValue>& values() const { return values_; }

  StatusOr<int64_t> GetInt(const std::string& name) const;
  StatusOr<double> GetFloat(const std::string& name) const;  // accepts an int too
  StatusOr<bool> GetBool(const std::string& name) const;
  StatusOr<std::string> GetString(const std::string& name) const;
  StatusOr<std::vector<int64_t>> GetInts(const std::string& name) const;
  StatusOr<std::vector<double>> GetFloats(const std::string& name) const;
  int64_t GetIntOr(const std::string& name, int64_t fallback) const;
  double GetFloatOr(const std::string& name, double fallback) const;
  bool GetBoolOr(const std::string& name, bool fallback) const;
  std::string GetStringOr(const std::string& name, const std::string& fallback) const;

 private:
  std::map<std::string, AttrValue> values_;
};

// Shape/dtype inference: fill `outputs` from `inputs` and `attrs`, or return an error
// saying what was expected and what came (the compiler adds op name and source line).
struct InferContext {
  std::vector<TensorDesc> inputs;
  Attrs attrs;
  std::vector<TensorDesc> outputs;  // to fill, one per OpDef::output_names (or more if variadic)
};

// Device types a kernel factory is registered for (OpDef::kernel_factories keys).
inline constexpr const char kCpuDevice[] = "cpu";
inline constexpr const char kCudaDevice[] = "cuda";

struct KernelInit {
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  Attrs attrs;
  int num_threads = 1;  // intra-op threads this kernel may use
  std::string device_type = kCpuDevice;
  int device_id = 0;
  // The device's stream or queue the kernel enqueues on (a cudaStream_t for "cuda"; nullptr on
  // the CPU, and the default stream is never used implicitly). Opaque so that this header
  // needs no device toolkit.
  void* stream = nullptr;
  // The same stream as the runtime's device object (actors/device.h), for completing acts from
  // it (StreamKernel) and for copies; null on the CPU. Copy kernels get the device's copy stream.
  DeviceStream* device_stream = nullptr;
  // Per input (empty, or one per input; null entries): a counter that changes whenever the data
  // at that input may have changed between acts: set for a variable the job only reads (the
  // session bumps it when a job writing the variable is called or the variable is set), and for
  // a saved model's weights (constant). A kernel may keep data derived from such an input (a
  // GEMM's right operand in the library's packed layout) and derive it again only when the
  // counter's value or the input's address changed. Null: the data may change at any act.
  std::vector<std::shared_ptr<const std::atomic<int64_t>>> input_versions{};
  const std::atomic<int64_t>* input_version(size_t i) const {
    return i < input_versions.size() ? input_versions[i].get() : nullptr;
  }
  void SetInputVersion(size_t i, std::shared_ptr<const std::atomic<int64_t>> version) {
    if (input_versions.size() <= i) input_versions.resize(i + 1);
    input_versions[i] = std::move(version);
  }
};

using KernelFactory = std::function<StatusOr<KernelFn>(const KernelInit&)>;

// The autodiff pass's view of one forward op while its gradient rule runs. Tensor references
// are strings "op_name/output_name". Implemented by graph/.
class GradBuilder {
 public:
  virtual ~GradBuilder() = default;
  virtual const std::string& op_name() const = 0;
  virtual const Attrs& attrs() const = 0;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  virtual std::string input(int i) const = 0;
  virtual std::string output(int i) const = 0;
  // Gradient of the loss with respect to output i, or "" when no gradient flows there.
  virtual std::string output_grad(int i) const = 0;
  virtual const TensorDesc& input_desc(int i) const = 0;
  virtual const TensorDesc& output_desc(int i) const = 0;
  virtual bool needs_input_grad(int i) const = 0;
  // Adds an op (name derived from the forward op's); returns its output references.
  virtual StatusOr<std::vector<std::string>> AddOp(const std::string& type, const std::vector<std::string>& inputs,
                                                   const Attrs& attrs) = 0;
  virtual void SetInputGrad(int i, const std::string& grad_ref) = 0;

  // Convenience for single-output ops.
  StatusOr<std::string> AddOp1(const std::string& type, const std::vector<std::string>& inputs, const Attrs& attrs = {});
};

// What an op's SBP function sees: the logical descriptions of its inputs and outputs (after
// inference), its attributes, and how many devices the op runs on (> 1).
struct SbpContext {
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  Attrs attrs;
  int64_t parts = 2;
};

// What an op's physical-attributes hook sees: one device's share of a logical op.
struct PhysicalContext {
  std::vector<TensorDesc> logical_inputs, logical_outputs;
  std::vector<TensorDesc> physical_inputs, physical_outputs;  // PhysicalShape of each under `signature`
  Attrs attrs;                                                // the logical op's
  SbpSignature signature;                                     // concrete (no kEachAxis)
  int64_t parts = 1, index = 0;
};

struct OpDef {
  std::string type;
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  bool variadic_inputs = false;     // e.g. concat: any number of inputs named input_names[0]_i
  std::vector<int> mutable_inputs;  // inputs written in place (optimizer updates, moving stats)
  // The kernel keeps state between calls (dropout's random stream): eager execution builds a
  // fresh kernel per call instead of reusing a cached one (session/eager.h).
  bool stateful_kernel = false;
  // The CPU kernel chooses how many of its num_threads a call uses (matmul: by FLOPs and operand
  // sizes, on the kernels' pool), so eager execution hands it the whole budget whatever the
  // inputs' size instead of its one-thread rule for small inputs (session/eager.cc).
  bool sizes_own_threads = false;
  std::function<Status(InferContext&)> infer;
  // Kernel factories by device type (kCpuDevice, kCudaDevice); every op has a CPU one.
  std::map<std::string, KernelFactory> kernel_factories;
  std::function<Status(GradBuilder&)> grad;  // empty: not differentiable
  // The concrete signatures this op supports for one logical instance, best first: every axis
  // explicit (no kEachAxis, no condition), one Sbp per actual input and output. Running the
  // op's kernel on each device's physical inputs (PhysicalShape) under any of them must give
  // the physical outputs of the single-device result laid out as the signature says. Empty
  // function: the op runs whole on one device (CandidateSbpSignatures falls back).
  std::function<StatusOr<std::vector<SbpSignature>>(const SbpContext&)> sbp;
  // Attributes of one device's share, for ops whose attributes name logical sizes (a reshape's
  // target shape, a constant's shape, a mean's element count). Empty: the logical attributes.
  std::function<StatusOr<Attrs>(const PhysicalContext&)> physical_attrs;
  std::string doc;  // one line: what it computes, with shape letters
};

class OpRegistry {
 public:
  static OpRegistry& Global();
  void Register(OpDef def);
  // Adds the kernel factory of `device_type` to a registered op (device families register
  // after the op families); NotFound for an unknown op, InvalidArgument if one is already there.
  Status AddKernelFactory(const std::string& type, const std::string& device_type, KernelFactory factory);
  // NotFound naming the type (and listing near matches) if unknown.
  StatusOr<const OpDef*> Find(const std::string& type) const;
  std::vector<std::string> Types() const;

 private:
  std::map<std::string, OpDef> defs_;
};

// The concrete signatures of `def` for one instance (OpDef::sbp), checked for arity and
// explicit axes; an op without an SBP function gets the single all-broadcast signature.
StatusOr<std::vector<SbpSignature>> CandidateSbpSignatures(const OpDef& def, const SbpContext& context);
// The attributes of device `index`'s share (OpDef::physical_attrs, or the logical ones).
StatusOr<Attrs> PhysicalAttrs(const OpDef& def, const PhysicalContext& context);

// Fills OpRegistry::Global() with every op family once.
void RegisterAllOps();

// Builds the kernel of a registered op for init.device_type (runs inference-independent
// validation too); Unimplemented naming op and device type when none is registered.
StatusOr<KernelFn> MakeKernel(const std::string& type, const KernelInit& init);
// MakeKernel on the CPU.
StatusOr<KernelFn> MakeCpuKernel(const std::string& type, const KernelInit& init);

}  // namespace actorflow
