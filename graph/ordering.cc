// The ordering and pruning passes over the logical graph (passes.h): every reader of a ref some
// op writes in place runs before that writer, and nodes no output, watch or side effect needs
// are dropped.
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/in_place_order.h"
#include "graph/ordering.h"
#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace ordering_detail {

// Refs some op writes in place (variables under an optimizer, batch-norm moving statistics).
NameIndex InPlaceWrittenRefs(const Graph& graph) {
  NameIndex written;
  for (const Node& n : graph.nodes())
    for (int m : n.mutable_inputs)
      if (m >= 0 && static_cast<size_t>(m) < n.inputs.size()) written.Insert(n.inputs[m], written.size());
  return written;
}

}  // namespace ordering_detail

namespace {

using ordering_detail::InPlaceWrittenRefs;

std::string ProducerOf(const std::string& ref) { return SplitRef(ref).value().first; }

// ProducerOf as a view into `ref` (no string built: the passes look up every input).
std::string_view ProducerView(const std::string& ref) {
  const size_t slash = ref.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == ref.size()) (void)ProducerOf(ref);  // fails as it does
  return std::string_view(ref).substr(0, slash);
}

// Outputs and watches of an in-place-written ref read an identity copy ("snapshot") placed
// right after the ref's producer. The copy is an ordinary reader, so the ordering below runs
// the writer after it: a return and a watch both see the value this iteration's forward read,
// never the update's result nor a torn mix of both.
// `written`: InPlaceWrittenRefs(graph) (the copies write nothing: it stays the graph's).
Status SnapshotSinkReads(Graph& graph, const NameIndex& written) {
  std::map<std::string, std::string> snapshot_of;  // written ref -> its copy's ref
  auto redirect = [&](std::string& ref, const std::string& location) -> Status {
    if (!written.Contains(ref)) return Status::Ok();
    auto it = snapshot_of.find(ref);
    if (it == snapshot_of.end()) {
      const std::string producer = ProducerOf(ref);
      AF_ASSIGN_OR_RETURN(const Node* copy, graph.AddOp("identity", producer + "-snapshot", {ref}, {}, location,
                                                        graph.FindNode(producer)->placement));
      const std::string copy_name = copy->name, copy_ref = copy->output_ref(0);
      graph.MoveAfter(copy_name, producer);
      it = snapshot_of.emplace(ref, copy_ref).first;
    }
    ref = it->second;
    return Status::Ok();
  };
  for (std::string& ref : graph.outputs()) AF_RETURN_IF_ERROR(redirect(ref, ""));
  for (Watch& w : graph.watches())
    if (!w.diff) AF_RETURN_IF_ERROR(redirect(w.ref, w.location));
  return Status::Ok();
}

class OrderingPass : public Pass {
 public:
  std::string name() const override { return "ordering"; }
  Status Run(Graph& graph) override {
    // Refs some op writes in place, numbered; the readers' list of each is found through it.
    const NameIndex written = InPlaceWrittenRefs(graph);
    AF_RETURN_IF_ERROR(SnapshotSinkReads(graph, written));
    if (written.size() == 0) return Status::Ok();  // no writer, nothing to order
    const std::vector<Node>& nodes = graph.nodes();
    std::vector<std::vector<int>> readers(written.size());  // by the written ref's number
    auto readers_of = [&](const std::string& ref) -> std::vector<int>* {
      const size_t at = written.Find(ref);
      return at == NameIndex::kNone ? nullptr : &readers[at];
    };
    auto producer_index = [&](std::string_view name) {  // the graph's own index, by position
      const Node* node = graph.FindNode(name);
      return node == nullptr ? -1 : static_cast<int>(node - nodes.data());
    };
    // One walk over the nodes (each walk over thousands of nodes and their input strings
    // costs cache misses per node): the readers (ascending, each once) of every ref some op
    // writes in place, every node's parents for the ancestry below, and the writers.
    bool any_reader = false;
    std::vector<int> writers;
    ParentRows parents;
    parents.begin.reserve(nodes.size() + 1);
    for (size_t m = 0; m < nodes.size(); ++m) {
      for (const auto& in : nodes[m].inputs) {
        std::vector<int>* list = readers_of(in);
        if (list != nullptr && (list->empty() || list->back() != static_cast<int>(m))) {
          list->push_back(static_cast<int>(m));
          any_reader = true;
        }
        if (int p = producer_index(ProducerView(in)); p >= 0) parents.parents.push_back(p);
      }
      for (const auto& c : nodes[m].control_inputs)
        if (int p = producer_index(c); p >= 0) parents.parents.push_back(p);
      parents.EndRow();
      if (!nodes[m].mutable_inputs.empty()) writers.push_back(static_cast<int>(m));
    }
    if (!any_reader) return Status::Ok();
    AncestorIndex ancestors(std::move(parents));
    for (int w : writers) {
      const size_t m = static_cast<size_t>(w);
      // Every other reader placed before the writer (readers after it in topological order
      // consume what it wrote) and not already ordered before it by data or control edges.
      std::vector<int> control;
      for (int k : nodes[m].mutable_inputs)
        for (int r : *readers_of(nodes[m].inputs.at(k))) {
          if (r >= static_cast<int>(m)) break;
          if (ancestors.IsAncestor(r, static_cast<int>(m)) || std::find(control.begin(), control.end(), r) != control.end())
            continue;
          control.push_back(r);
        }
      for (int r : control) {
        graph.mutable_nodes()[m].control_inputs.push_back(nodes[r].name);
        ancestors.AddEdge(static_cast<int>(m), r);
      }
    }
    return Status::Ok();
  }
};

class PrunePass : public Pass {
 public:
  std::string name() const override { return "prune"; }
  Status Run(Graph& graph) override {
    // Live nodes by position (a flag per node, not a set of names: linear in the graph).
    const Node* first = graph.nodes().data();
    std::vector<bool> keep(graph.nodes().size(), false);
    std::vector<size_t> stack;
    auto push = [&](std::string_view name) {
      const Node* n = graph.FindNode(name);
      if (n == nullptr) throw std::logic_error("prune: no node named " + std::string(name));
      stack.push_back(static_cast<size_t>(n - first));
    };
    for (const auto& ref : graph.outputs()) push(ProducerView(ref));
    for (const Watch& w : graph.watches()) {
      const std::string ref = w.diff ? graph.gradients()[w.ref] : w.ref;
      if (!ref.empty()) push(ProducerView(ref));
    }
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& n = graph.nodes()[i];
      if (n.kind == NodeKind::kInput || (n.kind == NodeKind::kOp && n.output_names.empty())) stack.push_back(i);
    }
    while (!stack.empty()) {
      const size_t i = stack.back();
      stack.pop_back();
      if (keep[i]) continue;
      keep[i] = true;
      const Node& n = graph.nodes()[i];
      for (const auto& in : n.inputs) push(ProducerView(in));
      for (const auto& c : n.control_inputs) push(c);
    }
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeOrderingPass() { return std::make_unique<OrderingPass>(); }
std::unique_ptr<Pass> MakePrunePass() { return std::make_unique<PrunePass>(); }

}  // namespace graph
}  // namespace actorflow
