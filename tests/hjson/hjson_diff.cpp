// hjson_diff [--expect-same] FILE... — compares zerocpp's reading of each file with hjson-go's.
// Prints one line per file; exits 1 on any mismatch (or, with --expect-same, on any known
// difference too: the real configs must read exactly as the reference reads them).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "hjson_oracle.h"

int main(int argc, char** argv) {
  using zero::hjson_oracle::Verdict;
  bool expect_same = false;
  int same = 0, known = 0, mismatched = 0;
  for (int i = 1; i < argc; ++i) {
    std::string path = argv[i];
    if (path == "--expect-same") {
      expect_same = true;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << "hjson_diff: cannot read " << path << "\n";
      return 2;
    }
    std::ostringstream text;
    text << in.rdbuf();
    try {
      auto result = zero::hjson_oracle::compare_with_hjson_go(text.str(), path);
      switch (result.verdict) {
        case Verdict::kSame:
          ++same;
          break;
        case Verdict::kKnownDifference:
          ++known;
          std::cout << "known difference: " << path << ": " << result.detail << "\n";
          break;
        case Verdict::kMismatch:
          ++mismatched;
          std::cout << "MISMATCH: " << path << ": " << result.detail << "\n";
          break;
      }
    } catch (const std::exception& e) {
      std::cerr << "hjson_diff: " << e.what() << "\n";
      return 2;
    }
  }
  std::cout << "hjson_diff: " << same << " same, " << known << " known differences, " << mismatched
            << " mismatches\n";
  return mismatched > 0 || (expect_same && known > 0) ? 1 : 0;
}
