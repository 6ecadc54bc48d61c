#include "comm/cluster.h"
#include "comm/cluster_actors.h"
#include "comm/cluster_tls_listener.h"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/manager.hpp>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>
#include <type_traits>

namespace actorflow {

using cluster_detail::api_barrier_atom;
using cluster_detail::api_call_check_atom;
using cluster_detail::api_gather_atom;
using cluster_detail::api_gather_timeout_atom;
using cluster_detail::api_join_atom;
using cluster_detail::api_leave_atom;
using cluster_detail::api_plan_atom;
using cluster_detail::api_texts_atom;
using cluster_detail::Coordinator;
using cluster_detail::drain_atom;
using cluster_detail::Hex;
using cluster_detail::Member;
using cluster_detail::Millis;

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
  if (actors_->coordinator) {
    // As in Call: rank 0's program may exit on this error; the others get theirs first.
    self->request(actors_->coordinator, std::chrono::seconds(3), drain_atom::value)
        .receive([](std::string&) {}, [](caf::error&) {});
  }
  return FailedPrecondition(reply);
}

template <typename T, typename Atom>
StatusOr<std::vector<T>> Cluster::Gather(const char* api, Atom atom, uint64_t epoch, const T& mine,
                                         std::chrono::milliseconds timeout) {
  if (!joined_) return FailedPrecondition(std::string(api) + ": call Rendezvous first");
  AF_RETURN_IF_ERROR(health());
  caf::scoped_actor self{environment_->system()};
  std::string failure;
  std::vector<T> gathered;
  bool timed_out = false;
  self->request(actors_->member, timeout, atom, epoch, mine)
      .receive(
          [&](std::string& error, std::vector<T>& values) {
            failure = std::move(error);
            gathered = std::move(values);
          },
          [&](caf::error& error) {
            timed_out = error == caf::sec::request_timeout;
            failure = timed_out ? "cluster all-gather timed out after " + Millis(timeout) + " on rank " +
                                      std::to_string(rank())
                                : "cluster all-gather: " + environment_->system().render(error);
          });
  if (timed_out) {
    // Every rank learns it, naming who did not come (the coordinator fails the cluster): this
    // rank's later all-gathers would otherwise pair with the others' earlier ones.
    self->request(actors_->member, options_.connection_timeout + std::chrono::seconds(10),
                  api_gather_timeout_atom::value, epoch, std::is_same_v<T, std::string>,
                  static_cast<int64_t>(timeout.count()))
        .receive([&](std::string& reply) { failure = reply.empty() ? failure : reply; }, [](caf::error&) {});
  }
  if (!failure.empty() && actors_->coordinator) {
    // As in Call: rank 0's program may exit on this error; the others get theirs first.
    self->request(actors_->coordinator, std::chrono::seconds(3), drain_atom::value)
        .receive([](std::string&) {}, [](caf::error&) {});
  }
  if (!failure.empty()) return FailedPrecondition(failure);
  if (static_cast<int>(gathered.size()) != world_size())
    return Internal(std::string(api) + " returned " + std::to_string(gathered.size()) + " values for " +
                    std::to_string(world_size()) + " ranks");
  return gathered;
}

StatusOr<std::vector<caf::actor>> Cluster::AllGather(const caf::actor& mine, std::chrono::milliseconds timeout) {
  return Gather("Cluster::AllGather", api_gather_atom::value, gather_epoch_++, mine, timeout);
}

StatusOr<std::vector<std::string>> Cluster::AllGatherText(const std::string& mine,
                                                         std::chrono::milliseconds timeout) {
  return Gather("Cluster::AllGatherText", api_texts_atom::value, text_epoch_++, mine, timeout);
}

int64_t Cluster::NoteCall(const std::string& job) { return state_->NoteCall(job); }

Status Cluster::CheckCalls(const std::string& job, int64_t calls, std::chrono::milliseconds deadline) {
  if (!joined_) return FailedPrecondition("Cluster::CheckCalls: call Rendezvous first");
  AF_RETURN_IF_ERROR(health());
  // The coordinator asks every rank with a 5 s bound; this one only guards a lost reply.
  const auto timeout = options_.connection_timeout + std::chrono::seconds(10);
  caf::scoped_actor self{environment_->system()};
  std::string reply;
  self->request(actors_->member, timeout, api_call_check_atom::value, job, calls, static_cast<int64_t>(deadline.count()))
      .receive([&](std::string& text) { reply = std::move(text); },
               [&](caf::error& error) {
                 reply = "job '" + job + "': checking which ranks made call #" + std::to_string(calls) + ": " +
                         environment_->system().render(error);
               });
  if (reply.empty()) return Status::Ok();
  return FailedPrecondition(reply);
}

void Cluster::OnFailure(std::function<void(const std::string&)> listener) { state_->AddListener(std::move(listener)); }

Status Cluster::Shutdown(std::chrono::milliseconds timeout) {
  AF_RETURN_IF_ERROR(Barrier(timeout));
  return Call("cluster shutdown", timeout, 2, 0, nullptr);
}

}  // namespace actorflow
