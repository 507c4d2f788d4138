// The checks every command runs on its output files before it loads anything (util/output_paths.h): what a name
// resolves to (a folder, a block device and a trailing '/' are refused; a FIFO, a device and /dev/stdout are written
// through), whether its folder takes the temporary name (a name too long once `.tmp-<pid>` is added, a missing
// folder), and outputs that are the same file as an input or as each other.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <functional>
#include <stdexcept>

#include <gtest/gtest.h>

#include "fitsum/util/output_paths.h"
#include "test_support.h"

namespace fitsum::test {
namespace {

TEST(OutputPaths, WhatANameResolvesToDecidesHowItIsWritten) {
  const auto dir = temp_dir("kinds");
  write_bytes(dir / "file.json", "{}");
  fs::create_symlink("file.json", dir / "link.json");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(util::resolve_output(dir / "new.json", "--f").kind, util::OutputKind::kNewFile);
  EXPECT_EQ(util::resolve_output(dir / "file.json", "--f").kind, util::OutputKind::kRegularFile);
  const auto linked = util::resolve_output(dir / "link.json", "--f");
  EXPECT_EQ(linked.kind, util::OutputKind::kRegularFile);
  EXPECT_EQ(linked.path, dir / "file.json");  // the target is what the rename replaces
  EXPECT_EQ(util::resolve_output(dir / "fifo", "--f").kind, util::OutputKind::kFifo);
  EXPECT_EQ(util::resolve_output("/dev/null", "--f").kind, util::OutputKind::kCharacterDevice);
  EXPECT_EQ(util::resolve_output("/dev/stdout", "--f").kind, util::OutputKind::kDescriptor);
  EXPECT_EQ(util::resolve_output("/dev/fd/2", "--f").kind, util::OutputKind::kDescriptor);
}

TEST(OutputPaths, FoldersBlockDevicesTrailingSlashesAndLinkLoopsAreRefusedByFlag) {
  const auto dir = temp_dir("refused");
  fs::create_directories(dir / "o");
  const auto folder = error_of([&] { util::require_writable_output_file(dir / "o", "--predictions_file"); });
  EXPECT_NE(folder.find("--predictions_file '" + (dir / "o").string() + "' is a folder"), std::string::npos) << folder;
  const auto slash =
      error_of([&] { util::require_writable_output_file((dir / "p").string() + "/", "--metrics_file"); });
  EXPECT_NE(slash.find("--metrics_file"), std::string::npos) << slash;
  EXPECT_NE(slash.find("ends with '/'"), std::string::npos) << slash;
  fs::create_symlink("b", dir / "a");
  fs::create_symlink("a", dir / "b");
  EXPECT_NE(error_of([&] { util::require_writable_output_file(dir / "a", "--f"); }).find("loop"), std::string::npos);
  if (::mknod((dir / "disk").c_str(), S_IFBLK | 0600, makedev(7, 0)) == 0) {
    const auto block = error_of([&] { util::require_writable_output_file(dir / "disk", "--output_file"); });
    EXPECT_NE(block.find("is a block device"), std::string::npos) << block;
  }
}

TEST(OutputPaths, ANameTooLongWithTheTemporarySuffixIsRefusedBeforeAnyWork) {
  const auto dir = temp_dir("long");
  const std::string name(250, 'p');  // fits NAME_MAX (255), but not with ".tmp-<pid>"
  const auto error = error_of([&] { util::require_writable_output_file(dir / name, "--predictions_file"); });
  EXPECT_NE(error.find("--predictions_file"), std::string::npos) << error;
  EXPECT_NE(error.find("has a name too long to write"), std::string::npos) << error;
  EXPECT_NE(error.find("at most 255 bytes"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(dir));
  EXPECT_EQ(error_of([&] { util::require_writable_output_file(dir / std::string(200, 'p'), "--f"); }), "");
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe was left behind";
}

TEST(OutputPaths, AMissingFolderOrAFileAsTheFolderIsRefused) {
  const auto dir = temp_dir("folders");
  const auto missing = error_of([&] { util::require_writable_output_file(dir / "none" / "m.json", "--metrics_file"); });
  EXPECT_NE(missing.find("--metrics_file"), std::string::npos) << missing;
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  write_bytes(dir / "a-file", "x");
  const auto under_file = error_of([&] { util::require_writable_output_file(dir / "a-file" / "m.json", "--f"); });
  EXPECT_NE(under_file.find("is not a folder"), std::string::npos) << under_file;
  EXPECT_EQ(error_of([&] { util::require_writable_output_file("/dev/null", "--f"); }), "");
}

// Which error an output check throws: "" for none, "usage" for std::invalid_argument, else what().
std::string check(const std::vector<util::NamedPath>& outputs, const std::vector<util::NamedPath>& inputs) {
  try {
    util::require_output_files(outputs, inputs);
  } catch (const std::invalid_argument& e) {
    return std::string("usage: ") + e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(OutputPaths, AnOutputThatIsAnInputIsAUsageErrorThroughAnyName) {
  const auto dir = temp_dir("same");
  const auto data = dir / "test.jsonl";
  write_bytes(data, "{}\n");
  fs::create_symlink("test.jsonl", dir / "link.jsonl");
  fs::create_hard_link(data, dir / "hard.jsonl");
  for (const fs::path& output : {data, dir / "link.jsonl", dir / "hard.jsonl", dir / "." / "test.jsonl"}) {
    const auto error = check({{"--predictions_file", output}}, {{"--test_file", data}});
    EXPECT_EQ(error.rfind("usage: --predictions_file '" + output.string() + "' is the same file as --test_file", 0), 0u)
        << error;
  }
  EXPECT_EQ(check({{"--predictions_file", dir / "p.jsonl"}}, {{"--test_file", data}}), "");
  EXPECT_EQ(check({{"--predictions_file", ""}}, {{"--test_file", data}, {"--validation_file", ""}}), "");
}

TEST(OutputPaths, TwoOutputsThatAreOneFileAreAUsageErrorUnlessWrittenThrough) {
  const auto dir = temp_dir("outputs");
  const auto error = check({{"--predictions_file", dir / "r.json"}, {"--metrics_file", dir / "." / "r.json"}}, {});
  EXPECT_NE(error.find("usage: --predictions_file '" + (dir / "r.json").string() + "' and --metrics_file"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("are the same file"), std::string::npos) << error;
  EXPECT_EQ(check({{"--predictions_file", "/dev/null"}, {"--metrics_file", "/dev/null"}}, {}), "");
}

}  // namespace
}  // namespace fitsum::test
