// GPU placement in the compiler (graph/device_placement.h): the plans, not their running. The
// process's "cuda" backend is replaced by a host test device with one GPU where a test needs a
// GPU present, and every op the tests place on it gets a "cuda" kernel factory if the build has
// none (a CPU-only build): the plans are checked, never run.
#include <gtest/gtest.h>

#include <set>

#include "actors/cuda_device.h"
#include "actors/device.h"
#include "actors/host_test_device.h"
#include "graph/device_placement.h"
#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Swaps the process's "cuda" backend for a host test device of `devices` GPUs for one test.
class WithTestGpus {
 public:
  explicit WithTestGpus(int devices) : original_(DeviceRegistry::Global().Find(kCudaDevice)) {
    DeviceRegistry::Global().Register(kCudaDevice, std::make_shared<HostTestBackend>("test_gpu", devices));
  }
  ~WithTestGpus() { DeviceRegistry::Global().Register(kCudaDevice, original_.ok() ? original_.value() : nullptr); }

 private:
  StatusOr<std::shared_ptr<DeviceBackend>> original_;
};

void EnsureCudaFactories(const std::vector<std::string>& types) {
  RegisterAllOps();
  for (const std::string& type : types) {
    const OpDef* def = ValueOrDie(OpRegistry::Global().Find(type));
    if (def->kernel_factories.count(kCudaDevice)) continue;
    Status added = OpRegistry::Global().AddKernelFactory(type, kCudaDevice, [type](const KernelInit&) -> StatusOr<KernelFn> {
      return Unimplemented("placeholder CUDA factory of '" + type + "' (graph test)");
    });
    ASSERT_TRUE(added.ok()) << added.message();
  }
}

const plan::Task& TaskNamed(const plan::Plan& plan, const std::string& name) {
  for (const plan::Task& t : plan.tasks())
    if (t.name() == name) return t;
  throw std::runtime_error("no task '" + name + "'");
}

int PlaceOfRegister(const plan::Task& producer, int register_index) {
  const plan::MemoryCase& m = producer.registers(register_index).memory_case();
  return m.kind() == plan::MEMORY_DEVICE ? m.device_id() : -1;
}

TEST(DevicePlacement, GpuDeviceNumNamesTheDeviceCountFoundWithoutAGpu) {
  Status status = CheckGpuDevices(2);
  const bool gpu_present = BuiltWithCuda() && DeviceRegistry::Global().Find(kCudaDevice).value()->device_count(nullptr) >= 2;
  if (gpu_present) {  // the config is accepted instead, and nothing else to check here
    EXPECT_TRUE(status.ok()) << status.ToString();
    return;
  }
  ASSERT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_TRUE(Contains(status.message(), "gpu_device_num(2)")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "found")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "cpu_device_num(2)")) << status.message();
  if (!BuiltWithCuda()) {
    EXPECT_TRUE(Contains(status.message(), "no CUDA support")) << status.message();
  }
  // The builder refuses the config the same way, and stays usable on the CPU.
  JobBuilder b = ValueOrDie(JobBuilder::Create("j", "predict"));
  Status refused = b.SetDeviceNum(0, 2);
  EXPECT_EQ(refused.message(), status.message());
  EXPECT_TRUE(b.SetDeviceNum(0, 0).ok());
}

TEST(DevicePlacement, GpuPlacementsResolveAgainstTheGpuCount) {
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"gpu", {"0:0"}}, 2, 1)), std::vector<int>{0});
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"gpu", {}}, 2, 1)), std::vector<int>{0});
  auto missing = ResolvePlacement(Placement{"gpu", {"0:1"}}, 2, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "device 1 does not exist: gpu_device_num is 1"))
      << missing.status().message();
  auto none = ResolvePlacement(Placement{"gpu", {"0:0"}}, 2, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "no GPU device is usable")) << none.status().message();
  auto two = ResolvePlacement(Placement{"gpu", {"0:0-1"}}, 1, 2);
  ASSERT_FALSE(two.ok());
  EXPECT_TRUE(Contains(two.status().message(), "one GPU so far")) << two.status().message();
}

