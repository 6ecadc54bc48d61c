#include "comm/data_plane.h"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "actors/proto/plan.pb.h"

namespace actorflow {

namespace {

// Wire protocol between endpoints (CAF built-in types only):
//   (data, job, channel, iteration, from rank, bytes)   sender -> receiver's endpoint
//   (ack, job, channel, iteration, error)                receiver -> sender's endpoint ("" = ok)
using data_atom = caf::atom_constant<caf::atom("afdata")>;
using ack_atom = caf::atom_constant<caf::atom("afack")>;

using ChannelKey = std::pair<uint64_t, int64_t>;  // (job digest, channel)

struct Posted {
  char* destination = nullptr;
  KernelCompletion done;
};

struct RecvChannel {
  std::string task;      // for messages
  int64_t bytes = -1;    // -1 until the local RECV task registered (data may come first)
  std::map<int64_t, Posted> posted;               // iteration -> the register waiting for it
  std::map<int64_t, std::vector<char>> arrived;   // iteration -> bytes waiting for a register
};

struct SendChannel {
  std::string task;
  std::map<int64_t, KernelCompletion> pending;  // iteration -> waiting for the receiver's ack
};

}  // namespace

class DataPlaneCore {
 public:
  std::mutex mu;
  std::string failure;  // the control plane's, once a rank is lost
  int rank = 0;
  std::vector<caf::actor> endpoints;  // by rank
  std::map<ChannelKey, RecvChannel> recvs;
  std::map<ChannelKey, SendChannel> sends;

  // Fails every pending act and remembers why, so that later acts fail at once.
  void Fail(const std::string& message) {
    std::vector<std::pair<KernelCompletion, std::string>> failed;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty()) return;
      failure = message;
      for (auto& [key, channel] : recvs) {
        for (auto& [iteration, posted] : channel.posted) failed.emplace_back(std::move(posted.done), channel.task);
        channel.posted.clear();
        channel.arrived.clear();
      }
      for (auto& [key, channel] : sends) {
        for (auto& [iteration, done] : channel.pending) failed.emplace_back(std::move(done), channel.task);
        channel.pending.clear();
      }
    }
    for (auto& [done, task] : failed) (void)done.Complete(FailedPrecondition(message).WithContext(task));
  }

  Status Failed(const std::string& task) {  // mu held
    return FailedPrecondition(failure).WithContext(task);
  }
};

namespace {

std::string SizeMismatch(const std::string& task, int64_t expected, size_t got, int from) {
  return task + ": expected " + std::to_string(expected) + " bytes from rank " + std::to_string(from) + ", got " +
         std::to_string(got) + " (do all ranks run the same plan?)";
}

caf::behavior Endpoint(caf::event_based_actor* self, std::shared_ptr<DataPlaneCore> core) {
  (void)self;
  return {
      [core](data_atom, uint64_t job, int64_t channel_id, int64_t iteration, int32_t from, std::vector<char>& bytes) {
        Posted posted;
        std::string task;
        int64_t expected = 0;
        {
          std::lock_guard<std::mutex> lock(core->mu);
          if (!core->failure.empty()) return;  // every act was failed already
          RecvChannel& channel = core->recvs[{job, channel_id}];
          auto it = channel.posted.find(iteration);
          if (it == channel.posted.end()) {
            channel.arrived.emplace(iteration, std::move(bytes));  // bounded by the sender's registers
            return;
          }
          posted = std::move(it->second);
          channel.posted.erase(it);
          task = channel.task;
          expected = channel.bytes;
        }
        std::string error;
        if (static_cast<int64_t>(bytes.size()) != expected) {
          error = SizeMismatch(task, expected, bytes.size(), from);
          (void)posted.done.Complete(Internal(error));
        } else {
          if (!bytes.empty()) std::memcpy(posted.destination, bytes.data(), bytes.size());
          (void)posted.done.Complete(Status::Ok());
        }
        if (from >= 0 && from < static_cast<int>(core->endpoints.size()))
          caf::anon_send(core->endpoints[from], ack_atom::value, job, channel_id, iteration, error);
      },
      [core](ack_atom, uint64_t job, int64_t channel_id, int64_t iteration, const std::string& error) {
        KernelCompletion done;
        std::string task;
        {
          std::lock_guard<std::mutex> lock(core->mu);
          auto channel = core->sends.find({job, channel_id});
          if (channel == core->sends.end()) return;
          auto it = channel->second.pending.find(iteration);
          if (it == channel->second.pending.end()) return;  // failed already
          done = std::move(it->second);
          channel->second.pending.erase(it);
          task = channel->second.task;
        }
        (void)done.Complete(error.empty() ? Status::Ok() : Internal(error).WithContext(task));
      },
  };
}

int64_t IntAttr(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() || it->second.value_case() != plan::AttrValue::kI ? -1 : it->second.i();
}

}  // namespace

StatusOr<std::shared_ptr<DataPlane>> DataPlane::Create(Cluster& cluster, std::shared_ptr<ActorEnvironment> environment,
                                                       std::chrono::milliseconds timeout) {
  if (!environment) return InvalidArgument("DataPlane::Create: no actor environment");
  std::shared_ptr<DataPlane> plane(new DataPlane());
  plane->core_ = std::make_shared<DataPlaneCore>();
  plane->core_->rank = cluster.rank();
  caf::actor endpoint = environment->system().spawn(Endpoint, plane->core_);
  auto endpoints = cluster.AllGather(endpoint, timeout);
  if (!endpoints.ok()) {
    caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
    return endpoints.status().WithContext("starting the data plane of rank " + std::to_string(cluster.rank()));
  }
  {
    std::lock_guard<std::mutex> lock(plane->core_->mu);
    plane->core_->endpoints = std::move(endpoints).value();
  }
  std::weak_ptr<DataPlaneCore> weak = plane->core_;
  cluster.OnFailure([weak](const std::string& message) {
    if (auto core = weak.lock()) core->Fail(message);
  });
  return plane;
}

