// The session's variable API (Session::*Variable*): the store of session_state.h.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "session/cluster_membership.h"
#include "session/session_state.h"

namespace actorflow {

std::shared_ptr<void> AllocateZeros(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kVariableAlignment - 1) / kVariableAlignment * kVariableAlignment;
  void* p = std::aligned_alloc(kVariableAlignment, rounded);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

int CurrentRank() {
  auto membership = ClusterMembership::Get();
  return membership ? membership->rank() : 0;
}

Status HoldAs(const std::string& name, StoredVariable& stored, const VariableLayout& layout, int rank,
              const std::string& job_name) {
  const std::string what = "job '" + job_name + "': variable '" + name + "'";
  if (!stored.layout.machines.empty()) {
    if (stored.layout == layout) return Status::Ok();
    return FailedPrecondition(what + " is held " + layout.ToString() + " by this job but " +
                              stored.layout.ToString() + " by a job compiled before; give both the same "
                              "placement and distribute");
  }
  if (layout.HeldWholeOn(rank)) {
    stored.layout = layout;
    return Status::Ok();
  }
  if (stored.external || stored.device || stored.HeldByJobs())
    return FailedPrecondition(what + " is held whole on this machine (rank " + std::to_string(rank) +
                              ") by a job compiled before, and this job holds it " + layout.ToString() +
                              "; give both the same placement and distribute");
  auto parts = std::make_shared<HeldParts>();
  parts->layout = layout;
  auto cut = CutParts(stored.desc, layout, rank, stored.data.get(), kVariableAlignment);
  if (!cut.ok()) return cut.status().WithContext(what);
  parts->local = std::move(cut).value();
  stored.parts = std::move(parts);
  stored.layout = layout;
  stored.data.reset();
  return Status::Ok();
}

bool Session::HasVariable(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->variables.count(name) > 0;
}

Status Session::CreateVariable(const std::string& name, const TensorDesc& desc, const void* initial) {
  if (name.empty()) return InvalidArgument("variable name is empty");
  for (int64_t d : desc.shape)
    if (d <= 0) return InvalidArgument("variable '" + name + "': shape " + ShapeToString(desc.shape) + " has a dimension <= 0");
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it != state_->variables.end())
    return InvalidArgument("variable '" + name + "' already exists as " + it->second.desc.ToString());
  StoredVariable v(desc, AllocateZeros(desc.byte_size()));
  if (!v.data) return Internal("out of memory for variable '" + name + "'");
  if (initial != nullptr) std::memcpy(v.data.get(), initial, desc.byte_size());
  state_->variables.emplace(name, std::move(v));
  return Status::Ok();
}

StatusOr<std::string> Session::CreateVariableOver(const std::string& name, const TensorDesc& desc,
                                                  std::shared_ptr<void> storage,
                                                  std::shared_ptr<std::atomic<int64_t>> version) {
  if (name.empty()) return InvalidArgument("variable name is empty");
  AF_RETURN_IF_ERROR(ValidateTensorDesc(desc, "variable '" + name + "'"));
  for (int64_t d : desc.shape)
    if (d <= 0) return InvalidArgument("variable '" + name + "': shape " + ShapeToString(desc.shape) + " has a dimension <= 0");
  if (!storage) return InvalidArgument("variable '" + name + "': no storage");
  if (reinterpret_cast<uintptr_t>(storage.get()) % kVariableAlignment != 0)
    return InvalidArgument("variable '" + name + "': the storage is not " + std::to_string(kVariableAlignment) +
                           "-byte aligned");
  std::lock_guard<std::mutex> lock(state_->mu);
  // The first name in order that holds this storage (the variables are unordered).
  const std::string* holding = nullptr;
  for (const auto& [existing, v] : state_->variables)
    if (v.external == storage && v.desc == desc && (holding == nullptr || existing < *holding)) holding = &existing;
  if (holding != nullptr) return *holding;
  auto it = state_->variables.find(name);
  if (it != state_->variables.end())
    return InvalidArgument("variable '" + name + "' already exists as " + it->second.desc.ToString() +
                           (it->second.external ? " over other memory" : ""));
  // The handle owns a reference to the storage; jobs copy the handle, outside owners do not.
  auto holder = std::make_shared<std::shared_ptr<void>>(storage);
  std::shared_ptr<void> handle(holder, storage.get());
  StoredVariable v(desc, std::move(handle), std::move(storage));
  v.version = std::move(version);  // null: its owners write it without telling the session
  state_->variables.emplace(name, std::move(v));
  return name;
}

