// Cluster: the control plane that joins one process per machine rank (docs/cluster.md).
//
// Rank 0 publishes a coordinator actor on CAF's network layer (the io middleman, BASP over
// TCP); every other rank connects to it with a deadline and backoff. Rendezvous collects all
// ranks and checks that every rank compiled the same plan and runs the same version; after it,
// the network layer's heartbeats detect a peer that died (SIGKILL: its connection closes) or
// froze (SIGSTOP: no heartbeat within connection_timeout), and every rank's pending and next
// call fails with an error naming the lost rank.
//
// The control plane runs on an ActorEnvironment whose actor system has the network layer
// loaded: build it with AddNetworkLayer (or, for the process-wide session environment,
// Environment::SetSystemConfigurator(NetworkLayerConfigurator(options))).
//
// Security: the port binds to 127.0.0.1 by default, and a joining rank proves it knows the
// launcher's secret. Off loopback the control plane requires mutual TLS (ClusterOptions::tls,
// CAF's OpenSSL module): Create refuses a non-loopback coordinator_host without it.
//
// Thread-safety: Rendezvous, Barrier and Shutdown are collective calls every rank makes in the
// same order, from one thread at a time; health() may be called from any thread at any time.
// Every call blocks for a bounded time (each has a deadline). One Cluster per process.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/actor.hpp>

#include "actors/environment.h"
#include "actors/status.h"
#include "comm/cluster_tls.h"

namespace actorflow {

struct ClusterOptions {
  int rank = 0;
  int world_size = 1;
  // Rank 0 binds here; the others connect here. Loopback unless configured otherwise.
  std::string coordinator_host = "127.0.0.1";
  // Rank 0 with port 0 binds a free port (read it back with Cluster::port()).
  uint16_t coordinator_port = 0;
  // Rendezvous deadline: how long rank 0 waits (from Cluster::Create) for every rank to join,
  // and how long the others try to reach rank 0. The error names the ranks that never came.
  std::chrono::milliseconds rendezvous_timeout{60000};
  // The network layer's heartbeat period and the silence after which a peer is declared lost.
  // Detection of a frozen peer takes at most about connection_timeout + heartbeat_interval.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds connection_timeout{5000};
  // Ranks of different jobs never join each other: BASP refuses a peer whose app identifier
  // differs (this is a guard against mistakes, not authentication: it travels in clear).
  std::string job_id = "actorflow";
  // Compared at rendezvous; a mismatch is an error naming the ranks.
  std::string version;
  // The launcher's shared secret (ACTORFLOW_CLUSTER_SECRET). When rank 0 has one, a joining
  // rank must prove it knows the same one: it sends HMAC-SHA256(secret, job_id and its rank),
  // never the secret; a wrong or missing proof is refused (that peer gets an error naming the
  // cause, rank 0 logs it on stderr, the job goes on waiting for the right rank). A guard
  // against strangers and other launches on the same host, not against an eavesdropper who
  // can replay a proof (mutual TLS is the answer to that).
  std::string secret;
  // Mutual TLS for every control-plane connection (comm/cluster_tls.h): required when
  // coordinator_host is not a loopback address, optional on loopback. The files are checked
  // by Create (a mistake is an error naming the file, never unauthenticated encryption).
  ClusterTls tls;
  // This rank's data plane listens on this address and tells it to the peers (comm/data_plane.h);
  // empty: coordinator_host (one machine). On several machines: this machine's own address.
  std::string data_host;
  // Authenticate every data-plane frame with keys fresh per connection (comm/data_plane_frames.h;
  // needs `secret`). On whenever `tls` is enabled, or with this set, or with the environment
  // variable ACTORFLOW_DATA_AUTH=1; every rank must agree (a mismatch is refused at connection).
  bool authenticate_data_frames = false;
  // Per-call deadline of multi-machine jobs (session/cluster_membership.h): a call still
  // pending this long after it was pushed makes its rank ask every rank how many calls of
  // the job it made; if some did not make this one, the cluster fails on every rank with an
  // error naming them, the job and the deadline. 0: no deadline. Long by default: between two
  // calls a rank may evaluate or save checkpoints while the others wait.
  std::chrono::milliseconds call_deadline{600000};
};

// HMAC-SHA256(secret, "actorflow-join/<job_id>/<rank>") in hex: a joining rank's proof.
std::string JoinProof(const std::string& secret, const std::string& job_id, int rank);

// What rendezvous compares: a digest of the whole plan plus one per op, so a mismatch can name
// the first differing op. FNV-1a 64: a consistency check between cooperating ranks, not a
// defence against a forged plan.
struct PlanIdentity {
  uint64_t digest = 0;
  std::vector<std::string> op_names;
  std::vector<uint64_t> op_digests;

