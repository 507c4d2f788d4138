// ROUGE tokens exactly as Google's `rouge_score` DefaultTokenizer makes them (tokenize.py):
//   1. lowercase with Python's str.lower() (full Unicode, not just A-Z),
//   2. turn every run of characters outside [a-z0-9] into one space,
//   3. split on spaces,
//   4. with use_stemmer, Porter-stem (NLTK_EXTENSIONS mode) the tokens longer than 3 characters,
//   5. drop empty tokens.
// Non-ASCII letters therefore split words ("café" -> "caf", "Zoë" -> "zo"). Only two code points lowercase to
// ASCII letters and change the tokens: 'İ' (U+0130, -> "i" + U+0307, so "İsmail" -> "i", "smail") and the Kelvin
// sign (U+212A -> "k"); rouge_lowercase_table.inc holds them, generated from Python's str.lower.
//
// Input is UTF-8; a byte that is not part of a valid UTF-8 sequence only separates tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fitsum::eval {

std::vector<std::string> rouge_tokenize(std::string_view text, bool use_stemmer);

}  // namespace fitsum::eval
