// The coordinator and member actors (comm/cluster_actors.h): rendezvous, barriers, plan checks,
// all-gathers, call censuses and the spreading of a failure to every rank.
#include "comm/cluster_actors.h"

#include "comm/cluster.h"

#include <caf/all.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace actorflow {
namespace cluster_detail {

std::string Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string Millis(std::chrono::milliseconds duration) { return std::to_string(duration.count()) + " ms"; }

namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return "[" + text + "]";
}

void DeliverAll(std::vector<caf::response_promise>& promises, const std::string& reply) {
  for (auto& promise : promises)
    if (promise.pending()) promise.deliver(reply);
  promises.clear();
}

// Fails everything pending and tells every other rank; the first failure is the one reported.
void FailCluster(caf::stateful_actor<CoordinatorState>* self, const std::string& message, int lost_rank) {
  auto& state = self->state;
  if (state.failure.empty()) state.failure = message;
  DeliverAll(state.join_promises, state.failure);
  for (auto& [epoch, promises] : state.barriers) DeliverAll(promises, state.failure);
  state.barriers.clear();
  DeliverAll(state.left_waiters, state.failure);
  for (auto& [epoch, promises] : state.plan_check_promises) DeliverAll(promises, state.failure);
  state.plan_check_promises.clear();
  state.actor_gathers.Fail(state.failure);
  state.text_gathers.Fail(state.failure);
  for (auto& [rank, joined] : state.joined)
    if (rank != lost_rank && !state.left.count(rank)) self->send(joined.member, lost_atom::value, state.failure);
}

// Rank `rank`'s value of all-gather `epoch`; once every rank's came, every request of the
// epoch is answered with them by rank.
template <typename T>
caf::result<std::string, std::vector<T>> AddToGather(caf::stateful_actor<CoordinatorState>* self,
                                                     GatherRounds<T>& rounds, int rank, uint64_t epoch,
                                                     const T& value) {
  if (!self->state.failure.empty())
    return caf::result<std::string, std::vector<T>>(self->state.failure, std::vector<T>());
  auto& values = rounds.values[epoch];
  values[rank] = value;
  auto& promises = rounds.promises[epoch];
  promises.push_back(self->make_response_promise());
  if (static_cast<int>(values.size()) == self->state.world_size) {
    std::vector<T> by_rank;
    for (auto& [r, v] : values) by_rank.push_back(v);
    for (auto& promise : promises)
      if (promise.pending()) promise.deliver(std::string(), by_rank);
    rounds.values.erase(epoch);
    rounds.promises.erase(epoch);
  }
  return caf::delegated<std::string, std::vector<T>>();
}

void DrainDone(caf::stateful_actor<CoordinatorState>* self, int rank) {
  self->state.drain_pending.erase(rank);
  if (self->state.drain_pending.empty()) DeliverAll(self->state.drain_promises, "");
}

// Every rank against rank 0: version first, then the plan, naming the first differing op.
std::string CheckConsistency(const std::map<int, JoinedRank>& ranks, const std::string& what = "cluster rendezvous") {
  const JoinedRank& reference = ranks.at(0);
  std::string problems;
  for (const auto& [rank, joined] : ranks) {
    if (rank == 0) continue;
    std::string problem;
    if (joined.version != reference.version) {
      problem = "rank " + std::to_string(rank) + " runs version '" + joined.version + "', rank 0 runs '" +
                reference.version + "'";
    } else if (joined.digest != reference.digest) {
      problem = "the plan of rank " + std::to_string(rank) + " differs from rank 0's (digest " + Hex(joined.digest) +
                " vs " + Hex(reference.digest) + ")";
      size_t common = std::min(joined.op_names.size(), reference.op_names.size());
      size_t index = 0;
      while (index < common && joined.op_names[index] == reference.op_names[index] &&
             joined.op_digests[index] == reference.op_digests[index])
        ++index;
      if (index < common) {
        problem += ": first differing op #" + std::to_string(index) + " '" + reference.op_names[index] + "' on rank 0";
        if (joined.op_names[index] != reference.op_names[index])
          problem += ", '" + joined.op_names[index] + "' on rank " + std::to_string(rank);
        else
          problem += " (its attributes or inputs differ)";
      } else if (joined.op_names.size() != reference.op_names.size()) {
        problem += ": rank 0 has " + std::to_string(reference.op_names.size()) + " ops, rank " + std::to_string(rank) +
                   " has " + std::to_string(joined.op_names.size());
      }
    }
    if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + problem;
  }
  return problems.empty() ? "" : what + ": " + problems;
}

