#include "comm/data_plane.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <cerrno>
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
#include "comm/ring.h"

namespace actorflow {

namespace {

// The endpoint actor only tells its data port (the control plane exchanges the endpoints).
using port_atom = caf::atom_constant<caf::atom("afport")>;

using ChannelKey = std::pair<uint64_t, int64_t>;  // (job digest, channel)

// One frame on a data connection: a header, then `bytes` payload bytes (data) or `bytes` bytes
// of error text (ack; 0 = received fine). Both ends are this host's byte order (loopback).
struct Header {
  uint64_t job = 0;
  int64_t channel = 0;
  int64_t iteration = 0;
  uint32_t kind = 0;  // kData, kAck or kCollective
  uint32_t from = 0;  // the sender's rank
  uint64_t bytes = 0;
  uint64_t step = 0;  // kCollective: the all-reduce's step (comm/ring.h)
};
constexpr uint32_t kData = 1, kAck = 2, kCollective = 3;

struct Posted {
  char* destination = nullptr;
  KernelCompletion done;
};

struct RecvChannel {
  std::string task;    // for messages
  int64_t bytes = -1;  // -1 until the local RECV task registered (data may come first)
  std::map<int64_t, Posted> posted;              // iteration -> the register waiting for it
  std::map<int64_t, std::vector<char>> arrived;  // iteration -> bytes waiting for a register
};

struct SendChannel {
  std::string task;
  std::map<int64_t, KernelCompletion> pending;  // iteration -> waiting for the receiver's ack
};

// One launched act of an all-reduce task: its output register holds the sum being built; chunks
// are sent from it and received (added or copied) into it.
struct CollectiveAct {
  char* sum = nullptr;
  int received = 0;  // steps whose chunk is in `sum`
  int busy = 0;      // chunks being read or applied into `sum`, frames queued or being written from it
  std::string error;  // set when the act failed: it completes once nothing is busy
  KernelCompletion done;
};

struct CollectiveChannel {
  std::string task;
  std::unique_ptr<RingSchedule> schedule;  // null until the local task registered (bytes may come first)
  DType dtype = DType::kFloat32;
  int next = -1, previous = -1;  // ranks
  std::map<int64_t, CollectiveAct> acts;  // iteration -> act in flight
  // (iteration, step) -> a chunk that came before its act launched (bounded: the previous rank
  // sends step t + 1 only after it received step t, and launches at most register_num acts).
  std::map<std::pair<int64_t, int64_t>, std::vector<char>> early;
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t wrote = send(fd, p, n, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    p += wrote;
    n -= static_cast<size_t>(wrote);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

// One TCP connection to a peer rank: a writer thread sends queued frames in order (payloads
// straight from the SEND's register, which stays held until the ack), a reader thread reads
// frames (payloads straight into a posted RECV register when one waits). Acks go through the
// writer too, so a reader never blocks on a write (two readers blocked writing to each other
// would deadlock).
struct Connection {
  int peer = -1;
  int fd = -1;
  std::mutex mu;
  std::condition_variable cv;
  struct Frame {
    Header header;
    const char* payload = nullptr;  // data: the register; ack: error text below
    std::string error;
  };
  std::deque<Frame> queue;
  bool closing = false;
  std::thread reader, writer;
  // The data frame being written (under DataPlaneCore::mu): its send is completed by the
  // writer once the write ended, never while the write may still read the register.
  bool writing = false;
  std::pair<uint64_t, int64_t> writing_key;
  int64_t writing_iteration = 0;
};

class DataPlaneCore {
 public:
  std::mutex mu;
  std::string failure;  // the control plane's or a connection's, once a rank is lost
  bool closing = false;  // the data plane is being destroyed: a closed connection is expected
  int rank = 0;
  std::map<int, std::unique_ptr<Connection>> connections;  // by peer rank; fixed after Create
  std::map<ChannelKey, RecvChannel> recvs;
  std::map<ChannelKey, SendChannel> sends;
  std::map<ChannelKey, CollectiveChannel> collectives;  // channels never go away: references stay valid

  // Fails every pending act and remembers why, so that later acts fail at once.
  void Fail(const std::string& message) {
    std::vector<std::pair<KernelCompletion, std::string>> failed;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty() || closing) return;
      failure = message;
      for (auto& [key, channel] : recvs) {
        for (auto& [iteration, posted] : channel.posted) failed.emplace_back(std::move(posted.done), channel.task);
        channel.posted.clear();
        channel.arrived.clear();
      }
      for (auto& [key, channel] : sends) {
        for (auto it = channel.pending.begin(); it != channel.pending.end();) {
          if (BeingWritten(key, it->first)) {  // its writer completes it when the write ends
            ++it;
            continue;
          }
          failed.emplace_back(std::move(it->second), channel.task);
          it = channel.pending.erase(it);
        }
      }
      for (auto& [key, channel] : collectives) {
        for (auto it = channel.acts.begin(); it != channel.acts.end();) {
          if (it->second.error.empty()) it->second.error = message;
          if (it->second.busy > 0) {  // whoever holds it completes it when done with its sum
            ++it;
            continue;
          }
          failed.emplace_back(std::move(it->second.done), channel.task);
          it = channel.acts.erase(it);
        }
        channel.early.clear();
      }
      // Unblocks readers and writers (a frozen peer never reads nor writes again).
      for (auto& [peer, connection] : connections) shutdown(connection->fd, SHUT_RDWR);
    }
    for (auto& [done, task] : failed) (void)done.Complete(FailedPrecondition(message).WithContext(task));
  }

