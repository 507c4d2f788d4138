// Streaming record readers: JSON Lines, JSON arrays (plain or under "data"), RFC 4180 csv, each plain or gzip;
// line numbers in errors, recovery after one malformed record, text that is not UTF-8, broken gzip streams.
#include <zlib.h>
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

// `text` compressed as one gzip member (what `gzip` writes).
std::string gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out;
  std::vector<char> buffer(1 << 16);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  int status = Z_OK;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buffer.data());
    z.avail_out = static_cast<uInt>(buffer.size());
    status = deflate(&z, Z_FINISH);
    out.append(buffer.data(), buffer.size() - z.avail_out);
  } while (status != Z_STREAM_END);
  deflateEnd(&z);
  return out;
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
  // Compression is read from the content; the name before .gz says the format, as `datasets` reads it.
  EXPECT_EQ(format_of("a/train.jsonl.gz"), FileFormat::kJsonLines);
  EXPECT_EQ(format_of("train.JSON.GZ"), FileFormat::kJson);
  EXPECT_EQ(format_of("train.csv.gz"), FileFormat::kCsv);
  EXPECT_THROW(format_of("train.gz"), std::invalid_argument);
}

// Hugging Face `datasets` reads compressed json and csv; a gzip file is recognized by its bytes, whatever its name.
TEST(Records, ReadsGzipFilesOfEveryFormatWhateverTheirName) {
  const std::string jsonl = "{\"id\": 1, \"dialogue\": \"A: hi\"}\n\n{\"id\": 2, \"dialogue\": \"B: yo\"}\n";
  const std::string json = "[\n{\"id\": 1, \"dialogue\": \"A: hi\"},\n\n{\"id\": 2, \"dialogue\": \"B: yo\"}]";
  const std::string csv = "id,dialogue\n1,A: hi\n\n2,\"B: yo\"\n";
  struct Case {
    std::string name;
    std::string text;
    std::size_t first_line, second_line;
  };
  for (const auto& c : std::vector<Case>{{"named.jsonl.gz", jsonl, 1, 3},
                                         {"misnamed.jsonl", jsonl, 1, 3},
                                         {"named.json.gz", json, 2, 4},
                                         {"misnamed.csv", csv, 2, 4},
                                         {"named.csv.gz", csv, 2, 4}}) {
    const std::vector<Record> records = read_all(write_file(c.name, gzip(c.text)));
    ASSERT_EQ(records.size(), 2u) << c.name;
    EXPECT_EQ(records[0].fields["dialogue"], "A: hi") << c.name;
    EXPECT_EQ(records[1].fields["dialogue"], "B: yo") << c.name;
    EXPECT_EQ(records[0].line, c.first_line) << c.name;
    EXPECT_EQ(records[1].line, c.second_line) << c.name;
  }
  // Members one after the other (`cat a.gz b.gz`) are one text; zero padding after a member is skipped.
  const auto joined = read_all(
      write_file("joined.jsonl.gz", gzip("{\"a\": \"1\"}\n") + gzip("{\"a\": \"2\"}\n") + std::string(7, '\0')));
  ASSERT_EQ(joined.size(), 2u);
  EXPECT_EQ(joined[1].fields["a"], "2");
  EXPECT_EQ(joined[1].line, 2u);
}

