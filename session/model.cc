#include "session/model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/util/json_util.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "actors/plan_dtype.h"
#include "actors/runtime.h"
#include "graph/attr_convert.h"
#include "kernels/op_registry.h"
#include "session/npy.h"
#include "session/proto/model.pb.h"

namespace actorflow {
namespace {

// The largest manifest and plan read (a plan of a big network is a few MiB).
constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 30;

std::string Errno() { return std::strerror(errno); }

// `text` with bytes that are not printable ASCII written as \xNN: parser messages quote the
// damaged input, which must not reach a terminal or a log raw.
std::string Printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  return out;
}

// More than 2^40 bytes (also when the element count overflows): no model holds that.
bool TooLarge(const TensorDesc& desc) {
  double bytes = static_cast<double>(DTypeSize(desc.dtype));
  for (int64_t d : desc.shape) bytes *= static_cast<double>(d);
  return bytes > static_cast<double>(uint64_t{1} << 40);
}

TensorDesc DescOfBlob(const plan::BlobDesc& blob) {
  return TensorDesc{Shape(blob.shape().begin(), blob.shape().end()), FromProtoDType(blob.dtype())};
}

StatusOr<TensorDesc> DescOfSpec(const google::protobuf::RepeatedField<int64_t>& shape, const std::string& dtype,
                                const std::string& what) {
  if (shape.size() > 32) return InvalidArgument(what + ": more than 32 dimensions");
  StatusOr<DType> parsed = graph::ParseDType(dtype);
  if (!parsed.ok()) return parsed.status().WithContext(what);
  TensorDesc desc{Shape(shape.begin(), shape.end()), *parsed};
  AF_RETURN_IF_ERROR(ValidateTensorDesc(desc, what));
  if (TooLarge(desc)) return InvalidArgument(what + ": " + desc.ToString() + " is too large");
  return desc;
}

bool PlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name != kModelManifestFile;
}

// The plan's facts the manifest must agree with, gathered once and checked for consistency.
struct PlanFacts {
  std::map<int64_t, int> index_of;             // task id -> index
  std::vector<TensorDesc> feeds;               // by feed_index
  std::vector<TensorDesc> outputs;             // the main sink's inputs
  std::map<std::string, TensorDesc> variables; // variable_name -> desc
};

// The desc a task's input reads (its producer's blob, or the view of it).
StatusOr<TensorDesc> InputDesc(const plan::Plan& plan, const PlanFacts& facts, const plan::Task& task,
                               const plan::InputDesc& input) {
  auto it = facts.index_of.find(input.producer_task_id());
  if (it == facts.index_of.end())
    return InvalidArgument("task '" + task.name() + "' reads unknown task " + std::to_string(input.producer_task_id()));
  const plan::Task& producer = plan.tasks(it->second);
  if (input.producer_register() < 0 || input.producer_register() >= producer.registers_size())
    return InvalidArgument("task '" + task.name() + "' reads a register task '" + producer.name() + "' does not have");
  const plan::RegisterDesc& reg = producer.registers(input.producer_register());
  if (input.blob_index() < 0 || input.blob_index() >= reg.blobs_size())
    return InvalidArgument("task '" + task.name() + "' reads a blob register '" + reg.name() + "' does not have");
  TensorDesc desc = DescOfBlob(reg.blobs(input.blob_index()));
  if (input.has_view()) {
    TensorDesc view{Shape(input.view_shape().begin(), input.view_shape().end()), desc.dtype};
    AF_RETURN_IF_ERROR(ValidateTensorDesc(view, "task '" + task.name() + "' view"));
    if (TooLarge(view)) return InvalidArgument("task '" + task.name() + "' views a blob as " + view.ToString());
    const bool fits = input.part() ? input.byte_offset() >= 0 && input.byte_offset() + static_cast<int64_t>(view.byte_size()) <=
                                                                      static_cast<int64_t>(desc.byte_size())
                         : input.whole()
                             // the register's whole reserved block: its own blob and the slices in it
                             ? static_cast<int64_t>(view.byte_size()) <= reg.reserved_byte_size() &&
                                   view.byte_size() >= desc.byte_size()
                             : view.num_elements() == desc.num_elements();
    if (!fits)
      return InvalidArgument("task '" + task.name() + "' views " + desc.ToString() + " as " + view.ToString() +
                             (input.part() ? " at byte " + std::to_string(input.byte_offset()) : ""));
    desc = view;
  }
  return desc;
}