  bool BeingWritten(const std::pair<uint64_t, int64_t>& key, int64_t iteration) const {  // mu held
    for (const auto& [peer, connection] : connections)
      if (connection->writing && connection->writing_key == key && connection->writing_iteration == iteration)
        return true;
    return false;
  }

  // The writer's data frame: written unless the data plane failed; if it failed before or
  // during the write, the send is completed with the failure here.
  bool WriteData(Connection* connection, const Connection::Frame& frame) {
    const std::pair<uint64_t, int64_t> key{frame.header.job, frame.header.channel};
    {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) {
        connection->writing = true;
        connection->writing_key = key;
        connection->writing_iteration = frame.header.iteration;
      }
    }
    bool written = connection->writing && WriteAll(connection->fd, &frame.header, sizeof frame.header) &&
                   (frame.header.bytes == 0 || WriteAll(connection->fd, frame.payload, frame.header.bytes));
    KernelCompletion done;
    std::string task, why;
    {
      std::lock_guard<std::mutex> lock(mu);
      connection->writing = false;
      if (!failure.empty()) {
        auto channel = sends.find(key);
        if (channel != sends.end()) {
          auto it = channel->second.pending.find(frame.header.iteration);
          if (it != channel->second.pending.end()) {
            done = std::move(it->second);
            channel->second.pending.erase(it);
            task = channel->second.task;
            why = failure;
          }
        }
      }
    }
    if (done.valid()) (void)done.Complete(FailedPrecondition(why).WithContext(task));
    return written || !why.empty();
  }

  Status Failed(const std::string& task) {  // mu held
    return FailedPrecondition(failure).WithContext(task);
  }

  void Enqueue(int peer, Connection::Frame frame) {
    Connection& connection = *connections.at(peer);
    {
      std::lock_guard<std::mutex> lock(connection.mu);
      connection.queue.push_back(std::move(frame));
    }
    connection.cv.notify_one();
  }

  void Ack(int peer, uint64_t job, int64_t channel, int64_t iteration, std::string error) {
    Connection::Frame frame;
    frame.header = Header{job, channel, iteration, kAck, static_cast<uint32_t>(rank), error.size()};
    frame.error = std::move(error);
    Enqueue(peer, std::move(frame));
  }

  void Writer(Connection* connection) {
    for (;;) {
      Connection::Frame frame;
      {
        std::unique_lock<std::mutex> lock(connection->mu);
        connection->cv.wait(lock, [&] { return connection->closing || !connection->queue.empty(); });
        if (connection->queue.empty()) return;  // closing
        frame = std::move(connection->queue.front());
        connection->queue.pop_front();
      }
      bool written;
      if (frame.header.kind == kData) {
        written = WriteData(connection, frame);
      } else if (frame.header.kind == kCollective) {
        written = WriteCollective(connection, frame);
      } else {
        written = WriteAll(connection->fd, &frame.header, sizeof frame.header) &&
                  (frame.header.bytes == 0 || WriteAll(connection->fd, frame.error.data(), frame.header.bytes));
      }
      if (!written) {
        Lost(connection->peer, "writing to its data connection: " + std::string(std::strerror(errno)));
        // Keep draining the queue: queued sends are completed (failed) by WriteData.
      }
    }
  }

