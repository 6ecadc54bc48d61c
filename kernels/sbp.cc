#include "kernels/sbp.h"

#include <cctype>

namespace actorflow {
namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> parts;
  if (s.empty()) return parts;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    parts.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

StatusOr<Sbp> ParseSbp(const std::string& token, const std::string& text) {
  if (token == "B") return Sbp::Broadcast();
  if (token == "P") return Sbp::PartialSum();
  if (token.size() > 3 && token.compare(0, 2, "S(") == 0 && token.back() == ')') {
    std::string axis = token.substr(2, token.size() - 3);
    bool digits = !axis.empty();
    for (char c : axis) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    return Sbp::Split(digits ? std::stoll(axis) : Sbp::kEachAxis);
  }
  return InvalidArgument("SBP signature '" + text + "': expected S(axis), B or P, got '" + token + "'");
}

}  // namespace

std::string Sbp::ToString() const {
  if (kind == SbpKind::kBroadcast) return "B";
  if (kind == SbpKind::kPartialSum) return "P";
  return "S(" + (axis == kEachAxis ? std::string("i") : std::to_string(axis)) + ")";
}

std::string SbpSignature::ToString() const {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + inputs[i].ToString();
  if (repeat_last_input) s += ",...";
  s += "->";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? "," : "") + outputs[i].ToString();
  if (!condition.empty()) s += " " + condition;
  return s;
}

StatusOr<SbpSignature> ParseSbpSignature(const std::string& text) {
  const size_t space = text.find(' ');
  const std::string layout = text.substr(0, space);
  const size_t arrow = layout.find("->");
  if (arrow == std::string::npos) return InvalidArgument("SBP signature '" + text + "': expected inputs->outputs");
  SbpSignature signature;
  if (space != std::string::npos) signature.condition = text.substr(space + 1);
  std::vector<std::string> inputs = SplitList(layout.substr(0, arrow));
  if (!inputs.empty() && inputs.back() == "...") {
    inputs.pop_back();
    if (inputs.empty()) return InvalidArgument("SBP signature '" + text + "': '...' repeats the input before it");
    signature.repeat_last_input = true;
  }
  for (const std::string& token : inputs) {
    AF_ASSIGN_OR_RETURN(Sbp sbp, ParseSbp(token, text));
    signature.inputs.push_back(sbp);
  }
  for (const std::string& token : SplitList(layout.substr(arrow + 2))) {
    AF_ASSIGN_OR_RETURN(Sbp sbp, ParseSbp(token, text));
    signature.outputs.push_back(sbp);
  }
  return signature;
}

Status ValidateSbpSignature(const SbpSignature& signature, size_t num_inputs, bool variadic_inputs, size_t num_outputs) {
  const std::string what = "SBP signature '" + signature.ToString() + "'";
  const size_t listed = signature.inputs.size();
  const bool inputs_fit = signature.repeat_last_input ? listed <= num_inputs || variadic_inputs
                                                      : listed == num_inputs || (variadic_inputs && listed >= 1);
  if (!inputs_fit)
    return InvalidArgument(what + ": has " + std::to_string(listed) + " inputs, the op " + std::to_string(num_inputs) +
                           (variadic_inputs ? " or more" : ""));
  if (signature.outputs.size() != num_outputs)
    return InvalidArgument(what + ": has " + std::to_string(signature.outputs.size()) + " outputs, the op " +
                           std::to_string(num_outputs));
  for (const auto* list : {&signature.inputs, &signature.outputs})
    for (const Sbp& sbp : *list)
      if (sbp.kind == SbpKind::kSplit && sbp.axis < 0 && sbp.axis != Sbp::kEachAxis)
        return InvalidArgument(what + ": negative split axis " + std::to_string(sbp.axis));
  return Status::Ok();
}

std::vector<int64_t> BalancedSplit(int64_t size, int64_t parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts), size / parts);
  for (int64_t i = 0; i < size % parts; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

StatusOr<Shape> PhysicalShape(const Shape& logical, const Sbp& sbp, int64_t parts, int64_t index) {
  if (parts <= 0) return InvalidArgument("physical shape: parts must be positive, got " + std::to_string(parts));
  if (index < 0 || index >= parts)
    return InvalidArgument("physical shape: device index " + std::to_string(index) + " outside [0, " + std::to_string(parts) + ")");
  if (sbp.kind != SbpKind::kSplit) return logical;
  if (sbp.axis < 0 || sbp.axis >= static_cast<int64_t>(logical.size()))
    return InvalidArgument("physical shape: " + sbp.ToString() + " of a rank-" + std::to_string(logical.size()) +
                           " tensor (axis must be in [0, " + std::to_string(logical.size()) + "))");
  Shape physical = logical;
  physical[static_cast<size_t>(sbp.axis)] = BalancedSplit(logical[static_cast<size_t>(sbp.axis)], parts)[static_cast<size_t>(index)];
  return physical;
}

}  // namespace actorflow
