#include "comm/cluster.h"
#include "comm/cluster_tls_listener.h"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/manager.hpp>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>

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
};

namespace {

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
//   member -> coordinator  (gather, rank, actor) -> (string, actors by rank), once every rank sent
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

std::string Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return "[" + text + "]";
}

std::string Millis(std::chrono::milliseconds duration) { return std::to_string(duration.count()) + " ms"; }

struct JoinedRank {
  caf::actor member;
  std::string version;
  uint64_t digest = 0;
  std::vector<std::string> op_names;
  std::vector<std::string> op_digests;
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
  std::map<int, caf::actor> gathered;
  std::vector<caf::response_promise> gather_promises;
  std::string failure;
  static inline const char* name = "actorflow.cluster.coordinator";
};

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
  for (auto& promise : state.gather_promises)
    if (promise.pending()) promise.deliver(state.failure, std::vector<caf::actor>());
  state.gather_promises.clear();
  for (auto& [rank, joined] : state.joined)
    if (rank != lost_rank && !state.left.count(rank)) self->send(joined.member, lost_atom::value, state.failure);
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
      [self](gather_atom, int32_t rank, const caf::actor& actor) -> caf::result<std::string, std::vector<caf::actor>> {
        auto& state = self->state;
        if (!state.failure.empty()) return caf::result<std::string, std::vector<caf::actor>>(state.failure, std::vector<caf::actor>());
        state.gathered[rank] = actor;
        state.gather_promises.push_back(self->make_response_promise());
        if (static_cast<int>(state.gathered.size()) == state.world_size) {
          std::vector<caf::actor> actors;
          for (auto& [r, a] : state.gathered) actors.push_back(a);
          for (auto& promise : state.gather_promises)
            if (promise.pending()) promise.deliver(std::string(), actors);
          state.gather_promises.clear();
        }
        return caf::delegated<std::string, std::vector<caf::actor>>();
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
      [self](wait_left_atom) -> caf::result<std::string> {
        auto& state = self->state;
        if (static_cast<int>(state.left.size()) >= state.world_size - 1) return std::string();
        if (!state.failure.empty()) return state.failure;
        state.left_waiters.push_back(self->make_response_promise());
        return caf::delegated<std::string>();
      },
  };
}

// One per process: forwards the API's calls to the coordinator and turns the loss of a peer
// (told by the coordinator, or the coordinator's own loss) into errors for every pending call.
struct MemberState {
  caf::actor coordinator;
  int rank = 0;
  std::shared_ptr<ClusterState> shared;
  std::vector<caf::response_promise> pending;
  std::vector<caf::response_promise> gather_pending;  // answered with (error, actors)
  bool leaving = false;
  static inline const char* name = "actorflow.cluster.member";
};

void FailMember(caf::stateful_actor<MemberState>* self, const std::string& message) {
  self->state.shared->Fail(message);
  DeliverAll(self->state.pending, self->state.shared->failure());
  for (auto& promise : self->state.gather_pending)
    if (promise.pending()) promise.deliver(self->state.shared->failure(), std::vector<caf::actor>());
  self->state.gather_pending.clear();
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
      [self](api_gather_atom, const caf::actor& actor) -> caf::result<std::string, std::vector<caf::actor>> {
        std::string failure = self->state.shared->failure();
        if (!failure.empty()) return caf::result<std::string, std::vector<caf::actor>>(failure, std::vector<caf::actor>());
        auto promise = self->make_response_promise();
        self->state.gather_pending.push_back(promise);
        self->request(self->state.coordinator, caf::infinite, gather_atom::value, self->state.rank, actor)
            .then(
                [promise](std::string& error, std::vector<caf::actor>& actors) mutable {
                  if (promise.pending()) promise.deliver(std::move(error), std::move(actors));
                },
                [self, promise](caf::error& error) mutable {
                  if (promise.pending())
                    promise.deliver("cluster: rank 0 did not answer: " + self->system().render(error),
                                    std::vector<caf::actor>());
                });
        return caf::delegated<std::string, std::vector<caf::actor>>();
      },
      [self](api_leave_atom) {
        self->state.leaving = true;
        if (self->state.rank == 0) return Forward(self, wait_left_atom::value);
        return Forward(self, leave_atom::value, self->state.rank);
      },
      [self](lost_atom, const std::string& message) { FailMember(self, message); },
      [](ping_atom) { return std::string(); },
  };
}

}  // namespace