  void Reader(Connection* connection) {
    std::vector<char> error_text;
    std::vector<char> scratch(kReducePiece);  // the all-reduce adds what it reads piece by piece
    for (;;) {
      Header header;
      if (!ReadAll(connection->fd, &header, sizeof header)) return Lost(connection->peer, "its data connection closed");
      if (header.kind == kCollective) {
        if (!ReceiveCollective(connection, header, scratch)) return Lost(connection->peer, "its data connection closed");
        continue;
      }
      if (header.kind == kAck) {
        error_text.resize(header.bytes);
        if (header.bytes > 0 && !ReadAll(connection->fd, error_text.data(), header.bytes))
          return Lost(connection->peer, "its data connection closed");
        KernelCompletion done;
        std::string task;
        {
          std::lock_guard<std::mutex> lock(mu);
          auto channel = sends.find({header.job, header.channel});
          if (channel == sends.end()) continue;
          auto it = channel->second.pending.find(header.iteration);
          if (it == channel->second.pending.end()) continue;  // failed already
          done = std::move(it->second);
          channel->second.pending.erase(it);
          task = channel->second.task;
        }
        (void)done.Complete(header.bytes == 0 ? Status::Ok()
                                              : Internal(std::string(error_text.begin(), error_text.end())).WithContext(task));
        continue;
      }
      // Data: straight into the posted register when one waits, else into a buffer that
      // waits for the RECV act (at most the sender's register_num per channel).
      Posted posted;
      bool have_register = false;
      std::string task;
      int64_t expected = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        RecvChannel& channel = recvs[{header.job, header.channel}];
        auto it = channel.posted.find(header.iteration);
        if (it != channel.posted.end() && static_cast<int64_t>(header.bytes) == channel.bytes) {
          posted = std::move(it->second);
          channel.posted.erase(it);
          have_register = true;
        }
        task = channel.task;
        expected = channel.bytes;
      }
      if (have_register) {
        if (header.bytes > 0 && !ReadAll(connection->fd, posted.destination, header.bytes)) {
          (void)posted.done.Complete(FailedPrecondition("lost rank " + std::to_string(connection->peer)).WithContext(task));
          return Lost(connection->peer, "its data connection closed");
        }
        (void)posted.done.Complete(Status::Ok());
        Ack(connection->peer, header.job, header.channel, header.iteration, "");
        continue;
      }
      std::vector<char> bytes(header.bytes);
      if (header.bytes > 0 && !ReadAll(connection->fd, bytes.data(), header.bytes))
        return Lost(connection->peer, "its data connection closed");
      std::string error;
      {
        std::lock_guard<std::mutex> lock(mu);
        RecvChannel& channel = recvs[{header.job, header.channel}];
        auto it = channel.posted.find(header.iteration);
        if (it == channel.posted.end()) {  // the usual case: the RECV act comes later
          channel.arrived.emplace(header.iteration, std::move(bytes));
          continue;
        }
        posted = std::move(it->second);  // posted while we read
        channel.posted.erase(it);
        expected = channel.bytes;
        task = channel.task;
      }
      if (static_cast<int64_t>(bytes.size()) != expected) {
        error = task + ": expected " + std::to_string(expected) + " bytes from rank " + std::to_string(connection->peer) +
                ", got " + std::to_string(bytes.size()) + " (do all ranks run the same plan?)";
        (void)posted.done.Complete(Internal(error));
      } else {
        if (!bytes.empty()) std::memcpy(posted.destination, bytes.data(), bytes.size());
        (void)posted.done.Complete(Status::Ok());
      }
      Ack(connection->peer, header.job, header.channel, header.iteration, error);
    }
  }

  // ---- The ring all-reduce (comm/ring.h). An act advances as its chunks arrive, on the reader
  // thread of the previous rank's connection: each chunk is added (or copied) into the act's
  // sum and queued on to the next rank. Nothing waits for a particular act, so ranks may launch
  // their all-reduces in any order without deadlock. A chunk that comes before its act launched
  // waits in `early` and is applied by the launch.

  static constexpr int64_t kReducePiece = 64 * 1024;  // a multiple of every element size

  struct Ended {
    KernelCompletion done;
    Status status;
  };

