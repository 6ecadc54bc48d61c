#include "python_bindings/dispatcher.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace actorflow {
namespace python {

Dispatcher::Dispatcher() : state_(std::make_shared<State>()) {}

Dispatcher::~Dispatcher() {
  Stop();
  if (!thread_.joinable()) return;
  if (on_dispatcher_thread()) thread_.detach();  // destroyed by one of its items: it ends on its own
  else thread_.join();
}

// A job that never delivers a callback never gets a thread: sync-only jobs cost no OS thread.
void Dispatcher::StartLocked() {
  if (started_) return;
  started_ = true;
  thread_ = std::thread(&Dispatcher::Loop, state_);
  thread_id_.store(thread_.get_id());
}

void Dispatcher::AbandonAfterFork() {
  new std::shared_ptr<State>(std::move(state_));  // its mutex may be held by a thread of the parent
  new std::thread(std::move(thread_));             // not joinable here; never destroyed
  state_ = std::make_shared<State>();
  thread_ = std::thread();
  thread_id_.store(std::thread::id());
  started_ = false;
}

void Dispatcher::Enqueue(Item item) {
  std::lock_guard<std::mutex> lock(state_->mu);
  StartLocked();  // also after Stop: what is queued still runs (and releases its objects)
  state_->queue.push_back(std::move(item));
  ++state_->enqueued;
  state_->cv.notify_all();
}

void Dispatcher::WaitIdle() {
  if (on_dispatcher_thread()) return;
  std::unique_lock<std::mutex> lock(state_->mu);
  int64_t target = state_->enqueued;
  state_->cv.wait(lock, [&] { return state_->done >= target || state_->finished; });
}

bool Dispatcher::TryBeginCall(int64_t limit, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!on_dispatcher_thread() &&
      !state_->cv.wait_for(lock, timeout, [&] { return state_->pending_calls < limit || state_->stopping; }))
    return false;
  ++state_->pending_calls;
  return true;
}

void Dispatcher::EndCall() {
  std::lock_guard<std::mutex> lock(state_->mu);
  --state_->pending_calls;
  state_->cv.notify_all();
}

void Dispatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
    state_->cv.notify_all();
    if (!started_) return;
  }
  // started_ is set once, and thread_ only with it: no lock needed from here on.
  if (thread_.joinable() && !on_dispatcher_thread()) thread_.join();
}

void Dispatcher::Loop(std::shared_ptr<State> state) {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(state->mu);
      state->cv.wait(lock, [&] { return !state->queue.empty() || state->stopping; });
      if (state->queue.empty()) {  // stopping and nothing left
        state->finished = true;
        state->cv.notify_all();
        return;
      }
      item = std::move(state->queue.front());
      state->queue.pop_front();
    }
    // Python may already be finalizing if the owner forgot to Stop() us at exit; never touch
    // the interpreter then (the items leak, which is the lesser evil at exit).
    if (Py_IsInitialized() && !_Py_IsFinalizing()) {
      py::gil_scoped_acquire gil;
      if (item.run) item.run();
      if (item.drop) item.drop();
      item = Item();
    } else {
      new Item(std::move(item));  // deliberately leaked: its Python objects cannot be released now
    }
    std::lock_guard<std::mutex> lock(state->mu);
    ++state->done;
    state->cv.notify_all();
  }
}

}  // namespace python
}  // namespace actorflow
