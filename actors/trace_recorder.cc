#include "actors/trace_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "graph/proto/plan.pb.h"

namespace actorflow {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* WaitReasonName(WaitReason reason) {
  return reason == WaitReason::kInputNotReady ? "input not ready" : "output registers full";
}

// Events of one actor in fixed-size chunks: appending never copies what was recorded (a
// growing vector would, on the actor's thread, in the middle of a run).
struct ChromeTraceRecorder::Lane {
  static constexpr size_t kChunk = 4096;
  int64_t task_id = 0;
  int pid = 0;
  std::string name, op, kind;
  std::vector<std::unique_ptr<Event[]>> chunks;
  size_t used = kChunk;  // in the last chunk
  size_t size = 0;

  void Append(const Event& e) {
    if (used == kChunk) {
      chunks.emplace_back(new Event[kChunk]);
      used = 0;
    }
    chunks.back()[used++] = e;
    ++size;
  }
  template <typename F> void ForEach(F&& f) const {
    for (size_t i = 0; i < size; ++i) f(chunks[i / kChunk][i % kChunk]);
  }
};

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

const char* KindName(plan::TaskKind kind) {
  switch (kind) {
    case plan::SOURCE: return "source";
    case plan::COMPUTE: return "compute";
    case plan::SINK: return "sink";
    case plan::VARIABLE: return "variable";
    default: return "unknown";
  }
}

int LanePid(const plan::Task& task) {
  int device = task.device_type() == "gpu" ? 500 + task.device_id() : task.device_id();
  return task.machine_id() * 1000 + device;
}

}  // namespace

ChromeTraceRecorder::ChromeTraceRecorder() : origin_ns_(NowNs()) {}

ChromeTraceRecorder::~ChromeTraceRecorder() {
  for (Lane* lane : lanes_) delete lane;
}

void ChromeTraceRecorder::OnPlan(const plan::Plan& plan) {
  job_name_ = plan.job_name();
  std::ostringstream actors;
  for (const plan::Task& task : plan.tasks()) {
    Lane* lane = new Lane;
    lane->task_id = task.id();
    lane->pid = LanePid(task);
    lane->name = task.name();
    lane->kind = KindName(task.kind());
    lane->op = task.op_type().empty() ? lane->kind : task.op_type();
    lanes_.push_back(lane);
    task_ids_.push_back(task.id());

    if (actors.tellp() > 0) actors << ",\n  ";
    actors << "{\"id\":" << task.id() << ",\"name\":\"" << Escape(task.name()) << "\",\"kind\":\"" << lane->kind
           << "\",\"op\":\"" << Escape(lane->op) << "\",\"device\":\""
           << Escape(task.device_type().empty() ? "cpu" : task.device_type()) << ":" << task.device_id()
           << "\",\"machine\":" << task.machine_id() << ",\"pid\":" << lane->pid << ",\"source_location\":\""
           << Escape(task.source_location()) << "\",\"inputs\":[";
    for (int i = 0; i < task.inputs_size(); ++i) {
      const plan::InputDesc& in = task.inputs(i);
      actors << (i ? "," : "") << "{\"producer\":" << in.producer_task_id() << ",\"register\":" << in.producer_register()
             << ",\"control\":" << (in.control() ? "true" : "false") << "}";
    }
    actors << "],\"registers\":[";
    for (int r = 0; r < task.registers_size(); ++r) {
      const plan::RegisterDesc& reg = task.registers(r);
      int64_t bytes = 0;
      for (const plan::BlobDesc& blob : reg.blobs()) bytes += blob.byte_size();
      actors << (r ? "," : "") << "{\"name\":\"" << Escape(reg.name()) << "\",\"register_num\":"
             << (task.kind() == plan::VARIABLE ? 1 : reg.register_num()) << ",\"bytes\":" << bytes << ",\"consumers\":[";
      for (int c = 0; c < reg.consumer_task_ids_size(); ++c) actors << (c ? "," : "") << reg.consumer_task_ids(c);
      actors << "]}";
    }
    actors << "]}";
  }
  plan_json_actors_ = actors.str();
}

