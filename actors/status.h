// Status and StatusOr: how user-caused failures travel (bad shapes, bad input,
// a failing kernel). CHECK-style aborts are for internal invariants only.
// Thread-safety: value types; safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "actors/check.h"

namespace actorflow {

enum class StatusCode { kOk = 0, kInvalidArgument, kNotFound, kFailedPrecondition, kInternal, kCancelled, kUnimplemented };

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prepends context ("while compiling op 'hidden': ") as an error propagates upward.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }
  std::string ToString() const { return ok() ? "OK" : message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status FailedPrecondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
inline Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
inline Status Unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }

template <typename T>
class StatusOr {
 public:
  // A StatusOr holds a value or an error, never an OK status without a value.
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    AF_CHECK(!status_.ok()) << "StatusOr constructed from an OK status without a value";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Reading the value of an error is a bug in the caller: it CHECK-fails with the error.
  T& value() & { return CheckedValue(); }
  const T& value() const& { return CheckedValue(); }
  T&& value() && { return std::move(CheckedValue()); }
  T* operator->() { return &CheckedValue(); }
  const T* operator->() const { return &CheckedValue(); }
  T& operator*() { return CheckedValue(); }
  const T& operator*() const { return CheckedValue(); }

 private:
  T& CheckedValue() const {
    AF_CHECK(value_.has_value()) << "value() of a StatusOr holding an error: " << status_.ToString();
    return const_cast<T&>(*value_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace actorflow

#define AF_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::actorflow::Status _af_status = (expr);   \
    if (!_af_status.ok()) return _af_status;   \
  } while (0)

#define AF_CONCAT_INNER(a, b) a##b
#define AF_CONCAT(a, b) AF_CONCAT_INNER(a, b)
#define AF_ASSIGN_OR_RETURN(lhs, expr) AF_ASSIGN_OR_RETURN_IMPL(AF_CONCAT(_af_statusor_, __LINE__), lhs, expr)
#define AF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