std::string error_of(const fs::path& file) {
  try {
    read_all(file);
  } catch (const BadRecord& e) {
    return std::string("BadRecord: ") + e.what();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Records, ABrokenGzipStreamIsOneLineNamingTheFile) {
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += "{\"id\": " + std::to_string(i) + ", \"dialogue\": \"line " + std::to_string(i * 7919) + "\"}\n";
  const std::string whole = gzip(text);
  const fs::path cut = write_file("cut.jsonl.gz", whole.substr(0, whole.size() / 2));
  const std::string cut_error = error_of(cut);
  EXPECT_EQ(cut_error.rfind(cut.string() + ": the gzip stream ends early (a truncated file?) at line ", 0), 0u)
      << cut_error;
  EXPECT_EQ(cut_error.find('\n'), std::string::npos);
  // A file cut inside its 8-byte trailer: every record read, and the end still noticed.
  EXPECT_NE(error_of(write_file("trailer.jsonl", whole.substr(0, whole.size() - 3))).find("ends early"),
            std::string::npos);
  std::string damaged = whole;
  for (std::size_t i = damaged.size() / 3; i < damaged.size() / 3 + 64; ++i)
    damaged[i] = static_cast<char>(~damaged[i]);
  const fs::path corrupt = write_file("corrupt.jsonl", damaged);
  const std::string corrupt_error = error_of(corrupt);
  EXPECT_EQ(corrupt_error.rfind(corrupt.string() + ": the gzip stream is corrupt (zlib: ", 0), 0u) << corrupt_error;
  EXPECT_NE(corrupt_error.find("compress it again"), std::string::npos) << corrupt_error;
  // Bytes after a member that start no other member.
  EXPECT_NE(error_of(write_file("trailing.jsonl", gzip("{\"a\": \"1\"}\n") + "junk")).find("gzip stream is corrupt"),
            std::string::npos);
  // Only the magic bytes: a gzip header cut short.
  EXPECT_NE(error_of(write_file("magic.jsonl", "\x1f\x8b")).find("ends early"), std::string::npos);
}

// A gzip file inflating to a 300 MiB record (300 one-MiB members, 300 KiB on disk) is read with the bounds of a plain
// file: the record is too long, consumed without being held, and the next one is read.
TEST(Records, AGzipBombIsStreamedWithThePlainFilesBounds) {
  const std::string member = gzip(std::string(std::size_t{1} << 20, 'a'));
  std::string bomb = gzip("{\"a\": \"");
  for (int i = 0; i < 300; ++i) bomb += member;
  const fs::path file = write_file("bomb.jsonl.gz", bomb + gzip("\"}\n{\"a\": \"after\"}\n"));
  RecordReader reader(file);
  Record record;
  try {
    reader.next(record);
    FAIL() << "expected a bad record";
  } catch (const BadRecord& e) {
    EXPECT_NE(std::string(e.what()).find("bomb.jsonl.gz:1: the record is longer than"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(reader.next(record));
  EXPECT_EQ(record.fields["a"], "after");
  EXPECT_EQ(record.line, 2u);
}

// datasets decodes every file as UTF-8 and fails at the first invalid byte; here the record is a BadRecord naming
// the file, the line of the byte and the field, in every format.
TEST(Records, TextThatIsNotUtf8IsABadRecordNamingFileLineAndField) {
  const std::string latin1 = "caf\xe9";
  const auto expect_bad = [](const fs::path& file, const std::string& where, std::size_t good_after) {
    RecordReader reader(file);
    Record record;
    std::size_t good = 0;
    std::string message;
    for (;;) {
      try {
        if (!reader.next(record)) break;
        ++good;
      } catch (const BadRecord& e) {
        message = e.what();
      }
    }
    EXPECT_EQ(message.rfind(file.string() + ":" + where + "not valid UTF-8 (byte 0xe9); ", 0), 0u) << message;
    EXPECT_EQ(good, good_after) << file;  // the reader goes on after it
  };
  expect_bad(write_file("latin1.jsonl", "{\"d\": \"ok\"}\n{\"d\": \"" + latin1 + "\"}\n{\"d\": \"ok\"}\n"), "2: ", 2);
  expect_bad(write_file("latin1.json", "[{\"d\": \"ok\"},\n{\"id\": 1,\n \"d\": \"" + latin1 + "\"}]"), "3: ", 1);
  expect_bad(write_file("latin1.csv", "id,dialogue,summary\n1,ok,ok\n2,\"two\nlines\",\"x\n" + latin1 + "\"\n"),
             "5: field 'summary': ", 1);
  expect_bad(write_file("latin1.csv.gz", gzip("id,dialogue\n1," + latin1 + "\n2,ok\n")), "2: field 'dialogue': ", 1);
  const std::string header_error = error_of(write_file("header.csv", "id," + latin1 + "\n1,2\n"));
  EXPECT_NE(header_error.find("header.csv:1: the header: not valid UTF-8 (byte 0xe9)"), std::string::npos)
      << header_error;
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
