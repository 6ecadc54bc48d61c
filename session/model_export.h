// Saving a compiled job of a session as a model directory (session/model.h): its plan, its
// inputs and outputs by name, and the current value of every variable its plan reads.
#pragma once

#include <string>

#include "session/model.h"
#include "session/session.h"

namespace actorflow {

// The variables are copied out after the jobs writing them drained (Session::GetVariable), so
// the model holds the values of one point between iterations. A train job (it updates weights
// and takes a learning-rate feed) is refused: a model predicts. (A predict job may still list
// variables as written: batch norm's moving statistics are mutable inputs of its op whether
// or not it trains; each loaded Model has its own copy of the weights.)
Status SaveCompiledJob(Session& session, const CompiledJob& job, const std::string& directory);

}  // namespace actorflow
