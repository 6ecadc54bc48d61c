#include "python_bindings/dispatcher.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace actorflow {
namespace python {

Dispatcher::Dispatcher() : thread_([this] { Loop(); }) {}

Dispatcher::~Dispatcher() { Stop(); }

void Dispatcher::Enqueue(Item item) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(item));
  ++enqueued_;
  cv_.notify_all();
}

void Dispatcher::WaitIdle() {
  if (on_dispatcher_thread()) return;
  std::unique_lock<std::mutex> lock(mu_);
  int64_t target = enqueued_;
  cv_.wait(lock, [&] { return done_ >= target || !thread_.joinable(); });
}

void Dispatcher::BeginCall(int64_t limit) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!on_dispatcher_thread()) cv_.wait(lock, [&] { return pending_calls_ < limit || stopping_; });
  ++pending_calls_;
}

void Dispatcher::EndCall() {
  std::lock_guard<std::mutex> lock(mu_);
  --pending_calls_;
  cv_.notify_all();
}

void Dispatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable() && !on_dispatcher_thread()) thread_.join();
}

void Dispatcher::Loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
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
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace python
}  // namespace actorflow
