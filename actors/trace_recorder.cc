#include "actors/trace_recorder.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "actors/proto/plan.pb.h"

namespace actorflow {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace trace_clock {
namespace {
// TSC ticks only where the kernel trusts the TSC as its own clocksource (so it is invariant
// and synchronized across cores); ACTORFLOW_TRACE_CLOCK=steady forces the portable clock.
bool UseTsc() {
#if defined(__x86_64__)
  if (const char* env = std::getenv("ACTORFLOW_TRACE_CLOCK"); env != nullptr && std::string(env) == "steady")
    return false;
  std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return source >> name && name == "tsc";
#else
  return false;
#endif
}
}  // namespace

const bool kTscTicks = UseTsc();

}  // namespace trace_clock

const char* WaitReasonName(WaitReason reason) {
  switch (reason) {
    case WaitReason::kInputNotReady: return "input not ready";
    case WaitReason::kOutputRegistersFull: return "output registers full";
    case WaitReason::kWorkerBusy: return "worker busy";
  }
  return "unknown";
}

struct ChromeTraceRecorder::Lane {
  int64_t task_id = 0;  // LaneFor's key
  int64_t tid = 0;      // in the JSON: the task id; the host's is one past the largest
  int pid = 0;
  std::string name, op, kind;
  TraceLane events;
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

constexpr int kHostDevice = 999;  // the host's lane: pid machine * 1000 + 999

// One instant read on both clocks: the tick read is the midpoint of two around the ns read.
void Anchor(int64_t* ticks, int64_t* ns) {
  const int64_t before = trace_clock::Now();
  *ns = NowNs();
  *ticks = before + (trace_clock::Now() - before) / 2;
}

// Nanoseconds per tick between the recorder's origin and now. TSC ticks are calibrated against
// the steady clock over at least 20 ms (waiting out the rest for short traces): the anchors'
// error of well under a microsecond then costs less than 50 ppm.
double NsPerTick(int64_t origin_ticks, int64_t origin_ns) {
  if (!trace_clock::kTscTicks) return 1.0;
  constexpr int64_t kMinSpanNs = 20'000'000;
  int64_t ticks, ns;
  Anchor(&ticks, &ns);
  if (ns - origin_ns < kMinSpanNs) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(kMinSpanNs - (ns - origin_ns)));
    Anchor(&ticks, &ns);
  }
  return ticks > origin_ticks ? static_cast<double>(ns - origin_ns) / static_cast<double>(ticks - origin_ticks) : 1.0;
}

}  // namespace

ChromeTraceRecorder::ChromeTraceRecorder() { Anchor(&origin_ticks_, &origin_ns_); }

ChromeTraceRecorder::~ChromeTraceRecorder() {
  for (Lane* lane : lanes_) delete lane;
}

void ChromeTraceRecorder::OnPlan(const plan::Plan& plan) {
  job_name_ = plan.job_name();
  std::ostringstream actors;
  for (const plan::Task& task : plan.tasks()) {
    Lane* lane = new Lane;
    lane->task_id = lane->tid = task.id();
    lane->pid = LanePid(task);
    lane->name = task.name();
    lane->kind = KindName(task.kind());
    lane->op = task.op_type().empty() ? lane->kind : task.op_type();
    lanes_.push_back(lane);

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
  // The host (the caller pushing iterations) on machine 0.
  Lane* host = new Lane;
  host->task_id = kHostLane;
  host->tid = 0;
  for (const Lane* lane : lanes_) host->tid = std::max(host->tid, lane->tid + 1);
  host->pid = kHostDevice;
  host->name = "host";
  host->kind = "host";
  host->op = "push";
  lanes_.push_back(host);
  if (actors.tellp() > 0) actors << ",\n  ";
  actors << "{\"id\":" << host->tid << ",\"name\":\"host\",\"kind\":\"host\",\"op\":\"push\",\"device\":\"host\","
         << "\"machine\":0,\"pid\":" << kHostDevice << ",\"source_location\":\"\",\"inputs\":[],\"registers\":[]}";
  plan_json_actors_ = actors.str();
}

TraceLane* ChromeTraceRecorder::LaneFor(int64_t task_id) {
  for (Lane* lane : lanes_)
    if (lane->task_id == task_id) return &lane->events;
  return nullptr;
}

size_t ChromeTraceRecorder::num_events() const {
  size_t n = 0;
  for (const Lane* lane : lanes_) n += lane->events.num_events();
  return n;
}

namespace {

// Appends JSON text; numbers through std::to_chars (an ostream costs ~1 us per event).
struct JsonOut {
  std::string s;
  JsonOut& operator<<(std::string_view v) {
    s.append(v);
    return *this;
  }
  JsonOut& operator<<(const char* v) { return *this << std::string_view(v); }
  JsonOut& operator<<(int64_t v) {
    char buf[24];
    return *this << std::string_view(buf, std::to_chars(buf, buf + sizeof buf, v).ptr - buf);
  }
  JsonOut& operator<<(int v) { return *this << static_cast<int64_t>(v); }
  JsonOut& operator<<(double v) {  // microseconds, to the nanosecond
    char buf[48];
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 3);
    return *this << std::string_view(buf, r.ptr - buf);
  }
};

}  // namespace

