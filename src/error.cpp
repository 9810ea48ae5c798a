#include "zero/error.h"

namespace zero {
namespace {

std::string join_problems(const std::string& origin, const std::vector<std::string>& problems) {
  std::string text =
      origin + ": " + std::to_string(problems.size()) + (problems.size() == 1 ? " problem" : " problems");
  for (const auto& p : problems) text += "\n  " + p;
  return text;
}

}  // namespace

Error::Error(const std::string& message, std::string subject, int rank)
    : std::runtime_error(rank >= 0 ? "rank " + std::to_string(rank) + ": " + message : message),
      subject_(std::move(subject)),
      rank_(rank) {}

std::string first_line(const std::exception& e) {
  std::string text = e.what();
  return text.substr(0, text.find('\n'));
}

ConfigError::ConfigError(std::string origin, std::vector<std::string> problems)
    : Error(join_problems(origin, problems), problems.empty() ? "" : problems.front()),
      origin_(std::move(origin)),
      problems_(std::move(problems)) {}

}  // namespace zero
