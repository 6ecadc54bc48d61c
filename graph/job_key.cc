#include "graph/job_key.h"

#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>
#include <unordered_map>

namespace actorflow {
namespace graph {

namespace {

// Doubles by their bits: the key must tell 0.1 from 0.1000000001.
std::string Exact(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return std::to_string(bits);
}

struct KeyToken {
  char kind;
  size_t number;
  std::string_view name, rest;
};

// The key's text, appended to one string (what std::ostringstream wrote, without a stream's
// per-insertion cost: the key is written for every job, a hit's included).
class KeyWriter {
 public:
  KeyWriter() { text_.reserve(1 << 16); }
  explicit KeyWriter(std::string text) : text_(std::move(text)) {}
  KeyWriter& operator<<(const std::string& s) { text_ += s; return *this; }
  KeyWriter& operator<<(const char* s) { text_ += s; return *this; }
  KeyWriter& operator<<(char c) { text_ += c; return *this; }
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
  KeyWriter& operator<<(T value) {
    if constexpr (std::is_same_v<T, bool>) {
      text_ += value ? '1' : '0';  // as a stream writes a bool
    } else {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
      text_.append(digits, end);
    }
    return *this;
  }
  // "#<position>" (a traced node), "v<position>" (a variable) or "?<size>\"<name>" (a name the
  // trace does not define), then `rest` (a ref's "/output").
  KeyWriter& operator<<(const KeyToken& token) {
    text_ += token.kind;
    *this << token.number;
    if (token.kind == '?') (text_ += '"') += token.name;
    text_ += token.rest;
    return *this;
  }
  std::string str() { return std::move(text_); }

 private:
  std::string text_;
};

// "float32(4,8,)": what TensorDesc::ToString says, without its stream (one per node output).
void WriteDesc(KeyWriter& out, const TensorDesc& desc) {
  out << DTypeName(desc.dtype) << '(';
  for (int64_t d : desc.shape) out << d << ',';
  out << ')';
}

// "cpu 0:0-1", "cpu (all devices)": Placement::ToString, written in place.
void WritePlacement(KeyWriter& out, const graph::Placement& placement) {
  out << placement.device_type;
  if (placement.machine_device_ids.empty()) {
    out << " (all devices)";
    return;
  }
  for (size_t i = 0; i < placement.machine_device_ids.size(); ++i) out << (i ? ',' : ' ') << placement.machine_device_ids[i];
}

void WriteAttr(KeyWriter& out, const AttrValue& value) {
  out << value.index() << ':';
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          out << Exact(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out << v.size() << '"' << v;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out << '[';
          for (int64_t x : v) out << x << ',';
          out << ']';
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          out << '[';
          for (double x : v) out << Exact(x) << ',';
          out << ']';
        } else {
          out << v;
        }
      },
      value);
}


// How the key names what a node refers to: a traced node by its position (through the graph's
// own name index), a variable by the position of its first node, anything else by its name.
class KeyNames {
 public:
  explicit KeyNames(const Graph& traced) : traced_(traced) {}
  KeyToken Node(std::string_view name, std::string_view rest = {}) const {
    const graph::Node* n = traced_.FindNode(name);
    if (n != nullptr && n->name == name) return KeyToken{'#', static_cast<size_t>(n - traced_.nodes().data()), {}, rest};
    return KeyToken{'?', name.size(), name, rest};  // a name the trace does not define stays itself
  }
  KeyToken Ref(const std::string& r) const {
    const size_t slash = r.rfind('/');
    if (slash == std::string::npos) return Node(r);
    return Node(std::string_view(r).substr(0, slash), std::string_view(r).substr(slash));
  }
  KeyToken Variable(const std::string& name) const {
    const graph::Node* n = traced_.FindVariable(name);
    return n == nullptr ? KeyToken{'?', name.size(), name, {}}
                        : KeyToken{'v', static_cast<size_t>(n - traced_.nodes().data()), {}, {}};
  }

 private:
  const Graph& traced_;
};

void WriteNode(KeyWriter& out, const KeyNames& names, const Node& n) {
  out << static_cast<int>(n.kind) << ' ' << n.type << " (";
  for (const auto& in : n.inputs) out << names.Ref(in) << ' ';
  out << ") control (";
  for (const auto& c : n.control_inputs) out << names.Node(c) << ' ';
  out << ") attrs {";
  for (const auto& [name, value] : n.attrs.values()) {
    out << name << '=';
    WriteAttr(out, value);
    out << ' ';
  }
  out << "} outputs (";
  for (size_t k = 0; k < n.output_names.size(); ++k) {
    out << n.output_names[k] << ':';
    if (k < n.output_descs.size()) {
      WriteDesc(out, n.output_descs[k]);
    } else {
      out << '?';
    }
    out << ' ';
  }
  out << ") mutable (";
  for (int m : n.mutable_inputs) out << m << ' ';
  out << ") on ";
  WritePlacement(out, n.placement);
  out << " hints (";
  for (const auto& hint : n.output_sbp_hints) out << (hint ? hint->ToString() : "-") << ' ';
  out << ')';
  if (n.kind == graph::NodeKind::kVariable)
    out << " variable " << names.Variable(n.variable_name) << (n.trainable ? " trainable" : "")
        << (n.zeros_if_missing ? " zeros" : "");
  out << '\n';
}

}  // namespace

void AppendNodeKey(const Graph& traced, const Node& node, std::string* key) {
  KeyWriter out(std::move(*key));
  WriteNode(out, KeyNames(traced), node);
  *key = out.str();
}

std::string JobKey(const Graph& traced, int register_num, const std::string* node_part) {
  const KeyNames names(traced);
  KeyWriter out;
  out << "job " << traced.job_type() << " devices " << traced.device_num() << " gpus " << traced.gpu_device_num()
      << " machines " << traced.machine_num()
      << " registers " << register_num << '\n';
  if (node_part != nullptr) {
    out << *node_part;
  } else {
    for (const Node& n : traced.nodes()) WriteNode(out, names, n);
  }
  out << "feeds";
  for (const auto& f : traced.feeds()) out << ' ' << names.Node(f);
  out << "\noutputs";
  for (const auto& o : traced.outputs()) out << ' ' << names.Ref(o);
  out << "\nlosses";
  for (const auto& l : traced.losses()) out << ' ' << names.Ref(l);
  out << "\nwatches";
  for (const auto& w : traced.watches()) out << ' ' << names.Ref(w.ref) << (w.diff ? ":diff" : "");
  out << '\n';
  if (const graph::OptimizerSpec* o = traced.optimizer()) {
    out << "optimizer " << o->type << ' ' << Exact(o->momentum) << ' ' << Exact(o->beta1) << ' ' << Exact(o->beta2)
        << ' ' << Exact(o->epsilon) << ' ' << Exact(o->decay_rate) << ' ' << Exact(o->weight_decay) << ' '
        << Exact(o->clip_norm) << (o->exact_bias_correction ? " exact" : "") << " (";
    for (const auto& v : o->variables) out << names.Variable(v) << ' ';
    out << ")\n";
  }
  return out.str();
}

}  // namespace graph
}  // namespace actorflow