std::string ChromeTraceRecorder::ToJson() const {
  JsonOut out;
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
    out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid << ",\"args\":{\"name\":\"machine " << machine << " ";
    if (device == kHostDevice)
      out << "host";
    else
      out << (device >= 500 ? "gpu:" : "cpu:") << (device >= 500 ? device - 500 : device);
    out << "\"}}";
  }
  for (const Lane* lane : lanes_) {
    sep();
    out << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << lane->pid << ",\"tid\":" << lane->tid
        << ",\"args\":{\"name\":\"" << Escape(lane->name) << "\"}}";
    sep();
    out << "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" << lane->pid << ",\"tid\":" << lane->tid
        << ",\"args\":{\"sort_index\":" << lane->tid << "}}";
  }
  const double ns_per_tick = NsPerTick(origin_ticks_, origin_ns_);
  auto micros = [&](int64_t ticks) { return static_cast<double>(ticks - origin_ticks_) * ns_per_tick / 1000.0; };
  for (const Lane* lane : lanes_) {
    const std::string name = Escape(lane->name), op = Escape(lane->op);
    // The fixed part of every event of this lane.
    JsonOut where;
    where << ",\"pid\":" << lane->pid << ",\"tid\":" << lane->tid << ",\"ts\":";
    JsonOut act_args;
    act_args << ",\"actor\":\"" << name << "\",\"op\":\"" << op << "\",\"kind\":\"" << lane->kind << "\"}}";
    lane->events.ForEach([&](const TraceLane::Event& e) {
      // Clocks of two cores may disagree by a few ns: never a negative duration.
      const double wait_ts = micros(e.wait_start), ts = std::max(micros(e.start), wait_ts),
                   end = std::max(micros(e.end), ts);
      if (e.waited && ts - wait_ts >= 1.0) {  // sub-microsecond waits carry no information
        const char* reason = WaitReasonName(e.reason);
        sep();
        out << "{\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"wait: " << reason << "\"" << where.s << wait_ts
            << ",\"dur\":" << ts - wait_ts << ",\"args\":{\"iteration\":" << e.iteration << ",\"reason\":\"" << reason
            << "\"}}";
      }
      if (!e.is_act) return;
      sep();
      out << "{\"ph\":\"X\",\"cat\":\"act\",\"name\":\"" << op << "\"" << where.s << ts << ",\"dur\":" << end - ts
          << ",\"args\":{\"iteration\":" << e.iteration << act_args.s;
    });
  }
  out << "\n],\n\"actorflow\":{\"version\":1,\"job\":\"" << Escape(job_name_) << "\",";
  if (workers_ > 0) out << "\"workers\":" << workers_ << ",";
  out << "\"actors\":[\n  "
      << plan_json_actors_ << "]}}\n";
  return std::move(out.s);
}

namespace {
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
std::string OsError(int error) { return std::strerror(error); }
}  // namespace

Status ChromeTraceRecorder::CheckWritable(const std::string& path) {
  if (path.empty()) return InvalidArgument("trace path is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return InvalidArgument("trace path '" + path + "' is a directory; name a file (e.g. '" + path + "/trace.json')");
    if (!S_ISREG(st.st_mode)) return InvalidArgument("trace path '" + path + "' exists and is not a regular file");
  } else if (errno != ENOENT) {
    return InvalidArgument("cannot use trace path '" + path + "': " + OsError(errno));
  }
  // The file is written as a temporary beside it, then renamed: the directory must take files.
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0)
    return InvalidArgument("cannot write trace file '" + path + "': directory '" + dir + "': " + OsError(errno));
  if (!S_ISDIR(st.st_mode))
    return InvalidArgument("cannot write trace file '" + path + "': '" + dir + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return InvalidArgument("cannot write trace file '" + path + "': directory '" + dir + "': " + OsError(errno));
  return Status::Ok();
}

Status ChromeTraceRecorder::Write(const std::string& path) const {
  if (Status writable = CheckWritable(path); !writable.ok()) return writable;
  // A temporary of our own (never a file of the user's), renamed over `path` when complete.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return Internal("cannot create a temporary file beside trace file '" + path + "': " + OsError(errno));
  const std::string json = ToJson();
  size_t done = 0;
  while (done < json.size()) {
    const ssize_t n = ::write(fd, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Internal("failed writing trace file '" + tmp + "': " + OsError(error));
    }
    done += static_cast<size_t>(n);
  }
  ::fchmod(fd, 0644);  // mkstemp makes it 0600; a trace is an ordinary output file
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return Internal("failed writing trace file '" + tmp + "': " + OsError(error));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return Internal("cannot rename '" + tmp + "' to '" + path + "': " + OsError(error));
  }
  return Status::Ok();
}

}  // namespace actorflow
