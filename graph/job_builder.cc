#include "graph/job_builder.h"

#include "graph/attr_convert.h"
#include "graph/device_placement.h"
#include "graph/job_key.h"
#include "graph/passes.h"

namespace actorflow {
namespace graph {

StatusOr<JobBuilder> JobBuilder::Create(const std::string& name, const std::string& job_type) {
  if (job_type != "predict" && job_type != "train")
    return InvalidArgument("job '" + name + "': type must be 'predict' or 'train', got '" + job_type + "'");
  RegisterAllOps();
  JobBuilder builder;
  builder.graph_ = Graph(name, job_type);
  return builder;
}

Status JobBuilder::SetDeviceNum(int cpu_device_num, int gpu_device_num) {
  if (gpu_device_num < 0) return InvalidArgument("gpu_device_num must be >= 0, got " + std::to_string(gpu_device_num));
  if (gpu_device_num > 0) AF_RETURN_IF_ERROR(CheckGpuDevices(gpu_device_num));
  if (cpu_device_num < 0) return InvalidArgument("cpu_device_num must be >= 0, got " + std::to_string(cpu_device_num));
  graph_.set_device_num(cpu_device_num);
  graph_.set_gpu_device_num(gpu_device_num);
  // OneFlow's default: with GPUs configured, ops outside a placement scope run on them.
  default_placement_ = gpu_device_num > 0 ? Placement{"gpu", {}} : Placement{};
  placement_ = default_placement_;
  return Status::Ok();
}

Status JobBuilder::ClearPlacement() {
  placement_ = default_placement_;
  return Status::Ok();
}

Status JobBuilder::SetMachineNum(int machine_num) {
  if (machine_num < 0) return InvalidArgument("machine_num must be >= 0, got " + std::to_string(machine_num));
  graph_.set_machine_num(machine_num);
  return Status::Ok();
}

Status JobBuilder::SetLogicalView(const std::string& view) {
  if (!view.empty() && view != "consistent" && view != "mirrored")
    return InvalidArgument("default_logical_view must be 'consistent' or 'mirrored', got '" + view + "'");
  logical_view_ = view;
  return Status::Ok();
}

Status JobBuilder::SetPlacement(const Placement& placement) {
  AF_RETURN_IF_ERROR(ResolvePlacement(placement, graph_.device_num(), graph_.gpu_device_num(), graph_.machine_num()).status());
  placement_ = placement;
  return Status::Ok();
}

Status JobBuilder::SetOutputSbpHint(const std::string& ref, const Sbp& sbp) {
  AF_ASSIGN_OR_RETURN(auto resolved, graph_.Resolve(ref));
  Node* node = graph_.FindMutableNode(resolved.first->name);
  if (sbp.kind == SbpKind::kSplit) {
    const Shape& shape = node->output_descs[resolved.second].shape;
    if (sbp.axis < 0 || sbp.axis >= static_cast<int64_t>(shape.size()))
      return InvalidArgument("layout hint " + sbp.ToString() + " on '" + ref + "' (" +
                             node->output_descs[resolved.second].ToString() + ", at " + node->location +
                             "): the axis is outside the rank");
  }
  node->output_sbp_hints.resize(node->output_names.size());
  node->output_sbp_hints[resolved.second] = sbp;
  node_key_valid_ = false;  // the node's part of the key was written before
  return Status::Ok();
}

Status JobBuilder::SetFedPerMachine(const std::string& ref) {
  AF_ASSIGN_OR_RETURN(auto resolved, graph_.Resolve(ref));
  Node* node = graph_.FindMutableNode(resolved.first->name);
  if (node->kind != NodeKind::kInput || node->output_descs.empty() || node->output_descs[0].shape.empty())
    return InvalidArgument("'" + ref + "' (at " + node->location + "): only a placeholder of rank >= 1 can be fed per "
                           "machine");
  node->attrs.Set(kFedPerMachineAttr, true);
  node_key_valid_ = false;  // the node's part of the key was written before
  return Status::Ok();
}

namespace {
Status CheckShape(const Shape& shape, const std::string& what) {
  for (int64_t d : shape)
    if (d <= 0) return InvalidArgument(what + ": shape " + ShapeToString(shape) + " has a dimension <= 0");
  return Status::Ok();
}
}  // namespace

StatusOr<std::string> JobBuilder::AddInput(const std::string& name, const Shape& shape, DType dtype,
                                           const std::string& location) {
  AF_RETURN_IF_ERROR(CheckShape(shape, "placeholder '" + name + "' at " + location));
  Node node;
  node.name = graph_.UniqueName(name.empty() ? "input" : name);
  node.kind = NodeKind::kInput;
  node.type = "input";
  node.output_names = {"out"};
  node.output_descs = {TensorDesc{shape, dtype}};
  node.location = location;
  node.placement = placement_;
  std::string ref = node.output_ref(0);
  graph_.feeds().push_back(node.name);
  graph_.Append(std::move(node));
  KeyNewNode();
  return ref;
}

StatusOr<std::string> JobBuilder::AddVariable(const std::string& name, const Shape& shape, DType dtype,
                                              const std::string& location, bool trainable) {
  if (name.empty()) return InvalidArgument("variable at " + location + ": empty name");
  AF_RETURN_IF_ERROR(CheckShape(shape, "variable '" + name + "' at " + location));
  TensorDesc desc{shape, dtype};
  if (const Node* n = graph_.FindVariable(name)) {
    if (n->output_descs[0] != desc)
      return InvalidArgument("variable '" + name + "' at " + location + ": declared as " + desc.ToString() +
                             " but already declared as " + n->output_descs[0].ToString() + " at " + n->location);
    return n->output_ref(0);
  }
  Node node;
  node.name = graph_.UniqueName(name);
  node.kind = NodeKind::kVariable;
  node.type = "variable";
  node.variable_name = name;
  node.trainable = trainable;
  node.output_names = {"out"};
  node.output_descs = {desc};
  node.location = location;
  node.placement = placement_;
  std::string ref = node.output_ref(0);
  graph_.Append(std::move(node));
  KeyNewNode();
  return ref;
}

StatusOr<const Node*> JobBuilder::AddOp(const std::string& type, const std::string& name,
                                        const std::vector<std::string>& inputs, const Attrs& attrs,
                                        const std::string& location) {
  AF_ASSIGN_OR_RETURN(const Node* added, graph_.AddOp(type, name, inputs, attrs, location, placement_));
  KeyNewNode();
  return added;
}

void JobBuilder::KeyNewNode() {
  if (!node_key_valid_ || keyed_nodes_ + 1 != graph_.nodes().size()) {
    node_key_valid_ = false;  // a node came in some other way: the key is written whole
    return;
  }
  if (node_key_.empty()) node_key_.reserve(size_t{1} << 16);
  AppendNodeKey(graph_, graph_.nodes().back(), &node_key_);
  ++keyed_nodes_;
}

Status JobBuilder::SetOutputs(const std::vector<std::string>& refs) {
  for (const auto& ref : refs) AF_RETURN_IF_ERROR(graph_.Resolve(ref).status().WithContext("job output"));
  graph_.outputs() = refs;
  return Status::Ok();
}

Status JobBuilder::AddWatch(const std::string& ref, const std::string& handler_name, bool diff,
                            const std::string& location) {
  std::string what = std::string(diff ? "watch_diff" : "watch") + " at " + location;
  AF_RETURN_IF_ERROR(graph_.Resolve(ref).status().WithContext(what));
  if (diff && !graph_.is_train())
    return InvalidArgument(what + ": watch_diff of '" + ref + "' needs a train job (job '" + graph_.job_name() +
                           "' is " + graph_.job_type() + ")");
  for (const Watch& w : graph_.watches())
    if (w.handler_name == handler_name) return InvalidArgument(what + ": handler name '" + handler_name + "' used twice");
  if (handler_name.empty()) return InvalidArgument(what + ": empty handler name");
  graph_.watches().push_back(Watch{ref, handler_name, diff, location});
  return Status::Ok();
}

Status JobBuilder::AddLoss(const std::string& ref) {
  if (!graph_.is_train())
    return InvalidArgument("loss '" + ref + "': job '" + graph_.job_name() + "' is a predict job; losses need type='train'");
  AF_ASSIGN_OR_RETURN(TensorDesc desc, graph_.Desc(ref));
  if (desc.dtype != DType::kFloat32 && desc.dtype != DType::kFloat64)
    return InvalidArgument("loss '" + ref + "' must be floating point, got " + desc.ToString());
  graph_.losses().push_back(ref);
  return Status::Ok();
}

Status JobBuilder::SetOptimizer(const OptimizerSpec& spec) {
  static const char* kTypes[] = {"sgd", "momentum", "adam", "adamw", "rmsprop", "lamb"};
  bool known = false;
  for (const char* t : kTypes) known |= spec.type == t;
  if (!known)
    return InvalidArgument("optimizer type '" + spec.type + "' is unknown (sgd, momentum, adam, adamw, rmsprop, lamb)");
  if (!graph_.is_train()) return InvalidArgument("optimizer set on predict job '" + graph_.job_name() + "'");
  if (spec.clip_norm < 0) return InvalidArgument("optimizer clip_norm must be >= 0");
  graph_.optimizer() = std::make_unique<OptimizerSpec>(spec);
  return Status::Ok();
}

job::Job JobBuilder::ToJob() const {
  job::Job job;
  job.mutable_config()->set_job_name(graph_.job_name());
  job.mutable_config()->set_job_type(graph_.job_type());
  if (graph_.device_num() > 1) job.mutable_config()->set_cpu_device_num(graph_.device_num());
  if (graph_.machine_num() > 1) job.mutable_config()->set_machine_num(graph_.machine_num());
  if (graph_.gpu_device_num() > 0) job.mutable_config()->set_gpu_device_num(graph_.gpu_device_num());
  job.mutable_config()->set_default_logical_view(logical_view_);
  for (const Node& n : graph_.nodes()) {
    job::OpConf* op = job.add_ops();
    op->set_name(n.name);
    op->set_type(n.type);
    for (const auto& in : n.inputs) op->add_inputs(in);
    AttrsToProto(n.attrs, op->mutable_attrs());
    op->mutable_placement()->set_device_type(n.placement.device_type);
    for (const auto& ids : n.placement.machine_device_ids) op->mutable_placement()->add_machine_device_ids(ids);
    op->set_source_location(n.location);
    for (size_t k = 0; k < n.output_sbp_hints.size(); ++k) {
      if (!n.output_sbp_hints[k]) break;  // the proto has no "no hint" entry before a hinted output
      job::Sbp* hint = op->add_output_sbp();
      hint->set_kind(n.output_sbp_hints[k]->kind == SbpKind::kSplit       ? job::Sbp::SPLIT
                     : n.output_sbp_hints[k]->kind == SbpKind::kPartialSum ? job::Sbp::PARTIAL_SUM
                                                                           : job::Sbp::BROADCAST);
      hint->set_axis(n.output_sbp_hints[k]->axis);
    }
    if (n.kind != NodeKind::kOp) {
      for (int64_t d : n.output_descs[0].shape) op->add_shape(d);
      op->set_dtype(ToProtoDType(n.output_descs[0].dtype));
      op->set_variable_name(n.variable_name);
      op->set_trainable(n.trainable);
    }
  }
  for (const auto& r : graph_.outputs()) job.add_outputs(r);
  for (const auto& r : graph_.losses()) job.add_losses(r);
  for (const Watch& w : graph_.watches()) {
    job::Watch* pw = job.add_watches();
    pw->set_ref(w.ref);
    pw->set_handler_name(w.handler_name);
    pw->set_diff(w.diff);
    pw->set_source_location(w.location);
  }
  if (const OptimizerSpec* o = graph_.optimizer()) {
    job::OptimizerConf* c = job.mutable_optimizer();
    c->set_type(o->type);
    c->set_momentum(o->momentum);
    c->set_beta1(o->beta1);
    c->set_beta2(o->beta2);
    c->set_epsilon(o->epsilon);
    c->set_decay_rate(o->decay_rate);
    c->set_weight_decay(o->weight_decay);
    c->set_clip_norm(o->clip_norm);
    for (const auto& v : o->variables) c->add_variables(v);
  }
  return job;
}

StatusOr<JobBuilder> JobBuilder::FromJob(const job::Job& job) {
  AF_ASSIGN_OR_RETURN(JobBuilder builder, Create(job.config().job_name(), job.config().job_type()));
  AF_RETURN_IF_ERROR(builder.SetDeviceNum(job.config().cpu_device_num(), job.config().gpu_device_num()));
  AF_RETURN_IF_ERROR(builder.SetMachineNum(job.config().machine_num()));
  AF_RETURN_IF_ERROR(builder.SetLogicalView(job.config().default_logical_view()));
  for (const job::OpConf& op : job.ops()) {
    Placement placement;
    placement.device_type = op.placement().device_type();
    placement.machine_device_ids.assign(op.placement().machine_device_ids().begin(),
                                        op.placement().machine_device_ids().end());
    AF_RETURN_IF_ERROR(builder.SetPlacement(placement));
    Shape shape(op.shape().begin(), op.shape().end());
    std::string ref;
    if (op.type() == "input") {
      AF_ASSIGN_OR_RETURN(ref, builder.AddInput(op.name(), shape, FromProtoDType(op.dtype()), op.source_location()));
    } else if (op.type() == "variable") {
      AF_ASSIGN_OR_RETURN(ref, builder.AddVariable(op.variable_name(), shape, FromProtoDType(op.dtype()),
                                                   op.source_location(), op.trainable()));
    } else {
      std::vector<std::string> inputs(op.inputs().begin(), op.inputs().end());
      AF_ASSIGN_OR_RETURN(const Node* node,
                          builder.AddOp(op.type(), op.name(), inputs, AttrsFromProto(op.attrs()), op.source_location()));
      ref = node->name + "/";
    }
    if (ref.substr(0, ref.rfind('/')) != op.name())
      return InvalidArgument("job '" + job.config().job_name() + "': op name '" + op.name() + "' is not unique");
    const Node* added = builder.graph_.FindNode(op.name());
    if (op.output_sbp_size() > static_cast<int>(added->output_names.size()))
      return InvalidArgument("op '" + op.name() + "' at " + op.source_location() + ": " +
                             std::to_string(op.output_sbp_size()) + " layout hints for " +
                             std::to_string(added->output_names.size()) + " outputs");
    for (int k = 0; k < op.output_sbp_size(); ++k) {
      const job::Sbp& hint = op.output_sbp(k);
      Sbp sbp = hint.kind() == job::Sbp::SPLIT         ? Sbp::Split(hint.axis())
                : hint.kind() == job::Sbp::PARTIAL_SUM ? Sbp::PartialSum()
                                                       : Sbp::Broadcast();
      AF_RETURN_IF_ERROR(builder.SetOutputSbpHint(added->output_ref(k), sbp));
    }
  }
  AF_RETURN_IF_ERROR(builder.SetOutputs({job.outputs().begin(), job.outputs().end()}));
  for (const auto& loss : job.losses()) AF_RETURN_IF_ERROR(builder.AddLoss(loss));
  for (const auto& w : job.watches())
    AF_RETURN_IF_ERROR(builder.AddWatch(w.ref(), w.handler_name(), w.diff(), w.source_location()));
  if (job.has_optimizer() && !job.optimizer().type().empty()) {
    const job::OptimizerConf& c = job.optimizer();
    OptimizerSpec spec{c.type(), c.momentum(), c.beta1(), c.beta2(), c.epsilon(), c.decay_rate(), c.weight_decay(),
                       c.clip_norm(), {c.variables().begin(), c.variables().end()}};
    AF_RETURN_IF_ERROR(builder.SetOptimizer(spec));
  }
  return builder;
}

}  // namespace graph
}  // namespace actorflow
