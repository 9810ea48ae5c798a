// Real DeepSpeed configs from public repositories (tests/configs/real/, sources in INDEX.tsv),
// each with the outcome zerocpp must give and why (tests/configs/real_expected.tsv): accepted,
// or refused with exactly these problems. A file's world size is the one its batch triad was
// written for; "auto" keys take a trainer's values (micro-batch 2, accumulation 1, lr 1e-4, ...).
//
// ZERO_CORPUS_PRINT=1 prints every file's actual outcome as a TSV line instead of checking.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zero/config.h"
#include "zero/error.h"

namespace {

const std::string kDir = std::string(ZERO_SOURCE_DIR) + "/tests/configs/";

struct Expectation {
  int world_size = 2;
  std::string outcome;  // "accepted", or the problems joined by " | "
  std::string why;
};

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::map<std::string, Expectation> read_expectations() {
  std::map<std::string, Expectation> out;
  std::ifstream in(kDir + "real_expected.tsv");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto f = split(line, '\t');
    if (f.size() != 4) {
      ADD_FAILURE() << "real_expected.tsv: expected 4 tab-separated fields: " << line;
      continue;
    }
    out[f[0]] = {std::stoi(f[1]), f[2], f[3]};
  }
  return out;
}

// A Hugging Face-style trainer fills the batch keys the file says "auto", or gives none (absent
// ones DeepSpeed derives from the others), and every other "auto" from its own arguments.
std::string outcome_of(const std::string& path, int world_size) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(zero::Config::document_as_json(path));
  } catch (const zero::ConfigError&) {
  }
  auto says_auto = [&](const char* key) { return document.is_object() && document.value(key, nlohmann::json()) == "auto"; };
  zero::AutoContext trainer{.world_size = world_size,
                            .hidden_size = 256,
                            .learning_rate = 1e-4,
                            .weight_decay = 0.0,
                            .adam_beta1 = 0.9,
                            .adam_beta2 = 0.999,
                            .adam_epsilon = 1e-8,
                            .max_grad_norm = 1.0,
                            .warmup_steps = 10,
                            .max_steps = 100};
  auto absent = [&](const char* key) { return !document.is_object() || !document.contains(key); };
  bool no_batch = absent("train_batch_size") && absent("train_micro_batch_size_per_gpu");
  if (says_auto("train_micro_batch_size_per_gpu") || no_batch) trainer.micro_batch_size = 2;
  if (says_auto("gradient_accumulation_steps") || (no_batch && absent("gradient_accumulation_steps"))) {
    trainer.gradient_accumulation_steps = 1;
  }
  try {
    zero::Config::from_file(path, trainer);
    return "accepted";
  } catch (const zero::ConfigError& e) {
    std::string joined;
    for (const auto& p : e.problems()) joined += (joined.empty() ? "" : " | ") + p;
    return joined;
  }
}

}  // namespace

TEST(RealConfigs, EachGivesItsExpectedOutcome) {
  auto expected = read_expectations();
  bool print = std::getenv("ZERO_CORPUS_PRINT") != nullptr;
  int files = 0, accepted = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir + "real")) {
    std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json") continue;
    ++files;
    auto it = expected.find(name);
    int world = it == expected.end() ? 2 : it->second.world_size;
    std::string actual = outcome_of(entry.path().string(), world);
    if (print) {
      std::cout << name << "\t" << world << "\t" << actual << "\t" << (it == expected.end() ? "" : it->second.why)
                << "\n";
      continue;
    }
    if (it == expected.end()) {
      ADD_FAILURE() << name << ": no line in real_expected.tsv";
      continue;
    }
    EXPECT_EQ(actual, it->second.outcome) << name << " (world size " << world << "): " << it->second.why;
    EXPECT_FALSE(it->second.why.empty()) << name << ": say why";
    accepted += actual == "accepted";
    expected.erase(it);
  }
  if (print) return;
  for (const auto& [name, e] : expected) ADD_FAILURE() << name << " is in real_expected.tsv but not in real/";
  EXPECT_GE(files, 40);
  std::cout << files << " real configs: " << accepted << " accepted, " << files - accepted << " refused\n";
}