// The MLP train job on one GPU: every compute op on gpu:0 in device memory and asynchronous,
// the variables resident on the GPU and updated there, the feeds copied in, the loss copied out
// to the sink, and no edge between host and device without a copy.
TEST(DevicePlacement, MlpTrainPlanCopiesAcrossHostAndGpu) {
  WithTestGpus gpus(1);
  EnsureCudaFactories({"matmul", "bias_add", "relu", "relu_grad", "bias_add_grad", "sparse_softmax_cross_entropy",
                       "sparse_softmax_cross_entropy_grad", "constant", "identity", "sgd_update"});
  JobBuilder b = ValueOrDie(JobBuilder::Create("gpu_mlp", "train"));
  ASSERT_TRUE(b.SetDeviceNum(0, 1).ok());
  EXPECT_EQ(b.placement().device_type, "gpu");  // OneFlow's default with GPUs configured
  std::string x = ValueOrDie(b.AddInput("x", {8, 6}, DType::kFloat32, "mlp.py:1"));
  std::string labels = ValueOrDie(b.AddInput("labels", {8}, DType::kInt32, "mlp.py:2"));
  std::string w1 = ValueOrDie(b.AddVariable("w1", {6, 5}, DType::kFloat32, "mlp.py:3"));
  std::string w2 = ValueOrDie(b.AddVariable("w2", {5, 3}, DType::kFloat32, "mlp.py:4"));
  std::string h = ValueOrDie(b.AddOp("matmul", "hidden", {x, w1}, {}, "mlp.py:3"))->output_ref(0);
  h = ValueOrDie(b.AddOp("relu", "hidden-relu", {h}, {}, "mlp.py:3"))->output_ref(0);
  std::string logits = ValueOrDie(b.AddOp("matmul", "output", {h, w2}, {}, "mlp.py:4"))->output_ref(0);
  std::string loss =
      ValueOrDie(b.AddOp("sparse_softmax_cross_entropy", "loss", {labels, logits}, {}, "mlp.py:5"))->output_ref(0);
  ASSERT_TRUE(b.AddLoss(loss).ok());
  OptimizerSpec sgd;
  sgd.type = "sgd";
  ASSERT_TRUE(b.SetOptimizer(sgd).ok());
  ASSERT_TRUE(b.SetOutputs({loss}).ok());
  Graph g = b.graph();
  auto compiled = CompileGraph(g, CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const plan::Plan& plan = compiled.value();
  std::set<std::string> gpu_types, cpu_compute_types;
  int h2d = 0, d2h = 0;
  for (const plan::Task& t : plan.tasks()) {
    const bool gpu = t.kind() == plan::COMPUTE && t.device_type() == "gpu";
    const int place = gpu ? t.device_id() : -1;  // where it runs (a variable's readers check its register)
    if (gpu) {
      EXPECT_TRUE(t.asynchronous()) << t.name();
      EXPECT_EQ(t.device_id(), 0) << t.name();
      if (t.op_type() == kCopyHostToDevice) ++h2d;
      else if (t.op_type() == kCopyDeviceToHost) ++d2h;
      else gpu_types.insert(t.op_type());
    } else if (t.kind() == plan::COMPUTE) {
      cpu_compute_types.insert(t.op_type());
    }
    // Registers: device memory on the GPU (except a device-to-host copy's pinned output).
    for (const plan::RegisterDesc& r : t.registers()) {
      if (r.blobs_size() == 0) continue;
      if (gpu && t.op_type() != kCopyDeviceToHost) {
        EXPECT_EQ(r.memory_case().kind(), plan::MEMORY_DEVICE) << t.name();
      } else if (t.kind() != plan::VARIABLE) {
        EXPECT_NE(r.memory_case().kind(), plan::MEMORY_DEVICE) << t.name();
      }
    }
    // Topological, and every data edge stays on one side unless it is a copy's input.
    for (const plan::InputDesc& in : t.inputs()) {
      ASSERT_LT(in.producer_task_id(), t.id()) << t.name();
      if (in.control()) continue;
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      const int from = PlaceOfRegister(producer, in.producer_register());
      if (t.op_type() == kCopyHostToDevice) {
        EXPECT_EQ(from, -1) << t.name();
      } else if (t.op_type() == kCopyDeviceToHost) {
        EXPECT_EQ(from, 0) << t.name();
      } else {
        EXPECT_EQ(from, place) << t.name() << " reads " << producer.name() << " across host and GPU without a copy";
      }
    }
  }
  EXPECT_TRUE(gpu_types.count("matmul") && gpu_types.count("sparse_softmax_cross_entropy_grad") &&
              gpu_types.count("relu_grad"))
      << "ops of the forward and backward pass run on the GPU";
  EXPECT_TRUE(gpu_types.count("sgd_update")) << "the GPU-resident variables are updated on the GPU";
  EXPECT_TRUE(cpu_compute_types.empty());
  EXPECT_EQ(h2d, 3) << "x, labels and learning_rate are copied in once each";
  EXPECT_EQ(d2h, 1) << "the loss is copied out";
  // Feeds that a host-to-device copy reads are pinned; the variables live on the GPU.
  EXPECT_EQ(TaskNamed(plan, "x").registers(0).memory_case().kind(), plan::MEMORY_PINNED_HOST);
  for (const char* name : {"w1", "w2"}) {
    EXPECT_EQ(TaskNamed(plan, name).registers(0).memory_case().kind(), plan::MEMORY_DEVICE) << name;
    EXPECT_EQ(TaskNamed(plan, name).registers(0).memory_case().device_id(), 0) << name;
  }
  EXPECT_EQ(TaskNamed(plan, "x-to-gpu0").op_type(), kCopyHostToDevice);
  EXPECT_EQ(TaskNamed(plan, "loss-to-host").registers(0).memory_case().kind(), plan::MEMORY_PINNED_HOST);
  // Consumers agree with inputs after renumbering.
  for (const plan::Task& t : plan.tasks())
    for (const plan::RegisterDesc& r : t.registers())
      for (int64_t consumer : r.consumer_task_ids()) {
        bool reads = false;
        for (const plan::InputDesc& in : plan.tasks(static_cast<int>(consumer)).inputs())
          reads |= in.producer_task_id() == t.id();
        EXPECT_TRUE(reads) << t.name() << " -> " << plan.tasks(static_cast<int>(consumer)).name();
      }
  // Stream-ordered acts (end at enqueue): exactly the GPU compute tasks whose inputs come from
  // the compute stream or GPU variables and whose readers all enqueue on it.
  for (const plan::Task& t : plan.tasks()) {
    if (t.kind() != plan::COMPUTE || t.device_type() != "gpu" || t.op_type() == kCopyHostToDevice ||
        t.op_type() == kCopyDeviceToHost || t.mutable_inputs_size() > 0) {
      EXPECT_FALSE(t.stream_ordered()) << t.name() << " (copies, updates and host tasks wait for the device)";
      continue;
    }
    bool reads_copy = false, read_off_stream = false;
    for (const plan::InputDesc& in : t.inputs())
      if (!in.control()) reads_copy |= plan.tasks(static_cast<int>(in.producer_task_id())).op_type() == kCopyHostToDevice;
    for (const plan::RegisterDesc& r : t.registers())
      for (int64_t consumer : r.consumer_task_ids()) {
        const plan::Task& reader = plan.tasks(static_cast<int>(consumer));
        read_off_stream |= reader.kind() != plan::COMPUTE || reader.device_type() != "gpu" ||
                           reader.op_type() == kCopyDeviceToHost;
      }
    EXPECT_EQ(t.stream_ordered(), !reads_copy && !read_off_stream) << t.name();
  }
  EXPECT_TRUE(TaskNamed(plan, "hidden-relu").stream_ordered()) << "between two GPU ops";
  EXPECT_FALSE(TaskNamed(plan, "hidden").stream_ordered()) << "reads x from the copy stream";
  EXPECT_FALSE(TaskNamed(plan, "loss").stream_ordered()) << "the loss is copied out to the host";
}

TEST(DevicePlacement, OpWithoutCudaKernelIsACompileErrorNamingOpAndLine) {
  WithTestGpus gpus(1);
  EnsureCudaFactories({"relu"});
  RegisterAllOps();
  ASSERT_FALSE(ValueOrDie(OpRegistry::Global().Find("transpose"))->kernel_factories.count(kCudaDevice))
      << "pick another op without a CUDA kernel for this test";
  JobBuilder b = ValueOrDie(JobBuilder::Create("no_kernel", "predict"));
  ASSERT_TRUE(b.SetDeviceNum(0, 1).ok());
  std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "t.py:1"));
  ASSERT_TRUE(b.SetPlacement(Placement{"cpu", {"0:0"}}).ok());
  std::string y = ValueOrDie(b.AddOp("relu", "cpu_relu", {x}, {}, "t.py:2"))->output_ref(0);
  ASSERT_TRUE(b.ClearPlacement().ok());  // back to the default: the GPU
  std::string t = ValueOrDie(b.AddOp("transpose", "flip", {y}, Attrs{{"perm", std::vector<int64_t>{1, 0}}}, "t.py:3"))
                      ->output_ref(0);
  ASSERT_TRUE(b.SetOutputs({t}).ok());
  Graph g = b.graph();
  auto compiled = CompileGraph(g, CompileOptions{});
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(compiled.status().message(), "op 'flip' (transpose) at t.py:3 is placed on gpu:0 but "
                                                    "'transpose' has no CUDA kernel"))
      << compiled.status().message();
}

