#include "session/model_export.h"

#include <set>

#include "session/npy.h"

namespace actorflow {

Status SaveCompiledJob(Session& session, const CompiledJob& job, const std::string& directory) {
  const std::string context = "saving job '" + job.name() + "' as model '" + directory + "'";
  if (job.graph().job_type() != "predict")
    return InvalidArgument(context + ": it is a " + job.graph().job_type() +
                           " job (it updates its variables and takes a learning-rate feed): only predict jobs are "
                           "saved as models");
  ModelContents contents;
  contents.plan = &job.plan();
  for (const NamedDesc& d : job.input_descs()) contents.inputs.push_back({d.name, d.desc});
  for (const NamedDesc& d : job.output_descs()) contents.outputs.push_back({d.name, d.desc});
  std::vector<HostTensor> values;
  std::set<std::string> seen;
  for (const plan::Task& task : job.plan().tasks()) {
    if (task.kind() != plan::VARIABLE || !seen.insert(task.variable_name()).second) continue;
    AF_ASSIGN_OR_RETURN(TensorDesc desc, session.VariableDesc(task.variable_name()));
    AF_ASSIGN_OR_RETURN(HostTensor value, AllocateHostTensor(desc, "variable '" + task.variable_name() + "'"));
    AF_RETURN_IF_ERROR(session.GetVariable(task.variable_name(), value.data.get(), desc.byte_size()));
    values.push_back(std::move(value));
    contents.weights.emplace_back(task.variable_name(), values.back().view());
  }
  return SaveModel(directory, contents);
}

}  // namespace actorflow