// The answers to one deadline check (Cluster::CheckCalls): every rank's calls of the job.
struct CallCensus {
  caf::response_promise promise;
  std::string job;
  int64_t calls = 0;  // the call that did not complete: every rank must have made this many
  int from_rank = 0;
  int64_t deadline_ms = 0;
  size_t waiting = 0;  // answers still due (plus one while the requests are sent)
  std::map<int, std::tuple<int64_t, std::string, int64_t>> answers;  // rank -> (calls, last job, its calls)
};

// Once every rank answered (or failed to): Ok when all made the call (the call is slow, not
// unpaired), else the failure naming who did not, sent to every rank.
void CountCalls(caf::stateful_actor<CoordinatorState>* self, const std::shared_ptr<CallCensus>& census) {
  if (--census->waiting > 0) return;
  std::vector<int> missing;
  std::string details;
  for (int rank = 0; rank < self->state.world_size; ++rank) {
    auto it = census->answers.find(rank);
    if (it != census->answers.end() && std::get<0>(it->second) >= census->calls) continue;
    missing.push_back(rank);
    std::string detail = "rank " + std::to_string(rank);
    if (it == census->answers.end()) {
      detail += self->state.left.count(rank) ? " has left the cluster" : " did not answer";
    } else {
      const auto& [made, last_job, last_calls] = it->second;
      detail += " made " + std::to_string(made) + " call(s) of it";
      if (!last_job.empty() && last_job != census->job)
        detail += ", its last call was #" + std::to_string(last_calls) + " of job '" + last_job + "'";
    }
    details += (details.empty() ? "" : "; ") + detail;
  }
  if (missing.empty()) {
    if (census->promise.pending()) census->promise.deliver(std::string());
    return;
  }
  const std::string message = "job '" + census->job + "': call #" + std::to_string(census->calls) + " of rank " +
                              std::to_string(census->from_rank) + " waited past the call deadline of " +
                              std::to_string(census->deadline_ms) + " ms for rank(s) " + RankList(missing) +
                              ", which did not make it (" + details +
                              "). Calls pair up by number across ranks, so a missed call stops the cluster's jobs on "
                              "every rank (ACTORFLOW_CALL_DEADLINE_MS sets the deadline)";
  // Every other rank is told first, and rank 0 (this process) only once each answered a ping
  // sent after it (messages on one connection arrive in order) or 2 s passed: the failed call
  // may end rank 0's program at once, and the others must learn the cause, not rank 0's loss.
  FailCluster(self, message, 0);
  auto told = std::make_shared<size_t>(1);
  auto finish = [self, census, told] {
    if (--*told > 0) return;
    const std::string failure = self->state.failure;
    auto zero = self->state.joined.find(0);
    if (zero != self->state.joined.end()) self->send(zero->second.member, lost_atom::value, failure);
    if (census->promise.pending()) census->promise.deliver(failure);
  };
  for (auto& [rank, joined] : self->state.joined) {
    if (rank == 0 || self->state.left.count(rank) || self->state.lost.count(rank)) continue;
    ++*told;
    self->request(joined.member, std::chrono::seconds(2), ping_atom::value)
        .then([finish](const std::string&) { finish(); }, [finish](caf::error&) { finish(); });
  }
  finish();
}

}  // namespace

