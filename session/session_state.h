// The session's variable store and call ordering, shared by session.cc (jobs) and
// session_variables.cc (the variable API). Internal to the session library: not installed.
#ifndef ACTORFLOW_SESSION_SESSION_STATE_H_
#define ACTORFLOW_SESSION_SESSION_STATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "actors/device.h"
#include "actors/environment.h"
#include "session/job_cache.h"
#include "session/session.h"
#include "session/variable_parts.h"

namespace actorflow {

inline constexpr size_t kVariableAlignment = 64;

// A zero-filled buffer of `bytes` (at least one alignment unit), aligned to kVariableAlignment;
// null when out of memory.
std::shared_ptr<void> AllocateZeros(size_t bytes);

// This process's rank in its cluster (0 outside one).
int CurrentRank();

inline bool Intersects(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const std::string& name : a)
    if (b.count(name)) return true;
  return false;
}

// A variable the compiler placed on a GPU (graph/device_placement.h): its buffer there, made
// when a job first binds the variable on that device and filled from the host value. Jobs read
// and update it in place; GetVariable refreshes the host value from it and SetVariable writes
// through to it, so the host buffer is current whenever the session hands it out.
struct DeviceVariable {
  MemoryCase memory_case;
  std::shared_ptr<RegisterAllocator> allocator;
  void* data = nullptr;
  ~DeviceVariable() {
    if (data != nullptr) allocator->Free(memory_case, data);
  }
};

// What a rank holds of a variable that a job over several machines holds elsewhere or in parts
// (session/variable_parts.h): the layout over the machines and this rank's parts by index.
struct HeldParts {
  VariableLayout layout;
  std::map<int, std::shared_ptr<void>> local;
};

// `data` counts the store and the compiled jobs holding the variable (DeleteVariable relies on
// it); for a variable over outside memory it is an aliasing handle whose own count excludes
// the outside owners, and `external` is that memory.
struct StoredVariable {
  StoredVariable() = default;
  StoredVariable(TensorDesc desc_in, std::shared_ptr<void> data_in, std::shared_ptr<void> external_in = nullptr)
      : desc(std::move(desc_in)), data(std::move(data_in)), external(std::move(external_in)) {}
  TensorDesc desc;
  std::shared_ptr<void> data;
  std::shared_ptr<void> external;
  std::shared_ptr<DeviceVariable> device;  // set once a job binds it on a GPU
  bool bound_on_host = false;              // a job reads the host buffer itself
  // Set once a job over several machines holds the variable on other machines only, or split
  // with only some parts here: `data` is then null and this rank keeps only `parts->local`.
  std::shared_ptr<HeldParts> parts;
  // How the jobs over several machines hold it (machines empty: no such job bound it yet).
  VariableLayout layout;
  // Bumped whenever the value may change: each call of a job writing the variable, and
  // SetVariable / SetVariablePart. Kernels of jobs that only read it keep data derived from it
  // until it moves (KernelInit::input_versions). Over outside memory: the owner's counter (an
  // eager tensor's, which its writes bump), or null when the owner's writes are not counted.
  std::shared_ptr<std::atomic<int64_t>> version = std::make_shared<std::atomic<int64_t>>(0);
  void Changed() {
    if (version) version->fetch_add(1, std::memory_order_release);
  }
  bool HeldByJobs() const {
    if (data.use_count() > 1) return true;
    if (parts)
      for (const auto& [index, buffer] : parts->local)
        if (buffer.use_count() > 1) return true;
    return false;
  }
  std::string NotWholeHere(const std::string& name, int rank) const {
    std::string held;
    for (const auto& [index, buffer] : parts->local) held += (held.empty() ? "" : ", ") + std::to_string(index);
    return "variable '" + name + "' is held " + parts->layout.ToString() + " and this process (rank " +
           std::to_string(rank) + ") holds " +
           (held.empty() ? std::string("none of it") : "only part(s) [" + held + "]");
  }
  Status CopyFromDevice() {
    if (device == nullptr) return Status::Ok();
    return CopyBytes(data.get(), HostPlace(), device->data, MemoryPlace(device->memory_case, device->allocator.get()),
                     desc.byte_size());
  }
  Status CopyToDevice() {
    if (device == nullptr) return Status::Ok();
    return CopyBytes(device->data, MemoryPlace(device->memory_case, device->allocator.get()), data.get(), HostPlace(),
                     desc.byte_size());
  }
};