std::string JoinProof(const std::string& secret, const std::string& job_id, int rank) {
  const std::string message = "actorflow-join/" + job_id + "/" + std::to_string(rank);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), digest, &length);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 1099511628211ull;
  }
  return hash;
}

PlanIdentity PlanIdentity::FromBytes(std::string_view serialized_plan) {
  PlanIdentity identity;
  identity.digest = Fnv1a64(serialized_plan);
  return identity;
}

PlanIdentity PlanIdentity::FromOps(const std::vector<std::pair<std::string, std::string>>& ops) {
  PlanIdentity identity;
  std::string combined;
  for (const auto& [name, bytes] : ops) {
    uint64_t digest = Fnv1a64(bytes);
    identity.op_names.push_back(name);
    identity.op_digests.push_back(digest);
    combined += name;
    combined.push_back('\0');
    combined += Hex(digest);
  }
  identity.digest = Fnv1a64(combined);
  return identity;
}

void AddNetworkLayer(EnvironmentOptions& environment_options, const ClusterOptions& options) {
  environment_options.configure_system = NetworkLayerConfigurator(options);
}

std::function<void(caf::actor_system_config&)> NetworkLayerConfigurator(const ClusterOptions& options) {
  return [options](caf::actor_system_config& config) {
    config.load<caf::io::middleman>();
    // Both are off in CAF 0.17 by default: without them a frozen peer is never detected.
    config.set("middleman.heartbeat-interval", caf::timespan{options.heartbeat_interval});
    config.set("middleman.connection-timeout", caf::timespan{options.connection_timeout});
    config.set("middleman.app-identifiers", std::vector<std::string>{"actorflow/" + options.job_id});
    if (options.tls.enabled()) ConfigureClusterTls(config, options.tls);
  };
}

struct Cluster::Actors {
  caf::actor coordinator;  // rank 0 only
  caf::actor member;
};

