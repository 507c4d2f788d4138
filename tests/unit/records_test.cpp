// Streaming record readers: JSON Lines, JSON arrays (plain or under "data"), RFC 4180 csv; line numbers in
// errors, and recovery after one malformed record.
#include <gtest/gtest.h>

#include <fstream>

#include "fitsum/data/records.h"
#include "test_support.h"

namespace fitsum::data {
namespace {

fs::path write_file(const std::string& name, const std::string& content) {
  const fs::path path = test::temp_dir("records") / name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::vector<Record> read_all(const fs::path& file) {
  RecordReader reader(file);
  std::vector<Record> records;
  Record record;
  while (reader.next(record)) {
    records.push_back(record);
  }
  return records;
}

TEST(Records, FormatComesFromTheExtension) {
  EXPECT_EQ(format_of("a/train.jsonl"), FileFormat::kJsonLines);
  EXPECT_EQ(format_of("a/train.JSON"), FileFormat::kJson);
  EXPECT_EQ(format_of("train.csv"), FileFormat::kCsv);
  EXPECT_THROW(format_of("train.parquet"), std::invalid_argument);
}

TEST(Records, ReadsJsonLinesWithLineNumbers) {
  const fs::path file = write_file("a.jsonl",
                                   "\xEF\xBB\xBF{\"id\": \"1\", \"dialogue\": \"A: hi\\r\\nB: yo\"}\n\n"
                                   "{\"id\": 2, \"dialogue\": \"x\"}\r\n");
  const std::vector<Record> records = read_all(file);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line, 1u);
  EXPECT_EQ(records[0].fields["id"], "1");
  EXPECT_EQ(records[0].fields["dialogue"], "A: hi\r\nB: yo");
  EXPECT_EQ(records[1].line, 3u);
  EXPECT_EQ(records[1].fields["id"], 2);
}

TEST(Records, AMalformedLineIsOneBadRecordAndReadingGoesOn) {
  const fs::path file = write_file("bad.jsonl", "{\"a\": \"1\"}\n{\"a\": \"2\"\n[1, 2]\n{\"a\": \"4\"}\n");
  RecordReader reader(file);
  Record record;
  ASSERT_TRUE(reader.next(record));
  try {
    reader.next(record);
    FAIL() << "expected a bad record";
  } catch (const BadRecord& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: not valid JSON"), std::string::npos) << e.what();
  }
  try {
    reader.next(record);
    FAIL() << "expected a bad record";
  } catch (const BadRecord& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:3: a record must be a JSON object"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(reader.next(record));
  EXPECT_EQ(record.fields["a"], "4");
  EXPECT_EQ(record.line, 4u);
  EXPECT_FALSE(reader.next(record));
}

TEST(Records, StreamsAJsonArray) {
  const fs::path file = write_file("a.json",
                                   "[\n  {\"id\": \"1\", \"dialogue\": \"brackets ] } [ { and \\\"quotes\\\"\"},\n"
                                   "  {\"id\": \"2\",\n   \"dialogue\": \"two\", \"n\": [1, {\"x\": 2}]}\n]\n");
  const std::vector<Record> records = read_all(file);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].fields["dialogue"], "brackets ] } [ { and \"quotes\"");
  EXPECT_EQ(records[0].line, 2u);
  EXPECT_EQ(records[1].line, 3u);
  EXPECT_EQ(records[1].fields["n"][1]["x"], 2);
  EXPECT_TRUE(read_all(write_file("empty.json", " [ ] ")).empty());
}

TEST(Records, StreamsTheDataArrayOfAnObject) {
  const fs::path file = write_file("d.json",
                                   "{\"version\": \"1.0\", \"meta\": {\"data\": [\"not this\"]}, \"n\": 3,\n"
                                   " \"data\": [{\"id\": \"a\"}, {\"id\": \"b\"}], \"after\": true}");
  const std::vector<Record> records = read_all(file);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].fields["id"], "b");
  EXPECT_EQ(records[1].line, 2u);
  EXPECT_THROW(read_all(write_file("nodata.json", "{\"rows\": []}")), std::runtime_error);
}

TEST(Records, ReadsJsonLinesSavedAsJson) {
  const std::vector<Record> records = read_all(write_file("lines.json", "{\"id\": \"a\"}\n{\"id\": \"b\"}\n"));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].fields["id"], "b");
  EXPECT_EQ(records[1].line, 2u);
}

TEST(Records, ABrokenJsonArrayIsAnErrorWithItsLine) {
  const fs::path file = write_file("broken.json", "[{\"id\": \"a\"}\n {\"id\": \"b\"}]");
  RecordReader reader(file);
  Record record;
  ASSERT_TRUE(reader.next(record));
  try {
    reader.next(record);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json:2: expected ','"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_all(write_file("cut.json", "[{\"id\": \"a\"}, {\"id\": \"b")), std::runtime_error);
}

TEST(Records, ReadsRfc4180Csv) {
  // Quoted fields with commas, doubled quotes and CRLF line breaks inside, CRLF record ends, a blank line.
  const fs::path file = write_file("a.csv",
                                   "id,dialogue,summary\r\n"
                                   "1,\"A: hi, you\r\nB: \"\"yo\"\"\",short\r\n"
                                   "\r\n"
                                   "2,plain,\"\"\n"
                                   "3,\"multi\nline\",\"x\"\n");
  const std::vector<Record> records = read_all(file);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].fields["id"], "1");
  EXPECT_EQ(records[0].fields["dialogue"], "A: hi, you\r\nB: \"yo\"");
  EXPECT_EQ(records[0].fields["summary"], "short");
  EXPECT_EQ(records[0].line, 2u);
  EXPECT_EQ(records[1].fields["summary"], "");
  EXPECT_EQ(records[1].line, 5u);
  EXPECT_EQ(records[2].fields["dialogue"], "multi\nline");
  EXPECT_EQ(records[2].line, 6u);
}

TEST(Records, ACsvRowWithTheWrongFieldCountIsABadRecord) {
  const fs::path file = write_file("bad.csv", "id,dialogue\n1,a,b\n2,ok\n3,\"never closed\n");
  RecordReader reader(file);
  Record record;
  try {
    reader.next(record);
    FAIL() << "expected a bad record";
  } catch (const BadRecord& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv:2: the row has 3 fields, the header 2"), std::string::npos)
        << e.what();
  }
  ASSERT_TRUE(reader.next(record));
  EXPECT_EQ(record.fields["dialogue"], "ok");
  EXPECT_THROW(reader.next(record), BadRecord);
  EXPECT_FALSE(reader.next(record));
  EXPECT_THROW(read_all(write_file("dup.csv", "a,a\n1,2\n")), std::runtime_error);
}

}  // namespace
}  // namespace fitsum::data
