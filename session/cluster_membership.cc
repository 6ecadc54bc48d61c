#include "session/cluster_membership.h"

#include <mutex>

#include "session/environment.h"

namespace actorflow {
namespace {

std::mutex membership_mu;
std::shared_ptr<ClusterMembership> membership;  // guarded by membership_mu

}  // namespace

Status ClusterMembership::Start(const ClusterOptions& options) {
  std::lock_guard<std::mutex> lock(membership_mu);
  if (membership) return FailedPrecondition("this process already is rank " + std::to_string(membership->rank()) +
                                            " of a cluster of " + std::to_string(membership->world_size()));
  std::shared_ptr<Environment> environment = Environment::Global();
  Status configured = environment->SetSystemConfigurator(NetworkLayerConfigurator(options));
  if (!configured.ok())
    return configured.WithContext("joining the cluster as rank " + std::to_string(options.rank) +
                                  " (start the cluster before the first job is compiled)");
  auto started = std::make_shared<ClusterMembership>();
  started->options_ = options;
  AF_ASSIGN_OR_RETURN(started->actors_, environment->ActorsFor(1));
  AF_ASSIGN_OR_RETURN(started->cluster_, Cluster::Create(options, started->actors_));
  AF_RETURN_IF_ERROR(started->cluster_->Rendezvous(PlanIdentity::FromOps({})));
  AF_ASSIGN_OR_RETURN(started->data_plane_,
                      DataPlane::Create(*started->cluster_, started->actors_, options.rendezvous_timeout));
  membership = std::move(started);
  return Status::Ok();
}

std::shared_ptr<ClusterMembership> ClusterMembership::Get() {
  std::lock_guard<std::mutex> lock(membership_mu);
  return membership;
}

Status ClusterMembership::Stop(std::chrono::milliseconds timeout) {
  std::shared_ptr<ClusterMembership> stopping;
  {
    std::lock_guard<std::mutex> lock(membership_mu);
    stopping.swap(membership);
  }
  if (!stopping) return Status::Ok();
  return stopping->cluster_->Shutdown(timeout);
}

}  // namespace actorflow