// Checks what the runtime trusts a plan for (Runtime::Create checks the wiring): every task
// runs on the CPU in host memory, every blob is a valid description, and every compute task's
// outputs are what its op's inference gives for its inputs and attributes, so no kernel is
// built over buffers of other sizes than it computes.
StatusOr<PlanFacts> CheckPlan(const plan::Plan& plan) {
  PlanFacts facts;
  for (int i = 0; i < plan.tasks_size(); ++i)
    if (!facts.index_of.emplace(plan.tasks(i).id(), i).second)
      return InvalidArgument("duplicate task id " + std::to_string(plan.tasks(i).id()));
  int main_sinks = 0;
  for (const plan::Task& task : plan.tasks()) {
    const std::string what = "task '" + task.name() + "'";
    if (task.machine_id() != 0 || (task.device_type() != "cpu" && !task.device_type().empty()))
      return Unimplemented(what + " runs on " + task.device_type() + " of machine " + std::to_string(task.machine_id()) +
                           "; a saved model runs on the CPU of one machine");
    std::vector<TensorDesc> produced;
    for (const plan::RegisterDesc& reg : task.registers()) {
      if (reg.memory_case().kind() != plan::MEMORY_HOST)
        return Unimplemented(what + " register '" + reg.name() + "' lives outside host memory");
      if (reg.register_num() < 1 || reg.register_num() > 64)
        return InvalidArgument(what + " register '" + reg.name() + "' has register_num " +
                               std::to_string(reg.register_num()) + " (expected 1 to 64)");
      for (const plan::BlobDesc& blob : reg.blobs()) {
        const TensorDesc desc = DescOfBlob(blob);
        AF_RETURN_IF_ERROR(ValidateTensorDesc(desc, what + " blob '" + blob.name() + "'"));
        if (TooLarge(desc))
          return InvalidArgument(what + " blob '" + blob.name() + "' is " + desc.ToString() + ", too large");
        produced.push_back(desc);
      }
    }
    std::vector<TensorDesc> consumed;
    for (const plan::InputDesc& input : task.inputs()) {
      if (input.control()) continue;
      AF_ASSIGN_OR_RETURN(TensorDesc desc, InputDesc(plan, facts, task, input));
      consumed.push_back(std::move(desc));
    }
    switch (task.kind()) {
      case plan::SOURCE: {
        if (produced.size() != 1) return InvalidArgument(what + ": a source produces one blob");
        const int k = task.feed_index();
        if (k < 0 || k >= plan.tasks_size()) return InvalidArgument(what + ": feed_index " + std::to_string(k));
        if (static_cast<int>(facts.feeds.size()) <= k) facts.feeds.resize(k + 1, TensorDesc{{}, DType::kInvalid});
        if (facts.feeds[k].dtype != DType::kInvalid) return InvalidArgument("two sources feed input " + std::to_string(k));
        facts.feeds[k] = produced[0];
        break;
      }
      case plan::SINK:
        if (task.sink_name().empty()) {
          ++main_sinks;
          facts.outputs = consumed;
        }
        break;
      case plan::VARIABLE: {
        if (produced.size() != 1) return InvalidArgument(what + ": a variable produces one blob");
        auto [it, inserted] = facts.variables.emplace(task.variable_name(), produced[0]);
        if (!inserted && it->second != produced[0])
          return InvalidArgument("variable '" + task.variable_name() + "' is " + it->second.ToString() + " and " +
                                 produced[0].ToString());
        break;
      }
      case plan::COMPUTE: {
        AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(task.op_type()));
        if (def->kernel_factories.count(kCpuDevice) == 0)
          return Unimplemented(what + ": op '" + task.op_type() + "' has no CPU kernel");
        // Fused ops take more inputs than declared (a matmul's fused bias), never fewer.
        if (!def->variadic_inputs && consumed.size() < def->input_names.size())
          return InvalidArgument(what + ": op '" + task.op_type() + "' takes " + std::to_string(def->input_names.size()) +
                                 " inputs, the plan gives " + std::to_string(consumed.size()));
        for (int m : task.mutable_inputs())
          if (m < 0 || m >= static_cast<int>(consumed.size()))
            return InvalidArgument(what + ": mutable input " + std::to_string(m) + " out of range");
        if (task.op_type() == "boxing") {
          // One destination device's piece of a layout conversion: physical shards in and out,
          // which its kernel's own check validates against the attrs (the op's inference is of
          // the logical tensor).
          KernelInit init;
          init.inputs = consumed;
          init.outputs = produced;
          init.attrs = graph::AttrsFromProto(task.attrs());
          AF_RETURN_IF_ERROR(def->kernel_factories.at(kCpuDevice)(init).status().WithContext(what));
          break;
        }
        InferContext infer;
        infer.inputs = consumed;
        infer.attrs = graph::AttrsFromProto(task.attrs());
        if (!def->infer) return InvalidArgument(what + ": op '" + task.op_type() + "' has no shape inference");
        Status inferred = def->infer(infer);
        if (!inferred.ok()) return inferred.WithContext(what + " (" + task.op_type() + ")");
        if (infer.outputs != produced) {
          std::string want, got;
          for (const TensorDesc& d : infer.outputs) want += " " + d.ToString();
          for (const TensorDesc& d : produced) got += " " + d.ToString();
          return InvalidArgument(what + " (" + task.op_type() + ") produces" + got + " but its op gives" + want);
        }
        break;
      }
      default:
        return InvalidArgument(what + " has no kind");
    }
  }
  if (main_sinks != 1) return InvalidArgument("expected one main sink, found " + std::to_string(main_sinks));
  for (size_t k = 0; k < facts.feeds.size(); ++k)
    if (facts.feeds[k].dtype == DType::kInvalid) return InvalidArgument("no source feeds input " + std::to_string(k));
  return facts;
}