caf::behavior Coordinator(caf::stateful_actor<CoordinatorState>* self, int world_size,
                          std::chrono::milliseconds rendezvous_timeout, std::string secret, std::string job_id) {
  self->state.world_size = world_size;
  self->state.rendezvous_timeout = rendezvous_timeout;
  self->delayed_send(self, rendezvous_timeout, deadline_atom::value);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& state = self->state;
    for (auto& [rank, joined] : state.joined) {
      if (joined.member.address() != down.source) continue;
      state.lost.insert(rank);
      DrainDone(self, rank);
      if (state.left.count(rank)) return;
      FailCluster(self, "lost rank " + std::to_string(rank) + " (" + self->system().render(down.reason) + ")", rank);
      return;
    }
  });
  return {
      [self, secret, job_id](join_atom, int32_t rank, int32_t world, const std::string& version, uint64_t digest,
             const std::vector<std::string>& op_names, const std::vector<std::string>& op_digests,
             const caf::actor& member, const std::string& proof) -> caf::result<std::string> {
        auto& state = self->state;
        if (!secret.empty() && (rank < 0 || proof != JoinProof(secret, job_id, rank))) {
          // Not counted as joined: the right rank may still come.
          std::string why = proof.empty() ? "presented no cluster secret" : "presented the wrong cluster secret";
          std::fprintf(stderr, "actorflow: cluster rank 0 refused a peer claiming rank %d: it %s\n", rank, why.c_str());
          std::fflush(stderr);
          return "cluster rendezvous: refused by rank 0: this process (rank " + std::to_string(rank) + ") " + why +
                 " (is it part of another launch? every rank needs the launcher's ACTORFLOW_CLUSTER_SECRET)";
        }
        if (!state.failure.empty()) return state.failure;
        if (world != state.world_size)
          return "cluster rendezvous: rank " + std::to_string(rank) + " was started with world size " +
                 std::to_string(world) + ", rank 0 with " + std::to_string(state.world_size);
        if (rank < 0 || rank >= state.world_size)
          return "cluster rendezvous: rank " + std::to_string(rank) + " is outside [0, " +
                 std::to_string(state.world_size) + ")";
        if (state.joined.count(rank))
          return "cluster rendezvous: rank " + std::to_string(rank) + " joined twice (two processes started with it?)";
        if (op_names.size() != op_digests.size()) return std::string("cluster rendezvous: malformed plan identity");
        self->monitor(member);
        state.joined[rank] = JoinedRank{member, version, digest, op_names, op_digests};
        state.join_promises.push_back(self->make_response_promise());
        if (static_cast<int>(state.joined.size()) == state.world_size) {
          state.rendezvous_done = true;
          std::string problem = CheckConsistency(state.joined);
          if (!problem.empty()) {
            state.failure = problem;
            DeliverAll(state.join_promises, problem);
          } else {
            DeliverAll(state.join_promises, "");
          }
        }
        return caf::delegated<std::string>();  // the promise made above answers
      },
      [self](deadline_atom) {
        auto& state = self->state;
        if (state.rendezvous_done || !state.failure.empty()) return;
        std::vector<int> missing;
        for (int rank = 0; rank < state.world_size; ++rank)
          if (!state.joined.count(rank)) missing.push_back(rank);
        FailCluster(self,
                    "cluster rendezvous timed out after " + Millis(state.rendezvous_timeout) + ": rank(s) " +
                        RankList(missing) + " never joined",
                    -1);
      },
      [self](barrier_atom, int32_t, uint64_t epoch) -> caf::result<std::string> {
        auto& state = self->state;
        if (!state.failure.empty()) return state.failure;
        auto& waiting = state.barriers[epoch];
        waiting.push_back(self->make_response_promise());
        if (static_cast<int>(waiting.size()) == state.world_size) {
          DeliverAll(waiting, "");
          state.barriers.erase(epoch);
        }
        return caf::delegated<std::string>();
      },
      [self](plan_check_atom, int32_t rank, uint64_t epoch, uint64_t digest, const std::vector<std::string>& op_names,
             const std::vector<std::string>& op_digests) -> caf::result<std::string> {
        auto& state = self->state;
        if (!state.failure.empty()) return state.failure;
        auto& ranks = state.plan_checks[epoch];
        ranks[rank] = JoinedRank{caf::actor(), "", digest, op_names, op_digests};
        auto& promises = state.plan_check_promises[epoch];
        promises.push_back(self->make_response_promise());
        if (static_cast<int>(ranks.size()) == state.world_size) {
          // A mismatch fails this job's compile on every rank, not the cluster: the ranks may
          // compile other jobs that agree.
          std::string problem = CheckConsistency(ranks, "job plan check #" + std::to_string(epoch));
          DeliverAll(promises, problem);
          state.plan_checks.erase(epoch);
          state.plan_check_promises.erase(epoch);
        }
        return caf::delegated<std::string>();
      },
      [self](gather_atom, int32_t rank, uint64_t epoch, const caf::actor& actor) {
        return AddToGather(self, self->state.actor_gathers, rank, epoch, actor);
      },
      [self](texts_atom, int32_t rank, uint64_t epoch, const std::string& text) {
        return AddToGather(self, self->state.text_gathers, rank, epoch, text);
      },
      [self](leave_atom, int32_t rank) -> std::string {
        auto& state = self->state;
        state.left.insert(rank);
        if (static_cast<int>(state.left.size()) >= state.world_size - 1) DeliverAll(state.left_waiters, "");
        return "";
      },
      [self](drain_atom) -> caf::result<std::string> {
        // Messages on one connection arrive in order, so a member that answers a ping has
        // received the failure sent before it; rank 0 exits only after every member answered
        // or was lost (a request to a vanished peer is never answered, hence the down handler).
        auto& state = self->state;
        for (auto& [rank, joined] : state.joined) {
          if (rank == 0 || state.left.count(rank) || state.lost.count(rank)) continue;
          state.drain_pending.insert(rank);
          self->request(joined.member, std::chrono::seconds(2), ping_atom::value)
              .then([self, rank = rank](const std::string&) { DrainDone(self, rank); },
                    [self, rank = rank](caf::error&) { DrainDone(self, rank); });
        }
        state.drain_promises.push_back(self->make_response_promise());
        DrainDone(self, -1);
        return caf::delegated<std::string>();
      },
      [self](call_check_atom, int32_t rank, const std::string& job, int64_t calls,
             int64_t deadline_ms) -> caf::result<std::string> {
        auto& state = self->state;
        if (!state.failure.empty()) return state.failure;
        auto census = std::make_shared<CallCensus>();
        census->promise = self->make_response_promise();
        census->job = job;
        census->calls = calls;
        census->from_rank = rank;
        census->deadline_ms = deadline_ms;
        census->waiting = 1;
        for (auto& [other, joined] : state.joined) {
          if (state.left.count(other) || state.lost.count(other)) continue;
          ++census->waiting;
          self->request(joined.member, std::chrono::seconds(5), call_state_atom::value, job)
              .then(
                  [self, census, other = other](int64_t made, std::string& last_job, int64_t last_calls) {
                    census->answers[other] = {made, std::move(last_job), last_calls};
                    CountCalls(self, census);
                  },
                  [self, census](caf::error&) { CountCalls(self, census); });
        }
        CountCalls(self, census);
        return caf::delegated<std::string>();
      },
      [self](gather_timeout_atom, int32_t rank, uint64_t epoch, bool texts, int64_t timeout_ms) -> std::string {
        // The ranks' collectives no longer pair up in order (one rank made a collective call the
        // others did not): later all-gathers would pair the wrong calls, so the cluster fails.
        auto& state = self->state;
        if (!state.failure.empty()) return state.failure;
        std::vector<int> missing;
        for (int r = 0; r < state.world_size; ++r) {
          const bool came = texts ? state.text_gathers.values[epoch].count(r) > 0
                                  : state.actor_gathers.values[epoch].count(r) > 0;
          if (!came) missing.push_back(r);
        }
        FailCluster(self,
                    "cluster all-gather #" + std::to_string(epoch) + " of rank " + std::to_string(rank) +
                        " timed out after " + std::to_string(timeout_ms) + " ms waiting for rank(s) " +
                        RankList(missing) +
                        ", which did not make it. Collective calls (checkpoint saves and loads) pair up in order "
                        "across ranks, so one that some rank did not make stops the cluster's jobs on every rank",
                    -1);
        return state.failure;
      },
      [self](wait_left_atom) -> caf::result<std::string> {
        auto& state = self->state;
        if (static_cast<int>(state.left.size()) >= state.world_size - 1) return std::string();
        if (!state.failure.empty()) return state.failure;
        state.left_waiters.push_back(self->make_response_promise());
        return caf::delegated<std::string>();
      },
  };
}

