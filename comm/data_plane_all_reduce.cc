// The data plane's ring all-reduce (comm/data_plane.h, ALL_REDUCE; the schedule: comm/ring.h).
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "comm/data_plane.h"
#include "comm/data_plane_core.h"

namespace actorflow {
namespace data_plane_internal {

void DataPlaneCore::QueueStep(const ChannelKey& key, CollectiveChannel& channel, int64_t iteration, CollectiveAct& act, int step) {
  const RingSchedule& ring = *channel.schedule;
  const int chunk = ring.SendChunk(step);
  Connection::Frame frame;
  frame.header = Header{key.first, key.second, iteration, kCollective, static_cast<uint32_t>(rank),
                        static_cast<uint64_t>(ring.ChunkBytes(chunk)), static_cast<uint64_t>(step)};
  frame.payload = (step == 0 ? act.input : act.sum) + ring.ChunkOffset(chunk);
  ++act.busy;
  Enqueue(channel.next, std::move(frame));
}

std::optional<DataPlaneCore::Ended> DataPlaneCore::Release(CollectiveChannel& channel, int64_t iteration) {
  auto it = channel.acts.find(iteration);
  CollectiveAct& act = it->second;
  if (--act.busy > 0 || (act.error.empty() && act.received < channel.schedule->steps())) return std::nullopt;
  Ended ended{std::move(act.done), act.error.empty() ? Status::Ok() : FailedPrecondition(act.error).WithContext(channel.task)};
  channel.acts.erase(it);
  return ended;
}

std::string DataPlaneCore::Mismatch(const CollectiveChannel& channel, uint64_t step, uint64_t bytes, int from) const {
  const RingSchedule& ring = *channel.schedule;
  if (from == channel.previous && step < static_cast<uint64_t>(ring.steps()) &&
      static_cast<int64_t>(bytes) == ring.ChunkBytes(ring.ReceiveChunk(static_cast<int>(step))))
    return "";
  return "step " + std::to_string(step) + " of " + std::to_string(bytes) + " bytes from rank " + std::to_string(from) +
         " does not fit this rank's ring (do all ranks run the same plan?)";
}

bool DataPlaneCore::ApplyStep(const ChannelKey& key, CollectiveChannel& channel, int64_t iteration, CollectiveAct& act,
                              int step, const char* source, int64_t from_source, Connection* connection,
                              const Header* header, std::vector<char>& scratch) {
  const RingSchedule& ring = *channel.schedule;
  const int chunk = ring.ReceiveChunk(step);
  char* destination = act.sum + ring.ChunkOffset(chunk);
  const char* own = act.input + ring.ChunkOffset(chunk);  // this rank's values of the chunk
  const int64_t bytes = ring.ChunkBytes(chunk);
  const int64_t prefix = source == nullptr ? 0 : std::min(from_source, bytes);  // a multiple of the element size
  if (prefix > 0) copied_bytes.fetch_add(static_cast<uint64_t>(prefix), std::memory_order_relaxed);
  bool read = true;
  if (!ring.Reduces(step)) {
    if (prefix > 0) std::memcpy(destination, source, static_cast<size_t>(prefix));
    if (connection != nullptr && prefix < bytes)
      read = ReadPayload(connection, destination + prefix, static_cast<size_t>(bytes - prefix));
  } else {
    if (prefix > 0) AddInto(destination, own, source, prefix, channel.dtype);
    // The sum streams as bytes come. With frame authentication the chunk's tag is checked only
    // after it was added in: a forged chunk fails the act (its sum is then never used).
    for (int64_t done = prefix; connection != nullptr && read && done < bytes; done += kReducePiece) {
      const int64_t piece = std::min<int64_t>(bytes - done, kReducePiece);
      read = ReadPayload(connection, scratch.data(), static_cast<size_t>(piece));
      if (read) AddInto(destination + done, own + done, scratch.data(), piece, channel.dtype);
    }
  }
  if (read && connection != nullptr) read = EndPayload(connection, *header);
  std::optional<Ended> ended;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!read) {
      if (act.error.empty()) act.error = connection->read_error;
    } else {
      ++act.received;
      if (act.error.empty() && step + 1 < ring.steps()) QueueStep(key, channel, iteration, act, step + 1);
    }
    ended = Release(channel, iteration);
  }
  if (ended) (void)ended->done.Complete(ended->status);
  return read;
}

