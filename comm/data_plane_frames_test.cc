// Frame authentication of the data plane (comm/data_plane_frames.h): the authenticator alone,
// then a real data plane (DataPlane::Start on one end of a socket pair, a runtime receiving
// into a RECV register) fed by this test playing rank 1 on the other end: a frame altered,
// replayed, reordered or cut short fails the call with an error naming rank 1, within a bound,
// and every later call fails at once; without authentication the same alteration goes through
// unnoticed (what the tags add).
#include "comm/data_plane_frames.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "actors/runtime.h"
#include "comm/data_plane.h"
#include "comm/data_plane_core.h"
#include "graph/passes.h"

namespace actorflow {
namespace {

using data_plane_internal::Header;

constexpr int64_t kBytes = 300 * 1024;  // more than one authenticated piece (256 KB)
constexpr char kJob[] = "frames";

std::vector<unsigned char> Key(unsigned char seed) {
  std::vector<unsigned char> key(kFrameKeyBytes);
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<unsigned char>(seed + 7 * i);
  return key;
}

std::vector<unsigned char> Tag(FrameAuthenticator& auth, FrameAuthenticator::Part part, const std::string& bytes,
                               size_t piece) {
  auth.Begin(part);
  for (size_t done = 0; done < bytes.size(); done += piece) auth.Add(bytes.data() + done, std::min(piece, bytes.size() - done));
  std::vector<unsigned char> tag(kFrameTagBytes);
  auth.Finish(tag.data());
  return tag;
}

TEST(FrameAuthenticatorTest, ChecksExactlyTheBytesKeyPartAndSequenceItSigned) {
  const std::string message(100000, 'x');
  FrameAuthenticator sender(Key(1).data()), receiver(Key(1).data()), stranger(Key(2).data());
  std::vector<unsigned char> tag = Tag(sender, FrameAuthenticator::kPayload, message, message.size());
  // The same bytes in other pieces give the same tag.
  EXPECT_EQ(Tag(receiver, FrameAuthenticator::kPayload, message, 777), tag);
  std::string altered = message;
  altered[54321] ^= 1;
  EXPECT_NE(Tag(receiver, FrameAuthenticator::kPayload, altered, 4096), tag);
  EXPECT_NE(Tag(receiver, FrameAuthenticator::kPayload, message.substr(0, message.size() - 1), 4096), tag);
  EXPECT_NE(Tag(receiver, FrameAuthenticator::kHeader, message, 4096), tag);  // another part
  EXPECT_NE(Tag(stranger, FrameAuthenticator::kPayload, message, 4096), tag);  // another key
  receiver.Begin(FrameAuthenticator::kPayload);
  receiver.Add(message.data(), message.size());
  EXPECT_TRUE(receiver.Check(tag.data()));
  receiver.EndFrame();  // the next frame: the same bytes and tag are a replay
  receiver.Begin(FrameAuthenticator::kPayload);
  receiver.Add(message.data(), message.size());
  EXPECT_FALSE(receiver.Check(tag.data()));
}

// Rank 0's data plane connected to one end of a socket pair; the test plays rank 1 on `peer`.
// `keys`: the connection's frame keys (disabled by default).
struct PlaneWithTestPeer {
  explicit PlaneWithTestPeer(const FrameKeys& keys = {}) {
    int ends[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
    peer = ends[1];
    DataPlane::PeerConnection connection;
    connection.peer = 1;
    connection.fd = ends[0];
    connection.keys = keys;
    plane = DataPlane::Start(0, {connection});
  }
  ~PlaneWithTestPeer() {
    plane.reset();
    close(peer);
  }
  int peer = -1;
  std::shared_ptr<DataPlane> plane;
};

// Rank 1, played by the test: writes frames to rank 0's data plane as its writer would.
class FramesTest : public ::testing::Test {
 protected:
  void StartPlane(bool authenticate) {
    int ends[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
    peer_fd_ = ends[1];
    DataPlane::PeerConnection connection;
    connection.peer = 1;
    connection.fd = ends[0];
    connection.keys.enabled = authenticate;
    std::memcpy(connection.keys.send, Key(10).data(), kFrameKeyBytes);
    std::memcpy(connection.keys.receive, Key(20).data(), kFrameKeyBytes);  // what rank 1 sends with
    if (authenticate) peer_auth_ = std::make_unique<FrameAuthenticator>(Key(20).data());
    plane_ = DataPlane::Start(0, {connection});
    // source on machine 1 -> machine 0's sink: the pass makes rank 0's RECV task.
    plan::Plan plan;
    plan.set_job_name(kJob);
    plan::Task* source = plan.add_tasks();
    source->set_id(0);
    source->set_name("source");
    source->set_kind(plan::SOURCE);
    source->set_device_type("cpu");
    source->set_machine_id(1);
    source->set_feed_index(0);
    plan::RegisterDesc* out = source->add_registers();
    out->set_name("out");
    out->set_register_num(2);
    plan::BlobDesc* blob = out->add_blobs();
    blob->set_name("source/out");
    blob->add_shape(kBytes);
    blob->set_dtype(plan::DT_UINT8);
    blob->set_byte_size(kBytes);
    plan::Task* sink = plan.add_tasks();
    sink->set_id(1);
    sink->set_name("output");
    sink->set_kind(plan::SINK);
    sink->set_device_type("cpu");
    sink->set_machine_id(0);
    sink->add_inputs()->set_producer_task_id(0);
    plan::Task* sink1 = plan.add_tasks();
    sink1->set_id(2);
    sink1->set_name("output@machine1");
    sink1->set_kind(plan::SINK);
    sink1->set_device_type("cpu");
    sink1->set_machine_id(1);
    auto global = graph::InsertCrossMachineTransfers(plan, 2);
    ASSERT_TRUE(global.ok()) << global.status().ToString();
    auto local = graph::ExtractMachinePlan(*global, 0);
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    for (const plan::Task& task : local->plan.tasks())
      if (task.op_type() == "recv") channel_ = task.attrs().at("channel").i();
    ASSERT_GE(channel_, 0);
    RuntimeHooks hooks;
    hooks.make_kernel = [this](const plan::Task& task) -> StatusOr<KernelFn> { return plane_->MakeKernel(kJob, task); };
    auto runtime = Runtime::Create(local->plan, hooks);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    runtime_ = std::move(*runtime);
  }

  void TearDown() override {
    if (runtime_) {
      EXPECT_TRUE(runtime_->Shutdown().ok());
    }
    runtime_.reset();
    plane_.reset();
    if (peer_fd_ >= 0) close(peer_fd_);
  }

  // One data frame of `iteration` as rank 1's writer puts it on the wire (tags when
  // authenticating, which advances rank 1's sequence).
  std::string Frame(int64_t iteration, const std::string& payload) {
    Header header{Fnv1a64(kJob), channel_, iteration, data_plane_internal::kData, 1, payload.size()};
    std::string wire(reinterpret_cast<const char*>(&header), sizeof header);
    if (peer_auth_) wire += AsString(Tag(*peer_auth_, FrameAuthenticator::kHeader, wire, wire.size()));
    wire += payload;
    if (peer_auth_ && !payload.empty()) wire += AsString(Tag(*peer_auth_, FrameAuthenticator::kPayload, payload, 65536));
    if (peer_auth_) peer_auth_->EndFrame();
    return wire;
  }

  static std::string AsString(const std::vector<unsigned char>& bytes) { return std::string(bytes.begin(), bytes.end()); }

  // Writes the bytes, up to where rank 0 stops reading (it closes a connection that sent a
  // forged frame: the rest is then moot).
  void Send(const std::string& wire) {
    for (size_t done = 0; done < wire.size();) {
      ssize_t wrote = send(peer_fd_, wire.data() + done, wire.size() - done, MSG_NOSIGNAL);
      if (wrote <= 0) return;
      done += static_cast<size_t>(wrote);
    }
  }

  // One call of rank 0 (its RECV into its sink), bounded: the status, or a failure after 20 s.
  Status Call(std::string* received = nullptr) {
    auto promise = std::make_shared<std::promise<Status>>();
    std::future<Status> future = promise->get_future();
    std::vector<char> output(kBytes);
    TensorDesc desc{{kBytes}, DType::kUInt8};
    auto pushed = runtime_->Push({}, {{output.data(), desc}},
                                 [promise](int64_t, const Status& status) { promise->set_value(status); });
    if (!pushed.ok()) return pushed.status();
    if (future.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      ADD_FAILURE() << "the call did not end within 20 s";
      std::_Exit(3);  // a hung data plane: nothing else can be trusted (ctest reports the exit)
    }
    if (received != nullptr) received->assign(output.begin(), output.end());
    return future.get();
  }

  std::string Payload(char fill) {
    std::string payload(kBytes, fill);
    for (int64_t i = 0; i < kBytes; i += 1000) payload[i] = static_cast<char>(i / 1000);
    return payload;
  }

  void ExpectRefused(const Status& status, const std::string& what) {
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("from rank 1 failed authentication"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(what), std::string::npos) << status.message();
    // Every later call fails at once, naming the same cause.
    const auto start = std::chrono::steady_clock::now();
    Status next = Call();
    EXPECT_FALSE(next.ok());
    EXPECT_NE(next.message().find("from rank 1 failed authentication"), std::string::npos) << next.message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }

  int peer_fd_ = -1;
  int64_t channel_ = -1;
  std::unique_ptr<FrameAuthenticator> peer_auth_;
  std::shared_ptr<DataPlane> plane_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(FramesTest, AuthenticFramesArrive) {
  StartPlane(true);
  for (int64_t iteration = 0; iteration < 3; ++iteration) {
    const std::string payload = Payload(static_cast<char>('a' + iteration));
    Send(Frame(iteration, payload));
    std::string received;
    Status status = Call(&received);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(received, payload);
  }
}

TEST_F(FramesTest, AnAlteredPayloadIsRefused) {
  StartPlane(true);
  std::string wire = Frame(0, Payload('a'));
  wire[sizeof(Header) + kFrameTagBytes + 123456] ^= 0x10;
  Send(wire);
  ExpectRefused(Call(), "payload bytes were altered");
}

TEST_F(FramesTest, AnAlteredHeaderIsRefused) {
  StartPlane(true);
  std::string wire = Frame(0, Payload('a'));
  wire[offsetof(Header, iteration)] ^= 1;  // claims iteration 1
  Send(wire);
  ExpectRefused(Call(), "its header was altered");
}

TEST_F(FramesTest, AReplayedFrameIsRefused) {
  StartPlane(true);
  const std::string wire = Frame(0, Payload('a'));
  Send(wire);
  ASSERT_TRUE(Call().ok());
  // The same frame again, relabelled as the next iteration would be caught by its header tag;
  // even byte for byte it is refused: its sequence number is the spent one.
  Send(wire);
  ExpectRefused(Call(), "data frame 1 from rank 1");
}

TEST_F(FramesTest, ReorderedFramesAreRefused) {
  StartPlane(true);
  const std::string first = Frame(0, Payload('a')), second = Frame(1, Payload('b'));
  Send(second + first);
  ExpectRefused(Call(), "data frame 0 from rank 1");
}

TEST_F(FramesTest, AFrameCutShortThenFollowedIsRefused) {
  StartPlane(true);
  const std::string cut = Frame(0, Payload('a')).substr(0, sizeof(Header) + kFrameTagBytes + kBytes / 2);
  Send(cut + Frame(1, Payload('b')));
  ExpectRefused(Call(), "from rank 1 failed authentication");
}

TEST_F(FramesTest, AFrameCutShortByAClosedConnectionFailsNamingTheRank) {
  StartPlane(true);
  Send(Frame(0, Payload('a')).substr(0, sizeof(Header) + kFrameTagBytes + 1000));
  shutdown(peer_fd_, SHUT_WR);
  Status status = Call();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("lost rank 1 (its data connection closed)"), std::string::npos) << status.message();
}

TEST_F(FramesTest, WithoutAuthenticationAnAlteredPayloadGoesThrough) {
  // What the tags add: the same alteration, unauthenticated, is delivered as if rank 1 sent it.
  StartPlane(false);
  const std::string payload = Payload('a');
  std::string wire = Frame(0, payload);
  wire[sizeof(Header) + 123456] ^= 0x10;
  Send(wire);
  std::string received;
  ASSERT_TRUE(Call(&received).ok());
  EXPECT_NE(received, payload);
  EXPECT_EQ(received, wire.substr(sizeof(Header)));
}

// The ring all-reduce's early path: rank 1 (the test) sends its first chunk before rank 0's act
// launched, stops in the middle of it until the act launched, then sends the rest. What came
// before the launch is added from a buffer, the rest straight from the connection (only the
// pieces read early are counted as copied), and the sum is exact.
TEST(AllReduceEarlyChunkTest, AChunkThatStartsBeforeItsActIsFinishedStraightFromTheConnection) {
  using data_plane_internal::kCollective;
  using data_plane_internal::DataPlaneCore;
  constexpr int64_t kChunkBytes = 4 * DataPlaneCore::kEarlyPiece, kElements = 2 * kChunkBytes / 4;
  constexpr int64_t kEarly = 2 * DataPlaneCore::kEarlyPiece + 88 * 1024;  // sent before the launch
  constexpr char kRingJob[] = "early_chunk";
  PlaneWithTestPeer connected;
  ASSERT_GE(connected.peer, 0);
  const int peer = connected.peer;
  std::shared_ptr<DataPlane>& plane = connected.plane;
  // Rank 0's part: its values fed in, one all_reduce over ranks 0 and 1, the sum fetched.
  plan::Plan plan;
  plan.set_job_name(kRingJob);
  auto add_task = [&](const char* name, plan::TaskKind kind) {
    plan::Task* task = plan.add_tasks();
    task->set_id(plan.tasks_size() - 1);
    task->set_name(name);
    task->set_kind(kind);
    task->set_device_type("cpu");
    if (kind == plan::SINK) return task;
    plan::BlobDesc* blob = task->add_registers()->add_blobs();
    task->mutable_registers(0)->set_name("out");
    task->mutable_registers(0)->set_register_num(2);
    task->mutable_registers(0)->add_consumer_task_ids(task->id() + 1);
    blob->set_name(std::string(name) + "/out");
    blob->add_shape(kElements);
    blob->set_dtype(plan::DT_FLOAT32);
    blob->set_byte_size(kElements * 4);
    return task;
  };
  add_task("values", plan::SOURCE)->set_feed_index(0);
  plan::Task* sum = add_task("sum", plan::COMPUTE);
  sum->set_op_type(kAllReduceOp);
  sum->set_asynchronous(true);
  (*sum->mutable_attrs())["channel"].set_i(0);
  (*sum->mutable_attrs())["ring"].mutable_ints()->add_values(0);
  (*sum->mutable_attrs())["ring"].mutable_ints()->add_values(1);
  sum->add_inputs()->set_producer_task_id(0);
  add_task("output", plan::SINK)->add_inputs()->set_producer_task_id(1);
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task& task) -> StatusOr<KernelFn> { return plane->MakeKernel(kRingJob, task); };
  auto runtime = Runtime::Create(plan, hooks);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();