  // mu held. Queues the frame of `step`: its chunk, straight from the act's sum (busy until written).
  void QueueStep(const ChannelKey& key, CollectiveChannel& channel, int64_t iteration, CollectiveAct& act, int step) {
    const RingSchedule& ring = *channel.schedule;
    const int chunk = ring.SendChunk(step);
    Connection::Frame frame;
    frame.header = Header{key.first, key.second, iteration, kCollective, static_cast<uint32_t>(rank),
                          static_cast<uint64_t>(ring.ChunkBytes(chunk)), static_cast<uint64_t>(step)};
    frame.payload = act.sum + ring.ChunkOffset(chunk);
    ++act.busy;
    Enqueue(channel.next, std::move(frame));
  }

  // mu held. One use of the act ended; when the act is over (every step in its sum, or failed,
  // and nothing uses it any more) it is removed and its completion returned.
  std::optional<Ended> Release(CollectiveChannel& channel, int64_t iteration) {
    auto it = channel.acts.find(iteration);
    CollectiveAct& act = it->second;
    if (--act.busy > 0 || (act.error.empty() && act.received < channel.schedule->steps())) return std::nullopt;
    Ended ended{std::move(act.done), act.error.empty() ? Status::Ok() : FailedPrecondition(act.error).WithContext(channel.task)};
    channel.acts.erase(it);
    return ended;
  }

  // mu held. Why a chunk cannot belong to this act ("" when it can).
  std::string Mismatch(const CollectiveChannel& channel, uint64_t step, uint64_t bytes, int from) const {
    const RingSchedule& ring = *channel.schedule;
    if (from == channel.previous && step < static_cast<uint64_t>(ring.steps()) &&
        static_cast<int64_t>(bytes) == ring.ChunkBytes(ring.ReceiveChunk(static_cast<int>(step))))
      return "";
    return "step " + std::to_string(step) + " of " + std::to_string(bytes) + " bytes from rank " + std::to_string(from) +
           " does not fit this rank's ring (do all ranks run the same plan?)";
  }

  // Applies the chunk of `step` into the act's sum, from `source`, or read from `fd` when source
  // is null; then queues the next step. Called without mu, with the act busy on the caller's
  // behalf (released here). False when reading failed.
  bool ApplyStep(const ChannelKey& key, CollectiveChannel& channel, int64_t iteration, CollectiveAct& act, int step,
                 const char* source, int fd, std::vector<char>& scratch) {
    const RingSchedule& ring = *channel.schedule;
    const int chunk = ring.ReceiveChunk(step);
    char* destination = act.sum + ring.ChunkOffset(chunk);
    const int64_t bytes = ring.ChunkBytes(chunk);
    bool read = true;
    if (!ring.Reduces(step)) {
      if (source != nullptr) std::memcpy(destination, source, static_cast<size_t>(bytes));
      else read = ReadAll(fd, destination, static_cast<size_t>(bytes));
    } else if (source != nullptr) {
      AccumulateInto(destination, source, bytes, channel.dtype);
    } else {
      for (int64_t done = 0; read && done < bytes; done += kReducePiece) {  // the sum streams as bytes come
        const int64_t piece = std::min<int64_t>(bytes - done, kReducePiece);
        read = ReadAll(fd, scratch.data(), static_cast<size_t>(piece));
        if (read) AccumulateInto(destination + done, scratch.data(), piece, channel.dtype);
      }
    }
    std::optional<Ended> ended;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!read) {
        if (act.error.empty()) act.error = "lost rank " + std::to_string(channel.previous) + " (its data connection closed)";
      } else {
        ++act.received;
        if (act.error.empty() && step + 1 < ring.steps()) QueueStep(key, channel, iteration, act, step + 1);
      }
      ended = Release(channel, iteration);
    }
    if (ended) (void)ended->done.Complete(ended->status);
    return read;
  }

  // The reader's collective frame: into its act when it launched, else kept for the launch.
  bool ReceiveCollective(Connection* connection, const Header& header, std::vector<char>& scratch) {
    const ChannelKey key{header.job, header.channel};
    const int step = static_cast<int>(header.step);
    CollectiveChannel* channel = nullptr;
    CollectiveAct* act = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      channel = &collectives[key];
      auto it = channel->acts.find(header.iteration);
      if (it != channel->acts.end() && it->second.error.empty() &&
          Mismatch(*channel, header.step, header.bytes, connection->peer).empty()) {
        act = &it->second;
        ++act->busy;
      }
    }
    if (act != nullptr) return ApplyStep(key, *channel, header.iteration, *act, step, nullptr, connection->fd, scratch);
    std::vector<char> bytes(header.bytes);
    if (header.bytes > 0 && !ReadAll(connection->fd, bytes.data(), header.bytes)) return false;
    std::optional<Ended> ended;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty()) return true;
      auto it = channel->acts.find(header.iteration);
      if (it == channel->acts.end()) {  // the usual case of this path: the act comes later
        channel->early.emplace(std::make_pair(header.iteration, static_cast<int64_t>(header.step)), std::move(bytes));
        return true;
      }
      if (!it->second.error.empty()) return true;  // failed already: the chunk is moot
      ++it->second.busy;
      const std::string mismatch = Mismatch(*channel, header.step, header.bytes, connection->peer);
      if (mismatch.empty()) {
        act = &it->second;
      } else {
        it->second.error = mismatch;
        ended = Release(*channel, header.iteration);
      }
    }
    if (ended) (void)ended->done.Complete(ended->status);
    if (act != nullptr) return ApplyStep(key, *channel, header.iteration, *act, step, bytes.data(), -1, scratch);
    return true;
  }

  // The writer's collective frame: written unless the data plane failed; then the act's use ends.
  bool WriteCollective(Connection* connection, const Connection::Frame& frame) {
    bool failed;
    {
      std::lock_guard<std::mutex> lock(mu);
      failed = !failure.empty();
    }
    const bool written = failed || (WriteAll(connection->fd, &frame.header, sizeof frame.header) &&
                                    (frame.header.bytes == 0 || WriteAll(connection->fd, frame.payload, frame.header.bytes)));
    std::optional<Ended> ended;
    {
      std::lock_guard<std::mutex> lock(mu);
      CollectiveChannel& channel = collectives[{frame.header.job, frame.header.channel}];
      CollectiveAct& act = channel.acts.at(frame.header.iteration);
      if (!written && act.error.empty()) act.error = "lost rank " + std::to_string(connection->peer) + " (writing to it failed)";
      ended = Release(channel, frame.header.iteration);
    }
    if (ended) (void)ended->done.Complete(ended->status);
    return written;
  }

  void Lost(int peer, const std::string& why) {
    Fail("lost rank " + std::to_string(peer) + " (" + why + ")");
  }
};

