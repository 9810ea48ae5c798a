// Encoding runs the tokenizers library's pipeline: added tokens are cut out of the raw text first
// (leftmost, then longest: AddedTokenMatcher, one pass), every other stretch is normalized, pre-tokenized into words,
// and each word goes through the BPE model; the post-processor's template adds the special tokens. Decoding maps ids to
// tokens and runs the decoders.
#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/tokenizer_stages.h"
#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::text {
namespace fs = std::filesystem;
using nlohmann::json;

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

struct Tokenizer::Impl {
  std::optional<Bpe> model;
  Normalize normalize;
  PreTokenize pre_tokenize;
  PostProcess post_process;
  Decode decode;
  std::vector<AddedToken> added;
  AddedTokenMatcher added_matcher;  // over `added`, in its order
  std::unordered_map<int32_t, const AddedToken*> added_by_id;
  std::vector<std::string> model_tokens;  // id → token
  json config;                            // tokenizer_config.json, or null
  std::string config_path;                // its path, or empty

  std::optional<int32_t> id_of(const std::string& token) const;  // an added token's, else the model's
  std::optional<int32_t> config_token(const char* key) const;
};

namespace {

json read_json(const fs::path& file) {
  std::error_code ec;
  if (fs::exists(file, ec) && !fs::is_regular_file(file, ec))  // a FIFO or a device would never end
    throw Error(file.string() + ": not a regular file", file.string());
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file.string() + ": cannot open", file.string());
  try {
    return parse_json_from(in, file.string());
  } catch (const json::exception& e) {
    throw Error(file.string() + ": not valid JSON: " + e.what(), file.string());
  }
}

// A token setting of tokenizer_config.json: "text", {"content": "text", ...}, or null (checked
// by check_config).
std::optional<std::string> token_text(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return std::nullopt;
}

// The keys of tokenizer_config.json that zerocpp reads, checked for their types once, at load:
// each later read can then take them as they are. An error names the file and the key.
void check_config(const json& config, const std::string& path) {
  const auto fail = [&](const std::string& key, const std::string& expected) {
    throw Error(path + ": " + key + " must be " + expected, key);
  };
  if (!config.is_object()) fail("(top level)", "a JSON object");
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    if (!config.contains(key)) continue;
    const json& v = config[key];
    if (!(v.is_null() || v.is_string() || (v.is_object() && v.contains("content") && v["content"].is_string())))
      fail(key, "a string, an object with a string \"content\", or null");
  }
  if (config.contains("clean_up_tokenization_spaces") && !config["clean_up_tokenization_spaces"].is_boolean())
    fail("clean_up_tokenization_spaces", "true or false");
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_array()) {
      for (size_t i = 0; i < t.size(); ++i)
        if (!t[i].is_object() || !t[i].contains("name") || !t[i]["name"].is_string() || !t[i].contains("template") ||
            !t[i]["template"].is_string())
          fail("chat_template[" + std::to_string(i) + "]", "an object with string \"name\" and \"template\"");
    } else if (!t.is_string() && !t.is_null()) {
      fail("chat_template", "a string or a list of named templates");
    }
  }
}

}  // namespace

