// The cluster's control-plane actors (comm/cluster.h): the coordinator on rank 0, a member per
// rank, their wire protocol, and the state the API and the rank's member share. Internal to
// comm/: cluster_actors.cc implements the actors, cluster.cc (the Cluster API) spawns them.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace actorflow {

// Failure shared by the rank's member actor (which learns of it) and the API (which reports it).
class ClusterState {
 public:
  void Fail(const std::string& message) {
    std::vector<std::function<void(const std::string&)>> listeners;
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.empty()) return;
      failure_ = message;
      failure = failure_;
      listeners = listeners_;  // called outside the lock: a listener may ask for failure()
    }
    for (auto& listener : listeners) listener(failure);
  }
  std::string failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  // This rank's calls of each multi-machine job so far (Cluster::NoteCall), and the last one.
  int64_t NoteCall(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(job);
    if (it == calls_.end()) it = calls_.emplace(job, 0).first;
    last_job_ = job;
    return ++it->second;
  }
  // (calls of `job`, the last job called, its calls).
  std::tuple<int64_t, std::string, int64_t> Calls(const std::string& job) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(job);
    auto last = calls_.find(last_job_);
    return {it == calls_.end() ? 0 : it->second, last_job_, last == calls_.end() ? 0 : last->second};
  }
  void AddListener(std::function<void(const std::string&)> listener) {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.empty()) {
        listeners_.push_back(std::move(listener));
        return;
      }
      failure = failure_;
    }
    listener(failure);
  }

 private:
  mutable std::mutex mu_;
  std::string failure_;
  std::vector<std::function<void(const std::string&)>> listeners_;
  std::map<std::string, int64_t> calls_;
  std::string last_job_;
};

