#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <time.h>

#include <cstdio>
#include <memory>

#include "zero/error.h"

namespace zero::text {
namespace {

// PCRE2's limits for one pcre2_match call (its defaults, stated): a pattern that backtracks
// catastrophically ends with an error instead of running for ever.
constexpr uint32_t kMatchLimit = 10'000'000, kDepthLimit = 10'000'000;

// A pattern can also be fast per attempt and still scan the rest of the text from every
// position (`a*b|a` over a run of "a": quadratic in the text, as with the tokenizers library's
// Oniguruma). find_all gives a text this much of the thread's CPU time: far above what a
// tokenizer's real patterns need (hundreds of MB/s), far below a hang. The clock is looked at
// between pcre2_match calls, and one call tries matches starting in at most kStartWindow bytes
// (PCRE2's offset limit; the next call goes on from there), so that no call can scan the rest of
// the text from every position of it: the leftmost match is the same.
constexpr double kBudgetSeconds = 1.0, kBudgetSecondsPerByte = 2e-7;
constexpr size_t kStartWindow = 64;

// A pattern as messages show it: a stranger's may be megabytes long.
std::string shown(const std::string& pattern) {
  return pattern.size() <= 200 ? pattern
                               : pattern.substr(0, 200) + "... (" + std::to_string(pattern.size()) + " bytes)";
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
using MatchContext = std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)>;

double seconds_of(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The thread's CPU time, read (a system call) only once the coarse wall clock (a few ns, ~4 ms
// steps) has moved 10 ms since the last reading: between calls that take microseconds, it is
// looked at every few thousand calls; after a slow call, at once.
class CpuBudget {
 public:
  explicit CpuBudget(double seconds) : budget_(seconds), started_(seconds_of(CLOCK_THREAD_CPUTIME_ID)) {}
  double seconds() const { return budget_; }
  bool spent() {
    const double now = seconds_of(CLOCK_MONOTONIC_COARSE);
    if (now - last_look_ < 0.01) return false;
    last_look_ = now;
    return seconds_of(CLOCK_THREAD_CPUTIME_ID) - started_ > budget_;
  }

 private:
  double budget_, started_, last_look_ = seconds_of(CLOCK_MONOTONIC_COARSE);
};

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  std::string pattern, what;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& what) : compiled_(new Compiled) {
  compiled_->pattern = pattern;
  compiled_->what = what;
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \d and \w are Unicode's classes, as Oniguruma's are on UTF-8 text.
  const uint32_t options =
      PCRE2_UTF | PCRE2_NO_UTF_CHECK | PCRE2_USE_OFFSET_LIMIT | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error(what + ": the pattern " + shown(pattern) + " does not compile at offset " + std::to_string(offset) +
                ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // without JIT (not built in): the interpreter
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  const std::string& what = compiled_->what;
  const MatchData data(pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  // A context of its own: the offset limit changes from call to call (and Regex is shared).
  const MatchContext context(pcre2_match_context_create(nullptr), &pcre2_match_context_free);
  if (!data || !context) throw Error(what + ": out of memory for the pattern " + shown(compiled_->pattern));
  pcre2_set_match_limit(context.get(), kMatchLimit);
  pcre2_set_depth_limit(context.get(), kDepthLimit);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const auto char_start = [&](size_t at) {  // `at`, or the start of the next character
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    return at;
  };
  CpuBudget budget(kBudgetSeconds + kBudgetSecondsPerByte * static_cast<double>(text.size()));
  size_t start = 0;
  while (start <= text.size()) {
    if (budget.spent()) {
      throw Error(what + ": the pattern " + shown(compiled_->pattern) + " took more than " +
                      seconds_text(budget.seconds()) + " s of CPU over a text of " + std::to_string(text.size()) +
                      " bytes (stopped at byte " + std::to_string(start) +
                      "): it scans the rest of the text from each position",
                  what);
    }
    const size_t window_end = char_start(std::min(text.size(), start + kStartWindow));
    pcre2_set_offset_limit(context.get(), window_end);
    const int found =
        pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), context.get());
    if (found == PCRE2_ERROR_NOMATCH) {
      if (window_end >= text.size()) break;
      start = window_end;  // no match starts in the window: the next one
      continue;
    }
    if (found < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(found, message, sizeof message);
      throw Error(what + ": the pattern " + shown(compiled_->pattern) + " failed at byte " + std::to_string(start) +
                      " of a text of " + std::to_string(text.size()) +
                      " bytes: " + reinterpret_cast<const char*>(message),
                  what);
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: step over one character
      start = char_start(end + 1);
    }
  }
  return matches;
}

}  // namespace zero::text
