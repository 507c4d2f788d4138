// Puts each sentence of a summary on its own line, for rougeLsum with --rouge_split_sentences. Hugging Face's
// run_summarization.py does this with nltk.sent_tokenize (the Punkt model); this is a small rule-based stand-in
// for English summaries, not a Punkt reimplementation, so it can disagree with NLTK on unusual text. The rules:
//   * Only the whitespace between two words can become a break; it is replaced by one "\n". Whitespace that
//     already holds a "\n" is left as it is (rougeLsum splits there anyway, as it would after NLTK).
//   * A word ends a sentence when, after dropping closing quotes and brackets ( " ' ) ] } ’ ” ), it ends with
//     '!' or '?', or with '.' and none of these exceptions applies:
//       - a known abbreviation that does not end sentences: titles (Mr. Mrs. Ms. Dr. Prof. Rev. Gen. Col. Capt.
//         Lt. Sgt. Hon. St. Mt. Jr. Sr.), vs. e.g. i.e. cf. approx. dept. est. fig. Inc. Ltd. Co. Corp., and
//         month abbreviations (Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec.); case is ignored;
//       - a single letter (an initial: "J. Smith");
//       - "etc.", an ellipsis ("..") or a dotted abbreviation ("p.m.", "U.S.") not followed by a word that
//         starts with an uppercase letter A-Z;
//       - a number ("5.") followed by a word that starts with a lowercase letter a-z.
// Punkt makes the same kinds of decisions (abbreviation, initial, ellipsis and number checks, followed by a look
// at the next word's case) from statistics learned on a corpus; the lists here are fixed.
#pragma once

#include <string>
#include <string_view>

namespace fitsum::eval {

// Returns `text` with "\n" between its sentences; the words and their order are unchanged.
std::string insert_sentence_newlines(std::string_view text);

}  // namespace fitsum::eval
