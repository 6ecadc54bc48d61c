#include "comm/data_plane.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "comm/data_plane_core.h"
#include "comm/data_plane_handshake.h"
#include "comm/ring.h"


namespace actorflow {

using namespace data_plane_internal;  // this file implements it

namespace {

// The endpoint actor only tells its data port (the control plane exchanges the endpoints).
using port_atom = caf::atom_constant<caf::atom("afport")>;

// Where this rank's data plane listens: its address (the peers on other machines connect there)
// and port.
caf::behavior Endpoint(caf::event_based_actor*, std::string host, uint16_t port) {
  return {[host, port](port_atom) { return caf::make_message(host, port); }};
}

int64_t IntAttr(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() || it->second.value_case() != plan::AttrValue::kI ? -1 : it->second.i();
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes every byte of the `count` pieces (one sendmsg per call while the socket takes them:
// a header and its payload go in one system call, not two).
bool WriteVectors(int fd, iovec* pieces, int count) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = pieces;
    message.msg_iovlen = static_cast<size_t>(count);
    ssize_t wrote = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    auto left = static_cast<size_t>(wrote);
    while (count > 0 && left >= pieces->iov_len) {
      left -= pieces->iov_len;
      ++pieces;
      --count;
    }
    if (count > 0) {
      pieces->iov_base = static_cast<char*>(pieces->iov_base) + left;
      pieces->iov_len -= left;
    }
  }
  return true;
}

// Authenticated payloads are hashed and written in pieces of this size, each while it is in
// the cache.
constexpr size_t kAuthenticatedPiece = 256 * 1024;


}  // namespace

namespace data_plane_internal {

namespace {

std::string Closed(Connection* connection) {
  connection->read_closed = true;
  return "lost rank " + std::to_string(connection->peer) + " (its data connection closed)";
}

}  // namespace

bool DataPlaneCore::WriteFrame(Connection* connection, const Header& header, const char* payload) {
  const int fd = connection->fd;
  FrameAuthenticator* auth = connection->send_auth.get();
  if (auth == nullptr) {
    iovec pieces[2] = {{const_cast<Header*>(&header), sizeof header}, {const_cast<char*>(payload), header.bytes}};
    return WriteVectors(fd, pieces, header.bytes > 0 ? 2 : 1);
  }
  unsigned char header_tag[kFrameTagBytes], payload_tag[kFrameTagBytes];
  auth->Begin(FrameAuthenticator::kHeader);
  auth->Add(&header, sizeof header);
  auth->Finish(header_tag);
  if (header.bytes == 0) {
    auth->EndFrame();
    iovec pieces[2] = {{const_cast<Header*>(&header), sizeof header}, {header_tag, kFrameTagBytes}};
    return WriteVectors(fd, pieces, 2);
  }
  auth->Begin(FrameAuthenticator::kPayload);
  for (size_t done = 0; done < header.bytes;) {
    const size_t piece = std::min<size_t>(header.bytes - done, kAuthenticatedPiece);
    auth->Add(payload + done, piece);
    iovec pieces[4];
    int count = 0;
    if (done == 0) {
      pieces[count++] = {const_cast<Header*>(&header), sizeof header};
      pieces[count++] = {header_tag, kFrameTagBytes};
    }
    pieces[count++] = {const_cast<char*>(payload + done), piece};
    done += piece;
    if (done == header.bytes) {
      auth->Finish(payload_tag);
      auth->EndFrame();
      pieces[count++] = {payload_tag, kFrameTagBytes};
    }
    if (!WriteVectors(fd, pieces, count)) return false;
  }
  return true;
}

int64_t DataPlaneCore::WriteFrom(Connection* connection, const Connection::Frame& frame, int flags) {
  const char* payload = frame.header.kind == kAck ? frame.error.data() : frame.payload;
  const size_t total = sizeof(Header) + frame.header.bytes;
  size_t sent = frame.sent;
  while (sent < total) {
    iovec pieces[2];
    int count = 0;
    if (sent < sizeof(Header))
      pieces[count++] = {reinterpret_cast<char*>(const_cast<Header*>(&frame.header)) + sent, sizeof(Header) - sent};
    const size_t into_payload = sent < sizeof(Header) ? 0 : sent - sizeof(Header);
    if (frame.header.bytes > into_payload)
      pieces[count++] = {const_cast<char*>(payload) + into_payload, frame.header.bytes - into_payload};
    msghdr message{};
    message.msg_iov = pieces;
    message.msg_iovlen = static_cast<size_t>(count);
    const ssize_t wrote = sendmsg(connection->fd, &message, MSG_NOSIGNAL | flags);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0 && (flags & MSG_DONTWAIT) != 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (wrote <= 0) return -1;
    sent += static_cast<size_t>(wrote);
  }
  return static_cast<int64_t>(sent);
}

void DataPlaneCore::Send(int peer, Connection::Frame frame) {
  Connection& connection = *connections.at(peer);
  {
    std::lock_guard<std::mutex> lock(connection.mu);
    if (connection.closing || connection.socket_busy || !connection.queue.empty() || connection.send_auth != nullptr) {
      connection.queue.push_back(std::move(frame));
      connection.cv.notify_one();
      return;
    }
    connection.socket_busy = true;  // the writer now waits until this thread is done
  }
  bool began = true;
  if (frame.header.kind == kData) {  // marked as being written, as the writer does (Fail leaves it to us)
    std::lock_guard<std::mutex> lock(mu);
    began = failure.empty();
    if (began) {
      connection.writing = true;
      connection.writing_key = {frame.header.job, frame.header.channel};
      connection.writing_iteration = frame.header.iteration;
    }
  }
  if (!began) {  // the data plane failed: the writer completes the send with the failure
    std::lock_guard<std::mutex> lock(connection.mu);
    connection.socket_busy = false;
    connection.queue.push_front(std::move(frame));
  } else {
    if (frame.header.kind != kAck) connection.payload_sent.fetch_add(frame.header.bytes, std::memory_order_relaxed);
    const int64_t sent = WriteFrom(&connection, frame, MSG_DONTWAIT);
    if (sent > 0) direct_writes.fetch_add(1, std::memory_order_relaxed);
    if (sent < 0) {  // the connection broke: as when the writer's write fails
      const std::string why = std::strerror(errno);
      if (frame.header.kind == kData) (void)EndDataWrite(&connection, frame, false);
      {
        std::lock_guard<std::mutex> lock(connection.mu);
        connection.socket_busy = false;
      }
      connection.cv.notify_one();
      Lost(peer, "writing to its data connection: " + why);
      return;
    }
    const bool whole = sent == static_cast<int64_t>(sizeof(Header) + frame.header.bytes);
    if (whole && frame.header.kind == kData) (void)EndDataWrite(&connection, frame, true);
    std::lock_guard<std::mutex> lock(connection.mu);
    connection.socket_busy = false;
    if (!whole) {  // the rest goes first: nothing was queued behind it while this thread wrote
      frame.begun = true;
      frame.sent = static_cast<size_t>(sent);
      connection.queue.push_front(std::move(frame));
    }
  }
  connection.cv.notify_one();
}

bool DataPlaneCore::ReadHeader(Connection* connection, Header* header) {
  FrameAuthenticator* auth = connection->receive_auth.get();
  if (auth == nullptr) {
    if (ReadAll(connection->fd, header, sizeof *header)) return true;
    connection->read_error = Closed(connection);
    return false;
  }
  unsigned char head[sizeof(Header) + kFrameTagBytes];
  if (!ReadAll(connection->fd, head, sizeof head)) {
    connection->read_error = Closed(connection);
    return false;
  }
  std::memcpy(header, head, sizeof *header);
  auth->Begin(FrameAuthenticator::kHeader);
  auth->Add(head, sizeof *header);
  if (!auth->Check(head + sizeof *header)) {
    connection->read_error = "data frame " + std::to_string(auth->sequence()) + " from rank " +
                             std::to_string(connection->peer) +
                             " failed authentication (its header was altered, replayed, reordered or cut short "
                             "on the way, or rank " + std::to_string(connection->peer) +
                             " did not send it): the data plane stops";
    return false;
  }
  if (header->bytes > 0) auth->Begin(FrameAuthenticator::kPayload);
  return true;
}

bool DataPlaneCore::ReadPayload(Connection* connection, char* destination, size_t bytes) {
  FrameAuthenticator* auth = connection->receive_auth.get();
  for (size_t done = 0; done < bytes;) {
    const size_t piece = auth == nullptr ? bytes : std::min<size_t>(bytes - done, kAuthenticatedPiece);
    if (!ReadAll(connection->fd, destination + done, piece)) {
      connection->read_error = Closed(connection);
      return false;
    }
    if (auth != nullptr) auth->Add(destination + done, piece);
    done += piece;
  }
  return true;
}

bool DataPlaneCore::EndPayload(Connection* connection, const Header& header) {
  FrameAuthenticator* auth = connection->receive_auth.get();
  if (auth == nullptr) return true;
  if (header.bytes > 0) {
    unsigned char tag[kFrameTagBytes];
    if (!ReadAll(connection->fd, tag, kFrameTagBytes)) {
      connection->read_error = Closed(connection);
      return false;
    }
    if (!auth->Check(tag)) {
      connection->read_error = "data frame " + std::to_string(auth->sequence()) + " from rank " +
                               std::to_string(connection->peer) + " failed authentication (its " +
                               std::to_string(header.bytes) +
                               " payload bytes were altered, replayed, reordered or cut short on the way, or rank " +
                               std::to_string(connection->peer) + " did not send them): the data plane stops";
      return false;
    }
  }
  auth->EndFrame();
  return true;
}

}  // namespace data_plane_internal

StatusOr<std::shared_ptr<DataPlane>> DataPlane::Create(Cluster& cluster, std::shared_ptr<ActorEnvironment> environment,
                                                       std::chrono::milliseconds timeout) {
  if (!environment) return InvalidArgument("DataPlane::Create: no actor environment");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int rank = cluster.rank(), world = cluster.world_size();
  const std::string& host =
      cluster.options().data_host.empty() ? cluster.options().coordinator_host : cluster.options().data_host;
  const DataHandshake handshake{cluster.options().secret, cluster.options().job_id, rank,
                                AuthenticatesFrames(cluster.options())};
  if (handshake.authenticate_frames && handshake.secret.empty())
    return InvalidArgument("data plane of rank " + std::to_string(rank) +
                           ": frame authentication (on with TLS, ClusterOptions::authenticate_data_frames or "
                           "ACTORFLOW_DATA_AUTH=1) needs the cluster secret (ClusterOptions::secret, the launcher's "
                           "ACTORFLOW_CLUSTER_SECRET): the frame keys are derived from it");
  // Listen first (loopback unless the cluster is configured otherwise), then tell the others.
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1)
    return InvalidArgument("data plane: its address (ClusterOptions::data_host, else coordinator_host) '" + host +
                           "' is not an IPv4 address");
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, world) != 0) {
    Status error = FailedPrecondition(Errno("data plane of rank " + std::to_string(rank) + " cannot listen on " + host));
    if (listener >= 0) close(listener);
    return error;
  }
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const uint16_t port = ntohs(address.sin_port);
  caf::actor endpoint = environment->system().spawn(Endpoint, host, port);
  auto endpoints = cluster.AllGather(endpoint, timeout);
  std::vector<PeerConnection> connections;
  auto fail = [&](Status status) {
    for (PeerConnection& connection : connections) close(connection.fd);
    close(listener);
    caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
    return status.WithContext("starting the data plane of rank " + std::to_string(rank));
  };
  if (!endpoints.ok()) return fail(endpoints.status());
  // Rank i connects to every higher rank and accepts every lower one: one connection per pair.
  caf::scoped_actor self{environment->system()};
  for (int peer = rank + 1; peer < world; ++peer) {
    uint16_t peer_port = 0;
    std::string peer_host, error;
    self->request((*endpoints)[peer], timeout, port_atom::value)
        .receive(
            [&](std::string& h, uint16_t p) {
              peer_host = std::move(h);
              peer_port = p;
            },
            [&](caf::error& e) { error = environment->system().render(e); });
    if (peer_port == 0) return fail(FailedPrecondition("rank " + std::to_string(peer) + " did not tell its data port: " + error));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(peer_port);
    if (inet_pton(AF_INET, peer_host.c_str(), &to.sin_addr) != 1) {
      close(fd);
      return fail(FailedPrecondition("rank " + std::to_string(peer) + " told a data address that is not IPv4: '" +
                                     peer_host + "'"));
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      Status status = FailedPrecondition(Errno("cannot connect to rank " + std::to_string(peer) + "'s data port"));
      close(fd);
      return fail(status);
    }
    FrameKeys keys;
    Status proven = ConnectHandshake(fd, handshake, peer, deadline, &keys);
    if (!proven.ok()) {
      close(fd);
      return fail(proven);
    }
    connections.push_back(PeerConnection{peer, fd, keys});
  }
  for (int accepted = 0; accepted < rank;) {
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd descriptor{listener, POLLIN, 0};
    if (remaining.count() <= 0 || poll(&descriptor, 1, static_cast<int>(remaining.count())) <= 0)
      return fail(FailedPrecondition("timed out waiting for the data connections of lower ranks"));
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    // Bounded per connection: a stranger that never answers cannot hold the accept loop long.
    FrameKeys keys;
    auto peer = AcceptHandshake(fd, handshake, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2)),
                                &keys);
    if (peer.ok() && std::any_of(connections.begin(), connections.end(),
                                 [&](const PeerConnection& connection) { return connection.peer == *peer; }))
      peer = FailedPrecondition("data plane of rank " + std::to_string(rank) + " refused a second connection from rank " +
                                std::to_string(*peer));
    if (!peer.ok()) {
      std::fprintf(stderr, "actorflow: %s\n", peer.status().message().c_str());
      std::fflush(stderr);
      close(fd);
      continue;
    }
    connections.push_back(PeerConnection{*peer, fd, keys});
    ++accepted;
  }
  close(listener);
  caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
  for (PeerConnection& connection : connections) {
    int one = 1;
    setsockopt(connection.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  std::shared_ptr<DataPlane> plane = Start(rank, std::move(connections));
  std::weak_ptr<DataPlaneCore> weak = plane->core_;
  {
    std::lock_guard<std::mutex> lock(plane->core_->mu);
    plane->core_->control_plane = true;
  }
  cluster.OnFailure([weak](const std::string& message) {
    if (auto core = weak.lock()) core->Fail(message);
  });
  return plane;
}

std::shared_ptr<DataPlane> DataPlane::Start(int rank, std::vector<PeerConnection> connections) {
  std::shared_ptr<DataPlane> plane(new DataPlane());
  plane->core_ = std::make_shared<DataPlaneCore>();
  DataPlaneCore& core = *plane->core_;
  core.rank = rank;
  for (PeerConnection& opened : connections) {
    auto connection = std::make_unique<Connection>();
    connection->peer = opened.peer;
    connection->fd = opened.fd;
    if (opened.keys.enabled) {
      connection->send_auth = std::make_unique<FrameAuthenticator>(opened.keys.send);
      connection->receive_auth = std::make_unique<FrameAuthenticator>(opened.keys.receive);
    }
    core.connections[opened.peer] = std::move(connection);
  }
  for (auto& [peer, connection] : core.connections) {
    Connection* raw = connection.get();
    DataPlaneCore* core_pointer = plane->core_.get();  // the threads end in ~DataPlane, before the core
    raw->reader = std::thread([core_pointer, raw] { core_pointer->Reader(raw); });
    raw->writer = std::thread([core_pointer, raw] { core_pointer->Writer(raw); });
  }
  return plane;
}

bool DataPlane::AuthenticatesFrames(const ClusterOptions& options) {
  const char* variable = std::getenv("ACTORFLOW_DATA_AUTH");
  return options.tls.enabled() || options.authenticate_data_frames || (variable != nullptr && std::strcmp(variable, "1") == 0);
}

DataPlane::~DataPlane() {
  if (!core_) return;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->closing = true;  // peers closing their ends now is the normal end, not a loss
  }
  core_->failure_told.notify_all();  // a reader waiting for the control plane's word ends
  for (auto& [peer, connection] : core_->connections) {
    {
      std::lock_guard<std::mutex> lock(connection->mu);
      connection->closing = true;
    }
    connection->cv.notify_all();
    shutdown(connection->fd, SHUT_RDWR);  // ends a blocked recv or send
    if (connection->writer.joinable()) connection->writer.join();
    if (connection->reader.joinable()) connection->reader.join();
    close(connection->fd);
  }
}

