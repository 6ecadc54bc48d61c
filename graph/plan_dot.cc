// PlanToDot (graph/passes.h): a plan as Graphviz text, one box per task with its registers.
#include <sstream>
#include <string>

#include "actors/plan_dtype.h"
#include "graph/passes.h"

namespace actorflow {
namespace graph {

std::string PlanToDot(const plan::Plan& plan) {
  std::ostringstream dot;
  auto quote = [](const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"') out += '\\';  // labels carry \n line breaks on purpose
      out += c;
    }
    return out + "\"";
  };
  static const char* kKinds[] = {"?", "source", "compute", "sink", "variable"};
  dot << "digraph " << quote(plan.job_name()) << " {\n  node [shape=box, fontname=monospace];\n";
  for (const plan::Task& t : plan.tasks()) {
    std::string label = "#" + std::to_string(t.id()) + " " + t.name() + "\\n" + kKinds[t.kind() < 5 ? t.kind() : 0];
    if (!t.op_type().empty()) label += " " + t.op_type();
    if (!t.sink_name().empty()) label += " '" + t.sink_name() + "'";
    for (const plan::RegisterDesc& r : t.registers()) {
      label += "\\n" + r.name() + " x" + std::to_string(r.register_num());
      for (const plan::BlobDesc& b : r.blobs()) {
        Shape s(b.shape().begin(), b.shape().end());
        label += " " + TensorDesc{s, FromProtoDType(b.dtype())}.ToString();
      }
      if (r.reserved_byte_size() > 0) label += " in a block of " + std::to_string(r.reserved_byte_size()) + " B";
      if (r.has_slice_of())
        label += " at +" + std::to_string(r.slice_of().byte_offset()) + " B of #" + std::to_string(r.slice_of().task_id());
      if (r.has_shared_memory())
        label += " shared +" + std::to_string(r.shared_memory().byte_offset()) + " B";
    }
    dot << "  t" << t.id() << " [label=" << quote(label) << "];\n";
    for (int i = 0; i < t.inputs_size(); ++i) {
      const plan::InputDesc& in = t.inputs(i);
      bool is_mutable = false;
      for (int m : t.mutable_inputs()) is_mutable |= m == i;
      dot << "  t" << in.producer_task_id() << " -> t" << t.id()
          << (in.control() ? " [style=dashed]" : is_mutable ? " [color=red]" : in.whole() ? " [style=bold, label=whole]" : "")
          << ";\n";
    }
  }
  dot << "}\n";
  return dot.str();
}

}  // namespace graph
}  // namespace actorflow