  static PlanIdentity FromBytes(std::string_view serialized_plan);
  // ops: (op name, that op's serialized bytes), in plan order.
  static PlanIdentity FromOps(const std::vector<std::pair<std::string, std::string>>& ops);
};

uint64_t Fnv1a64(std::string_view bytes);

// Loads the network layer with the heartbeat settings and app identifier of `options`: for
// EnvironmentOptions::configure_system or Environment::SetSystemConfigurator.
std::function<void(caf::actor_system_config&)> NetworkLayerConfigurator(const ClusterOptions& options);
// environment_options.configure_system = NetworkLayerConfigurator(options).
void AddNetworkLayer(EnvironmentOptions& environment_options, const ClusterOptions& options);

class TlsListener;   // rank 0's listener with mutual TLS (comm/cluster_tls_listener.h)
class ClusterState;  // shared between the API and the rank's member actor (cluster_actors.h)

class Cluster {
 public:
  // Rank 0: spawns and publishes the coordinator (a port in use is an error naming it). Other
  // ranks: connect to rank 0, retrying with backoff until rendezvous_timeout. Does not wait
  // for the other ranks: Rendezvous does.
  static StatusOr<std::unique_ptr<Cluster>> Create(const ClusterOptions& options,
                                                   std::shared_ptr<ActorEnvironment> environment);
  ~Cluster();  // leaves without waiting; peers see this rank as lost unless Shutdown ran
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Blocks until every rank has joined with the same plan and version (Ok), a mismatch
  // (error naming the ranks and the first differing op), a rank never came within
  // rendezvous_timeout (error naming the missing ranks) or a rank was lost.
  Status Rendezvous(const PlanIdentity& plan);
  // Blocks until every rank has called Barrier as often as this one (a collective call all
  // ranks make in the same order). Fails with an error naming the lost rank if one is lost
  // while waiting or before, or when `timeout` passes.
  Status Barrier(std::chrono::milliseconds timeout);
  // A job's plan compared across ranks (a collective call every rank makes in the same order,
  // once per compiled job): Ok when all are identical, else the error naming the first
  // differing op, on every rank; a lost rank or `timeout` fails it too. Unlike Rendezvous, a
  // mismatch fails this call only, not the cluster.
  Status CheckPlan(const PlanIdentity& plan, std::chrono::milliseconds timeout);
  // Every rank's actor, by rank (a collective call): how the data plane's endpoints find each
  // other. Fails on a lost rank or after `timeout`.
  StatusOr<std::vector<caf::actor>> AllGather(const caf::actor& mine, std::chrono::milliseconds timeout);
  // Every rank's `mine`, by rank (a collective call every rank makes in the same order): small
  // agreements such as each rank's outcome of a checkpoint save. Fails on a lost rank or after
  // `timeout` (a rank that stops calling: the others wait that long). A timeout fails the
  // cluster on every rank, naming the ranks that did not make the call (the ranks' later
  // all-gathers would pair the wrong calls); so does AllGather's.
  StatusOr<std::vector<std::string>> AllGatherText(const std::string& mine, std::chrono::milliseconds timeout);
  // Counts a call of multi-machine job `job` by this rank; returns this rank's calls of it so far.
  // Thread-safe, no message: peers read the counts when CheckCalls asks.
  int64_t NoteCall(const std::string& job);
  // Asks every rank how many calls of `job` it made (not a collective: one rank asks). Ok when
  // every rank made at least `calls` (the call is slow, not unpaired); otherwise fails the
  // cluster on every rank with an error naming the ranks that did not, what they called last,
  // the job and `deadline` (the wait that prompted the check), and returns it.
  Status CheckCalls(const std::string& job, int64_t calls, std::chrono::milliseconds deadline);
  // Ok while every rank is alive; the error naming the lost rank once one is lost.
  Status health() const;
  // `listener(message)` is called once, on the thread that learns of it, when a rank is lost
  // (at once if one already was). It must not block: the data plane fails its pending
  // transfers from it.
  void OnFailure(std::function<void(const std::string&)> listener);
  // Barrier, then leave so that peers exiting is not a failure; rank 0 waits (bounded by
  // `timeout`) until the others have left before unpublishing.
  Status Shutdown(std::chrono::milliseconds timeout);

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  const ClusterOptions& options() const { return options_; }
  // The coordinator's port (rank 0: the one bound, useful with coordinator_port 0).
  uint16_t port() const { return port_; }

 private:
  Cluster() = default;
  Status Call(const char* what, std::chrono::milliseconds timeout, int kind, uint64_t epoch, const PlanIdentity* plan);
  // Every rank's `mine` of all-gather `epoch` (of its kind), by rank: AllGather and AllGatherText.
  template <typename T, typename Atom>
  StatusOr<std::vector<T>> Gather(const char* api, Atom atom, uint64_t epoch, const T& mine,
                                  std::chrono::milliseconds timeout);

  ClusterOptions options_;
  std::shared_ptr<ActorEnvironment> environment_;
  std::shared_ptr<ClusterState> state_;
  uint16_t port_ = 0;
  uint64_t barrier_epoch_ = 0;
  uint64_t plan_epoch_ = 0;
  uint64_t gather_epoch_ = 0;
  uint64_t text_epoch_ = 0;
  bool joined_ = false;
  struct Actors;
  std::unique_ptr<Actors> actors_;
  std::unique_ptr<TlsListener> tls_listener_;  // rank 0 with TLS
};

}  // namespace actorflow
