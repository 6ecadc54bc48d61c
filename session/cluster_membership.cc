#include "session/cluster_membership.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

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

StatusOr<graph::MachinePlan> ClusterMembership::CheckAndExtract(const plan::Plan& plan) {
  std::vector<std::pair<std::string, std::string>> ops;
  for (const plan::Task& task : plan.tasks()) {
    // Deterministic: map fields (attrs) are otherwise serialized in an order that differs
    // between processes.
    std::string bytes;
    {
      google::protobuf::io::StringOutputStream stream(&bytes);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      task.SerializeToCodedStream(&coded);
    }
    ops.emplace_back(task.name(), std::move(bytes));
  }
  AF_RETURN_IF_ERROR(cluster_->CheckPlan(PlanIdentity::FromOps(ops), options_.rendezvous_timeout));
  return graph::ExtractMachinePlan(plan, rank());
}

ClusterMembership::~ClusterMembership() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

uint64_t ClusterMembership::StartCall(const std::string& job) {
  const int64_t calls = cluster_->NoteCall(job);
  if (options_.call_deadline.count() <= 0) return 0;
  std::lock_guard<std::mutex> lock(watch_mu_);
  const uint64_t token = next_token_++;
  const bool earliest = watched_.empty();
  watched_.push_back(Watched{token, &job, calls, std::chrono::steady_clock::now() + options_.call_deadline});
  if (!watcher_.joinable()) watcher_ = std::thread([this] { Watch(); });
  // A later call's deadline is later: the watcher needs waking only when it had nothing to wait for.
  if (earliest) watch_cv_.notify_all();
  return token;
}

void ClusterMembership::EndCall(uint64_t token) {
  if (token == 0) return;
  std::lock_guard<std::mutex> lock(watch_mu_);
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (watched_[i].token != token) continue;
    watched_[i] = watched_.back();  // the watcher wakes at its deadline and finds it gone
    watched_.pop_back();
    return;
  }
}

void ClusterMembership::Watch() {
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!stopping_) {
    if (watched_.empty()) {
      watch_cv_.wait(lock, [&] { return stopping_ || !watched_.empty(); });
      continue;
    }
    size_t first = 0;
    for (size_t i = 1; i < watched_.size(); ++i)
      if (watched_[i].deadline < watched_[first].deadline) first = i;
    if (std::chrono::steady_clock::now() < watched_[first].deadline) {
      watch_cv_.wait_until(lock, watched_[first].deadline);
      continue;
    }
    const Watched call = watched_[first];
    const std::string job = *call.job;  // the job may end while the check runs unlocked
    lock.unlock();
    Status checked = cluster_->CheckCalls(job, call.calls, options_.call_deadline);
    lock.lock();
    if (!checked.ok() && !cluster_->health().ok()) {
      // The cluster failed (every rank was told): the data plane fails the pending calls.
      watched_.clear();
      continue;
    }
    // Every rank made the call (it is slow), or the check itself got no answer (a lost rank is
    // the heartbeats' to find): watch it for another deadline.
    for (Watched& still : watched_)
      if (still.token == call.token) still.deadline = std::chrono::steady_clock::now() + options_.call_deadline;
  }
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