namespace cluster_detail {

// Wire protocol (every message carries only CAF's built-in types, so nothing is announced):
//   member -> coordinator  (join, rank, world_size, version, digest, op_names, op_digests, member,
//                           proof) -> string
//   member -> coordinator  (barrier, rank, epoch) -> string
//   member -> coordinator  (leave, rank) -> string
//   rank 0 -> coordinator  (wait_left) -> string, once every other rank has left
//   coordinator -> member  (lost, message)
//   rank 0 -> coordinator  (drain) -> string, once every remote member answered a ping
//   coordinator -> member  (ping) -> string: everything sent to it earlier has arrived
//   member -> coordinator  (plancheck, rank, epoch, digest, op_names, op_digests) -> string, once
//                          every rank sent that epoch: a job's plan compared across ranks
//   member -> coordinator  (gather, rank, epoch, actor) -> (string, actors by rank), once every
//                          rank sent that epoch; (texts, rank, epoch, text) -> (string, texts)
//                          the same for texts
//   member -> coordinator  (callcheck, rank, job, calls, deadline ms) -> string: empty when every
//                          rank made `calls` calls of `job`, else the failure naming those that
//                          did not (the coordinator then fails the cluster with it)
//   coordinator -> member  (callstate, job) -> (calls of job, last job called, its calls)
//   member -> coordinator  (gathertime, rank, epoch, texts, timeout ms) -> string: the rank's
//                          all-gather `epoch` (of texts, else of actors) timed out; the
//                          coordinator fails the cluster naming the ranks that did not make it
// A reply string is empty for success and the error's message otherwise.
using join_atom = caf::atom_constant<caf::atom("join")>;
using barrier_atom = caf::atom_constant<caf::atom("barrier")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using wait_left_atom = caf::atom_constant<caf::atom("waitleft")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using api_join_atom = caf::atom_constant<caf::atom("apijoin")>;
using api_barrier_atom = caf::atom_constant<caf::atom("apibarrier")>;
using api_leave_atom = caf::atom_constant<caf::atom("apileave")>;
using plan_check_atom = caf::atom_constant<caf::atom("plancheck")>;
using gather_atom = caf::atom_constant<caf::atom("gather")>;
using api_plan_atom = caf::atom_constant<caf::atom("apiplan")>;
using api_gather_atom = caf::atom_constant<caf::atom("apigather")>;
using texts_atom = caf::atom_constant<caf::atom("texts")>;
using api_texts_atom = caf::atom_constant<caf::atom("apitexts")>;
using call_check_atom = caf::atom_constant<caf::atom("callcheck")>;
using call_state_atom = caf::atom_constant<caf::atom("callstate")>;
using api_call_check_atom = caf::atom_constant<caf::atom("apicalls")>;
using gather_timeout_atom = caf::atom_constant<caf::atom("gathertime")>;
using api_gather_timeout_atom = caf::atom_constant<caf::atom("apigathert")>;

// 16 lower-case hex digits: how op digests travel and how messages name them.
std::string Hex(uint64_t value);
// A duration as messages give it ("250 ms").
std::string Millis(std::chrono::milliseconds duration);

struct JoinedRank {
  caf::actor member;
  std::string version;
  uint64_t digest = 0;
  std::vector<std::string> op_names;
  std::vector<std::string> op_digests;
};

// Answers all-gather requests of values of type T, answered with (error, values by rank),
// with `failure`.
template <typename T>
void FailGathers(std::vector<caf::response_promise>& pending, const std::string& failure) {
  for (auto& promise : pending)
    if (promise.pending()) promise.deliver(failure, std::vector<T>());
  pending.clear();
}

// The all-gathers of values of type T on the coordinator, by epoch: each rank's value and the
// requests waiting for the others'.
template <typename T>
struct GatherRounds {
  std::map<uint64_t, std::map<int, T>> values;  // by epoch, by rank
  std::map<uint64_t, std::vector<caf::response_promise>> promises;
  void Fail(const std::string& failure) {
    for (auto& [epoch, waiting] : promises) FailGathers<T>(waiting, failure);
    promises.clear();
  }
};

struct CoordinatorState {
  int world_size = 1;
  std::chrono::milliseconds rendezvous_timeout{0};
  std::map<int, JoinedRank> joined;
  std::vector<caf::response_promise> join_promises;
  std::map<uint64_t, std::vector<caf::response_promise>> barriers;  // by epoch
  std::set<int> left;
  std::vector<caf::response_promise> left_waiters;
  std::set<int> lost;
  std::set<int> drain_pending;
  std::vector<caf::response_promise> drain_promises;
  bool rendezvous_done = false;
  std::map<uint64_t, std::map<int, JoinedRank>> plan_checks;  // by epoch
  std::map<uint64_t, std::vector<caf::response_promise>> plan_check_promises;
  GatherRounds<caf::actor> actor_gathers;   // Cluster::AllGather
  GatherRounds<std::string> text_gathers;   // Cluster::AllGatherText
  std::string failure;
  static inline const char* name = "actorflow.cluster.coordinator";
};

// One per process: forwards the API's calls to the coordinator and turns the loss of a peer
// (told by the coordinator, or the coordinator's own loss) into errors for every pending call.
struct MemberState {
  caf::actor coordinator;
  int rank = 0;
  std::shared_ptr<ClusterState> shared;
  std::vector<caf::response_promise> pending;
  std::vector<caf::response_promise> gather_pending;  // answered with (error, actors)
  std::vector<caf::response_promise> texts_pending;   // answered with (error, texts)
  bool leaving = false;
  static inline const char* name = "actorflow.cluster.member";
};

// Rank 0 spawns and publishes the coordinator, every rank spawns its member (Cluster::Create).
caf::behavior Coordinator(caf::stateful_actor<CoordinatorState>* self, int world_size,
                          std::chrono::milliseconds rendezvous_timeout, std::string secret, std::string job_id);
caf::behavior Member(caf::stateful_actor<MemberState>* self, caf::actor coordinator, int rank,
                     std::shared_ptr<ClusterState> shared);

}  // namespace cluster_detail
}  // namespace actorflow