TEST(DevicePlacement, CpuOnlyPlansAreUnchangedAndMixedPlacementsCopyBothWays) {
  WithTestGpus gpus(1);
  EnsureCudaFactories({"relu"});
  testing::Mlp m = testing::BuildMlp("predict", 4, 3, 5, 2);
  Graph cpu_graph = m.builder.graph();
  plan::Plan cpu_plan = ValueOrDie(CompileGraph(cpu_graph, CompileOptions{}));
  plan::Plan copy = cpu_plan;
  ASSERT_TRUE(PlaceOnDevices(copy).ok());
  EXPECT_EQ(copy.SerializeAsString(), cpu_plan.SerializeAsString());

  // cpu relu -> gpu relu -> cpu relu -> output: one copy in, one copy out; the sink reads the
  // last relu's host register directly.
  JobBuilder b = ValueOrDie(JobBuilder::Create("mixed", "predict"));
  ASSERT_TRUE(b.SetDeviceNum(0, 1).ok());
  ASSERT_TRUE(b.SetPlacement(Placement{"cpu", {"0:0"}}).ok());
  std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "t.py:1"));
  std::string a = ValueOrDie(b.AddOp("relu", "a", {x}, {}, "t.py:2"))->output_ref(0);
  ASSERT_TRUE(b.SetPlacement(Placement{"gpu", {"0:0"}}).ok());
  std::string g1 = ValueOrDie(b.AddOp("relu", "g", {a}, {}, "t.py:3"))->output_ref(0);
  ASSERT_TRUE(b.SetPlacement(Placement{"cpu", {"0:0"}}).ok());
  std::string c = ValueOrDie(b.AddOp("relu", "c", {g1}, {}, "t.py:4"))->output_ref(0);
  ASSERT_TRUE(b.SetOutputs({c}).ok());
  Graph g = b.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  std::vector<std::string> names;
  for (const plan::Task& t : plan.tasks()) names.push_back(t.name());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "a", "a-to-gpu0", "g", "g-to-host", "c", "output"}));
  EXPECT_EQ(TaskNamed(plan, "a").registers(0).memory_case().kind(), plan::MEMORY_PINNED_HOST);
  EXPECT_EQ(TaskNamed(plan, "x").registers(0).memory_case().kind(), plan::MEMORY_HOST);
  EXPECT_EQ(TaskNamed(plan, "g").device_type(), "gpu");
  EXPECT_EQ(TaskNamed(plan, "c").device_type(), "cpu");
  EXPECT_EQ(TaskNamed(plan, "c").inputs(0).producer_task_id(), TaskNamed(plan, "g-to-host").id());
}

