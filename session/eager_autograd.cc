#include "session/eager_autograd.h"

#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace actorflow {
namespace {

std::atomic<int64_t> g_sequence{0};

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// The gradient rule's view of one recorded node. References name tensors of a table:
// "in<i>", "out<k>", "dout<k>" and "t<n>" for what AddOp made; AddOp runs at once.
class EagerGradBuilder : public GradBuilder {
 public:
  EagerGradBuilder(const GradNode& node, const std::vector<EagerTensorPtr>& output_grads)
      : node_(node), input_grads_(node.inputs.size()) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      tensors_["in" + std::to_string(i)] = node.inputs[i];
      saved_["in" + std::to_string(i)] = {node.input_versions[i], "input " + std::to_string(i)};
    }
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      tensors_["out" + std::to_string(k)] = node.outputs[k];
      saved_["out" + std::to_string(k)] = {node.output_versions[k], "output " + std::to_string(k)};
      if (output_grads[k]) tensors_["dout" + std::to_string(k)] = output_grads[k];
    }
  }
  const std::string& op_name() const override { return node_.type(); }
  const Attrs& attrs() const override { return node_.attrs; }
  int num_inputs() const override { return static_cast<int>(node_.inputs.size()); }
  int num_outputs() const override { return static_cast<int>(node_.outputs.size()); }
  std::string input(int i) const override { return "in" + std::to_string(i); }
  std::string output(int i) const override { return "out" + std::to_string(i); }
  std::string output_grad(int i) const override {
    std::string name = "dout" + std::to_string(i);
    return tensors_.count(name) ? name : "";
  }
  const TensorDesc& input_desc(int i) const override { return node_.input_descs[i]; }
  const TensorDesc& output_desc(int i) const override { return node_.output_descs[i]; }
  bool needs_input_grad(int i) const override { return node_.edges[i].valid(); }
  StatusOr<std::vector<std::string>> AddOp(const std::string& type, const std::vector<std::string>& inputs,
                                           const Attrs& attrs) override {
    std::vector<EagerTensorPtr> in;
    in.reserve(inputs.size());
    for (const std::string& name : inputs) {
      auto it = tensors_.find(name);
      if (it == tensors_.end())
        return Internal("gradient of '" + node_.type() + "': its rule referenced unknown tensor '" + name + "'");
      AF_RETURN_IF_ERROR(CheckVersion(name, *it->second));
      in.push_back(it->second);
    }
    AF_ASSIGN_OR_RETURN(std::vector<EagerTensorPtr> out, RunEagerOp(type, attrs, in, /*record_history=*/false));
    std::vector<std::string> names;
    for (EagerTensorPtr& t : out) {
      std::string name = "t" + std::to_string(counter_++);
      tensors_.emplace(name, std::move(t));
      names.push_back(std::move(name));
    }
    return names;
  }
  void SetInputGrad(int i, const std::string& ref) override { input_grads_[i] = ref; }

  // A saved tensor the rule reads must hold what the op saw: refused when written in place
  // since (only tensors the rule actually reads are checked, as PyTorch checks what it saved).
  Status CheckVersion(const std::string& name, const EagerTensor& tensor) const {
    auto saved = saved_.find(name);
    if (saved == saved_.end() || tensor.version() == saved->second.version) return Status::Ok();
    return FailedPrecondition("backward of op '" + node_.type() + "': its " + saved->second.what + " (" +
                              tensor.desc().ToString() + "), needed for the gradient, was modified in place after "
                              "the op ran (version " + std::to_string(tensor.version()) + ", saved at version " +
                              std::to_string(saved->second.version) + "); compute the op again after the in-place write");
  }

  // The input gradients the rule set (null where none), moving them out of the table.
  StatusOr<std::vector<EagerTensorPtr>> TakeInputGrads() {
    std::vector<EagerTensorPtr> grads(input_grads_.size());
    for (size_t i = 0; i < input_grads_.size(); ++i) {
      if (input_grads_[i].empty() || !node_.edges[i].valid()) continue;
      auto it = tensors_.find(input_grads_[i]);
      if (it == tensors_.end()) return Internal("gradient of '" + node_.type() + "': unknown tensor '" + input_grads_[i] + "'");
      AF_RETURN_IF_ERROR(CheckVersion(input_grads_[i], *it->second));
      if (it->second->desc() != node_.input_descs[i])
        return Internal("gradient of '" + node_.type() + "' for input " + std::to_string(i) + " is " +
                        it->second->desc().ToString() + ", expected " + node_.input_descs[i].ToString());
      grads[i] = it->second;
    }
    tensors_.clear();  // drops the table's references, so an unshared gradient can be kept as is
    return grads;
  }

 private:
  const GradNode& node_;
  std::unordered_map<std::string, EagerTensorPtr> tensors_;
  struct Saved {
    int64_t version;
    std::string what;
  };
  std::unordered_map<std::string, Saved> saved_;  // in<i>, out<k>: versions when recorded
  std::vector<std::string> input_grads_;
  int counter_ = 0;
};

