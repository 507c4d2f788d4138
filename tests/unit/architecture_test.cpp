// The shape of the source tree, checked on every test run (docs/architecture.md explains the rules):
//  - the library's folders include each other only along the layer table below, which has no cycle;
//  - no function in src/ or tools/ is longer than 80 lines, and no source file longer than 600 lines;
//  - a model family is named only in its own module (src/families/, include/fitsum/families/).
// Reads the sources as text: no compiler involved, so a failure names the file and line to change.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fitsum/families/family.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

// Which library folders each folder may include (besides itself). The same table is drawn in
// docs/architecture.md; a new folder or edge starts there.
const std::map<std::string, std::set<std::string>>& layer_table() {
  static const std::map<std::string, std::set<std::string>> table = {
      {"util", {}},
      {"tokenizer", {"util"}},
      {"data", {"util", "tokenizer"}},
      {"kernels", {"util"}},
      {"model", {"util", "kernels"}},
      {"optim", {"util"}},
      {"eval", {"util"}},
      {"families", {"util", "model", "tokenizer"}},
      {"io", {"util", "model", "tokenizer", "families"}},
      {"generate", {"util", "model"}},
      // memory: the fused loss's chunk sizes (kernels/loss.h) are terms of the planner's memory model.
      {"memory", {"util", "kernels", "model", "optim"}},
      // train: a batch's KnownLabels and the TokenLoss sums (kernels/loss.h).
      {"train", {"util", "tokenizer", "data", "kernels", "model", "optim", "eval", "io", "generate", "memory", "families"}},
  };
  return table;
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const auto ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cpp" || ext == ".hpp" || ext == ".cu")) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Architecture, LayerTableHasNoCycle) {
  // Depth-first search for a back edge.
  std::map<std::string, int> state;  // 0 unseen, 1 on the stack, 2 done
  std::function<bool(const std::string&)> cyclic = [&](const std::string& folder) {
    state[folder] = 1;
    for (const auto& next : layer_table().at(folder)) {
      if (state[next] == 1 || (state[next] == 0 && cyclic(next))) return true;
    }
    state[folder] = 2;
    return false;
  };
  for (const auto& [folder, uses] : layer_table()) {
    for (const auto& next : uses) ASSERT_TRUE(layer_table().count(next)) << folder << " -> unknown folder " << next;
    if (state[folder] == 0) EXPECT_FALSE(cyclic(folder)) << "cycle through " << folder;
  }
}

TEST(Architecture, LibraryIncludesFollowTheLayerTable) {
  const std::regex include_pattern(R"(^\s*#\s*include\s+"fitsum/([a-z_0-9]+)/)");
  std::size_t checked = 0;
  for (const auto& [folder, allowed] : layer_table()) {
    for (const auto& root : {source_dir() / "include" / "fitsum" / folder, source_dir() / "src" / folder}) {
      for (const auto& file : sources_under(root)) {
        const auto lines = lines_of(file);
        for (std::size_t i = 0; i < lines.size(); ++i) {
          std::smatch match;
          if (!std::regex_search(lines[i], match, include_pattern)) continue;
          const auto used = match[1].str();
          ++checked;
          EXPECT_TRUE(used == folder || allowed.count(used))
              << fs::relative(file, source_dir()).string() << ":" << i + 1 << ": " << folder << " includes " << used
              << ", which the layer table (docs/architecture.md) does not allow";
        }
      }
    }
  }
  EXPECT_GT(checked, 100u);  // the walk found the sources
  // Every library folder is in the table.
  for (const auto& entry : fs::directory_iterator(source_dir() / "include" / "fitsum")) {
    EXPECT_TRUE(layer_table().count(entry.path().filename().string()))
        << "include/fitsum/" << entry.path().filename().string() << " is missing from the layer table";
  }
}