  auto write_all = [&](const void* data, size_t n) {
    const char* bytes = static_cast<const char*>(data);
    for (size_t done = 0; done < n;) {
      ssize_t wrote = send(peer, bytes + done, n - done, MSG_NOSIGNAL);
      ASSERT_GT(wrote, 0);
      done += static_cast<size_t>(wrote);
    }
  };
  auto read_all = [&](void* data, size_t n) {
    char* bytes = static_cast<char*>(data);
    for (size_t done = 0; done < n;) {
      ssize_t got = recv(peer, bytes + done, n - done, 0);
      ASSERT_GT(got, 0);
      done += static_cast<size_t>(got);
    }
  };
  // Rank 0 (ring position 0) receives chunk 1 at step 0 and adds it to its own; rank 1's values
  // are 2, rank 0's 1 (its chunk 1 ends up 3); at step 1 it receives the total of chunk 0.
  const std::vector<float> twos(kChunkBytes / 4, 2.0f), threes(kChunkBytes / 4, 3.0f);
  Header step0{Fnv1a64(kRingJob), 0, 0, kCollective, 1, static_cast<uint64_t>(kChunkBytes), 0};
  write_all(&step0, sizeof step0);
  write_all(twos.data(), kEarly);
  // Wait until rank 0's reader took every byte so far: it read two pieces into a buffer, found
  // no act after each, and waits in the third.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int unread = 1; unread > 0;) {
    ASSERT_EQ(ioctl(peer, SIOCOUTQ, &unread), 0);
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << unread << " bytes still unread";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<float> values(kElements, 1.0f), output(kElements, 0.0f);
  const TensorDesc desc{{kElements}, DType::kFloat32};
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> done = promise->get_future();
  ASSERT_TRUE((*runtime)->Push({{values.data(), desc}}, {{output.data(), desc}},
                               [promise](int64_t, const Status& status) { promise->set_value(status); }).ok());
  // The act launched: its step 0 sends rank 0's chunk 0; then the rest of chunk 1 goes.
  Header header;
  std::vector<float> chunk(kChunkBytes / 4);
  read_all(&header, sizeof header);
  ASSERT_EQ(header.step, 0u);
  ASSERT_EQ(header.bytes, static_cast<uint64_t>(kChunkBytes));
  read_all(chunk.data(), kChunkBytes);
  EXPECT_EQ(chunk, std::vector<float>(kChunkBytes / 4, 1.0f));
  write_all(reinterpret_cast<const char*>(twos.data()) + kEarly, kChunkBytes - kEarly);
  // Step 1: rank 0 sends the chunk it finished (1 + 2), and receives the total of chunk 0.
  read_all(&header, sizeof header);
  ASSERT_EQ(header.step, 1u);
  read_all(chunk.data(), kChunkBytes);
  EXPECT_EQ(chunk, threes);
  Header step1 = step0;
  step1.step = 1;
  write_all(&step1, sizeof step1);
  write_all(threes.data(), kChunkBytes);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the all-reduce did not end";
  ASSERT_TRUE(done.get().ok());
  EXPECT_EQ(output, std::vector<float>(kElements, 3.0f));
  // The three pieces read before the act was found were added from the buffer; the last piece
  // came straight from the connection.
  EXPECT_EQ(plane->CopiedPayloadBytes(), static_cast<uint64_t>(3 * DataPlaneCore::kEarlyPiece));
  EXPECT_TRUE((*runtime)->Shutdown().ok());
  runtime->reset();
}

// A send whose connection's writer is idle is written by the act's own thread, as much as the
// socket takes at once; the writer thread writes the rest. Rank 1 (the test) reads the frame
// only after the send began: the bytes arrive whole and in order, the send completes when rank
// 1 acknowledges them, and a second send behind it (queued while the first was incomplete)
// follows it intact.
TEST(DirectWriteTest, ASendLargerThanTheSocketBufferIsFinishedByTheWriter) {
  constexpr int64_t kLarge = 8 << 20;  // far more than a socket pair's buffer
  constexpr char kSendJob[] = "direct_write";
  PlaneWithTestPeer connected;
  ASSERT_GE(connected.peer, 0);
  const int peer = connected.peer;
  std::shared_ptr<DataPlane>& plane = connected.plane;
  // source on machine 0 -> machine 1's sink: rank 0 runs the source and its SEND.
  plan::Plan plan;
  plan.set_job_name(kSendJob);
  for (int machine = 0; machine < 2; ++machine) {
    plan::Task* task = plan.add_tasks();
    task->set_id(machine);
    task->set_kind(machine == 0 ? plan::SOURCE : plan::SINK);
    task->set_name(machine == 0 ? "source" : "output@machine1");
    task->set_device_type("cpu");
    task->set_machine_id(machine);
    if (machine == 1) {
      task->add_inputs()->set_producer_task_id(0);
      continue;
    }
    task->set_feed_index(0);
    plan::RegisterDesc* out = task->add_registers();
    out->set_name("out");
    out->set_register_num(2);
    plan::BlobDesc* blob = out->add_blobs();
    blob->set_name("source/out");
    blob->add_shape(kLarge);
    blob->set_dtype(plan::DT_UINT8);
    blob->set_byte_size(kLarge);
  }
  plan::Task* sink0 = plan.add_tasks();  // machine 0's main sink (it waits for the send)
  sink0->set_id(2);
  sink0->set_name("output");
  sink0->set_kind(plan::SINK);
  sink0->set_device_type("cpu");
  sink0->set_machine_id(0);
  auto global = graph::InsertCrossMachineTransfers(plan, 2);
  ASSERT_TRUE(global.ok()) << global.status().ToString();
  auto local = graph::ExtractMachinePlan(*global, 0);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  int64_t channel = -1;
  for (const plan::Task& task : local->plan.tasks())
    if (task.op_type() == "send") channel = task.attrs().at("channel").i();
  ASSERT_GE(channel, 0);
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task& task) -> StatusOr<KernelFn> { return plane->MakeKernel(kSendJob, task); };
  auto runtime = Runtime::Create(local->plan, hooks);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();