Status Session::DeleteVariable(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
  // Compiled jobs keep the buffers they use alive; the store being the only owner means no job
  // reads or writes this variable.
  if (it->second.HeldByJobs())
    return FailedPrecondition("variable '" + name + "' is used by a compiled job and cannot be deleted");
  state_->variables.erase(it);
  return Status::Ok();
}

StatusOr<TensorDesc> Session::VariableDesc(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
  return it->second.desc;
}

Status Session::GetVariable(const std::string& name, void* out, size_t bytes) {
  return state_->WithVariable(name, /*writing=*/false, [&]() -> Status {
    auto it = state_->variables.find(name);
    if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
    if (bytes != it->second.desc.byte_size()) return InvalidArgument("variable '" + name + "': wrong buffer size");
    if (it->second.parts)
      return FailedPrecondition(it->second.NotWholeHere(name, CurrentRank()) +
                                "; read its parts (Session::GetVariablePart) or save a checkpoint, which every "
                                "machine writes its parts of");
    AF_RETURN_IF_ERROR(it->second.CopyFromDevice().WithContext("variable '" + name + "'"));
    std::memcpy(out, it->second.data.get(), bytes);
    return Status::Ok();
  });
}

Status Session::SetVariable(const std::string& name, const TensorDesc& desc, const void* data) {
  return state_->WithVariable(name, /*writing=*/true, [&]() -> Status {
    auto it = state_->variables.find(name);
    if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
    if (desc != it->second.desc)
      return InvalidArgument("variable '" + name + "' is " + it->second.desc.ToString() + ", got " + desc.ToString());
    it->second.Changed();
    if (it->second.parts) {  // the logical value: this rank keeps its parts of it
      for (auto& [index, buffer] : it->second.parts->local)
        CopyPart(desc, it->second.parts->layout, static_cast<size_t>(index), const_cast<void*>(data), buffer.get(),
                 /*into_part=*/true);
      return Status::Ok();
    }
    std::memcpy(it->second.data.get(), data, desc.byte_size());
    return it->second.CopyToDevice().WithContext("variable '" + name + "'");
  });
}

StatusOr<VariableLayout> Session::VariableLayoutOf(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
  return it->second.layout;
}

Status Session::GetVariablePart(const std::string& name, int index, void* out, size_t bytes) {
  return state_->WithVariable(name, /*writing=*/false, [&]() -> Status {
    auto it = state_->variables.find(name);
    if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
    if (!it->second.parts || !it->second.parts->local.count(index))
      return NotFound("variable '" + name + "': this process holds no part " + std::to_string(index) +
                      (it->second.parts ? " (" + it->second.NotWholeHere(name, CurrentRank()) + ")" : ""));
    if (bytes != it->second.parts->layout.parts.at(static_cast<size_t>(index)).byte_size())
      return InvalidArgument("variable '" + name + "' part " + std::to_string(index) + ": wrong buffer size");
    std::memcpy(out, it->second.parts->local.at(index).get(), bytes);
    return Status::Ok();
  });
}

Status Session::SetVariablePart(const std::string& name, int index, const TensorDesc& desc, const void* data) {
  return state_->WithVariable(name, /*writing=*/true, [&]() -> Status {
    auto it = state_->variables.find(name);
    if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
    if (!it->second.parts || !it->second.parts->local.count(index))
      return NotFound("variable '" + name + "': this process holds no part " + std::to_string(index) +
                      (it->second.parts ? " (" + it->second.NotWholeHere(name, CurrentRank()) + ")" : ""));
    const TensorDesc& part = it->second.parts->layout.parts.at(static_cast<size_t>(index));
    if (desc != part)
      return InvalidArgument("variable '" + name + "' part " + std::to_string(index) + " is " + part.ToString() +
                             ", got " + desc.ToString());
    it->second.Changed();
    std::memcpy(it->second.parts->local.at(index).get(), data, desc.byte_size());
    return Status::Ok();
  });
}

std::vector<std::string> Session::VariableNames() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<std::string> names;
  for (const auto& [name, v] : state_->variables) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace actorflow