// Inputs, outputs and weights (by name) against what the plan says.
Status CheckAgainstPlan(const PlanFacts& facts, const std::vector<ModelTensorSpec>& inputs,
                        const std::vector<ModelTensorSpec>& outputs, const std::map<std::string, TensorDesc>& weights) {
  auto compare = [](const char* kind, const std::vector<ModelTensorSpec>& specs, const std::vector<TensorDesc>& plan) {
    if (specs.size() != plan.size())
      return InvalidArgument(std::string("the manifest lists ") + std::to_string(specs.size()) + " " + kind +
                             "s, the plan has " + std::to_string(plan.size()));
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].desc != plan[i])
        return InvalidArgument(std::string(kind) + " '" + specs[i].name + "' is " + specs[i].desc.ToString() +
                               " in the manifest and " + plan[i].ToString() + " in the plan");
    return Status::Ok();
  };
  AF_RETURN_IF_ERROR(compare("input", inputs, facts.feeds));
  AF_RETURN_IF_ERROR(compare("output", outputs, facts.outputs));
  for (const auto& [name, desc] : facts.variables) {
    auto it = weights.find(name);
    if (it == weights.end()) return InvalidArgument("the plan reads variable '" + name + "', which has no weight");
    if (it->second != desc)
      return InvalidArgument("weight '" + name + "' is " + it->second.ToString() + ", the plan reads " + desc.ToString());
  }
  for (const auto& [name, desc] : weights)
    if (!facts.variables.count(name)) return InvalidArgument("weight '" + name + "' is not read by the plan");
  return Status::Ok();
}

std::string JoinPath(const std::string& directory, const std::string& file) {
  return directory.empty() || directory.back() == '/' ? directory + file : directory + "/" + file;
}