// `g` as a tensor nobody else holds: kept as is when unshared, copied otherwise (a rule may
// pass the same tensor to two inputs, or the caller's gradient straight through; .grad is
// written in place later, e.g. by zero_()).
EagerTensorPtr Owned(const EagerTensorPtr& g) {
  if (g.use_count() <= 1 && g->storage().use_count() <= 1) return g;
  auto copy = EagerTensor::Empty(g->desc());
  (void)copy->CopyFrom(*g);
  return copy;
}

StatusOr<EagerTensorPtr> Sum(const EagerTensorPtr& a, const EagerTensorPtr& b) {
  AF_ASSIGN_OR_RETURN(std::vector<EagerTensorPtr> out, RunEagerOp("add", {}, {a, b}, /*record_history=*/false));
  return out[0];
}

Status AccumulateInto(EagerTensor& tensor, EagerTensorPtr g) {
  if (!tensor.grad()) return tensor.SetGrad(Owned(g));
  AF_ASSIGN_OR_RETURN(EagerTensorPtr sum, Sum(tensor.grad(), g));
  return tensor.SetGrad(std::move(sum));
}

struct LaterFirst {
  bool operator()(const GradNode* a, const GradNode* b) const { return a->sequence < b->sequence; }
};

}  // namespace

void RecordGradNode(const OpDef& def, const Attrs& attrs, const std::vector<EagerTensorPtr>& inputs,
                    const std::vector<EagerTensorPtr>& outputs) {
  bool any = false;
  for (const EagerTensorPtr& t : inputs) any |= t->requires_grad();
  if (!any) return;
  bool float_output = false;
  for (const EagerTensorPtr& t : outputs) float_output |= IsFloat(t->dtype());
  if (!float_output) return;  // argmax-like results carry no gradient
  auto node = std::make_shared<GradNode>();
  node->def = &def;
  node->attrs = attrs;
  node->sequence = g_sequence.fetch_add(1, std::memory_order_relaxed);
  node->inputs = inputs;
  node->edges.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const EagerTensorPtr& t = inputs[i];
    node->input_descs.push_back(t->desc());
    node->input_versions.push_back(t->version());
    if (!t->requires_grad()) continue;
    if (t->grad_fn()) {
      node->edges[i].node = t->grad_fn();
      node->edges[i].output_index = t->output_index();
    } else {
      node->edges[i].leaf = t;
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    node->outputs.push_back(outputs[k]->Detached());
    node->output_tensors.push_back(outputs[k]);
    node->output_descs.push_back(outputs[k]->desc());
    node->output_versions.push_back(outputs[k]->version());
  }
  for (size_t k = 0; k < outputs.size(); ++k)
    if (IsFloat(outputs[k]->dtype())) outputs[k]->SetHistory(node, static_cast<int>(k));
}

