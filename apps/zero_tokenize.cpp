// zero-tokenize: a Hugging Face tokenizer (tokenizer.json, or the model directory holding it)
// applied to a file, as the `tokenizers` library would: the ids of its text on one line,
// space-separated, or with --decode the text of a file of such ids.
//   zero-tokenize --tokenizer DIR [--add-special] FILE
//   zero-tokenize --tokenizer DIR --decode [--skip-special] IDS_FILE
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "text/tokenizer.h"
#include "zero/error.h"

int main(int argc, char** argv) {
  CLI::App app{"zero-tokenize: a Hugging Face tokenizer.json applied to a file"};
  std::string tokenizer_path, input;
  bool add_special = false, decode = false, skip_special = false, timing = false;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json, or a directory holding it (and tokenizer_config.json)")
      ->required();
  app.add_flag("--add-special", add_special, "add the post-processor's special tokens (a BOS for Llama)");
  app.add_flag("--decode", decode, "FILE holds ids: print their text");
  app.add_flag("--skip-special", skip_special, "with --decode: leave special tokens out");
  app.add_flag("--time", timing, "print the encoding or decoding speed on stderr");
  app.add_option("FILE", input, "the text (or with --decode the ids) to read")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  try {
    const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load(tokenizer_path);
    std::ifstream in(input, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string content = buffer.str();
    const auto start = std::chrono::steady_clock::now();
    const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    if (decode) {
      std::vector<int32_t> ids;
      std::istringstream words(content);
      std::string word;
      while (words >> word) {
        size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(word, &used);
        } catch (const std::exception&) {
        }
        if (used != word.size() || id < 0 || id > INT32_MAX)
          throw zero::Error(input + ": \"" + word + "\" is not a token id", input);
        ids.push_back(static_cast<int32_t>(id));
      }
      const std::string text = tokenizer.decode(ids, skip_special, tokenizer.clean_up_tokenization_spaces());
      if (timing) std::cerr << fmt::format("zero-tokenize: decoded {} ids in {:.3f} s\n", ids.size(), seconds());
      std::cout << text;
    } else {
      const std::vector<int32_t> ids = tokenizer.encode(content, add_special);
      const double s = seconds();
      if (timing)
        std::cerr << fmt::format("zero-tokenize: encoded {} bytes into {} tokens in {:.3f} s ({:.2f} MB/s)\n",
                                 content.size(), ids.size(), s, content.size() / s / 1e6);
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
      std::cout << line << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "zero-tokenize: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