// Makes `stored` held as `layout` says on machine `rank` (a job over several machines binding
// it): whole where this machine holds a copy, else only this machine's parts, cut from the
// logical value (same initial values as one process), the whole buffer then released. A layout
// another job of this rank already holds the variable in otherwise is FailedPrecondition.
Status HoldAs(const std::string& name, StoredVariable& stored, const VariableLayout& layout, int rank,
              const std::string& job_name);

class SessionState {
 public:
  std::shared_ptr<Environment> environment = Environment::Global();
  mutable std::mutex mu;  // guards variables and jobs
  // Hashed, found by views too: binding a job looks each of its variables up (a tree of string
  // keys costs a dozen cold nodes per lookup in a session of thousands of variables). Unordered:
  // who lists them sorts (Session::VariableNames).
  struct VariableNameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::unordered_map<std::string, StoredVariable, VariableNameHash, std::equal_to<>> variables;
  std::vector<std::weak_ptr<CompiledJob>> jobs;
  JobCache job_cache;  // synchronized itself

  // Ordering of calls between jobs (see session.h). A caller takes a ticket and waits until
  // no conflicting job has iterations in flight, no variable it touches is being copied, and
  // no conflicting caller with an older ticket waits (arrival order, so no starvation).
  std::mutex order_mu;
  std::condition_variable order_cv;
  uint64_t next_ticket = 0;
  struct Waiter {
    const CompiledJob* job;                      // null: a variable copy
    const std::set<std::string>* reads;
    const std::set<std::string>* writes;
  };
  std::map<uint64_t, Waiter> waiters;          // by ticket
  std::set<const CompiledJob*> ordered_jobs;   // live jobs, under order_mu
  std::map<std::string, int> copying;          // variables being copied in or out

  std::vector<std::shared_ptr<CompiledJob>> LiveJobs() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::shared_ptr<CompiledJob>> live;
    std::vector<std::weak_ptr<CompiledJob>> kept;
    for (auto& weak : jobs)
      if (auto job = weak.lock()) {
        live.push_back(job);
        kept.push_back(weak);
      }
    jobs = std::move(kept);
    return live;
  }

  static bool Conflict(const std::set<std::string>& reads_a, const std::set<std::string>& writes_a,
                       const std::set<std::string>& reads_b, const std::set<std::string>& writes_b) {
    return Intersects(writes_a, writes_b) || Intersects(writes_a, reads_b) || Intersects(reads_a, writes_b);
  }

  // order_mu held. Whether the caller holding `ticket` (job `self`, or a copy when null) may start.
  bool MayStart(uint64_t ticket, const CompiledJob* self, const std::set<std::string>& reads,
                const std::set<std::string>& writes) {
    for (const CompiledJob* other : ordered_jobs)
      if (other != self && other->in_flight() > 0 && Conflict(reads, writes, other->reads(), other->writes()))
        return false;
    for (const auto& [name, count] : copying)
      if (count > 0 && (writes.count(name) || (self != nullptr && reads.count(name)))) return false;
    for (const auto& [older, waiter] : waiters) {
      if (older >= ticket) break;
      if (waiter.job != self && Conflict(reads, writes, *waiter.reads, *waiter.writes)) return false;
    }
    return true;
  }

  // Waits for the turn of a caller touching reads/writes; returns with order_mu held.
  void WaitTurn(std::unique_lock<std::mutex>& lock, const CompiledJob* self, const std::set<std::string>& reads,
                const std::set<std::string>& writes) {
    const uint64_t ticket = next_ticket++;
    if (MayStart(ticket, self, reads, writes)) return;
    waiters.emplace(ticket, Waiter{self, &reads, &writes});
    order_cv.wait(lock, [&] { return MayStart(ticket, self, reads, writes); });
    waiters.erase(ticket);
    order_cv.notify_all();  // callers behind this one may be free now
  }

  // Copies variable `name` in or out once no job conflicting with the copy has iterations in
  // flight; jobs touching it wait for the copy.
  template <typename Fn>
  Status WithVariable(const std::string& name, bool writing, Fn&& copy) {
    std::set<std::string> none, names{name};
    {
      std::unique_lock<std::mutex> lock(order_mu);
      WaitTurn(lock, nullptr, writing ? none : names, writing ? names : none);
      ++copying[name];
    }
    Status status;
    {
      std::lock_guard<std::mutex> lock(mu);
      status = copy();
    }
    std::lock_guard<std::mutex> lock(order_mu);
    if (--copying[name] == 0) copying.erase(name);
    order_cv.notify_all();
    return status;
  }
};

}  // namespace actorflow

#endif  // ACTORFLOW_SESSION_SESSION_STATE_H_