// A variable read on the CPU and on the GPU stays in host memory; its in-place writer placed on
// the GPU then runs on the CPU, reading the GPU's blob through a copy.
TEST(DevicePlacement, VariableReadOnBothSidesStaysOnTheHostAndItsWriterOnTheCpu) {
  EnsureCudaFactories({"relu", "sgd_update"});
  plan::Plan plan;
  plan.set_job_name("both");
  auto add = [&](const std::string& name, plan::TaskKind kind, const std::string& device_type, const std::string& op,
                 std::vector<int64_t> inputs) {
    plan::Task* t = plan.add_tasks();
    t->set_id(plan.tasks_size() - 1);
    t->set_name(name);
    t->set_kind(kind);
    t->set_device_type(device_type);
    t->set_op_type(op);
    for (int64_t p : inputs) t->add_inputs()->set_producer_task_id(p);
    if (kind != plan::SINK) {
      plan::RegisterDesc* r = t->add_registers();
      r->set_name("out");
      r->set_register_num(kind == plan::VARIABLE ? 1 : 2);
      plan::BlobDesc* b = r->add_blobs();
      b->add_shape(3);
      b->set_dtype(plan::DT_FLOAT32);
      b->set_byte_size(12);
    }
    return t;
  };
  add("v", plan::VARIABLE, "cpu", "", {});
  add("on_cpu", plan::COMPUTE, "cpu", "relu", {0});
  add("on_gpu", plan::COMPUTE, "gpu", "relu", {0});
  plan::Task* update = add("update", plan::COMPUTE, "gpu", "sgd_update", {0, 2});
  update->add_mutable_inputs(0);
  update->clear_registers();
  add("output", plan::SINK, "cpu", "", {1, 2});
  ASSERT_TRUE(PlaceOnDevices(plan).ok());
  EXPECT_EQ(TaskNamed(plan, "v").registers(0).memory_case().kind(), plan::MEMORY_HOST);
  EXPECT_EQ(TaskNamed(plan, "update").device_type(), "cpu");
  EXPECT_EQ(TaskNamed(plan, "on_gpu").device_type(), "gpu");
  EXPECT_EQ(plan.tasks(static_cast<int>(TaskNamed(plan, "update").inputs(1).producer_task_id())).name(), "on_gpu-to-host");
  EXPECT_EQ(plan.tasks(static_cast<int>(TaskNamed(plan, "on_gpu").inputs(0).producer_task_id())).name(), "v-to-gpu0");
}

}  // namespace
}  // namespace graph
}  // namespace actorflow
