#pragma once
// Errors by layer: library code returns Result<T>/Status carrying a message that
// names the input and what was expected; only main() turns an Error into an exit
// code (2 for bad input, 1 for failures).

#include <string>
#include <utility>
#include <variant>

namespace hexi {

enum class ErrorKind {
  kBadInput,  // the user's files or flags are wrong: exit code 2
  kFailure,   // the input was fine but the work failed: exit code 1
};

struct Error {
  ErrorKind kind = ErrorKind::kFailure;
  std::string message;
};

inline Error bad_input(std::string message) {
  return {ErrorKind::kBadInput, std::move(message)};
}
inline Error failure(std::string message) {
  return {ErrorKind::kFailure, std::move(message)};
}
inline int exit_code(const Error& e) {
  return e.kind == ErrorKind::kBadInput ? 2 : 1;
}

// A value or an Error. Deliberately small: ok(), value(), error(), ->, *.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> v_;
};

// Success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace hexi
