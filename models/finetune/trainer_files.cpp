#include "models/finetune/trainer_files.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::finetune {

namespace fs = std::filesystem;

std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // fmt's shortest round-trip form switches to an exponent where repr does (below 1e-4, from
  // 1e16 up) and writes it as repr does ("1e-05"); repr also keeps ".0" on whole numbers.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

double python_round(double value, int digits) {
  // round() works on the exact binary value: format it with enough digits, then let the
  // correctly rounded conversion decide (as CPython's float rounding does via its dtoa).
  const std::string text = fmt::format("{:.{}f}", value, digits);
  return std::stod(text);
}

std::string python_dict(const nlohmann::ordered_json& logs) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : logs.items()) {
    out += (first ? "'" : ", '") + key + "': ";
    first = false;
    if (value.is_number_float()) {
      out += python_float(value.get<double>());
    } else if (value.is_number()) {
      out += value.dump();
    } else if (value.is_string()) {
      out += "'" + value.get<std::string>() + "'";
    } else {
      out += value.dump();
    }
  }
  return out + "}";
}

void write_trainer_state(const TrainerState& s, const std::string& path) {
  nlohmann::json state = {{"best_global_step", nullptr},
                          {"best_metric", nullptr},
                          {"best_model_checkpoint", nullptr},
                          {"epoch", s.epoch},
                          {"eval_steps", s.eval_steps},
                          {"global_step", s.global_step},
                          {"is_hyper_param_search", false},
                          {"is_local_process_zero", true},
                          {"is_world_process_zero", true},
                          {"log_history", s.log_history},
                          {"logging_steps", s.logging_steps},
                          {"max_steps", s.max_steps},
                          {"num_input_tokens_seen", 0},
                          {"num_train_epochs", s.num_train_epochs},
                          {"save_steps", s.save_steps},
                          {"stateful_callbacks",
                           {{"TrainerControl",
                             {{"args",
                               {{"should_epoch_stop", false},
                                {"should_evaluate", false},
                                {"should_log", false},
                                {"should_save", true},
                                {"should_training_stop", s.global_step >= s.max_steps}}},
                              {"attributes", nlohmann::json::object()}}}}},
                          {"total_flos", 0.0},
                          {"train_batch_size", s.train_batch_size},
                          {"trial_name", nullptr},
                          {"trial_params", nullptr}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << state.dump(2) << "\n";
    if (!out) throw Error("cannot write " + tmp, tmp);
  }
  fs::rename(tmp, path);
}

TrainerState read_trainer_state(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw Error("cannot read " + path + " (a checkpoint-N directory of zero-finetune holds one)", path);
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path + " (a checkpoint-N directory of zero-finetune holds one)", path);
  nlohmann::json j;
  try {
    j = parse_json_from(in, path);
    TrainerState s;
    s.global_step = json_required<int64_t>(j, "global_step", path + ": ");
    s.max_steps = json_required<int64_t>(j, "max_steps", path + ": ");
    s.epoch = j.at("epoch").get<double>();
    s.log_history = j.at("log_history");
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a trainer_state.json: " + e.what(), path);
  }
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (!fs::is_directory(output_dir)) return found;
  static const std::regex name("checkpoint-([0-9]+)");
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(file, m, name))
      found.emplace_back(std::stoll(m[1]), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<std::string> rotate_checkpoints(const std::string& output_dir, int64_t limit, const std::string& keep) {
  std::vector<std::string> removed;
  if (limit <= 0) return removed;
  auto checkpoints = list_checkpoints(output_dir);
  // The one to keep counts as the newest.
  const auto kept = std::find_if(checkpoints.begin(), checkpoints.end(),
                                 [&](const auto& c) { return !keep.empty() && fs::equivalent(c.second, keep); });
  if (kept != checkpoints.end()) std::rotate(kept, kept + 1, checkpoints.end());
  for (size_t i = 0; i + static_cast<size_t>(limit) < checkpoints.size(); ++i) {
    fs::remove_all(checkpoints[i].second);
    removed.push_back(checkpoints[i].second);
  }
  return removed;
}

}  // namespace zero::finetune