// The code of a line with comments, string and character literals blanked out; `in_comment` carries a /* */
// comment across lines.
std::string code_of(const std::string& line, bool& in_comment) {
  std::string out;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_comment) {
      if (c == '*' && i + 1 < line.size() && line[i + 1] == '/') {
        in_comment = false;
        ++i;
      }
      continue;
    }
    if (c == '/' && i + 1 < line.size() && line[i + 1] == '/') break;
    if (c == '/' && i + 1 < line.size() && line[i + 1] == '*') {
      in_comment = true;
      ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      for (++i; i < line.size() && line[i] != c; ++i) {
        if (line[i] == '\\') ++i;
      }
      out += ' ';
      continue;
    }
    out += c;
  }
  return out;
}

struct Function {
  std::size_t first_line = 0;  // 1-based
  std::size_t lines = 0;
  std::string header;
};

// Function bodies opened at namespace or class level: a block whose header holds a parameter list. Lambdas and
// local classes count towards the function around them.
std::vector<Function> functions_in(const fs::path& file) {
  enum Scope { outside, function_body, inside_function };
  const auto lines = lines_of(file);
  std::vector<Function> found;
  std::vector<Scope> scopes;  // one per open brace
  std::string header;         // the text since the last ; { or } outside functions
  std::size_t header_line = 0;
  bool in_comment = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto code = code_of(lines[i], in_comment);
    if (code.find_first_not_of(" \t") != std::string::npos && code[code.find_first_not_of(" \t")] == '#') continue;
    for (const char c : code) {
      const bool inside = !scopes.empty() && scopes.back() != outside;
      if (c == '{') {
        if (inside) {
          scopes.push_back(inside_function);
        } else if (header.find('(') != std::string::npos && header.find("namespace") == std::string::npos) {
          found.push_back({header_line + 1, 0, header});
          scopes.push_back(function_body);
        } else {
          scopes.push_back(outside);
        }
        header.clear();
      } else if (c == '}') {
        if (!scopes.empty() && scopes.back() == function_body) found.back().lines = i + 2 - found.back().first_line;
        if (!scopes.empty()) scopes.pop_back();
        header.clear();
      } else if (!inside) {
        if (c == ';') {
          header.clear();
          continue;
        }
        if (header.find_first_not_of(" \t") == std::string::npos && c != ' ' && c != '\t') header_line = i;
        header += c;
      }
    }
    if (scopes.empty() || scopes.back() == outside) header += ' ';
  }
  return found;
}

TEST(Architecture, FunctionsAndFilesStayShort) {
  std::size_t functions = 0;
  for (const auto* top : {"src", "tools"}) {
    for (const auto& file : sources_under(source_dir() / top)) {
      const auto name = fs::relative(file, source_dir()).string();
      EXPECT_LE(lines_of(file).size(), 600u) << name << " has more than 600 lines: split it by concern";
      for (const auto& f : functions_in(file)) {
        ++functions;
        EXPECT_LE(f.lines, 80u) << name << ":" << f.first_line << ": a function of " << f.lines
                                << " lines (at most 80): " << f.header.substr(0, 100);
      }
    }
  }
  EXPECT_GT(functions, 300u);  // the scan found the functions
}

// A source file's string literals and its code (comments and literals blanked), line by line. Raw strings
// (R"delim( ... )delim") may span lines; a literal is reported on the line it starts.
struct ScannedSource {
  std::vector<std::string> code;                             // one entry per line
  std::vector<std::pair<std::size_t, std::string>> literals;  // (1-based line, contents)
};

