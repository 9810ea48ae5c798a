#include "models/finetune/instruction_data.h"

#include <filesystem>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "models/finetune/chat_example.h"
#include "text/tokenizer.h"
#include "zero/error.h"
#include "util/json_from_file.h"

namespace zero::finetune {
namespace {

namespace fs = std::filesystem;

using json = nlohmann::ordered_json;  // key order shows in a template's tojson

struct Record {
  json value;
  int64_t where = 0;  // line (JSONL) or index (JSON array)
};

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))  // a FIFO or a device would never end
    throw Error("the data set " + path + " is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open the data set " + path, path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int64_t line_of(const std::string& text, size_t byte) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(byte, text.size())), '\n');
}

// A file whose first non-blank character is '[' is one JSON array; anything else is JSONL.
std::vector<Record> read_records(const std::string& path, bool& is_array) {
  const std::string text = read_file(path);
  const size_t first = text.find_first_not_of(" \t\r\n");
  std::vector<Record> records;
  is_array = first != std::string::npos && text[first] == '[';
  if (is_array) {
    json array;
    try {
      array = parse_json_from<json>(text, path);
    } catch (const json::parse_error& e) {
      throw Error(fmt::format("{}:{}: not JSON: {}", path, line_of(text, e.byte == 0 ? 0 : e.byte - 1), e.what()), path);
    }
    for (size_t i = 0; i < array.size(); ++i) records.push_back({std::move(array[i]), static_cast<int64_t>(i)});
    return records;
  }
  const size_t last = text.find_last_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{' && text.find('\n', first) < last && json::accept(text)) {
    // One object over several lines: neither an array of records nor a record a line.
    throw Error(path + ": one JSON object; the data set must be a JSON array of records, or JSONL (a record a line)",
                path);
  }
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      records.push_back({parse_json_from<json>(line, path + ":" + std::to_string(number)), number});
    } catch (const json::parse_error& e) {
      throw Error(fmt::format("{}:{}: not a JSON line: {}", path, number, e.what()), path);
    }
  }
  return records;
}

std::string string_field(const json& record, const char* key, bool required, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) {
    if (required) throw Error(fmt::format("{}: no \"{}\"", where, key), where);
    return "";
  }
  if (!it->is_string()) throw Error(fmt::format("{}: \"{}\" must be a string, not {}", where, key, it->type_name()), where);
  return it->get<std::string>();
}

// Stanford Alpaca's train.py: ids of prompt + output + EOS as one text; the prompt's own ids
// (tokenized alone, with the BOS) are masked.
Example alpaca_example(const json& record, const text::Tokenizer& tokenizer, const std::string& eos,
                       const std::string& where) {
  const std::string prompt =
      alpaca_prompt(string_field(record, "instruction", true, where), string_field(record, "input", false, where));
  Example example;
  example.ids = tokenizer.encode(prompt + string_field(record, "output", true, where) + eos, true);
  const size_t masked = std::min(tokenizer.encode(prompt, true).size(), example.ids.size());
  example.labels = example.ids;
  std::fill(example.labels.begin(), example.labels.begin() + static_cast<std::ptrdiff_t>(masked), kIgnoreIndex);
  return example;
}

bool learns_something(const Example& e) {
  // Position 0's label is never a target (each position predicts the next token).
  return std::any_of(e.labels.begin() + (e.labels.empty() ? 0 : 1), e.labels.end(),
                     [](int32_t label) { return label != kIgnoreIndex; });
}

}  // namespace

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty()) {
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:";
  }
  return "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
         "response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:";
}

InstructionData read_instruction_data(const std::string& path, const text::Tokenizer& tokenizer,
                                      int64_t model_max_length) {
  if (model_max_length < 2) throw Error("--model_max_length must be at least 2", "--model_max_length");
  bool is_array = false;
  const std::vector<Record> records = read_records(path, is_array);
  if (records.empty()) throw Error("the data set " + path + " holds no records", path);
  InstructionData data;
  std::optional<ChatRenderer> chat;  // built at the first chat record (the template is parsed once)
  std::string eos;
  for (const Record& r : records) {
    const std::string where = is_array ? fmt::format("{}: record {}", path, r.where) : fmt::format("{}:{}", path, r.where);
    if (!r.value.is_object()) throw Error(where + ": a record must be a JSON object, not " + r.value.type_name(), path);
    Example example;
    if (r.value.contains("messages")) {
      if (!chat) chat.emplace(tokenizer);
      example = chat->example(r.value.at("messages"), where);
      ++data.chat;
    } else if (r.value.contains("instruction") || r.value.contains("output")) {
      if (eos.empty()) {
        const auto id = tokenizer.eos_id();
        if (!id) throw Error("the alpaca layout ends each response with the EOS token, and the tokenizer names none "
                             "(tokenizer_config.json's eos_token)", path);
        eos = *tokenizer.id_to_token(*id);
      }
      example = alpaca_example(r.value, tokenizer, eos, where);
      ++data.alpaca;
    } else {
      std::vector<std::string> keys;
      for (const auto& [key, value] : r.value.items()) keys.push_back('"' + key + '"');
      throw Error(fmt::format("{}: neither the alpaca layout (\"instruction\", \"input\", \"output\") nor chat "
                              "\"messages\"; the record has {}",
                              where, keys.empty() ? std::string("no keys") : fmt::format("{}", fmt::join(keys, ", "))),
                  path);
    }
    ++data.records;
    example.record = r.where;
    if (static_cast<int64_t>(example.ids.size()) > model_max_length) {
      example.ids.resize(static_cast<size_t>(model_max_length));
      example.labels.resize(static_cast<size_t>(model_max_length));
      ++data.truncated;
    }
    if (!learns_something(example)) {
      ++data.dropped;
      continue;
    }
    data.examples.push_back(std::move(example));
  }
  if (data.examples.empty()) {
    throw Error(fmt::format("the data set {} has nothing to learn: all {} records were cut to nothing at "
                            "--model_max_length {}",
                            path, data.records, model_max_length),
                path);
  }
  return data;
}

}  // namespace zero::finetune