Status Backward(const EagerTensorPtr& root, const EagerTensorPtr& gradient, bool retain_graph) {
  if (!root->requires_grad())
    return FailedPrecondition("backward: the tensor does not require grad and has no grad_fn (call requires_grad_() on "
                              "the inputs before computing it)");
  EagerTensorPtr grad = gradient;
  if (!grad) {
    if (root->desc().num_elements() != 1)
      return InvalidArgument("backward: a gradient can be created implicitly only for a one-element tensor, this one is " +
                             root->desc().ToString() + "; pass gradient=");
    grad = EagerTensor::Empty(root->desc());
    grad->Fill(1.0);
  } else if (grad->desc() != root->desc()) {
    return InvalidArgument("backward: gradient is " + grad->desc().ToString() + ", expected " + root->desc().ToString() +
                           " like the tensor");
  }
  if (root->is_leaf()) return AccumulateInto(*root, grad);

  // Every node reachable from the root, and how many edges of reachable nodes lead to each.
  std::unordered_map<GradNode*, int> dependencies;
  std::vector<GradNode*> stack = {root->grad_fn().get()};
  std::unordered_set<GradNode*> seen = {stack[0]};
  while (!stack.empty()) {
    GradNode* n = stack.back();
    stack.pop_back();
    if (n->released)
      return FailedPrecondition("backward: trying to backward through the graph a second time (op '" + n->type() +
                                "'); its saved tensors were freed by the first backward. Pass retain_graph=True to "
                                "the first backward to keep them");
    for (const GradEdge& e : n->edges) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<GradNode*, std::vector<EagerTensorPtr>> pending;
  GradNode* start = root->grad_fn().get();
  pending[start].resize(start->output_descs.size());
  pending[start][root->output_index()] = grad;
  std::priority_queue<GradNode*, std::vector<GradNode*>, LaterFirst> ready;
  ready.push(start);
  while (!ready.empty()) {
    GradNode* n = ready.top();
    ready.pop();
    std::vector<EagerTensorPtr> output_grads = std::move(pending[n]);
    pending.erase(n);
    output_grads.resize(n->output_descs.size());
    for (size_t k = 0; k < output_grads.size(); ++k) {
      if (!output_grads[k]) continue;
      EagerTensorPtr out = n->output_tensors[k].lock();
      if (out && out->retains_grad()) AF_RETURN_IF_ERROR(AccumulateInto(*out, output_grads[k]));
    }
    bool any = false;
    for (const EagerTensorPtr& g : output_grads) any |= g != nullptr;
    if (any) {
      std::vector<EagerTensorPtr> input_grads;
      {
        EagerGradBuilder builder(*n, output_grads);
        output_grads.clear();
        Status ruled = n->def->grad(builder);
        if (!ruled.ok()) return ruled.WithContext("backward of op '" + n->type() + "'");
        AF_ASSIGN_OR_RETURN(input_grads, builder.TakeInputGrads());
      }
      for (size_t i = 0; i < input_grads.size(); ++i) {
        if (!input_grads[i]) continue;
        const GradEdge& e = n->edges[i];
        if (e.leaf) {
          AF_RETURN_IF_ERROR(AccumulateInto(*e.leaf, std::move(input_grads[i])));
        } else if (e.node) {
          std::vector<EagerTensorPtr>& slots = pending[e.node.get()];
          slots.resize(e.node->output_descs.size());
          EagerTensorPtr& slot = slots[e.output_index];
          if (!slot) {
            slot = std::move(input_grads[i]);
          } else {
            AF_ASSIGN_OR_RETURN(slot, Sum(slot, input_grads[i]));
          }
        }
      }
    }
    for (const GradEdge& e : n->edges)
      if (e.node && --dependencies[e.node.get()] == 0) ready.push(e.node.get());
    if (!retain_graph) {
      n->released = true;
      n->inputs.clear();
      n->outputs.clear();
    }
  }
  return Status::Ok();
}

}  // namespace actorflow