ScannedSource scan_source(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  ScannedSource out;
  out.code.emplace_back();
  std::size_t line = 1;
  const auto newline = [&] {
    ++line;
    out.code.emplace_back();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '\n') {
      newline();
    } else if (c == '/' && next == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '/' && next == '*') {
      for (i += 2; i + 1 < text.size() && !(text[i] == '*' && text[i + 1] == '/'); ++i) {
        if (text[i] == '\n') newline();
      }
      ++i;
    } else if (c == 'R' && next == '"' && (i == 0 || !(std::isalnum(static_cast<unsigned char>(text[i - 1])) ||
                                                       text[i - 1] == '_'))) {
      const std::size_t open = text.find('(', i + 2);
      const std::string end = ")" + text.substr(i + 2, open - i - 2) + "\"";
      const std::size_t close = text.find(end, open);
      const std::string contents = text.substr(open + 1, close - open - 1);
      out.literals.emplace_back(line, contents);
      for (const char k : contents) {
        if (k == '\n') newline();
      }
      out.code.back() += ' ';
      i = close + end.size() - 1;
    } else if (c == '"' || c == '\'') {
      std::string contents;
      for (++i; i < text.size() && text[i] != c && text[i] != '\n'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) contents += text[i++];
        contents += text[i];
      }
      if (c == '"') out.literals.emplace_back(line, contents);
      out.code.back() += ' ';
    } else {
      out.code.back() += c;
    }
  }
  return out;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// Why `literal` names a registered family, or "" when it does not.
std::string family_name_in(const std::string& literal) {
  const std::string folded = lower(literal);
  for (const auto* family : families::registered_families()) {
    for (const auto& type : family->model_types) {
      if (folded == type.name) return "the model_type \"" + type.name + "\"";
      for (const auto* quote : {"'", "\\\"", "`"}) {
        if (folded.find(quote + type.name + quote) != std::string::npos) return "the model_type '" + type.name + "'";
      }
      for (const auto& class_name : {type.architecture, type.config_class}) {
        if (literal.find(class_name) != std::string::npos) return "transformers' class " + class_name;
      }
    }
  }
  if (literal.find("ForConditionalGeneration") != std::string::npos) return "a transformers model class";
  return "";
}

// ModelConfig's defaults are PEGASUS-large's (model::pegasus_shape), its model_type with them: a default value, read
// by no switch. The one literal allowed outside the families.
bool allowed_family_literal(const std::string& file, const std::string& literal) {
  return file == "include/fitsum/model/config.h" && literal == "pegasus";
}

TEST(Architecture, FamilyNamesLiveInTheirModules) {
  // A family is one record in src/families/ (docs/adding-a-family.md): everywhere else, code asks the registry or
  // reads the feature fields the family's config reader sets. So no string literal outside the families folder
  // names a registered model_type ("t5", or quoted in a message: 't5') or a family's transformers model or config
  // class (...ForConditionalGeneration, T5Config), and no code has an is_t5-style predicate. Tokenizer classes
  // (PegasusTokenizer, T5Tokenizer, BartTokenizer in tokenizer/) and T5's layer modules keep their transformers
  // names: they are the classes they reproduce, not a switch on the family. Comments may name anything.
  std::string predicates;
  for (const auto* family : families::registered_families()) {
    for (const auto& type : family->model_types) predicates += (predicates.empty() ? "" : "|") + type.name;
    predicates += "|" + lower(family->name);
  }
  const std::regex predicate(R"(\bis_()" + predicates + R"()\w*)");
  std::size_t scanned = 0;
  for (const auto* top : {"src", "include", "tools"}) {
    for (const auto& file : sources_under(source_dir() / top)) {
      const auto name = fs::relative(file, source_dir()).generic_string();
      if (name.rfind("src/families/", 0) == 0 || name.rfind("include/fitsum/families/", 0) == 0) continue;
      ++scanned;
      const auto source = scan_source(file);
      for (const auto& [line, literal] : source.literals) {
        if (allowed_family_literal(name, literal)) continue;
        const auto named = family_name_in(literal);
        EXPECT_TRUE(named.empty()) << name << ":" << line << ": the string \"" << literal << "\" names " << named
                                   << "; ask the family registry (families/family.h) instead";
      }
      for (std::size_t i = 0; i < source.code.size(); ++i) {
        std::smatch match;
        EXPECT_FALSE(std::regex_search(source.code[i], match, predicate))
            << name << ":" << i + 1 << ": " << match.str()
            << " switches on a family; read a feature field of model::ModelConfig (or the family's record)";
      }
    }
  }
  EXPECT_GT(scanned, 200u);  // the walk found the sources
}

}  // namespace
}  // namespace fitsum::test