std::optional<int32_t> Tokenizer::Impl::id_of(const std::string& token) const {
  for (const AddedToken& a : added)
    if (a.content == token) return a.id;
  const auto it = model->vocab().find(token);
  if (it == model->vocab().end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Tokenizer::Impl::config_token(const char* key) const {
  const std::optional<std::string> text = token_text(config, key);
  if (!text) return std::nullopt;
  const std::optional<int32_t> id = id_of(*text);
  if (!id)
    throw Error(config_path + ": " + std::string(key) + " \"" + *text + "\" is not a token of tokenizer.json", key);
  return id;
}

Tokenizer Tokenizer::load(const std::string& file_or_dir) {
  fs::path file = file_or_dir;
  if (fs::is_directory(file)) file /= "tokenizer.json";
  if (!fs::exists(file)) throw Error(file.string() + ": no such file", file.string());
  const json doc = read_json(file);
  const std::string name = file.filename().string();
  auto impl = std::make_unique<Impl>();
  const fs::path config_file = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_file)) {
    impl->config = read_json(config_file);
    impl->config_path = config_file.string();
    check_config(impl->config, impl->config_path);
  }

  try {
    for (const char* key : {"truncation", "padding"})
      if (doc.contains(key) && !doc[key].is_null())
        throw Error(name + ": " + key + " is set, and zerocpp's tokenizer does not apply it: set it to null", key);
    if (!doc.contains("model")) throw Error(name + ": model: is required", "model");
    impl->model.emplace(doc["model"], name + ": model");
    impl->normalize = build_normalizer(doc.value("normalizer", json()), name + ": normalizer");
    impl->pre_tokenize = build_pre_tokenizer(doc.value("pre_tokenizer", json()), name + ": pre_tokenizer");
    impl->post_process = build_post_processor(doc.value("post_processor", json()), name + ": post_processor");
    impl->decode = build_decoder(doc.value("decoder", json()), name + ": decoder");
    const json& added = doc.value("added_tokens", json::array());
    if (!added.is_array()) throw Error(name + ": added_tokens: must be a list", "added_tokens");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      const std::string where = name + ": added_tokens[" + std::to_string(i) + "]";
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (json_field<bool>(a, flag, false, where))
          throw Error(where + " (" + json_field<std::string>(a, "content", "", where) + "): " + flag +
                          " is not supported by zerocpp's tokenizer",
                      where);
      const bool special = json_field<bool>(a, "special", false, where);
      // "normalized": match in the normalized text, as the tokenizers library does. With no
      // normalizer that is the text itself (Hugging Face's own GPT-2 tokenizer.json says true).
      const bool has_normalizer = doc.contains("normalizer") && !doc["normalizer"].is_null();
      if (json_field<bool>(a, "normalized", !special, where) && has_normalizer)
        throw Error(where + " (" + json_field<std::string>(a, "content", "", where) +
                        "): matching added tokens in normalized text is not supported by zerocpp's tokenizer",
                    where);
      if (!a.contains("id")) throw Error(where + ".id: is required", where);
      const json& id = a["id"];
      const int64_t limit = max_token_id(static_cast<int64_t>(impl->model->vocab().size() + added.size()));
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit)
        throw Error(where + ".id: " + id.dump().substr(0, 40) + " is not in [0, " + std::to_string(limit) + ")", where);
      impl->added.push_back(
          {json_required<std::string>(a, "content", where), static_cast<int32_t>(id.get<int64_t>()), special});
    }
  } catch (const json::exception& e) {
    throw Error(file.string() + ": " + e.what(), file.string());
  }
  std::vector<std::string> contents;
  for (const AddedToken& a : impl->added) {
    contents.push_back(a.content);
    if (!a.content.empty()) impl->added_by_id[a.id] = &a;
  }
  impl->added_matcher = AddedTokenMatcher(contents);
  int32_t largest = -1;
  for (const auto& [token, id] : impl->model->vocab()) largest = std::max(largest, id);
  impl->model_tokens.resize(static_cast<size_t>(largest + 1));
  for (const auto& [token, id] : impl->model->vocab())
    if (id >= 0) impl->model_tokens[static_cast<size_t>(id)] = token;
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special) const {
  const std::string text = valid_utf8(input);
  std::vector<int32_t> ids;
  const auto encode_stretch = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    std::string s = text.substr(begin, end - begin);
    impl_->normalize(s);
    if (s.empty()) return;
    for (const std::string& word : impl_->pre_tokenize({std::move(s)})) impl_->model->encode_word(word, ids);
  };
  size_t stretch = 0;
  for (const AddedTokenMatcher::Match& match : impl_->added_matcher.find_all(text)) {
    encode_stretch(stretch, match.begin);
    ids.push_back(impl_->added[static_cast<size_t>(match.token)].id);
    stretch = match.end;
  }
  encode_stretch(stretch, text.size());
  return add_special ? impl_->post_process(std::move(ids)) : ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special, bool clean_up_spaces) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const auto added = impl_->added_by_id.find(id);
    if (added != impl_->added_by_id.end()) {
      if (!(skip_special && added->second->special)) tokens.push_back(added->second->content);
    } else if (id >= 0 && static_cast<size_t>(id) < impl_->model_tokens.size() &&
               !impl_->model_tokens[static_cast<size_t>(id)].empty()) {
      tokens.push_back(impl_->model_tokens[static_cast<size_t>(id)]);
    } else {
      throw Error("decode: " + std::to_string(id) + " is not an id of this tokenizer (vocabulary size " +
                  std::to_string(vocab_size()) + ")");
    }
  }
  std::string text;
  for (const std::string& s : impl_->decode(std::move(tokens))) text += s;
  if (clean_up_spaces) {  // transformers' clean_up_tokenization
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      std::string out;
      const std::string f = from;
      size_t at = 0, hit;
      while ((hit = text.find(f, at)) != std::string::npos) {
        out.append(text, at, hit - at);
        out += to;
        at = hit + f.size();
      }
      out.append(text, at, std::string::npos);
      text = std::move(out);
    }
  }
  return text;
}

int32_t Tokenizer::vocab_size() const {
  int32_t n = static_cast<int32_t>(impl_->model_tokens.size());
  for (const AddedToken& a : impl_->added) n = std::max(n, a.id + 1);
  return n;
}

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const { return impl_->id_of(token); }

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const auto added = impl_->added_by_id.find(id);
  if (added != impl_->added_by_id.end()) return added->second->content;
  if (id >= 0 && static_cast<size_t>(id) < impl_->model_tokens.size() &&
      !impl_->model_tokens[static_cast<size_t>(id)].empty())
    return impl_->model_tokens[static_cast<size_t>(id)];
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->config_token("bos_token"); }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->config_token("eos_token"); }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->config_token("pad_token"); }

bool Tokenizer::clean_up_tokenization_spaces() const {
  return impl_->config.is_object() && impl_->config.value("clean_up_tokenization_spaces", false);
}

std::string Tokenizer::config_path() const { return impl_->config_path; }

std::string Tokenizer::chat_template() const {
  if (!impl_->config.is_object() || !impl_->config.contains("chat_template")) return {};
  const json& t = impl_->config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())  // [{"name": "default", "template": ...}, ...]
    for (const json& named : t)
      if (named.value("name", std::string()) == "default") return named.value("template", std::string());
  return {};
}

}  // namespace zero::text
