// CHECK: internal invariants. A failed CHECK is a bug in actorflow (never a user error, which
// travels as a Status): it prints file:line, the condition and a message to stderr and aborts,
// so the failure is loud and points at the broken invariant instead of corrupting memory.
//
//   AF_CHECK(reg >= 0) << "register of '" << name << "'";
//   AF_CHECK_EQ(a, b);          // prints both values
//   AF_CHECK_OK(status);        // prints the status message
//
// Active in every build type (the invariants guard memory safety; they are cheap).
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

namespace actorflow {
namespace check_internal {

// Collects the message; aborts in its destructor (at the end of the CHECK's full expression).
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const std::string& what) {
    stream_ << file << ":" << line << ": CHECK failed: " << what;
  }
  [[noreturn]] ~CheckFailure() {
    stream_ << "\n";
    std::cerr << stream_.str() << std::flush;
    std::abort();
  }
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    if (!has_message_) stream_ << ": ";
    has_message_ = true;
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
  bool has_message_ = false;
};

// Makes `AF_CHECK(c) << ...` one expression of type void for the conditional below.
struct Voidify {
  void operator&(const CheckFailure&) {}
};

template <typename A, typename B>
std::string BinaryWhat(const char* expression, const A& a, const B& b) {
  std::ostringstream out;
  out << expression << " (" << a << " vs " << b << ")";
  return out.str();
}

}  // namespace check_internal
}  // namespace actorflow

#define AF_CHECK(condition)                         \
  (condition) ? (void)0                             \
              : ::actorflow::check_internal::Voidify() & \
                    ::actorflow::check_internal::CheckFailure(__FILE__, __LINE__, #condition)

#define AF_CHECK_OP_IMPL(a, b, op)                                                                        \
  for (bool _af_check_once = true; _af_check_once; _af_check_once = false)                                \
    for (const auto& _af_a = (a); _af_check_once; _af_check_once = false)                                 \
      for (const auto& _af_b = (b); _af_check_once; _af_check_once = false)                               \
        if (_af_a op _af_b) {                                                                             \
        } else                                                                                            \
          ::actorflow::check_internal::Voidify() & ::actorflow::check_internal::CheckFailure(           \
                                                       __FILE__, __LINE__,                                \
                                                       ::actorflow::check_internal::BinaryWhat(           \
                                                           #a " " #op " " #b, _af_a, _af_b))

#define AF_CHECK_EQ(a, b) AF_CHECK_OP_IMPL(a, b, ==)
#define AF_CHECK_NE(a, b) AF_CHECK_OP_IMPL(a, b, !=)
#define AF_CHECK_LT(a, b) AF_CHECK_OP_IMPL(a, b, <)
#define AF_CHECK_LE(a, b) AF_CHECK_OP_IMPL(a, b, <=)
#define AF_CHECK_GT(a, b) AF_CHECK_OP_IMPL(a, b, >)
#define AF_CHECK_GE(a, b) AF_CHECK_OP_IMPL(a, b, >=)

// For a Status (or anything with ok() and ToString()).
#define AF_CHECK_OK(expr)                                                                    \
  for (const auto& _af_status = (expr); !_af_status.ok();)                                  \
  ::actorflow::check_internal::Voidify() &                                                   \
      ::actorflow::check_internal::CheckFailure(__FILE__, __LINE__, #expr " is OK")          \
          << _af_status.ToString()