bool DataPlaneCore::ReceiveCollective(Connection* connection, const Header& header, std::vector<char>& scratch) {
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
  if (act != nullptr)
    return ApplyStep(key, *channel, header.iteration, *act, step, nullptr, 0, connection, &header, scratch);
  // Before its act: into a spare buffer, in pieces; between them, look whether the act launched
  // meanwhile (the usual race: the chunk comes as this rank starts its call). Then only what
  // came so far is applied from the buffer, and the rest straight from the connection.
  std::vector<char> bytes;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!channel->spare.empty()) {
      bytes = std::move(channel->spare.back());
      channel->spare.pop_back();
    }
  }
  bytes.resize(header.bytes);  // a spare of this size (or larger): nothing to fill
  size_t done = 0;
  while (done < header.bytes) {
    const size_t piece = std::min<size_t>(header.bytes - done, kEarlyPiece);
    if (!ReadPayload(connection, bytes.data() + done, piece)) return false;
    done += piece;
    if (done == header.bytes) break;
    std::lock_guard<std::mutex> lock(mu);
    auto it = channel->acts.find(header.iteration);
    if (it != channel->acts.end() && it->second.error.empty() &&
        Mismatch(*channel, header.step, header.bytes, connection->peer).empty()) {
      act = &it->second;
      ++act->busy;
      break;
    }
  }
  if (act != nullptr) {  // launched while the chunk came
    const bool read = ApplyStep(key, *channel, header.iteration, *act, step, bytes.data(), static_cast<int64_t>(done),
                                connection, &header, scratch);
    std::lock_guard<std::mutex> lock(mu);
    KeepSpareChunk(*channel, std::move(bytes));
    return read;
  }
  if (!EndPayload(connection, header)) return false;
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
  if (act != nullptr) {
    ApplyStep(key, *channel, header.iteration, *act, step, bytes.data(), static_cast<int64_t>(bytes.size()), nullptr,
              nullptr, scratch);
    std::lock_guard<std::mutex> lock(mu);
    KeepSpareChunk(*channel, std::move(bytes));
  }
  return true;
}

bool DataPlaneCore::WriteCollective(Connection* connection, const Connection::Frame& frame) {
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mu);
    failed = !failure.empty();
  }
  const bool written = failed || WriteFrame(connection, frame.header, frame.payload);
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

}  // namespace data_plane_internal

using namespace data_plane_internal;  // this file implements it

namespace {

int64_t IntAttrOf(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() || it->second.value_case() != plan::AttrValue::kI ? -1 : it->second.i();
}

}  // namespace

StatusOr<KernelFn> DataPlane::MakeAllReduceKernel(const std::string& job, const plan::Task& task) {
  const std::string what = std::string(kAllReduceOp) + " '" + task.name() + "'";
  if (!task.asynchronous()) return InvalidArgument(what + ": must be asynchronous (plan Task.asynchronous)");
  const int64_t channel_id = IntAttrOf(task, "channel");
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
    // This machine's partial sums, in input order, before the act is visible to the reader. One
    // input is used where it is (its register stays held until the act completes).
    const char* input = static_cast<const char*>(ctx.input(0).data);
    if (ctx.num_inputs() > 1) {
      AddInto(sum, ctx.input(0).data, ctx.input(1).data, bytes, dtype);
      for (size_t k = 2; k < ctx.num_inputs(); ++k) AccumulateInto(sum, ctx.input(k).data, bytes, dtype);
      input = sum;
    }
    const int64_t iteration = ctx.iteration;
    CollectiveChannel* channel = nullptr;
    {
      std::lock_guard<std::mutex> lock(core->mu);
      channel = &core->collectives[key];
      if (!core->failure.empty()) return core->Failed(channel->task);
      CollectiveAct& act = channel->acts[iteration];
      act.sum = sum;
      act.input = input;
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
      core->ApplyStep(key, *channel, iteration, *act, step, early.data(), static_cast<int64_t>(early.size()), nullptr,
                      nullptr, unused);
      std::lock_guard<std::mutex> lock(core->mu);
      core->KeepSpareChunk(*channel, std::move(early));
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