ChromeTraceRecorder::Lane* ChromeTraceRecorder::LaneOf(int64_t task_id) {
  // Plans number tasks densely in practice; fall back to a search otherwise.
  if (task_id >= 0 && task_id < static_cast<int64_t>(lanes_.size()) && lanes_[task_id]->task_id == task_id)
    return lanes_[task_id];
  for (Lane* lane : lanes_)
    if (lane->task_id == task_id) return lane;
  return nullptr;
}

void ChromeTraceRecorder::OnAct(int64_t task_id, int64_t iteration, int64_t start_ns, int64_t end_ns) {
  if (Lane* lane = LaneOf(task_id)) lane->Append(Event{start_ns, end_ns, iteration, 0});
}

void ChromeTraceRecorder::OnWait(int64_t task_id, int64_t iteration, WaitReason reason, int64_t start_ns,
                                 int64_t end_ns) {
  if (end_ns - start_ns < 1000) return;  // sub-microsecond waits carry no information
  if (Lane* lane = LaneOf(task_id))
    lane->Append(Event{start_ns, end_ns, iteration, static_cast<int8_t>(reason == WaitReason::kInputNotReady ? 1 : 2)});
}

size_t ChromeTraceRecorder::num_events() const {
  size_t n = 0;
  for (const Lane* lane : lanes_) n += lane->size;
  return n;
}

std::string ChromeTraceRecorder::ToJson() const {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  std::vector<int> pids;
  for (const Lane* lane : lanes_)
    if (std::find(pids.begin(), pids.end(), lane->pid) == pids.end()) pids.push_back(lane->pid);
  for (int pid : pids) {
    int machine = pid / 1000, device = pid % 1000;
    sep();
    out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid << ",\"args\":{\"name\":\"machine " << machine << " "
        << (device >= 500 ? "gpu:" : "cpu:") << (device >= 500 ? device - 500 : device) << "\"}}";
  }
  for (const Lane* lane : lanes_) {
    sep();
    out << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << lane->pid << ",\"tid\":" << lane->task_id
        << ",\"args\":{\"name\":\"" << Escape(lane->name) << "\"}}";
    sep();
    out << "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" << lane->pid << ",\"tid\":" << lane->task_id
        << ",\"args\":{\"sort_index\":" << lane->task_id << "}}";
  }
  for (const Lane* lane : lanes_) {
    const std::string name = Escape(lane->name), op = Escape(lane->op);
    lane->ForEach([&](const Event& e) {
      sep();
      double ts = (e.start_ns - origin_ns_) / 1000.0, dur = (e.end_ns - e.start_ns) / 1000.0;
      if (e.kind == 0) {
        out << "{\"ph\":\"X\",\"cat\":\"act\",\"name\":\"" << op << "\",\"pid\":" << lane->pid << ",\"tid\":" << lane->task_id
            << ",\"ts\":" << ts << ",\"dur\":" << dur << ",\"args\":{\"iteration\":" << e.iteration << ",\"actor\":\""
            << name << "\",\"op\":\"" << op << "\",\"kind\":\"" << lane->kind << "\"}}";
      } else {
        const char* reason = WaitReasonName(e.kind == 1 ? WaitReason::kInputNotReady : WaitReason::kOutputRegistersFull);
        out << "{\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"wait: " << reason << "\",\"pid\":" << lane->pid
            << ",\"tid\":" << lane->task_id << ",\"ts\":" << ts << ",\"dur\":" << dur
            << ",\"args\":{\"iteration\":" << e.iteration << ",\"reason\":\"" << reason << "\"}}";
      }
    });
  }
  out << "\n],\n\"actorflow\":{\"version\":1,\"job\":\"" << Escape(job_name_) << "\",\"actors\":[\n  "
      << plan_json_actors_ << "]}}\n";
  return out.str();
}

Status ChromeTraceRecorder::Write(const std::string& path) const {
  std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) return InvalidArgument("cannot open trace file '" + tmp + "' for writing");
    file << ToJson();
    if (!file) return Internal("failed writing trace file '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Internal("cannot rename '" + tmp + "' to '" + path + "'");
  return Status::Ok();
}

}  // namespace actorflow
