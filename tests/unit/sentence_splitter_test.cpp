// The rule-based sentence splitter behind --rouge_split_sentences (see sentence_splitter.h for the rules).
#include <gtest/gtest.h>

#include "fitsum/eval/sentence_splitter.h"

namespace fitsum::eval {
namespace {

TEST(SentenceSplitter, BreaksAfterSentenceFinalPunctuation) {
  EXPECT_EQ(insert_sentence_newlines("Amanda baked cookies. Jerry will bring them!  Will he? Yes."),
            "Amanda baked cookies.\nJerry will bring them!\nWill he?\nYes.");
  EXPECT_EQ(insert_sentence_newlines("He said \"stop.\" Then he left."), "He said \"stop.\"\nThen he left.");
  EXPECT_EQ(insert_sentence_newlines("Done (finally.) next part"), "Done (finally.)\nnext part");
  EXPECT_EQ(insert_sentence_newlines("\"Stop!\" he said."), "\"Stop!\"\nhe said.");
  EXPECT_EQ(insert_sentence_newlines("one sentence without a stop"), "one sentence without a stop");
  EXPECT_EQ(insert_sentence_newlines(""), "");
}

TEST(SentenceSplitter, KeepsExistingLineBreaks) {
  EXPECT_EQ(insert_sentence_newlines("Hannah: Hey\r\nAmanda: Lemme check. OK\n"),
            "Hannah: Hey\r\nAmanda: Lemme check.\nOK\n");
}

TEST(SentenceSplitter, DoesNotBreakAfterAbbreviationsAndInitials) {
  EXPECT_EQ(insert_sentence_newlines("Mr. Smith met Dr. Jones and J. R. Tolkien."),
            "Mr. Smith met Dr. Jones and J. R. Tolkien.");
  EXPECT_EQ(insert_sentence_newlines("Bring fruit, e.g. apples. Tom agrees."),
            "Bring fruit, e.g. apples.\nTom agrees.");
  EXPECT_EQ(insert_sentence_newlines("Buy milk, eggs etc. and bread."), "Buy milk, eggs etc. and bread.");
  EXPECT_EQ(insert_sentence_newlines("Buy milk, eggs etc. Tom pays."), "Buy milk, eggs etc.\nTom pays.");
  EXPECT_EQ(insert_sentence_newlines("They meet at 5 p.m. tomorrow."), "They meet at 5 p.m. tomorrow.");
  EXPECT_EQ(insert_sentence_newlines("They met at 5 p.m. Anna came too."), "They met at 5 p.m.\nAnna came too.");
}

TEST(SentenceSplitter, HandlesEllipsesAndNumbers) {
  EXPECT_EQ(insert_sentence_newlines("Well... maybe. So... Tom said no."), "Well... maybe.\nSo...\nTom said no.");
  EXPECT_EQ(insert_sentence_newlines("Chapter 5. then more"), "Chapter 5. then more");
  EXPECT_EQ(insert_sentence_newlines("It costs 5. Tom pays."), "It costs 5.\nTom pays.");
}

}  // namespace
}  // namespace fitsum::eval