// A file the manifest names: read whole after its size is checked, then its CRC-32.
StatusOr<std::string> ReadListed(const std::string& directory, const model::FileEntry& entry, const std::string& what,
                                 uint64_t max_bytes) {
  if (!PlainFileName(entry.file()))
    return InvalidArgument(what + ": file '" + entry.file() + "' must be a plain file name inside the directory");
  const std::string path = JoinPath(directory, entry.file());
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return NotFound(what + ": '" + path + "' is missing (" + Errno() + ")");
  if (!S_ISREG(info.st_mode)) return InvalidArgument(what + ": '" + path + "' is not a regular file");
  if (entry.bytes() < 0 || static_cast<uint64_t>(entry.bytes()) > max_bytes)
    return InvalidArgument(what + ": the manifest gives '" + entry.file() + "' " + std::to_string(entry.bytes()) + " bytes");
  if (info.st_size != entry.bytes())
    return InvalidArgument(what + ": '" + path + "' holds " + std::to_string(info.st_size) + " bytes, the manifest says " +
                           std::to_string(entry.bytes()) + " (truncated or replaced)");
  AF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, static_cast<uint64_t>(entry.bytes())));
  if (bytes.size() != static_cast<size_t>(entry.bytes()))
    return InvalidArgument(what + ": '" + path + "' changed while being read");
  const uint32_t crc = Crc32(bytes);
  if (crc != entry.crc32()) {
    char message[96];
    std::snprintf(message, sizeof(message), "checksum mismatch (CRC-32 %08x, the manifest says %08x)", crc, entry.crc32());
    return InvalidArgument(what + ": '" + path + "': " + message + ": the file is corrupt");
  }
  return bytes;
}

std::vector<ModelTensorSpec> SpecsOf(const google::protobuf::RepeatedPtrField<model::TensorSpec>& specs,
                                     const char* kind, Status* status) {
  std::vector<ModelTensorSpec> out;
  std::set<std::string> names;
  for (const model::TensorSpec& spec : specs) {
    const std::string what = std::string(kind) + " '" + spec.name() + "'";
    if (spec.name().empty() || !names.insert(spec.name()).second) {
      *status = InvalidArgument(std::string("an ") + kind + " has an empty or repeated name ('" + spec.name() + "')");
      return out;
    }
    auto desc = DescOfSpec(spec.shape(), spec.dtype(), what);
    if (!desc.ok()) {
      *status = desc.status();
      return out;
    }
    out.push_back({spec.name(), *desc});
  }
  return out;
}

void FillSpec(const ModelTensorSpec& spec, model::TensorSpec* out) {
  out->set_name(spec.name);
  for (int64_t d : spec.desc.shape) out->add_shape(d);
  out->set_dtype(DTypeName(spec.desc.dtype));
}

model::FileEntry EntryFor(const std::string& file, const std::string& bytes) {
  model::FileEntry entry;
  entry.set_file(file);
  entry.set_bytes(static_cast<int64_t>(bytes.size()));
  entry.set_crc32(Crc32(bytes));
  return entry;
}

Status SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open directory '" + directory + "': " + Errno());
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0 && errno != EINVAL) return Internal("cannot sync directory '" + directory + "': " + Errno());
  return Status::Ok();
}

}  // namespace

const char* ActorflowVersion() { return ACTORFLOW_VERSION; }

std::string WeightFileName(size_t index, const std::string& name) {
  std::string readable;
  for (char c : name.substr(0, 80))
    readable += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  while (!readable.empty() && (readable.front() == '.' || readable.front() == '_')) readable.erase(0, 1);
  if (readable.empty()) readable = "weight";
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "%06zu-", index);
  return prefix + readable + ".npy";
}