namespace {

void FailMember(caf::stateful_actor<MemberState>* self, const std::string& message) {
  self->state.shared->Fail(message);
  DeliverAll(self->state.pending, self->state.shared->failure());
  FailGathers<caf::actor>(self->state.gather_pending, self->state.shared->failure());
  FailGathers<std::string>(self->state.texts_pending, self->state.shared->failure());
}

// An all-gather request of this rank (AllGather, AllGatherText) sent on to the coordinator;
// its answer, or the rank's failure, completes it.
template <typename T, typename Atom>
caf::result<std::string, std::vector<T>> ForwardGather(caf::stateful_actor<MemberState>* self,
                                                       std::vector<caf::response_promise>& pending, Atom atom,
                                                       uint64_t epoch, const T& value) {
  std::string failure = self->state.shared->failure();
  if (!failure.empty()) return caf::result<std::string, std::vector<T>>(failure, std::vector<T>());
  // Answered requests leave the list (it serves FailMember only): a save's agreements add four.
  pending.erase(std::remove_if(pending.begin(), pending.end(), [](caf::response_promise& p) { return !p.pending(); }),
                pending.end());
  auto promise = self->make_response_promise();
  pending.push_back(promise);
  self->request(self->state.coordinator, caf::infinite, atom, self->state.rank, epoch, value)
      .then(
          [self, promise](std::string& error, std::vector<T>& values) mutable {
            // An error is the cluster's failure: this rank fails before its caller hears of it,
            // so the caller's next call fails with the cause (the coordinator's own message
            // telling this rank may come later).
            if (!error.empty()) FailMember(self, error);
            if (promise.pending()) promise.deliver(std::move(error), std::move(values));
          },
          [self, promise](caf::error& error) mutable {
            if (promise.pending())
              promise.deliver("cluster: rank 0 did not answer: " + self->system().render(error), std::vector<T>());
          });
  return caf::delegated<std::string, std::vector<T>>();
}

// Sends `request` to the coordinator; its reply (or the rank's failure) completes a promise.
template <typename... Ts>
caf::result<std::string> Forward(caf::stateful_actor<MemberState>* self, Ts&&... request) {
  std::string failure = self->state.shared->failure();
  if (!failure.empty()) return failure;
  auto promise = self->make_response_promise();
  self->state.pending.push_back(promise);
  self->request(self->state.coordinator, caf::infinite, std::forward<Ts>(request)...)
      .then(
          [self, promise](const std::string& reply) mutable {
            if (!reply.empty()) FailMember(self, reply);
            if (promise.pending()) promise.deliver(reply);
          },
          [self, promise](caf::error& error) mutable {
            if (promise.pending()) promise.deliver("cluster: rank 0 did not answer: " + self->system().render(error));
          });
  return caf::delegated<std::string>();
}

}  // namespace