bool DataPlane::Handles(const std::string& op_type) {
  return op_type == "send" || op_type == "recv" || op_type == kAllReduceOp;
}

int DataPlane::rank() const { return core_->rank; }

std::pair<uint64_t, uint64_t> DataPlane::PayloadBytes() const {
  std::pair<uint64_t, uint64_t> bytes{0, 0};
  for (const auto& [peer, connection] : core_->connections) {
    bytes.first += connection->payload_sent.load(std::memory_order_relaxed);
    bytes.second += connection->payload_received.load(std::memory_order_relaxed);
  }
  return bytes;
}

uint64_t DataPlane::CopiedPayloadBytes() const { return core_->copied_bytes.load(std::memory_order_relaxed); }

uint64_t DataPlane::DirectWrites() const { return core_->direct_writes.load(std::memory_order_relaxed); }

size_t DataPlane::waiting_payloads() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  size_t waiting = 0;
  for (const auto& [key, channel] : core_->recvs) waiting += channel.arrived.size();
  return waiting;
}

StatusOr<KernelFn> DataPlane::MakeKernel(const std::string& job, const plan::Task& task) {
  if (task.op_type() == kAllReduceOp) return MakeAllReduceKernel(job, task);
  const int64_t channel_id = IntAttr(task, "channel"), peer = IntAttr(task, "peer"), bytes = IntAttr(task, "bytes");
  const std::string what = task.op_type() + " '" + task.name() + "'";
  if (!Handles(task.op_type())) return InvalidArgument(what + ": not a data plane op");
  if (!task.asynchronous()) return InvalidArgument(what + ": must be asynchronous (plan Task.asynchronous)");
  if (channel_id < 0 || bytes < 0 || peer < 0 || !core_->connections.count(static_cast<int>(peer)))
    return InvalidArgument(what + ": attrs channel, peer and bytes must be set, peer another rank of the " +
                           std::to_string(core_->connections.size() + 1) + ", got channel " + std::to_string(channel_id) +
                           ", peer " + std::to_string(peer) + ", bytes " + std::to_string(bytes));
  const uint64_t job_key = Fnv1a64(job);
  const ChannelKey key{job_key, channel_id};
  std::shared_ptr<DataPlaneCore> core = core_;
  const int from_rank = core_->rank;
  const int to = static_cast<int>(peer);
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
    return KernelFn([core, key, bytes, to](KernelContext& ctx) -> Status {
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
        error = task + ": expected " + std::to_string(bytes) + " bytes from rank " + std::to_string(to) + ", got " +
                std::to_string(arrived.size()) + " (do all ranks run the same plan?)";
      else if (!arrived.empty())
        std::memcpy(destination, arrived.data(), arrived.size());
      core->copied_bytes.fetch_add(arrived.size(), std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(core->mu);
        RecvChannel& channel = core->recvs[key];
        if (channel.spare.size() < kSpareBuffers) channel.spare.push_back(std::move(arrived));
      }
      core->Ack(to, key.first, key.second, ctx.iteration, error);
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
  return KernelFn([core, key, bytes, to, from_rank](KernelContext& ctx) -> Status {
    const char* payload = nullptr;
    if (bytes > 0) {
      const TensorView& input = ctx.input(0);
      if (static_cast<int64_t>(input.byte_size()) != bytes)
        return Internal("send: the input holds " + std::to_string(input.byte_size()) + " bytes, the plan says " +
                        std::to_string(bytes));
      payload = static_cast<const char*>(input.data);  // held until the ack: sent from the register
    }
    {
      std::lock_guard<std::mutex> lock(core->mu);
      SendChannel& channel = core->sends[key];
      if (!core->failure.empty()) return core->Failed(channel.task);
      channel.pending.emplace(ctx.iteration, ctx.TakeCompletion());
    }
    Connection::Frame frame;
    frame.header = Header{key.first, key.second, ctx.iteration, kData, static_cast<uint32_t>(from_rank),
                          static_cast<uint64_t>(bytes)};
    frame.payload = payload;
    core->Send(to, std::move(frame));
    return Status::Ok();
  });
}

}  // namespace actorflow