Status SaveModel(const std::string& directory, const ModelContents& contents) {
  RegisterAllOps();
  const std::string context = "saving model '" + directory + "'";
  if (contents.plan == nullptr) return InvalidArgument(context + ": no plan");
  auto facts = CheckPlan(*contents.plan);
  if (!facts.ok()) return facts.status().WithContext(context + ": the plan");
  std::map<std::string, TensorDesc> weight_descs;
  for (const auto& [name, view] : contents.weights)
    if (!weight_descs.emplace(name, view.desc).second) return InvalidArgument(context + ": weight '" + name + "' twice");
  AF_RETURN_IF_ERROR(CheckAgainstPlan(*facts, contents.inputs, contents.outputs, weight_descs).WithContext(context));

  struct stat info {};
  if (::lstat(directory.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) return InvalidArgument(context + ": the path exists and is not a directory");
    const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return InvalidArgument(context + ": cannot open the directory: " + Errno());
    ::close(fd);
  } else if (::mkdir(directory.c_str(), 0755) != 0) {
    return InvalidArgument(context + ": cannot create the directory: " + Errno());
  }

  model::Manifest manifest;
  manifest.set_format(kModelFormat);
  manifest.set_version(kModelFormatVersion);
  manifest.set_actorflow_version(ActorflowVersion());
  manifest.set_job_name(contents.plan->job_name());
  for (const ModelTensorSpec& spec : contents.inputs) FillSpec(spec, manifest.add_inputs());
  for (const ModelTensorSpec& spec : contents.outputs) FillSpec(spec, manifest.add_outputs());
  std::string plan_bytes;
  if (!contents.plan->SerializeToString(&plan_bytes)) return Internal(context + ": the plan does not serialize");
  // O_EXCL below refuses any file already there: nothing is ever replaced.
  AF_RETURN_IF_ERROR(WriteFileDurably(JoinPath(directory, kModelPlanFile), plan_bytes).WithContext(context));
  *manifest.mutable_plan() = EntryFor(kModelPlanFile, plan_bytes);
  for (size_t i = 0; i < contents.weights.size(); ++i) {
    const auto& [name, view] = contents.weights[i];
    const std::string file = WeightFileName(i, name);
    const std::string bytes = EncodeNpy(view);
    AF_RETURN_IF_ERROR(WriteFileDurably(JoinPath(directory, file), bytes).WithContext(context));
    model::Weight* weight = manifest.add_weights();
    weight->set_name(name);
    for (int64_t d : view.desc.shape) weight->add_shape(d);
    weight->set_dtype(DTypeName(view.desc.dtype));
    *weight->mutable_data() = EntryFor(file, bytes);
  }
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(manifest, &json, print).ok())
    return Internal(context + ": the manifest does not serialize");
  // The manifest last: a directory without it is an interrupted save, never a model.
  AF_RETURN_IF_ERROR(WriteFileDurably(JoinPath(directory, kModelManifestFile), json).WithContext(context));
  return SyncDirectory(directory).WithContext(context);
}

// ------------------------------------------------------------------------------------ Model

struct Model::State {
  std::string job_name, actorflow_version;
  std::vector<ModelTensorSpec> inputs, outputs;
  std::vector<TensorDesc> output_descs;
  plan::Plan plan;
  std::map<std::string, HostTensor> weights;
  std::unique_ptr<Runtime> runtime;  // last: destroyed first, before the weights it reads
};

Model::Model(std::unique_ptr<State> state) : state_(std::move(state)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const std::vector<ModelTensorSpec>& Model::inputs() const { return state_->inputs; }
const std::vector<ModelTensorSpec>& Model::outputs() const { return state_->outputs; }
const std::string& Model::job_name() const { return state_->job_name; }
const std::string& Model::actorflow_version() const { return state_->actorflow_version; }

Status Model::Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  const std::string what = "model '" + state_->job_name + "'";
  if (inputs.size() != state_->inputs.size())
    return InvalidArgument(what + " takes " + std::to_string(state_->inputs.size()) + " inputs, got " +
                           std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].desc != state_->inputs[i].desc)
      return InvalidArgument(what + ", input '" + state_->inputs[i].name + "': expected " +
                             state_->inputs[i].desc.ToString() + ", got " + inputs[i].desc.ToString());
    if (inputs[i].data == nullptr && inputs[i].byte_size() > 0)
      return InvalidArgument(what + ", input '" + state_->inputs[i].name + "': no data");
  }
  if (outputs.size() != state_->outputs.size())
    return InvalidArgument(what + " has " + std::to_string(state_->outputs.size()) + " outputs, got " +
                           std::to_string(outputs.size()) + " output buffers");
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].desc != state_->outputs[i].desc || (outputs[i].data == nullptr && outputs[i].byte_size() > 0))
      return InvalidArgument(what + ", output '" + state_->outputs[i].name + "': the buffer is " +
                             outputs[i].desc.ToString() + (outputs[i].data ? "" : " without data") + ", expected " +
                             state_->outputs[i].desc.ToString());
  return state_->runtime->Run(inputs, outputs).WithContext(what);
}