  std::vector<std::string> payloads;
  std::vector<std::future<Status>> calls;
  const TensorDesc desc{{kLarge}, DType::kUInt8};
  for (int iteration = 0; iteration < 2; ++iteration) {
    payloads.emplace_back(static_cast<size_t>(kLarge), static_cast<char>('p' + iteration));
    for (int64_t i = 0; i < kLarge; i += 4096) payloads.back()[static_cast<size_t>(i)] = static_cast<char>(i / 4096);
    auto promise = std::make_shared<std::promise<Status>>();
    calls.push_back(promise->get_future());
    ASSERT_TRUE((*runtime)->Push({{payloads.back().data(), desc}}, {},
                                 [promise](int64_t, const Status& status) { promise->set_value(status); }).ok());
  }
  auto read_all = [&](void* data, size_t n) {
    char* bytes = static_cast<char*>(data);
    for (size_t done = 0; done < n;) {
      ssize_t got = recv(peer, bytes + done, n - done, 0);
      ASSERT_GT(got, 0);
      done += static_cast<size_t>(got);
    }
  };
  for (int iteration = 0; iteration < 2; ++iteration) {
    Header header;
    read_all(&header, sizeof header);
    ASSERT_EQ(header.kind, data_plane_internal::kData);
    ASSERT_EQ(header.iteration, iteration);
    ASSERT_EQ(header.bytes, static_cast<uint64_t>(kLarge));
    std::string received(static_cast<size_t>(kLarge), 0);
    read_all(received.data(), received.size());
    EXPECT_TRUE(received == payloads[static_cast<size_t>(iteration)]) << "iteration " << iteration;
    Header ack{Fnv1a64(kSendJob), channel, iteration, data_plane_internal::kAck, 1, 0};
    ASSERT_EQ(send(peer, &ack, sizeof ack, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof ack));
  }
  for (auto& call : calls) {
    ASSERT_EQ(call.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "a send did not complete";
    EXPECT_TRUE(call.get().ok());
  }
  // The first send found the writer idle and began itself; the second was queued behind its rest.
  EXPECT_GE(plane->DirectWrites(), 1u);
  EXPECT_TRUE((*runtime)->Shutdown().ok());
  runtime->reset();
}

}  // namespace
}  // namespace actorflow
