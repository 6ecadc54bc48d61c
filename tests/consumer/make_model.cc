// Writes the install test's model directory (argv[1], which must not exist): a predict job
// y = relu(x . W + b) compiled by a session and saved with SaveCompiledJob.
#include <cstdio>

#include "graph/job_builder.h"
#include "session/model_export.h"
#include "tests/consumer/model_constants.h"

int main(int argc, char** argv) {
  using namespace actorflow;
  using namespace consumer_model;
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_model DIR\n");
    return 2;
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "make_model: %s\n", s.ToString().c_str());
    return 1;
  };
  auto builder = graph::JobBuilder::Create("consumer_dense", "predict");
  if (!builder.ok()) return fail(builder.status());
  graph::JobBuilder& b = *builder;
  auto x = b.AddInput("x", {kRows, kIn}, DType::kFloat32, "make_model.cc");
  auto w = b.AddVariable("dense-weight", {kIn, kOut}, DType::kFloat32, "make_model.cc");
  auto bias = b.AddVariable("dense-bias", {kOut}, DType::kFloat32, "make_model.cc");
  if (!x.ok() || !w.ok() || !bias.ok()) return fail(Internal("cannot add the inputs"));
  auto mm = b.AddOp("matmul", "dense-matmul", {*x, *w}, {}, "make_model.cc");
  if (!mm.ok()) return fail(mm.status());
  auto add = b.AddOp("bias_add", "dense-bias_add", {(*mm)->output_ref(0), *bias}, {}, "make_model.cc");
  if (!add.ok()) return fail(add.status());
  auto relu = b.AddOp("relu", "y", {(*add)->output_ref(0)}, {}, "make_model.cc");
  if (!relu.ok()) return fail(relu.status());
  Status s = b.SetOutputs({(*relu)->output_ref(0)});
  if (!s.ok()) return fail(s);
  Session session;
  if (!(s = session.CreateVariable("dense-weight", {{kIn, kOut}, DType::kFloat32}, kWeight)).ok()) return fail(s);
  if (!(s = session.CreateVariable("dense-bias", {{kOut}, DType::kFloat32}, kBias)).ok()) return fail(s);
  auto job = session.Compile(b, JobOptions{});
  if (!job.ok()) return fail(job.status());
  if (!(s = SaveCompiledJob(session, **job, argv[1])).ok()) return fail(s);
  return 0;
}