namespace {

caf::behavior Endpoint(caf::event_based_actor*, uint16_t port) {
  return {[port](port_atom) { return port; }};
}

int64_t IntAttr(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() || it->second.value_case() != plan::AttrValue::kI ? -1 : it->second.i();
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Rank, then the job's digest: a connection from another job (or a stranger who guessed the
// port) is refused. Not authentication; see docs/cluster.md.
struct Hello {
  uint64_t rank = 0;  // 64 bits: no padding goes on the wire
  uint64_t job = 0;
};

}  // namespace

StatusOr<std::shared_ptr<DataPlane>> DataPlane::Create(Cluster& cluster, std::shared_ptr<ActorEnvironment> environment,
                                                       std::chrono::milliseconds timeout) {
  if (!environment) return InvalidArgument("DataPlane::Create: no actor environment");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int rank = cluster.rank(), world = cluster.world_size();
  const std::string& host = cluster.options().coordinator_host;
  const uint64_t job = Fnv1a64(cluster.options().job_id);
  // Listen first (loopback unless the cluster is configured otherwise), then tell the others.
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1)
    return InvalidArgument("data plane: coordinator_host '" + host + "' is not an IPv4 address");
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, world) != 0) {
    Status error = FailedPrecondition(Errno("data plane of rank " + std::to_string(rank) + " cannot listen on " + host));
    if (listener >= 0) close(listener);
    return error;
  }
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const uint16_t port = ntohs(address.sin_port);
  caf::actor endpoint = environment->system().spawn(Endpoint, port);
  auto endpoints = cluster.AllGather(endpoint, timeout);
  std::shared_ptr<DataPlane> plane(new DataPlane());
  plane->core_ = std::make_shared<DataPlaneCore>();
  DataPlaneCore& core = *plane->core_;
  core.rank = rank;
  auto fail = [&](Status status) {
    close(listener);
    caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
    return status.WithContext("starting the data plane of rank " + std::to_string(rank));
  };
  if (!endpoints.ok()) return fail(endpoints.status());
  // Rank i connects to every higher rank and accepts every lower one: one connection per pair.
  caf::scoped_actor self{environment->system()};
  for (int peer = rank + 1; peer < world; ++peer) {
    uint16_t peer_port = 0;
    std::string error;
    self->request((*endpoints)[peer], timeout, port_atom::value)
        .receive([&](uint16_t p) { peer_port = p; }, [&](caf::error& e) { error = environment->system().render(e); });
    if (peer_port == 0) return fail(FailedPrecondition("rank " + std::to_string(peer) + " did not tell its data port: " + error));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to = address;
    to.sin_port = htons(peer_port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      Status status = FailedPrecondition(Errno("cannot connect to rank " + std::to_string(peer) + "'s data port"));
      close(fd);
      return fail(status);
    }
    Hello hello{static_cast<uint64_t>(rank), job};
    WriteAll(fd, &hello, sizeof hello);
    auto connection = std::make_unique<Connection>();
    connection->peer = peer;
    connection->fd = fd;
    core.connections[peer] = std::move(connection);
  }
  for (int accepted = 0; accepted < rank;) {
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd descriptor{listener, POLLIN, 0};
    if (remaining.count() <= 0 || poll(&descriptor, 1, static_cast<int>(remaining.count())) <= 0)
      return fail(FailedPrecondition("timed out waiting for the data connections of lower ranks"));
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    Hello hello;
    pollfd incoming{fd, POLLIN, 0};
    if (poll(&incoming, 1, 2000) <= 0 || !ReadAll(fd, &hello, sizeof hello) || hello.job != job ||
        hello.rank >= static_cast<uint64_t>(rank) || core.connections.count(static_cast<int>(hello.rank))) {
      std::fprintf(stderr, "actorflow: data plane of rank %d refused a connection that is not a lower rank of this job\n",
                   rank);
      close(fd);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->peer = static_cast<int>(hello.rank);
    connection->fd = fd;
    core.connections[connection->peer] = std::move(connection);
    ++accepted;
  }
  close(listener);
  caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
  for (auto& [peer, connection] : core.connections) {
    int one = 1;
    setsockopt(connection->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Connection* raw = connection.get();
    DataPlaneCore* core_pointer = plane->core_.get();  // the threads end in ~DataPlane, before the core
    raw->reader = std::thread([core_pointer, raw] { core_pointer->Reader(raw); });
    raw->writer = std::thread([core_pointer, raw] { core_pointer->Writer(raw); });
  }
  std::weak_ptr<DataPlaneCore> weak = plane->core_;
  cluster.OnFailure([weak](const std::string& message) {
    if (auto core = weak.lock()) core->Fail(message);
  });
  return plane;
}

DataPlane::~DataPlane() {
  if (!core_) return;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->closing = true;  // peers closing their ends now is the normal end, not a loss
  }
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
    core->Enqueue(to, std::move(frame));
    return Status::Ok();
  });
}

}  // namespace actorflow

