// zero::Error — the one exception type zerocpp throws.
//
// Every error names what it is about: a JSON path, a file, a rank, a parameter. The message is
// complete on its own (what() is what a user sees); the fields let callers and tests inspect it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace zero {

class Error : public std::runtime_error {
 public:
  // `subject` is the thing the error is about (a JSON path, a file, a tensor name); `rank` is
  // the reporting rank, or -1 when the error is not tied to one.
  Error(const std::string& message, std::string subject = {}, int rank = -1);

  const std::string& subject() const { return subject_; }
  int rank() const { return rank_; }

 private:
  std::string subject_;
  int rank_;
};

// A configuration that failed validation. Holds every problem found, not only the first, so a
// user fixes a config in one round. Each problem starts with the JSON path it is about.
class ConfigError : public Error {
 public:
  ConfigError(std::string origin, std::vector<std::string> problems);

  const std::string& origin() const { return origin_; }  // file name or "<string>"
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::string origin_;
  std::vector<std::string> problems_;
};

// The first line of an exception's message: what a program prints when something other than a
// zero::Error escapes (a c10::Error's message goes on with a stack dump).
std::string first_line(const std::exception& e);

}  // namespace zero
