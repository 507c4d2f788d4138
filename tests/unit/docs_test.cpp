// The README and docs/ are a manual, kept so: the README stays short, no page carries a date (the project's history
// is in git and in the dated benchmark records of bench/results/), every local link leads to a file, and every
// benchmark record says when, where, at which commit and with which command it was measured.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.h"

namespace fitsum::test {
namespace {

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// README.md and every Markdown page under docs/.
std::vector<fs::path> manual_pages() {
  std::vector<fs::path> pages = {source_dir() / "README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(source_dir() / "docs")) {
    if (entry.is_regular_file() && entry.path().extension() == ".md") pages.push_back(entry.path());
  }
  std::sort(pages.begin() + 1, pages.end());
  return pages;
}

std::vector<fs::path> benchmark_records() {
  std::vector<fs::path> records;
  const auto dir = source_dir() / "bench" / "results";
  if (!fs::is_directory(dir)) return records;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".md") records.push_back(entry.path());
  }
  std::sort(records.begin(), records.end());
  return records;
}

std::string where(const fs::path& file, std::size_t index) {
  return fs::relative(file, source_dir()).string() + ":" + std::to_string(index + 1);
}

// A line with the targets of its Markdown links blanked: a link to a dated record of bench/results/ names a date in
// its file name, which is the record's, not the page's.
std::string without_link_targets(const std::string& line) {
  static const std::regex target(R"(\]\([^)\s]*\))");
  return std::regex_replace(line, target, "]()");
}

// The local files a line links to: relative Markdown link targets (anchors dropped), and bench/results/ records
// named in the text.
std::vector<std::string> local_links(const std::string& line) {
  static const std::regex link(R"(\]\(([^)\s]+)\))");
  static const std::regex record(R"((^|[^/\w.-])(bench/results/[\w.-]+\.md))");
  std::vector<std::string> links;
  for (std::sregex_iterator it(line.begin(), line.end(), link), end; it != end; ++it) {
    std::string target = (*it)[1].str();
    if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target.rfind("mailto:", 0) == 0) {
      continue;
    }
    target = target.substr(0, target.find('#'));
    if (!target.empty()) links.push_back(target);
  }
  const auto text = without_link_targets(line);
  for (std::sregex_iterator it(text.begin(), text.end(), record), end; it != end; ++it) {
    links.push_back("/" + (*it)[2].str());  // from the source folder
  }
  return links;
}

TEST(Docs, TheReadmeIsUnderTwoHundredLines) {
  const auto lines = lines_of(source_dir() / "README.md");
  ASSERT_FALSE(lines.empty()) << "README.md is missing or empty";
  EXPECT_LT(lines.size(), 200u) << "README.md is a manual: what fitsum is, the seed's command, install, the commands, "
                                   "one performance table, models, where to read more; details go to docs/";
}

TEST(Docs, NoPageOfTheManualCarriesADate) {
  const std::regex iso(R"(\b20\d\d-\d\d-\d\d\b)");
  const std::string month =
      "(Jan|January|Feb|February|Mar|March|Apr|April|May|Jun|June|Jul|July|Aug|August|Sep|Sept|September|Oct|October|"
      "Nov|November|Dec|December)";
  const std::regex month_first("\\b" + month + "\\.? \\d{1,2}(st|nd|rd|th)?,? 20\\d\\d\\b");
  const std::regex day_first("\\b\\d{1,2}(st|nd|rd|th)? " + month + "\\.?,? 20\\d\\d\\b");
  const std::regex month_year("\\b" + month + " 20\\d\\d\\b");
  std::size_t pages = 0;
  for (const auto& page : manual_pages()) {
    ++pages;
    const auto lines = lines_of(page);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const auto text = without_link_targets(lines[i]);
      std::smatch match;
      for (const auto* pattern : {&iso, &month_first, &day_first, &month_year}) {
        EXPECT_FALSE(std::regex_search(text, match, *pattern))
            << where(page, i) << ": the date '" << match.str() << "' belongs in git or in a record of bench/results/, "
            << "not in the manual:\n  " << lines[i];
      }
    }
  }
  EXPECT_GT(pages, 5u);  // the walk found the pages
}

TEST(Docs, EveryLocalLinkLeadsToAFile) {
  std::size_t checked = 0;
  for (const auto& page : manual_pages()) {
    const auto lines = lines_of(page);
    bool in_code = false;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find("```") != std::string::npos) in_code = !in_code;
      if (in_code) continue;
      for (const auto& link : local_links(lines[i])) {
        const auto target = link[0] == '/' ? source_dir() / link.substr(1) : page.parent_path() / link;
        ++checked;
        EXPECT_TRUE(fs::exists(target)) << where(page, i) << ": the link '" << link << "' leads nowhere ("
                                        << fs::relative(target.lexically_normal(), source_dir()).string() << ")";
      }
    }
  }
  EXPECT_GT(checked, 50u);  // the walk found the links
}

TEST(Docs, EveryBenchmarkRecordSaysWhenWhereAtWhichCommitAndHow) {
  const auto records = benchmark_records();
  ASSERT_FALSE(records.empty()) << "bench/results/ holds no record";
  const std::regex name(R"((20\d\d-\d\d-\d\d)-[a-z0-9]+(-[a-z0-9]+)*\.md)");
  for (const auto& record : records) {
    const auto file = record.filename().string();
    std::smatch match;
    if (!std::regex_match(file, match, name)) {
      ADD_FAILURE() << "bench/results/" << file << ": a record is named YYYY-MM-DD-what-was-measured.md";
      continue;
    }
    const auto lines = lines_of(record);
    auto field = [&](const std::string& key) -> std::string {
      for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].rfind("- " + key + ":", 0) != 0) continue;
        auto value = lines[i].substr(key.size() + 3);
        value.erase(0, value.find_first_not_of(' '));
        // A command may be a fenced block below its field.
        if (value.empty() && i + 2 < lines.size() && lines[i + 1].empty() && lines[i + 2].rfind("```", 0) == 0 &&
            i + 3 < lines.size() && lines[i + 3].rfind("```", 0) != 0) {
          value = lines[i + 3];
        }
        return value;
      }
      return "";
    };
    EXPECT_EQ(field("date"), match[1].str()) << "bench/results/" << file << ": '- date: " << match[1].str()
                                             << "', the date of its name";
    for (const char* key : {"machine", "commit", "command"}) {
      EXPECT_FALSE(field(key).empty()) << "bench/results/" << file << ": no '- " << key
                                       << ": ...' (say 'not recorded' where the run did not record it)";
    }
  }
}

TEST(Docs, EveryBenchmarkRecordIsListedInThePerformancePage) {
  const auto lines = lines_of(source_dir() / "docs" / "performance.md");
  std::set<std::string> listed;
  for (const auto& line : lines) {
    for (const auto& link : local_links(line)) listed.insert(fs::path(link).filename().string());
  }
  for (const auto& record : benchmark_records()) {
    EXPECT_TRUE(listed.count(record.filename().string()))
        << "bench/results/" << record.filename().string() << " is not linked from docs/performance.md's Records";
  }
}

}  // namespace
}  // namespace fitsum::test