DataPlane::~DataPlane() {
  if (!core_) return;
  // The endpoints stay readable: kernels of runtimes still alive hold the core.
  if (core_->rank < static_cast<int>(core_->endpoints.size()))
    caf::anon_send_exit(core_->endpoints[core_->rank], caf::exit_reason::user_shutdown);
}

bool DataPlane::Handles(const std::string& op_type) { return op_type == "send" || op_type == "recv"; }

int DataPlane::rank() const { return core_->rank; }

size_t DataPlane::waiting_payloads() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  size_t waiting = 0;
  for (const auto& [key, channel] : core_->recvs) waiting += channel.arrived.size();
  return waiting;
}

StatusOr<KernelFn> DataPlane::MakeKernel(const std::string& job, const plan::Task& task) {
  const int64_t channel_id = IntAttr(task, "channel"), peer = IntAttr(task, "peer"), bytes = IntAttr(task, "bytes");
  const std::string what = task.op_type() + " '" + task.name() + "'";
  int world = 0;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    world = static_cast<int>(core_->endpoints.size());
  }
  if (!Handles(task.op_type())) return InvalidArgument(what + ": not a data plane op");
  if (!task.asynchronous()) return InvalidArgument(what + ": must be asynchronous (plan Task.asynchronous)");
  if (channel_id < 0 || bytes < 0 || peer < 0 || peer >= world || peer == core_->rank)
    return InvalidArgument(what + ": attrs channel, peer and bytes must be set, peer another rank in [0, " +
                           std::to_string(world) + "), got channel " + std::to_string(channel_id) + ", peer " +
                           std::to_string(peer) + ", bytes " + std::to_string(bytes));
  const uint64_t job_key = Fnv1a64(job);
  const ChannelKey key{job_key, channel_id};
  std::shared_ptr<DataPlaneCore> core = core_;
  const int from_rank = core_->rank;
  if (task.op_type() == "recv") {
    if (bytes > 0 && (task.registers_size() != 1 || task.registers(0).blobs_size() != 1 ||
                      task.registers(0).blobs(0).byte_size() != bytes))
      return InvalidArgument(what + ": must have one register with one blob of " + std::to_string(bytes) + " bytes");
    {
      std::lock_guard<std::mutex> lock(core->mu);
      RecvChannel& channel = core->recvs[key];  // bytes may have arrived already
      channel.task = "recv '" + task.name() + "' (from rank " + std::to_string(peer) + ")";
      channel.bytes = bytes;
      channel.posted.clear();
    }
    return KernelFn([core, key, bytes, peer](KernelContext& ctx) -> Status {
      char* destination = bytes > 0 ? static_cast<char*>(ctx.output(0).data) : nullptr;
      std::vector<char> arrived;
      std::string task;
      {
        std::lock_guard<std::mutex> lock(core->mu);
        RecvChannel& channel = core->recvs[key];
        if (!core->failure.empty()) return core->Failed(channel.task);
        auto it = channel.arrived.find(ctx.iteration);
        if (it == channel.arrived.end()) {
          channel.posted.emplace(ctx.iteration, Posted{destination, ctx.TakeCompletion()});
          return Status::Ok();
        }
        arrived = std::move(it->second);
        channel.arrived.erase(it);
        task = channel.task;
      }
      // The bytes came first: receive them now, synchronously.
      std::string error;
      if (static_cast<int64_t>(arrived.size()) != bytes)
        error = SizeMismatch(task, bytes, arrived.size(), static_cast<int>(peer));
      else if (!arrived.empty())
        std::memcpy(destination, arrived.data(), arrived.size());
      caf::anon_send(core->endpoints[peer], ack_atom::value, key.first, key.second, ctx.iteration, error);
      return error.empty() ? Status::Ok() : Internal(error);
    });
  }
  if (task.inputs_size() != 1 || (bytes > 0 && task.inputs(0).control()))
    return InvalidArgument(what + ": must read one register (a data input when it carries bytes)");
  {
    std::lock_guard<std::mutex> lock(core->mu);
    SendChannel& channel = core->sends[key];
    channel.task = "send '" + task.name() + "' (to rank " + std::to_string(peer) + ")";
    channel.pending.clear();
  }
  caf::actor remote = core->endpoints[peer];
  return KernelFn([core, key, bytes, remote, from_rank](KernelContext& ctx) -> Status {
    std::vector<char> payload;
    if (bytes > 0) {
      const TensorView& input = ctx.input(0);
      if (static_cast<int64_t>(input.byte_size()) != bytes)
        return Internal("send: the input holds " + std::to_string(input.byte_size()) + " bytes, the plan says " +
                        std::to_string(bytes));
      const char* data = static_cast<const char*>(input.data);
      payload.assign(data, data + bytes);
    }
    {
      std::lock_guard<std::mutex> lock(core->mu);
      SendChannel& channel = core->sends[key];
      if (!core->failure.empty()) return core->Failed(channel.task);
      channel.pending.emplace(ctx.iteration, ctx.TakeCompletion());
    }
    caf::anon_send(remote, data_atom::value, key.first, key.second, ctx.iteration, static_cast<int32_t>(from_rank),
                   std::move(payload));
    return Status::Ok();
  });
}

}  // namespace actorflow