StatusOr<std::unique_ptr<Cluster>> Cluster::Create(const ClusterOptions& options,
                                                   std::shared_ptr<ActorEnvironment> environment) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return InvalidArgument("ClusterOptions: rank must be in [0, world_size) and world_size >= 1, got rank " +
                           std::to_string(options.rank) + ", world_size " + std::to_string(options.world_size));
  if (options.rendezvous_timeout.count() <= 0 || options.heartbeat_interval.count() <= 0 ||
      options.connection_timeout <= options.heartbeat_interval)
    return InvalidArgument(
        "ClusterOptions: rendezvous_timeout and heartbeat_interval must be > 0 and connection_timeout > "
        "heartbeat_interval, got " +
        Millis(options.rendezvous_timeout) + ", " + Millis(options.heartbeat_interval) + ", " +
        Millis(options.connection_timeout));
  if (!environment || !environment->system().has_middleman())
    return FailedPrecondition(
        "Cluster::Create: the actor environment has no network layer; create it with AddNetworkLayer(options)");
  if (options.tls.enabled()) {
    AF_RETURN_IF_ERROR(CheckClusterTls(options.tls));
    AF_RETURN_IF_ERROR(CheckSystemUsesClusterTls(environment->system(), options.tls));
  } else if (!IsLoopbackHost(options.coordinator_host)) {
    return FailedPrecondition("cluster: coordinator_host '" + options.coordinator_host +
                              "' is not a loopback address; off loopback the control plane requires mutual TLS "
                              "(ClusterOptions::tls: certificate, key and cluster CA files)");
  }
  const bool tls = options.tls.enabled();
  std::unique_ptr<Cluster> cluster(new Cluster());
  cluster->options_ = options;
  cluster->environment_ = environment;
  cluster->state_ = std::make_shared<ClusterState>();
  cluster->actors_ = std::make_unique<Actors>();
  caf::actor_system& system = environment->system();
  std::string where = options.coordinator_host + ":" + std::to_string(options.coordinator_port);
  if (options.rank == 0) {
    caf::actor coordinator =
        system.spawn(Coordinator, options.world_size, options.rendezvous_timeout, options.secret, options.job_id);
    // With TLS, CAF's OpenSSL sessions: every connection needs a certificate from the CA (and
    // a refused one is logged on stderr).
    std::string listen_error;
    if (tls) {
      cluster->tls_listener_ = std::make_unique<TlsListener>(system, "actorflow: cluster rank 0");
      auto port = cluster->tls_listener_->Publish(coordinator, options.coordinator_host, options.coordinator_port);
      if (port.ok()) cluster->port_ = *port;
      else listen_error = port.status().message();
    } else {
      auto port = system.middleman().publish(coordinator, options.coordinator_port, options.coordinator_host.c_str(),
                                             /*reuse_addr=*/false);
      if (port) cluster->port_ = *port;
      else listen_error = system.render(port.error());
    }
    if (!listen_error.empty()) {
      caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
      return FailedPrecondition("cluster rank 0 cannot listen on " + where + " (port in use or address not local?): " +
                                listen_error);
    }
    cluster->actors_->coordinator = coordinator;
    cluster->actors_->member = system.spawn(Member, coordinator, 0, cluster->state_);
    return cluster;
  }
  // Rank 0 may start later than this rank: retry with backoff until the deadline.
  auto deadline = std::chrono::steady_clock::now() + options.rendezvous_timeout;
  auto backoff = std::chrono::milliseconds(50);
  std::string last_error;
  caf::scoped_actor self{system};
  auto middleman = tls ? system.openssl_manager().actor_handle() : system.middleman().actor_handle();
  for (;;) {
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (remaining.count() <= 0) break;
    caf::actor coordinator;
    self->request(middleman, std::min(remaining, std::chrono::milliseconds(2000)), caf::connect_atom::value,
                  options.coordinator_host, options.coordinator_port)
        .receive(
            [&](const caf::node_id&, caf::strong_actor_ptr& remote, const std::set<std::string>&) {
              if (remote)
                coordinator = caf::actor_cast<caf::actor>(remote);
              else
                last_error = "nothing is published there";
            },
            [&](caf::error& error) { last_error = system.render(error); });
    if (coordinator) {
      cluster->port_ = options.coordinator_port;
      cluster->actors_->member = system.spawn(Member, coordinator, options.rank, cluster->state_);
      return cluster;
    }
    std::this_thread::sleep_for(std::min(backoff, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - std::chrono::steady_clock::now())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return FailedPrecondition("cluster rank " + std::to_string(options.rank) + " could not reach rank 0 at " + where +
                            " within " + Millis(options.rendezvous_timeout) + ": " + last_error);
}

Cluster::~Cluster() {
  if (!actors_) return;
  if (actors_->member) caf::anon_send_exit(actors_->member, caf::exit_reason::user_shutdown);
  if (actors_->coordinator) {
    if (tls_listener_)
      tls_listener_->Unpublish(actors_->coordinator, port_);
    else
      (void)environment_->system().middleman().unpublish(actors_->coordinator, port_);
    caf::anon_send_exit(actors_->coordinator, caf::exit_reason::user_shutdown);
  }
}

Status Cluster::health() const {
  std::string failure = state_->failure();
  return failure.empty() ? Status::Ok() : FailedPrecondition(failure);
}

Status Cluster::Call(const char* what, std::chrono::milliseconds timeout, int kind, uint64_t epoch,
                     const PlanIdentity* plan) {
  AF_RETURN_IF_ERROR(health());
  caf::scoped_actor self{environment_->system()};
  std::string reply;
  auto on_reply = [&](std::string& text) { reply = std::move(text); };
  auto on_error = [&](caf::error& error) {
    reply = error == caf::sec::request_timeout
                ? std::string(what) + " timed out after " + Millis(timeout) + " on rank " + std::to_string(rank())
                : std::string(what) + ": " + environment_->system().render(error);
  };
  if (kind == 0) {
    std::vector<std::string> digests;
    for (uint64_t digest : plan->op_digests) digests.push_back(Hex(digest));
    self->request(actors_->member, timeout, api_join_atom::value, static_cast<int32_t>(options_.world_size),
                  options_.version, plan->digest, plan->op_names, digests,
                  options_.secret.empty() ? std::string() : JoinProof(options_.secret, options_.job_id, rank()))
        .receive(on_reply, on_error);
  } else if (kind == 1) {
    self->request(actors_->member, timeout, api_barrier_atom::value, epoch).receive(on_reply, on_error);
  } else {
    self->request(actors_->member, timeout, api_leave_atom::value).receive(on_reply, on_error);
  }
  if (reply.empty()) return Status::Ok();
  if (actors_->coordinator) {
    // Rank 0 is about to report a failure, and its process may exit right after: make sure the
    // others have the same message first, or they would only see rank 0 vanish.
    self->request(actors_->coordinator, std::chrono::seconds(3), drain_atom::value)
        .receive([](std::string&) {}, [](caf::error&) {});
  }
  return FailedPrecondition(reply);
}

Status Cluster::Rendezvous(const PlanIdentity& plan) {
  if (joined_) return FailedPrecondition("Cluster::Rendezvous: this rank has already joined");
  if (plan.op_names.size() != plan.op_digests.size())
    return InvalidArgument("Cluster::Rendezvous: plan has " + std::to_string(plan.op_names.size()) + " op names and " +
                           std::to_string(plan.op_digests.size()) + " op digests");
  joined_ = true;
  // The coordinator's own deadline answers first; this bound only guards a lost reply.
  return Call("cluster rendezvous", options_.rendezvous_timeout + std::chrono::seconds(5), 0, 0, &plan);
}

Status Cluster::Barrier(std::chrono::milliseconds timeout) {
  if (!joined_) return FailedPrecondition("Cluster::Barrier: call Rendezvous first");
  return Call("cluster barrier", timeout, 1, barrier_epoch_++, nullptr);
}

Status Cluster::CheckPlan(const PlanIdentity& plan, std::chrono::milliseconds timeout) {
  if (!joined_) return FailedPrecondition("Cluster::CheckPlan: call Rendezvous first");
  if (plan.op_names.size() != plan.op_digests.size())
    return InvalidArgument("Cluster::CheckPlan: plan has " + std::to_string(plan.op_names.size()) + " op names and " +
                           std::to_string(plan.op_digests.size()) + " op digests");
  AF_RETURN_IF_ERROR(health());
  std::vector<std::string> digests;
  for (uint64_t digest : plan.op_digests) digests.push_back(Hex(digest));
  caf::scoped_actor self{environment_->system()};
  std::string reply;
  self->request(actors_->member, timeout, api_plan_atom::value, plan_epoch_++, plan.digest, plan.op_names, digests)
      .receive([&](std::string& text) { reply = std::move(text); },
               [&](caf::error& error) {
                 reply = error == caf::sec::request_timeout
                             ? "job plan check timed out after " + Millis(timeout) + " on rank " + std::to_string(rank()) +
                                   " (does every rank compile the same jobs in the same order?)"
                             : "job plan check: " + environment_->system().render(error);
               });
  if (reply.empty()) return Status::Ok();
  return FailedPrecondition(reply);
}

StatusOr<std::vector<caf::actor>> Cluster::AllGather(const caf::actor& mine, std::chrono::milliseconds timeout) {
  if (!joined_) return FailedPrecondition("Cluster::AllGather: call Rendezvous first");
  AF_RETURN_IF_ERROR(health());
  caf::scoped_actor self{environment_->system()};
  std::string failure;
  std::vector<caf::actor> actors;
  self->request(actors_->member, timeout, api_gather_atom::value, mine)
      .receive(
          [&](std::string& error, std::vector<caf::actor>& gathered) {
            failure = std::move(error);
            actors = std::move(gathered);
          },
          [&](caf::error& error) {
            failure = error == caf::sec::request_timeout
                          ? "cluster all-gather timed out after " + Millis(timeout) + " on rank " + std::to_string(rank())
                          : "cluster all-gather: " + environment_->system().render(error);
          });
  if (!failure.empty()) return FailedPrecondition(failure);
  if (static_cast<int>(actors.size()) != world_size())
    return Internal("cluster all-gather returned " + std::to_string(actors.size()) + " actors for " +
                    std::to_string(world_size()) + " ranks");
  return actors;
}

void Cluster::OnFailure(std::function<void(const std::string&)> listener) { state_->AddListener(std::move(listener)); }

Status Cluster::Shutdown(std::chrono::milliseconds timeout) {
  AF_RETURN_IF_ERROR(Barrier(timeout));
  return Call("cluster shutdown", timeout, 2, 0, nullptr);
}

}  // namespace actorflow
