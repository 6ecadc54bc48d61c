// Lowering of a placed Graph to a plan::Plan (LowerToPlan): tasks per device, views, gathers in
// place, sinks and control edges.
#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <ranges>
#include <stdexcept>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "graph/attr_convert.h"
#include "graph/in_place_order.h"
#include "graph/ordering.h"
#include "graph/passes.h"
#include "kernels/boxing.h"

namespace actorflow {
namespace graph {

using ordering_detail::InPlaceWrittenRefs;

namespace {

// Fills `blob` in place (the register's own message: no temporary copied into it); its name is
// written by the caller.
void FillBlob(plan::BlobDesc& blob, const TensorDesc& desc) {
  blob.mutable_shape()->Reserve(static_cast<int>(desc.shape.size()));
  for (int64_t d : desc.shape) blob.add_shape(d);
  blob.set_dtype(ToProtoDType(desc.dtype));
  blob.set_byte_size(static_cast<int64_t>(desc.byte_size()));
}

// Where devices_of points for a node without devices (placement did not run).
const std::vector<int> kFirstDevice{0};

// A node's tasks: consecutive ids, as LowerInto makes each node's tasks one after the other
// (a number and a count per node, where a vector was one allocation per node).
struct TaskRange {
  int first = 0;
  int count = 0;
  size_t size() const { return static_cast<size_t>(count); }
  bool empty() const { return count == 0; }
  int operator[](size_t i) const { return first + static_cast<int>(i); }
  int at(size_t i) const {
    if (i >= size()) throw std::out_of_range("lowering: task " + std::to_string(i) + " of " + std::to_string(count));
    return (*this)[i];
  }
  auto begin() const { return std::views::iota(first, first + count).begin(); }
  auto end() const { return std::views::iota(first, first + count).end(); }
  void push_back(int task) {
    if (count == 0) first = task;
    if (task != first + count) throw std::logic_error("lowering: a node's tasks are not consecutive");
    ++count;
  }
  bool operator==(const TaskRange&) const = default;
};

}  // namespace

StatusOr<plan::Plan> LowerToPlan(const Graph& graph, const CompileOptions& options) {
  plan::Plan plan;
  AF_RETURN_IF_ERROR(LowerInto(graph, options, plan));
  return plan;
}

Status LowerInto(const Graph& graph, const CompileOptions& options, plan::Plan& plan) {
  plan.set_job_name(graph.job_name());
  const int register_num = std::max(1, options.register_num);
  // Each logical node's tasks: one per device of its placement; inputs and variables, held
  // whole, have one task whatever their placement (their readers on every device read it in
  // place: registers are host memory).
  struct Physical {
    const std::vector<int>* devices = &kFirstDevice;  // the node's (devices_of)
    TaskRange tasks;
  };
  // By node position: lookups hash no name, and the table is one allocation (no vector per node).
  std::vector<Physical> physical(graph.nodes().size());
  auto physical_of = [&](const Node& node) -> Physical& {
    return physical[static_cast<size_t>(&node - graph.nodes().data())];
  };
  auto devices_of = [](const Node& n) -> const std::vector<int>& { return n.devices.empty() ? kFirstDevice : n.devices; };
  // `device` is a global device id (graph.h): machine device / D, device device % D.
  const int device_num = graph.device_num();
  auto new_task = [&](const std::string& name, plan::TaskKind kind, int device = 0) {
    plan::Task* t = plan.add_tasks();
    t->set_id(plan.tasks_size() - 1);
    t->set_name(name);
    t->set_kind(kind);
    t->set_device_type("cpu");
    t->set_device_id(device % device_num);
    t->set_machine_id(device / device_num);
    return t;
  };
  // Reshape and flatten become views: their readers read the input's register with the new
  // shape, so no task copies the bytes and no message hop is spent. Not for variables (their
  // readers are ordered against updates by control edges) nor where a control edge, an
  // in-place write or a chain through a variable would need the op as a task.
  // On several devices (one machine), a reshape that keeps axis 0 and reads and writes it
  // S(0) is a split view: each device's rows of the output are the same bytes as its rows of
  // the input, so each device's reader reads its producer's register (or its rows of a feed
  // stored split) with its physical shape. Only where every reader reads it so, or gathers it
  // whole (a boxing to B, made a gather in place of the bytes below).
  struct View {
    std::string base;  // the ref whose register holds the bytes
    TensorDesc desc;   // logical
    bool split = false;
  };
  std::map<std::string, View> views;  // view op output ref -> what it reads
  const NameIndex written = InPlaceWrittenRefs(graph);
  {
    // Built on first use: most jobs have no reshape, and most reshapes run on one device.
    std::optional<std::unordered_set<std::string>> control_targets;
    std::optional<std::unordered_map<std::string, std::vector<std::pair<const Node*, size_t>>>> all_readers;
    auto is_control_target = [&](const std::string& name) {
      if (!control_targets) {
        control_targets.emplace();
        for (const Node& n : graph.nodes()) control_targets->insert(n.control_inputs.begin(), n.control_inputs.end());
      }
      return control_targets->count(name) > 0;
    };
    auto read_split_or_gathered = [&](const Node& n) {
      if (!all_readers) {
        all_readers.emplace();  // ref -> (reader, input)
        for (const Node& reader : graph.nodes())
          for (size_t i = 0; i < reader.inputs.size(); ++i) (*all_readers)[reader.inputs[i]].push_back({&reader, i});
      }
      auto& readers = *all_readers;
      for (const auto& [reader, i] : readers[n.output_ref(0)]) {
        const bool gathers = reader->type == "boxing" && !reader->output_sbp.empty() &&
                             reader->output_sbp[0].kind == SbpKind::kBroadcast;
        const bool same = devices_of(*reader) == devices_of(n) && i < reader->input_sbp.size() &&
                          reader->input_sbp[i] == Sbp::Split(0) &&
                          std::find(reader->mutable_inputs.begin(), reader->mutable_inputs.end(), static_cast<int>(i)) ==
                              reader->mutable_inputs.end();
        if (!gathers && (reader->type == "boxing" || !same)) return false;
      }
      return true;
    };
    for (const Node& n : graph.nodes()) {
      if (n.kind != NodeKind::kOp || (n.type != "reshape" && n.type != "flatten") || n.inputs.size() != 1 ||
          n.output_names.size() != 1 || !n.control_inputs.empty() || is_control_target(n.name) ||
          written.Contains(n.output_ref(0)))
        continue;
      const bool split = devices_of(n).size() > 1;
      if (split) {
        AF_ASSIGN_OR_RETURN(TensorDesc in, graph.Desc(n.inputs[0]));
        if (graph.machine_num() > 1 || n.input_sbp.size() != 1 || n.output_sbp.size() != 1 ||
            !(n.input_sbp[0] == Sbp::Split(0)) || !(n.output_sbp[0] == Sbp::Split(0)) || in.shape.empty() ||
            n.output_descs[0].shape.empty() || in.shape[0] != n.output_descs[0].shape[0] || !read_split_or_gathered(n))
          continue;
      }
      std::string base = n.inputs[0];
      if (auto it = views.find(base); it != views.end()) {
        if (it->second.split != split) continue;
        base = it->second.base;
      }
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(base));
      const Node& from = *producer.first;
      if (from.kind == NodeKind::kVariable || written.Contains(base) || devices_of(from) != devices_of(n)) continue;
      // A split view's bytes: the producer's tasks' registers, S(0), or a feed stored S(0).
      if (split && !(from.kind == NodeKind::kOp ? static_cast<size_t>(producer.second) < from.output_sbp.size() &&
                                                      from.output_sbp[producer.second] == Sbp::Split(0)
                                                : StoredLayout(graph, from) == Sbp::Split(0)))
        continue;
      views[n.output_ref(0)] = View{base, n.output_descs[0], split};
    }
  }
  auto output_sbp = [&graph](const Node& n, size_t k) {
    if (n.kind == NodeKind::kVariable && ShardedVariable(graph, n)) return StoredLayout(graph, n);
    if (FedPerMachine(graph, n)) return Sbp::Split(0);  // one source per machine (FedPerMachine)
    if (n.kind != NodeKind::kOp || k >= n.output_sbp.size() || n.devices.size() <= 1) return Sbp::Broadcast();
    return n.output_sbp[k];
  };
  // The task (and its register) a reader on device `device`, index `index` of `reader_devices`,
  // reads for `ref`: the producer's only task, its task on that device (or its first) for a
  // broadcast blob, else its task of the same index (the boxing pass made the layouts equal).
  // A boxing to B from a split whose shards are contiguous byte ranges of the whole (every
  // axis before the split axis has length 1) makes no task: the producer's registers on its
  // devices become slices of one block (RegisterDesc.slice_of), and readers take the block
  // whole (InputDesc.whole), waiting for every slice. Each device's task (a reduce-scatter's
  // sum, a layer's output) thus writes its piece straight into the tensor every reader reads;
  // in one process the gather costs no copy.
  struct Gathered {
    TaskRange tasks;  // the producer's, one per shard, in order
    int register_index;
    TensorDesc logical;
  };
  std::map<std::string, Gathered> gathered;  // boxing node -> the block it reads
  struct Source {
    int task;
    int register_index;
    std::optional<Shape> view_shape;  // read with this shape (a view, a gather in place)
    const Gathered* gathered = nullptr;
    std::optional<int64_t> part_offset;  // a part of the register, this many bytes in
  };
  // The bytes before shard `index` of `parts` of `logical` split S(0).
  auto rows_before = [](const TensorDesc& logical, size_t index, size_t parts) -> StatusOr<int64_t> {
    int64_t offset = 0;
    for (size_t k = 0; k < index; ++k) {
      AF_ASSIGN_OR_RETURN(Shape shard, PhysicalShape(logical.shape, Sbp::Split(0), static_cast<int64_t>(parts),
                                                     static_cast<int64_t>(k)));
      offset += static_cast<int64_t>(TensorDesc{shard, logical.dtype}.byte_size());
    }
    return offset;
  };
  auto source_of = [&](const std::string& ref, int device, size_t index,
                       const std::vector<int>& reader_devices) -> StatusOr<Source> {
    auto view = views.find(ref);
    const View* v = view == views.end() ? nullptr : &view->second;
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(v == nullptr ? ref : v->base));
    std::optional<Shape> view_shape;
    if (v != nullptr) view_shape = v->desc.shape;
    if (auto g = gathered.find(resolved.first->name); g != gathered.end())
      return Source{g->second.tasks[0], g->second.register_index, view_shape, &g->second, std::nullopt};
    const Physical& p = physical_of(*resolved.first);
    if (p.tasks.empty()) return Internal("'" + ref + "' is read before its producer has a task");
    if (v != nullptr && v->split) {  // this device's rows (read_split_or_gathered: on the view's devices)
      const size_t parts = reader_devices.size();
      if (*p.devices != reader_devices || index >= parts)
        return Internal("split view '" + ref + "' read on " + PlacementOf(reader_devices).ToString());
      AF_ASSIGN_OR_RETURN(view_shape, PhysicalShape(v->desc.shape, Sbp::Split(0), static_cast<int64_t>(parts),
                                                    static_cast<int64_t>(index)));
      if (p.tasks.size() == parts) return Source{p.tasks[index], resolved.second, view_shape, nullptr, std::nullopt};
      AF_ASSIGN_OR_RETURN(int64_t offset, rows_before(v->desc, index, parts));  // a feed stored split
      return Source{p.tasks[0], resolved.second, view_shape, nullptr, offset};
    }
    Source source{p.tasks[0], resolved.second, view_shape, nullptr, std::nullopt};
    if (p.tasks.size() == 1) return source;
    if (output_sbp(*resolved.first, resolved.second).kind == SbpKind::kBroadcast) {
      auto it = std::find(p.devices->begin(), p.devices->end(), device);
      source.task = p.tasks[it == p.devices->end() ? 0 : it - p.devices->begin()];
      return source;
    }
    if (*p.devices != reader_devices || index >= p.tasks.size())
      return Internal("'" + ref + "' is laid out " + output_sbp(*resolved.first, resolved.second).ToString() + " on " +
                      PlacementOf(*p.devices).ToString() + " but read on " + PlacementOf(reader_devices).ToString() +
                      " without a boxing");
    source.task = p.tasks[index];
    return source;
  };
  auto add_input = [&](plan::Task* consumer, const Source& source) {
    plan::InputDesc* in = consumer->add_inputs();
    in->set_producer_task_id(source.task);
    in->set_producer_register(source.register_index);
    in->set_blob_index(0);
    if (source.view_shape || source.gathered != nullptr) {
      in->set_has_view(true);
      in->set_whole(source.gathered != nullptr);
      const Shape& shape = source.view_shape ? *source.view_shape : source.gathered->logical.shape;
      for (int64_t d : shape) in->add_view_shape(d);
    }
    if (source.part_offset) {
      in->set_part(true);
      in->set_byte_offset(*source.part_offset);
    }
    if (source.gathered == nullptr) return;
    for (size_t k = 1; k < source.gathered->tasks.size(); ++k) {  // wait for every slice, hold it until acked
      plan::InputDesc* slice = consumer->add_inputs();
      slice->set_producer_task_id(source.gathered->tasks[k]);
      slice->set_producer_register(source.register_index);
      slice->set_control(true);
    }
  };
  // Whether boxing node `n` (to B) is a gather in place (see Gathered); if so, lays out the
  // producer's registers as slices of one block and records it.
  auto gather_in_place = [&](const Node& n) -> StatusOr<bool> {
    // A block is shared memory: on several machines (processes) the boxing stays a task, and
    // the cross-machine pass, which renumbers and splits the tasks by machine, sees no slices.
    if (graph.machine_num() > 1) return false;
    if (n.type != "boxing" || n.output_sbp.empty() || n.output_sbp[0].kind != SbpKind::kBroadcast) return false;
    // Gathering a split view gathers its bytes: a feed stored split is whole already (the
    // boxing is a view of its register); an op's shards are gathered below, shaped as the view.
    auto view = views.find(n.inputs.at(0));
    if (view != views.end() && !view->second.split) return false;
    const std::string source_ref = view == views.end() ? n.inputs[0] : view->second.base;
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(source_ref));
    const Node& producer = *resolved.first;
    if (view != views.end() && producer.kind != NodeKind::kOp) {
      views[n.output_ref(0)] = View{source_ref, n.output_descs[0], false};
      return true;
    }
    const Sbp from = output_sbp(producer, resolved.second);
    const Physical& shards = physical_of(producer);
    if (producer.kind != NodeKind::kOp || from.kind != SbpKind::kSplit || shards.tasks.size() < 2) return false;
    const TensorDesc& logical = view == views.end() ? producer.output_descs.at(resolved.second) : n.output_descs[0];
    for (int64_t a = 0; a < from.axis; ++a)
      if (producer.output_descs.at(resolved.second).shape[a] != 1) return false;  // shards are strided, not byte ranges
    if (gathered.count(n.name)) return true;
    for (const auto& [name, other] : gathered)  // a second gather of the same shards shares the block
      if (other.tasks == shards.tasks && other.register_index == resolved.second) {
        gathered.emplace(n.name, Gathered{other.tasks, other.register_index, logical});
        return true;
      }
    const int owner = shards.tasks[0];
    int64_t offset = 0;
    for (int task : shards.tasks) {
      plan::RegisterDesc* r = plan.mutable_tasks(task)->mutable_registers(resolved.second);
      if (r->blobs_size() != 1 || r->has_slice_of() || r->reserved_byte_size() > 0)
        return Internal("op '" + producer.name + "': its register is already laid out for another gather");
      if (task == owner) {
        r->set_reserved_byte_size(static_cast<int64_t>(logical.byte_size()));
      } else {
        r->mutable_slice_of()->set_task_id(owner);
        r->mutable_slice_of()->set_register_index(resolved.second);
        r->mutable_slice_of()->set_byte_offset(offset);
      }
      offset += r->blobs(0).byte_size();
    }
    if (offset != static_cast<int64_t>(logical.byte_size()))
      return Internal("op '" + producer.name + "': its shards hold " + std::to_string(offset) + " bytes of " +
                      logical.ToString());
    gathered.emplace(n.name, Gathered{shards.tasks, resolved.second, logical});
    return true;
  };
  auto add_data_input = [&](plan::Task* consumer, const std::string& ref, int device = 0, size_t index = 0,
                            const std::vector<int>& reader_devices = {0}) -> Status {
    AF_ASSIGN_OR_RETURN(Source source, source_of(ref, device, index, reader_devices));
    add_input(consumer, source);
    return Status::Ok();
  };
  // Input i of op `n`'s task `index` of `parts`, where it reads a variable or placeholder
  // stored split with that layout (StoredLayout; the boxing pass left the edge alone): a part
  // view of the one buffer, this device's shard, which the task reads (and an update writes)
  // in place.
  auto add_shard_input = [&](plan::Task* consumer, const Node& n, size_t i, size_t index,
                             size_t parts) -> StatusOr<bool> {
    if (parts <= 1 || i >= n.input_sbp.size() || n.input_sbp[i].kind != SbpKind::kSplit) return false;
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(n.inputs[i]));
    const Node& variable = *resolved.first;
    if ((variable.kind != NodeKind::kVariable && variable.kind != NodeKind::kInput) ||
        !(StoredLayout(graph, variable) == n.input_sbp[i]))
      return false;
    if (variable.devices.size() != parts)
      return Internal("op '" + n.name + "' reads variable '" + variable.name + "' stored " +
                      n.input_sbp[i].ToString() + " over " + std::to_string(variable.devices.size()) +
                      " devices on " + std::to_string(parts));
    if (ShardedVariable(graph, variable)) {  // this device's shard is a buffer of its own
      const int shard_task = physical_of(variable).tasks.at(index);
      if (plan.tasks(shard_task).device_id() != consumer->device_id() ||
          plan.tasks(shard_task).machine_id() != consumer->machine_id())
        return Internal("op '" + n.name + "' reads shard " + std::to_string(index) + " of variable '" + variable.name +
                        "' on another device");
      plan::InputDesc* in = consumer->add_inputs();
      in->set_producer_task_id(shard_task);
      in->set_producer_register(resolved.second);
      in->set_blob_index(0);
      return true;
    }
    const TensorDesc& logical = variable.output_descs[0];
    // Fed per machine: shard `index` lies in the source of its machine (every machine holds the
    // same number of shards), offset by the shards before it there.
    const Physical& stored = physical_of(variable);
    const size_t per_source = parts / stored.tasks.size();
    const size_t first = index - index % per_source;
    int64_t offset = 0;
    Shape shard;
    for (size_t k = first; k <= index; ++k) {
      AF_ASSIGN_OR_RETURN(shard, PhysicalShape(logical.shape, n.input_sbp[i], static_cast<int64_t>(parts),
                                               static_cast<int64_t>(k)));
      if (k < index) offset += static_cast<int64_t>(TensorDesc{shard, logical.dtype}.byte_size());
    }
    plan::InputDesc* in = consumer->add_inputs();
    in->set_producer_task_id(stored.tasks.at(index / per_source));
    in->set_producer_register(resolved.second);
    in->set_blob_index(0);
    in->set_has_view(true);
    for (int64_t d : shard) in->add_view_shape(d);
    in->set_part(true);
    in->set_byte_offset(offset);
    return true;
  };
  // A producer's control register (no blobs), created on first use.
  std::map<int, int> control_register;
  auto add_control_input = [&](plan::Task* consumer, int producer) {
    auto it = control_register.find(producer);
    if (it == control_register.end()) {
      plan::Task* p = plan.mutable_tasks(producer);
      plan::RegisterDesc* r = p->add_registers();
      r->set_name("control");
      r->set_register_num(p->kind() == plan::VARIABLE ? 1 : register_num);
      it = control_register.emplace(producer, p->registers_size() - 1).first;
    }
    plan::InputDesc* in = consumer->add_inputs();
    in->set_producer_task_id(producer);
    in->set_producer_register(it->second);
    in->set_control(true);
  };

  std::map<std::string, int> feed_index;
  for (size_t i = 0; i < graph.feeds().size(); ++i) feed_index[graph.feeds()[i]] = static_cast<int>(i);
  bool spread = false;  // some node runs on several devices
  for (const Node& n : graph.nodes()) {
    if (n.kind == NodeKind::kOp && n.output_names.size() == 1 && !views.empty() && views.count(n.output_ref(0)))
      continue;  // a view
    if (n.kind == NodeKind::kOp) {
      AF_ASSIGN_OR_RETURN(bool in_place, gather_in_place(n));
      if (in_place) continue;
    }
    Physical& p = physical_of(n);
    p.devices = &devices_of(n);
    const std::vector<int>& all_devices = *p.devices;
    // Inputs and variables: one task holding the whole tensor, on the first device (variables
    // stored as shards across machines: one task per device, ShardedVariable). So is a
    // boxing to B: registers are host memory, so one copy serves the readers of every device
    // (an all-gather is one gather, an all-reduce a reduce-scatter and one gather; where the
    // shards are byte ranges of the whole, no gather at all: see gather_in_place).
    const bool whole_once = (n.kind != NodeKind::kOp && !ShardedVariable(graph, n)) ||
                            (n.type == "boxing" && !n.output_sbp.empty() && n.output_sbp[0].kind == SbpKind::kBroadcast);
    std::vector<int> own_task_devices;  // where they are not the node's devices
    if (whole_once) own_task_devices = {all_devices[0]};
    const std::vector<int>* task_devices_of = whole_once ? &own_task_devices : &all_devices;
    if (FedPerMachine(graph, n)) {  // one source per machine, on its first device, holding its rows
      if (static_cast<int>(all_devices.size()) != graph.machine_num() * device_num ||
          !std::is_sorted(all_devices.begin(), all_devices.end()) ||
          !(StoredLayout(graph, n) == Sbp::Split(0)))
        return InvalidArgument("placeholder '" + n.name + "' at " + n.location + " is fed per machine: it must be "
                               "laid out S(0) over every device of every machine (" +
                               std::to_string(graph.machine_num()) + " x " + std::to_string(device_num) +
                               ") with rows divisible by them, got " + PlacementOf(all_devices).ToString() + " " +
                               n.output_descs[0].ToString());
      own_task_devices.clear();
      for (int machine = 0; machine < graph.machine_num(); ++machine) own_task_devices.push_back(machine * device_num);
      task_devices_of = &own_task_devices;
    }
    const std::vector<int>& task_devices = *task_devices_of;
    const size_t parts = task_devices.size();
    spread |= parts > 1;
    plan::TaskKind kind = n.kind == NodeKind::kInput ? plan::SOURCE : n.kind == NodeKind::kVariable ? plan::VARIABLE : plan::COMPUTE;
    const OpDef* def = nullptr;
    if (n.kind == NodeKind::kOp && parts > 1) {
      AF_ASSIGN_OR_RETURN(def, OpRegistry::Global().Find(n.type));
    }
    std::vector<TensorDesc> logical_inputs;  // for the physical attributes of an op on several devices
    if (def != nullptr) {
      logical_inputs.reserve(n.inputs.size());
      for (const auto& ref : n.inputs) {
        AF_ASSIGN_OR_RETURN(TensorDesc desc, graph.Desc(ref));
        logical_inputs.push_back(std::move(desc));
      }
    }
    for (size_t index = 0; index < parts; ++index) {
      const int device = task_devices[index];
      plan::Task* t = new_task(parts == 1 ? n.name : n.name + "@" + std::to_string(device), kind, device);
      p.tasks.push_back(static_cast<int>(t->id()));
      t->set_source_location(n.location);
      // Ops placed on a GPU (PlaceOnDevices makes them CUDA tasks); feeds and variables stay host.
      if (kind == plan::COMPUTE && (n.placement.device_type == "gpu" || n.placement.device_type == "cuda"))
        t->set_device_type("gpu");
      std::vector<TensorDesc> physical_outputs;
      for (size_t k = 0; k < n.output_names.size(); ++k) {
        TensorDesc desc = n.output_descs[k];
        if (parts > 1) {
          auto shape = PhysicalShape(desc.shape, output_sbp(n, k), static_cast<int64_t>(parts), static_cast<int64_t>(index));
          if (!shape.ok()) return shape.status().WithContext("op '" + n.name + "' at " + n.location);
          desc.shape = shape.value();
        }
        physical_outputs.push_back(desc);
      }
      if (n.kind == NodeKind::kInput) {
        if (!feed_index.count(n.name)) return Internal("placeholder '" + n.name + "' is not a feed");
        t->set_feed_index(feed_index[n.name]);
      } else if (n.kind == NodeKind::kVariable) {
        t->set_variable_name(n.variable_name);
        t->set_read_only(!written.Contains(n.output_ref(0)));
        if (parts > 1) {  // a shard (ShardedVariable): which part of the logical tensor it holds
          (*t->mutable_attrs())["shard_axis"].set_i(output_sbp(n, 0).axis);
          (*t->mutable_attrs())["shard_index"].set_i(static_cast<int64_t>(index));
          (*t->mutable_attrs())["shard_parts"].set_i(static_cast<int64_t>(parts));
        }
      } else {
        t->set_op_type(n.type);
        Attrs made;  // the task's own attributes where they are not the node's
        const Attrs* attrs = &n.attrs;
        if (n.type == "boxing") {
          // One input per source shard (one for a broadcast source), and this device's piece.
          // A view's source is one whole register on one device (views are single-device
          // reshapes, read through add_data_input), so is a gather in place (one block);
          // anything else is the producer's tasks.
          AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(n.inputs.at(0)));
          const bool from_view = views.count(n.inputs[0]) > 0 || gathered.count(resolved.first->name) > 0;
          static const Physical kWholeSource{};
          const Physical& from = from_view ? kWholeSource : physical_of(*resolved.first);
          const size_t from_parts = from_view ? 1 : from.tasks.size();
          BoxingSpec spec;
          spec.logical_shape = n.output_descs[0].shape;
          spec.dtype = n.output_descs[0].dtype;
          spec.in = from_parts == 1 ? Sbp::Broadcast() : output_sbp(*resolved.first, resolved.second);
          spec.out = parts == 1 ? Sbp::Broadcast() : n.output_sbp.at(0);
          spec.in_parts = static_cast<int64_t>(from_parts);
          spec.out_parts = static_cast<int64_t>(parts);
          spec.out_index = static_cast<int64_t>(index);
          made = BoxingTaskAttrs(spec);
          attrs = &made;
          if (spec.in.kind == SbpKind::kBroadcast) {
            AF_RETURN_IF_ERROR(add_data_input(t, n.inputs[0], device, index, task_devices));
          } else {
            for (int task : from.tasks) add_input(t, Source{task, resolved.second, std::nullopt, nullptr, std::nullopt});
          }
        } else {
          for (size_t i = 0; i < n.inputs.size(); ++i) {
            AF_ASSIGN_OR_RETURN(bool shard, add_shard_input(t, n, i, index, parts));
            if (!shard) AF_RETURN_IF_ERROR(add_data_input(t, n.inputs[i], device, index, task_devices));
          }
          if (parts > 1) {
            PhysicalContext context;
            context.logical_inputs = logical_inputs;
            context.logical_outputs = n.output_descs;
            for (size_t i = 0; i < n.inputs.size(); ++i) {
              TensorDesc desc = logical_inputs[i];
              AF_ASSIGN_OR_RETURN(desc.shape, PhysicalShape(desc.shape, n.input_sbp.at(i), static_cast<int64_t>(parts),
                                                            static_cast<int64_t>(index)));
              context.physical_inputs.push_back(desc);
            }
            context.physical_outputs = physical_outputs;
            context.attrs = n.attrs;
            context.signature.inputs = n.input_sbp;
            context.signature.outputs = n.output_sbp;
            context.parts = static_cast<int64_t>(parts);
            context.index = static_cast<int64_t>(index);
            auto physical_attrs = PhysicalAttrs(*def, context);
            if (!physical_attrs.ok()) return physical_attrs.status().WithContext("op '" + n.name + "' at " + n.location);
            made = std::move(physical_attrs).value();
            attrs = &made;
          }
        }
        AttrsToProto(*attrs, t->mutable_attrs());
        // Control edges: between tasks of the same index where both sides span the same
        // devices, else from every task of the predecessor (the in-place order check below
        // adds what a writer still needs).
        for (const auto& c : n.control_inputs) {
          const Node* before_node = graph.FindNode(c);
          if (before_node == nullptr) return Internal("op '" + n.name + "' is ordered after unknown op '" + c + "'");
          const Physical& before = physical_of(*before_node);
          if (*before.devices == task_devices && before.tasks.size() == parts) {
            add_control_input(t, before.tasks[index]);
          } else {
            for (int task : before.tasks) add_control_input(t, task);
          }
        }
        for (int m : n.mutable_inputs) t->add_mutable_inputs(m);
      }
      for (size_t k = 0; k < n.output_names.size(); ++k) {
        plan::RegisterDesc* r = t->add_registers();
        r->set_name(n.output_names[k]);
        r->set_register_num(n.kind == NodeKind::kVariable ? 1 : register_num);
        plan::BlobDesc* blob = r->add_blobs();
        blob->mutable_name()->append(n.name).append("/").append(n.output_names[k]);  // n.output_ref(k)
        FillBlob(*blob, physical_outputs[k]);
      }
    }
  }
  if (spread) OrderInPlaceWriters(plan, add_control_input);

  // Every machine has a main sink reading the call's outputs and a sink per watch, so that the
  // same program gets the same results on every rank (cross-machine reads become send/recv
  // pairs, InsertCrossMachineTransfers). One machine: the watch sits on the watched blob's device.
  const int machine_num = graph.machine_num();
  // Outputs fetched per machine (OutputPerMachine): machine m's rows, its devices' shards, read
  // where they are: the shard itself with one device per machine, else a gather of the
  // machine's shards on its first device (made before the sinks: tasks before the first sink
  // are the ones the loops below complete).
  std::map<std::pair<int, std::string>, Source> machine_rows;  // (machine, output ref) -> what its sink reads
  for (const auto& ref : graph.outputs()) {
    if (!OutputPerMachine(graph, ref)) continue;
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(ref));
    const Physical& shards = physical_of(*resolved.first);
    const TensorDesc& logical = resolved.first->output_descs.at(resolved.second);
    if (static_cast<int>(shards.tasks.size()) != machine_num * device_num ||
        !(output_sbp(*resolved.first, resolved.second) == Sbp::Split(0)))
      return Internal("output '" + ref + "' is fetched per machine but laid out " +
                      output_sbp(*resolved.first, resolved.second).ToString() + " over " +
                      std::to_string(shards.tasks.size()) + " tasks");
    for (int machine = 0; machine < machine_num; ++machine) {
      const size_t first = static_cast<size_t>(machine * device_num);
      if (device_num == 1) {
        machine_rows[{machine, ref}] = Source{shards.tasks[first], resolved.second, std::nullopt, nullptr, std::nullopt};
        continue;
      }
      BoxingSpec spec;
      AF_ASSIGN_OR_RETURN(spec.logical_shape, PhysicalShape(logical.shape, Sbp::Split(0), machine_num, machine));
      spec.dtype = logical.dtype;
      spec.in = Sbp::Split(0);
      spec.out = Sbp::Broadcast();
      spec.in_parts = device_num;
      plan::Task* gather = new_task(resolved.first->name + "-machine" + std::to_string(machine), plan::COMPUTE,
                                    machine * device_num);
      gather->set_op_type("boxing");
      gather->set_source_location(resolved.first->location);
      AttrsToProto(BoxingTaskAttrs(spec), gather->mutable_attrs());
      for (int device = 0; device < device_num; ++device)
        add_input(gather, Source{shards.tasks[first + device], resolved.second, std::nullopt, nullptr, std::nullopt});
      plan::RegisterDesc* r = gather->add_registers();
      r->set_name("out");
      r->set_register_num(register_num);
      plan::BlobDesc* blob = r->add_blobs();
      blob->set_name(ref + "@machine" + std::to_string(machine));
      FillBlob(*blob, TensorDesc{spec.logical_shape, logical.dtype});
      machine_rows[{machine, ref}] = Source{static_cast<int>(gather->id()), 0, std::nullopt, nullptr, std::nullopt};
    }
  }
  std::vector<int> sink_ids;  // main sink of each machine
  for (int machine = 0; machine < machine_num; ++machine) {
    plan::Task* sink = new_task(machine == 0 ? "output" : "output@machine" + std::to_string(machine), plan::SINK,
                                machine * device_num);
    sink_ids.push_back(static_cast<int>(sink->id()));
    for (const auto& ref : graph.outputs()) {
      auto own = machine_rows.find({machine, ref});
      if (own != machine_rows.end()) {
        add_input(plan.mutable_tasks(sink_ids.back()), own->second);
        continue;
      }
      AF_RETURN_IF_ERROR(add_data_input(plan.mutable_tasks(sink_ids.back()), ref));
    }
  }
  const int sink_id = sink_ids.front();
  for (const Watch& w : graph.watches()) {
    std::string ref = w.ref;
    if (w.diff) {
      auto it = graph.gradients().find(w.ref);
      if (it == graph.gradients().end() || it->second.empty())
        return InvalidArgument("watch_diff at " + w.location + ": no gradient of '" + w.ref + "'");
      ref = it->second;
    }
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(ref));
    for (int machine = 0; machine < machine_num; ++machine) {
      plan::Task* t = new_task("watch-" + w.handler_name + (machine == 0 ? "" : "@machine" + std::to_string(machine)),
                               plan::SINK, machine_num == 1 ? devices_of(*resolved.first)[0] : machine * device_num);
      t->set_sink_name(w.handler_name);
      t->set_source_location(w.location);
      AF_RETURN_IF_ERROR(add_data_input(t, ref));
    }
  }

  // Consumers, deduplicated per task (the runtime makes one in-edge per producer register), in
  // task order. `consumer` reads `in`: listed in its place unless listed already.
  auto add_consumer = [&](const plan::InputDesc& in, int64_t consumer) {
    auto* ids = plan.mutable_tasks(in.producer_task_id())->mutable_registers(in.producer_register())
                    ->mutable_consumer_task_ids();
    auto place = std::lower_bound(ids->begin(), ids->end(), consumer);
    if (place != ids->end() && *place == consumer) return;
    const auto at = place - ids->begin();
    ids->Add(consumer);
    std::rotate(ids->begin() + at, ids->end() - 1, ids->end());
  };
  // Ops without data outputs (optimizer updates) still announce when they are done, so the
  // main sink below can wait for them. Each task's registers numbered in one array.
  const int task_count = plan.tasks_size();
  std::vector<int> register_base(static_cast<size_t>(task_count) + 1, 0);
  for (int i = 0; i < task_count; ++i) {
    plan::Task& t = *plan.mutable_tasks(i);
    if (i < sink_id && t.kind() == plan::COMPUTE && t.registers_size() == 0) {
      plan::RegisterDesc* r = t.add_registers();
      r->set_name("done");
      r->set_register_num(register_num);
    }
    register_base[i + 1] = register_base[i] + t.registers_size();
  }
  // Every register's consumers, gathered by register in one walk over the inputs (task order:
  // each list ascending), then written into the registers in one walk over the tasks: each
  // register is written once, with its list's final size, instead of an append per input at
  // the producer (a random access to a cold task per input, the list grown step by step).
  std::vector<int> consumer_begin(static_cast<size_t>(register_base[task_count]) + 1, 0);
  std::vector<std::pair<int, int64_t>> reads;  // (producer's register, consumer id), task order
  reads.reserve(static_cast<size_t>(task_count) * 2);
  for (const plan::Task& t : plan.tasks())
    for (const plan::InputDesc& in : t.inputs()) {
      const int reg = register_base[static_cast<size_t>(in.producer_task_id())] + in.producer_register();
      reads.emplace_back(reg, t.id());
      ++consumer_begin[static_cast<size_t>(reg) + 1];
    }
  for (size_t r = 1; r < consumer_begin.size(); ++r) consumer_begin[r] += consumer_begin[r - 1];
  std::vector<int64_t> consumers(reads.size());
  {
    std::vector<int> fill(consumer_begin.begin(), consumer_begin.end() - 1);
    for (const auto& [reg, consumer] : reads) consumers[static_cast<size_t>(fill[reg]++)] = consumer;
  }
  // A call completes when the main sink has acted: it also waits (control) for every register
  // nobody reads, so updates and unused feeds belong to the iteration they serve. Each machine's
  // main sink waits for its machine's registers.
  for (int i = 0; i < task_count; ++i) {
    plan::Task& t = *plan.mutable_tasks(i);
    for (int r = 0; r < t.registers_size(); ++r) {
      auto* ids = t.mutable_registers(r)->mutable_consumer_task_ids();
      ids->Clear();
      const int reg = register_base[i] + r;
      const int begin = consumer_begin[reg], end = consumer_begin[reg + 1];
      if (end > begin) ids->Reserve(end - begin);
      for (int k = begin; k < end; ++k)  // a consumer listed already is the list's last
        if (ids->empty() || ids->Get(ids->size() - 1) != consumers[k]) ids->Add(consumers[k]);
      if (i >= sink_id || !ids->empty()) continue;
      const int sink = sink_ids.at(t.machine_id());
      plan::InputDesc* in = plan.mutable_tasks(sink)->add_inputs();
      in->set_producer_task_id(i);
      in->set_producer_register(r);
      in->set_control(true);
      add_consumer(*in, sink);
    }
  }
  // A job with nothing to return (only watches): the main sink still fires once per call.
  for (int sink : sink_ids) {
    if (plan.tasks(sink).inputs_size() > 0) continue;
    for (int i = 0; i < sink_id; ++i) {
      if (plan.tasks(i).kind() != plan::SOURCE) continue;
      plan::InputDesc* in = plan.mutable_tasks(sink)->add_inputs();
      in->set_producer_task_id(i);
      in->set_producer_register(0);
      in->set_control(true);
      add_consumer(*in, sink);
    }
  }
  return Status::Ok();
}

}  // namespace graph
}  // namespace actorflow