caf::behavior Member(caf::stateful_actor<MemberState>* self, caf::actor coordinator, int rank,
                     std::shared_ptr<ClusterState> shared) {
  self->state.coordinator = coordinator;
  self->state.rank = rank;
  self->state.shared = std::move(shared);
  if (rank != 0) self->monitor(coordinator);
  self->set_down_handler([self](caf::down_msg& down) {
    if (self->state.leaving) {
      // Leaving comes after the shutdown barrier, which every rank passed. Rank 0 exits once
      // it received every rank's leave, possibly before its reply to ours left its process (a
      // loaded host delays the middleman's write): its going away ends our leave as well.
      // Waiting for the lost reply would only time out.
      DeliverAll(self->state.pending, "");
      return;
    }
    FailMember(self, "lost rank 0, the coordinator (" + self->system().render(down.reason) + ")");
  });
  return {
      [self](api_join_atom, int32_t world, const std::string& version, uint64_t digest,
             const std::vector<std::string>& op_names, const std::vector<std::string>& op_digests,
             const std::string& proof) {
        return Forward(self, join_atom::value, self->state.rank, world, version, digest, op_names, op_digests,
                       caf::actor_cast<caf::actor>(self), proof);
      },
      [self](api_barrier_atom, uint64_t epoch) { return Forward(self, barrier_atom::value, self->state.rank, epoch); },
      [self](api_plan_atom, uint64_t epoch, uint64_t digest, const std::vector<std::string>& op_names,
             const std::vector<std::string>& op_digests) {
        return Forward(self, plan_check_atom::value, self->state.rank, epoch, digest, op_names, op_digests);
      },
      [self](api_gather_atom, uint64_t epoch, const caf::actor& actor) {
        return ForwardGather(self, self->state.gather_pending, gather_atom::value, epoch, actor);
      },
      [self](api_texts_atom, uint64_t epoch, const std::string& text) {
        return ForwardGather(self, self->state.texts_pending, texts_atom::value, epoch, text);
      },
      [self](api_leave_atom) {
        self->state.leaving = true;
        if (self->state.rank == 0) return Forward(self, wait_left_atom::value);
        return Forward(self, leave_atom::value, self->state.rank);
      },
      [self](api_gather_timeout_atom, uint64_t epoch, bool texts, int64_t timeout_ms) {
        return Forward(self, gather_timeout_atom::value, self->state.rank, epoch, texts, timeout_ms);
      },
      [self](api_call_check_atom, const std::string& job, int64_t calls, int64_t deadline_ms) {
        return Forward(self, call_check_atom::value, self->state.rank, job, calls, deadline_ms);
      },
      [self](call_state_atom, const std::string& job) -> caf::result<int64_t, std::string, int64_t> {
        auto [made, last_job, last_calls] = self->state.shared->Calls(job);
        return caf::result<int64_t, std::string, int64_t>(made, std::move(last_job), last_calls);
      },
      [self](lost_atom, const std::string& message) { FailMember(self, message); },
      [](ping_atom) { return std::string(); },
  };
}

}  // namespace cluster_detail
}  // namespace actorflow
