// A fast reader for trace files in the recorder's own layout (docs/trace_format.md: one event
// per line, keys in a fixed order). json.loads builds a dict per event, which is most of the
// time `python -m actorflow.trace summary` spends on a million events; this reads the complete
// events straight into columns. Anything it does not recognise makes it return None, and the
// reader falls back to the general JSON path (which also gives the precise error messages).
#include "python_bindings/trace_reader.h"

#include <pybind11/numpy.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actorflow {
namespace py = pybind11;
namespace {

constexpr std::string_view kHead = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
constexpr std::string_view kTail = "\n],\n\"actorflow\":";

// Kinds as in actorflow/trace/reader.py.
constexpr int8_t kAct = 0, kWaitInput = 1, kWaitBackpressure = 2, kWaitWorker = 4;

class LineParser {
 public:
  LineParser(const char* p, const char* end) : p_(p), end_(end) {}
  bool Literal(std::string_view s) {
    if (static_cast<size_t>(end_ - p_) < s.size() || std::memcmp(p_, s.data(), s.size()) != 0) return false;
    p_ += s.size();
    return true;
  }
  // A string without escapes (names with escapes take the general path).
  bool String(std::string_view* out) {
    if (!Literal("\"")) return false;
    const char* start = p_;
    while (p_ < end_ && *p_ != '"') {
      if (*p_ == '\\' || static_cast<unsigned char>(*p_) < 0x20) return false;
      ++p_;
    }
    if (p_ == end_) return false;
    *out = std::string_view(start, p_ - start);
    ++p_;
    return true;
  }
  template <typename T> bool Number(T* out) {
    auto [next, ec] = std::from_chars(p_, end_, *out);
    if (ec != std::errc() || next == p_) return false;
    p_ = next;
    return true;
  }
  bool AtEnd() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

struct Columns {
  std::vector<int64_t> pid, tid, iteration;
  std::vector<double> ts, dur;
  std::vector<int8_t> kind;
  std::vector<int32_t> name;
  std::vector<std::string_view> names;
  std::unordered_map<std::string_view, int32_t> name_ids;

  int32_t NameId(std::string_view s) {
    auto [it, inserted] = name_ids.emplace(s, static_cast<int32_t>(names.size()));
    if (inserted) names.push_back(s);
    return it->second;
  }
};

// One complete event (ph X) line; false: not in the recorder's layout.
bool ParseComplete(const char* p, const char* end, Columns* c) {
  LineParser in(p, end);
  std::string_view cat, name, text;
  int64_t pid, tid, iteration;
  double ts, dur;
  if (!(in.Literal("{\"ph\":\"X\",\"cat\":") && in.String(&cat) && in.Literal(",\"name\":") && in.String(&name) &&
        in.Literal(",\"pid\":") && in.Number(&pid) && in.Literal(",\"tid\":") && in.Number(&tid) &&
        in.Literal(",\"ts\":") && in.Number(&ts) && in.Literal(",\"dur\":") && in.Number(&dur) &&
        in.Literal(",\"args\":{\"iteration\":") && in.Number(&iteration)))
    return false;
  int8_t kind;
  if (cat == "act") {
    if (!(in.Literal(",\"actor\":") && in.String(&text) && in.Literal(",\"op\":") && in.String(&text) &&
          in.Literal(",\"kind\":") && in.String(&text)))
      return false;
    kind = kAct;
  } else if (cat == "wait") {
    if (!(in.Literal(",\"reason\":") && in.String(&text))) return false;
    if (text == "input not ready")
      kind = kWaitInput;
    else if (text == "output registers full")
      kind = kWaitBackpressure;
    else if (text == "worker busy")
      kind = kWaitWorker;
    else
      return false;
  } else {
    return false;
  }
  if (!(in.Literal("}}") && in.AtEnd())) return false;
  // from_chars also reads "nan" and "inf": such times (and negative durations) are errors that
  // the general path reports with the event's index.
  if (!std::isfinite(ts) || !std::isfinite(dur) || dur < 0) return false;
  c->pid.push_back(pid);
  c->tid.push_back(tid);
  c->ts.push_back(ts);
  c->dur.push_back(dur);
  c->kind.push_back(kind);
  c->iteration.push_back(iteration);
  c->name.push_back(c->NameId(name));
  return true;
}

template <typename T> py::array_t<T> ToArray(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

py::object ReadRecorderTrace(const py::bytes& data) {
  std::string_view text = data;  // a view of the bytes object: no copy
  if (text.substr(0, kHead.size()) != kHead) return py::none();
  const size_t tail = text.rfind(kTail);
  if (tail == std::string_view::npos || tail < kHead.size() - 1) return py::none();
  Columns c;
  std::vector<std::string_view> metadata;
  bool ok = true;
  {
    py::gil_scoped_release release;
    const char* p = text.data() + kHead.size();
    const char* events_end = text.data() + tail;
    while (p < events_end) {
      const char* line_end = static_cast<const char*>(std::memchr(p, '\n', events_end - p));
      if (line_end == nullptr) line_end = events_end;
      const char* event_end = line_end;
      if (event_end > p && event_end[-1] == ',') --event_end;  // the separator
      if (event_end - p > 8 && std::memcmp(p, "{\"ph\":\"M\"", 9) == 0) {
        metadata.emplace_back(p, event_end - p);
      } else if (!ParseComplete(p, event_end, &c)) {
        ok = false;
        break;
      }
      p = line_end + 1;
    }
  }
  if (!ok) return py::none();
  py::list names, meta;
  std::string_view rest = text.substr(tail + kTail.size() - std::string_view("\"actorflow\":").size());
  py::str rest_text;
  try {  // names and metadata that are not UTF-8: the general path says so, with the byte offset
    for (std::string_view s : c.names) names.append(py::str(s.data(), s.size()));
    for (std::string_view s : metadata) meta.append(py::str(s.data(), s.size()));
    rest_text = py::str("{" + std::string(rest.data(), rest.size()));
  } catch (py::error_already_set&) {
    return py::none();
  }
  py::dict out;
  out["pid"] = ToArray(c.pid);
  out["tid"] = ToArray(c.tid);
  out["ts"] = ToArray(c.ts);
  out["dur"] = ToArray(c.dur);
  out["kind"] = ToArray(c.kind);
  out["iteration"] = ToArray(c.iteration);
  out["name_index"] = ToArray(c.name);
  out["names"] = names;
  out["metadata"] = meta;                                           // the ph M lines, as JSON texts
  out["rest"] = rest_text;  // {"actorflow":...}
  return out;
}

}  // namespace

void BindTraceReader(py::module_& m) {
  m.def("_read_recorder_trace", &ReadRecorderTrace, py::arg("data"),
        "Columns of a trace in the recorder's layout, or None (then use the general JSON reader).");
}

}  // namespace actorflow