namespace actorflow {

StatusOr<KernelFn> DataPlane::MakeAllReduceKernel(const std::string& job, const plan::Task& task) {
  const std::string what = std::string(kAllReduceOp) + " '" + task.name() + "'";
  if (!task.asynchronous()) return InvalidArgument(what + ": must be asynchronous (plan Task.asynchronous)");
  const int64_t channel_id = IntAttr(task, "channel");
  auto ring_attr = task.attrs().find("ring");
  std::vector<int> ring;
  if (ring_attr != task.attrs().end() && ring_attr->second.value_case() == plan::AttrValue::kInts)
    for (int64_t r : ring_attr->second.ints().values()) ring.push_back(static_cast<int>(r));
  std::string ring_text;
  for (int r : ring) ring_text += (ring_text.empty() ? "" : ",") + std::to_string(r);
  const int self = core_->rank;
  const auto position = std::find(ring.begin(), ring.end(), self);
  bool valid_ring = ring.size() >= 2 && position != ring.end() && std::count(ring.begin(), ring.end(), self) == 1;
  for (int r : ring) valid_ring &= r == self || core_->connections.count(r) == 1;
  if (channel_id < 0 || !valid_ring)
    return InvalidArgument(what + ": attrs channel (>= 0) and ring (two or more distinct ranks of the " +
                           std::to_string(core_->connections.size() + 1) + ", this rank " + std::to_string(self) +
                           " among them) must be set, got channel " + std::to_string(channel_id) + ", ring [" + ring_text + "]");
  if (task.registers_size() != 1 || task.registers(0).blobs_size() != 1)
    return InvalidArgument(what + ": must have one register with one blob (the sum)");
  const plan::BlobDesc& blob = task.registers(0).blobs(0);
  const DType dtype = blob.dtype() == plan::DT_FLOAT64 ? DType::kFloat64 : blob.dtype() == plan::DT_FLOAT32 ? DType::kFloat32 : DType::kInvalid;
  if (!AllReduceSupports(dtype))
    return InvalidArgument(what + ": sums float32 or float64, got dtype " + std::to_string(blob.dtype()));
  int data_inputs = 0;
  for (const plan::InputDesc& in : task.inputs()) data_inputs += !in.control();
  if (data_inputs < 1) return InvalidArgument(what + ": must read at least one register (this machine's partial sums)");
  const int64_t bytes = blob.byte_size();
  const int64_t element_size = static_cast<int64_t>(DTypeSize(dtype));
  const ChannelKey key{Fnv1a64(job), channel_id};
  std::shared_ptr<DataPlaneCore> core = core_;
  const int ranks = static_cast<int>(ring.size());
  const int at = static_cast<int>(position - ring.begin());
  {
    std::lock_guard<std::mutex> lock(core->mu);
    CollectiveChannel& channel = core->collectives[key];  // chunks may have arrived already
    channel.task = what + " (ring " + ring_text + ")";
    channel.schedule = std::make_unique<RingSchedule>(ranks, at, bytes / element_size, element_size);
    channel.dtype = dtype;
    channel.next = ring[(at + 1) % ranks];
    channel.previous = ring[(at + ranks - 1) % ranks];
    channel.acts.clear();
  }
  return KernelFn([core, key, bytes, dtype](KernelContext& ctx) -> Status {
    char* sum = static_cast<char*>(ctx.output(0).data);
    for (size_t k = 0; k < ctx.num_inputs(); ++k)
      if (static_cast<int64_t>(ctx.input(k).byte_size()) != bytes)
        return Internal("all_reduce: input " + std::to_string(k) + " holds " + std::to_string(ctx.input(k).byte_size()) +
                        " bytes, the sum " + std::to_string(bytes));
    // This machine's partial sums, in input order, before the act is visible to the reader.
    std::memcpy(sum, ctx.input(0).data, static_cast<size_t>(bytes));
    for (size_t k = 1; k < ctx.num_inputs(); ++k) AccumulateInto(sum, ctx.input(k).data, bytes, dtype);
    const int64_t iteration = ctx.iteration;
    CollectiveChannel* channel = nullptr;
    {
      std::lock_guard<std::mutex> lock(core->mu);
      channel = &core->collectives[key];
      if (!core->failure.empty()) return core->Failed(channel->task);
      CollectiveAct& act = channel->acts[iteration];
      act.sum = sum;
      act.done = ctx.TakeCompletion();
      act.busy = 1;  // this launch, until the chunks that came first are applied
      core->QueueStep(key, *channel, iteration, act, 0);
    }
    std::vector<char> unused;
    for (;;) {
      std::vector<char> early;
      int step = 0;
      CollectiveAct* act = nullptr;
      {
        std::lock_guard<std::mutex> lock(core->mu);
        CollectiveAct& launched = channel->acts.at(iteration);
        auto it = channel->early.lower_bound({iteration, 0});
        if (it == channel->early.end() || it->first.first != iteration || !launched.error.empty()) break;
        step = static_cast<int>(it->first.second);
        const std::string mismatch = core->Mismatch(*channel, it->first.second, it->second.size(), channel->previous);
        early = std::move(it->second);
        channel->early.erase(it);
        if (!mismatch.empty()) {
          launched.error = mismatch;
          break;
        }
        act = &launched;
        ++act->busy;
      }
      core->ApplyStep(key, *channel, iteration, *act, step, early.data(), -1, unused);
    }
    std::optional<DataPlaneCore::Ended> ended;
    {
      std::lock_guard<std::mutex> lock(core->mu);
      ended = core->Release(*channel, iteration);
    }
    if (ended) (void)ended->done.Complete(ended->status);
    return Status::Ok();
  });
}

}  // namespace actorflow