StatusOr<std::vector<ModelOutput>> Model::Run(const std::vector<TensorView>& inputs) {
  std::vector<ModelOutput> outputs;
  std::vector<TensorView> views;
  for (const ModelTensorSpec& spec : state_->outputs) {
    AF_ASSIGN_OR_RETURN(HostTensor tensor, AllocateHostTensor(spec.desc, "output '" + spec.name + "'"));
    outputs.push_back({spec.name, spec.desc, tensor.data});
    views.push_back(tensor.view());
  }
  AF_RETURN_IF_ERROR(Run(inputs, views));
  return outputs;
}

struct ModelLoader {
  static StatusOr<Model> Load(const std::string& directory, const ModelOptions& options);
};

StatusOr<Model> ModelLoader::Load(const std::string& directory, const ModelOptions& options) {
  const std::string context = "model '" + directory + "'";
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) return NotFound(context + ": no such directory (" + Errno() + ")");
  if (!S_ISDIR(info.st_mode)) return InvalidArgument(context + ": not a directory");

  const std::string manifest_path = JoinPath(directory, kModelManifestFile);
  auto text = ReadFile(manifest_path, kMaxManifestBytes);
  if (!text.ok())
    return Status(text.status().code(), context + ": " + text.status().message() +
                                            " (not a saved model, or an interrupted save)");
  model::Manifest manifest;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = false;
  auto parsed = google::protobuf::util::JsonStringToMessage(*text, &manifest, parse);
  if (!parsed.ok())
    return InvalidArgument(context + ": " + kModelManifestFile + " is not a valid manifest: " + parsed.ToString());
  if (manifest.format() != kModelFormat)
    return InvalidArgument(context + ": " + kModelManifestFile + " has format '" + manifest.format() + "', expected '" +
                           kModelFormat + "'");
  if (manifest.version() != kModelFormatVersion)
    return InvalidArgument(context + ": format version " + std::to_string(manifest.version()) + " (written by actorflow " +
                           manifest.actorflow_version() + "); this actorflow (" + ActorflowVersion() + ") reads version " +
                           std::to_string(kModelFormatVersion));

  auto state = std::make_unique<Model::State>();
  state->job_name = manifest.job_name();
  state->actorflow_version = manifest.actorflow_version();
  Status status;
  state->inputs = SpecsOf(manifest.inputs(), "input", &status);
  if (status.ok()) state->outputs = SpecsOf(manifest.outputs(), "output", &status);
  if (!status.ok()) return status.WithContext(context + ": " + kModelManifestFile);

  AF_ASSIGN_OR_RETURN(std::string plan_bytes, ReadListed(directory, manifest.plan(), context + ": the plan", kMaxPlanBytes));
  if (!state->plan.ParseFromString(plan_bytes))
    return InvalidArgument(context + ": '" + manifest.plan().file() + "' is not a valid plan");
  if (state->plan.job_name() != manifest.job_name())
    return InvalidArgument(context + ": the plan is job '" + state->plan.job_name() + "', the manifest says '" +
                           manifest.job_name() + "'");
  auto facts = CheckPlan(state->plan);
  if (!facts.ok()) return facts.status().WithContext(context + ": the plan");

  std::map<std::string, TensorDesc> weight_descs;
  std::set<std::string> files{manifest.plan().file()};
  for (const model::Weight& weight : manifest.weights()) {
    const std::string what = context + ": weight '" + weight.name() + "'";
    AF_ASSIGN_OR_RETURN(TensorDesc desc, DescOfSpec(weight.shape(), weight.dtype(), what));
    if (!weight_descs.emplace(weight.name(), desc).second) return InvalidArgument(what + " is listed twice");
    if (!files.insert(weight.data().file()).second)
      return InvalidArgument(what + ": file '" + weight.data().file() + "' is listed twice");
    if (static_cast<double>(desc.byte_size()) > static_cast<double>(weight.data().bytes()))
      return InvalidArgument(what + " is " + desc.ToString() + ", larger than its file");
  }
  AF_RETURN_IF_ERROR(CheckAgainstPlan(*facts, state->inputs, state->outputs, weight_descs).WithContext(context));
  for (const model::Weight& weight : manifest.weights()) {
    const std::string what = context + ": weight '" + weight.name() + "'";
    AF_ASSIGN_OR_RETURN(std::string bytes,
                        ReadListed(directory, weight.data(), what, static_cast<uint64_t>(weight.data().bytes())));
    AF_ASSIGN_OR_RETURN(HostTensor tensor, DecodeNpy(bytes, what + ", file '" + weight.data().file() + "'"));
    if (tensor.desc != weight_descs[weight.name()])
      return InvalidArgument(what + ": the file holds " + tensor.desc.ToString() + ", the manifest says " +
                             weight_descs[weight.name()].ToString());
    state->weights.emplace(weight.name(), std::move(tensor));
  }
  for (const ModelTensorSpec& spec : state->outputs) state->output_descs.push_back(spec.desc);

  const int budget = options.num_threads > 0 ? options.num_threads
                                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const plan::Plan* plan = &state->plan;
  std::map<int64_t, int> index_of = facts->index_of;
  RuntimeHooks hooks;
  // The weights are the model's own and never change: one constant version for every reader
  // (none if the plan writes a variable: a predict model does not, but the file is outside data).
  bool writes_weights = false;
  for (const plan::Task& task : plan->tasks()) writes_weights |= task.kind() == plan::VARIABLE && !task.read_only();
  std::shared_ptr<const std::atomic<int64_t>> constant =
      writes_weights ? nullptr : std::make_shared<const std::atomic<int64_t>>(0);
  hooks.make_kernel = [plan, index_of, budget, constant](const plan::Task& task) -> StatusOr<KernelFn> {
    KernelInit init;
    for (const plan::InputDesc& input : task.inputs()) {
      if (input.control()) continue;
      const plan::Task& producer = plan->tasks(index_of.at(input.producer_task_id()));  // checked by CheckPlan
      TensorDesc desc = DescOfBlob(producer.registers(input.producer_register()).blobs(input.blob_index()));
      if (input.has_view()) desc.shape.assign(input.view_shape().begin(), input.view_shape().end());
      if (constant != nullptr && producer.kind() == plan::VARIABLE) init.SetInputVersion(init.inputs.size(), constant);
      init.inputs.push_back(std::move(desc));
    }
    for (const plan::RegisterDesc& reg : task.registers())
      for (const plan::BlobDesc& blob : reg.blobs()) init.outputs.push_back(DescOfBlob(blob));
    init.attrs = graph::AttrsFromProto(task.attrs());
    init.num_threads = budget;
    return MakeCpuKernel(task.op_type(), init);
  };
  Model::State* raw = state.get();
  hooks.variable_buffer = [raw](const plan::Task& task) -> StatusOr<void*> {
    auto it = raw->weights.find(task.variable_name());
    if (it == raw->weights.end()) return NotFound("no weight for variable '" + task.variable_name() + "'");
    return it->second.data.get();
  };
  hooks.sink_handler = [](const std::string&, int64_t, const std::vector<TensorView>&) { return Status::Ok(); };
  RuntimeOptions runtime_options;
  runtime_options.num_threads = budget;
  runtime_options.num_workers = 1;
  runtime_options.kernel_threads = budget;
  auto runtime = Runtime::Create(state->plan, std::move(hooks), runtime_options);
  if (!runtime.ok()) return runtime.status().WithContext(context);
  state->runtime = std::move(runtime).value();
  return Model(std::move(state));
}

StatusOr<Model> LoadModel(const std::string& directory, const ModelOptions& options) {
  RegisterAllOps();
  StatusOr<Model> model = ModelLoader::Load(directory, options);
  // Messages quote what the files hold (names, parser excerpts): printable ASCII only.
  if (!model.ok()) return Status(model.status().code(), Printable(model.status().message()));
  return model;
}

}  // namespace actorflow
