// The Porter stemmer exactly as NLTK's `PorterStemmer().stem(word)` behaves in its default NLTK_EXTENSIONS mode
// (NLTK 3.8), which is what Google's `rouge_score` calls with use_stemmer=True. Only that mode is provided: the
// published 1980 algorithm and Martin Porter's frozen variant stem some words differently (NLTK gives
// "dies" -> "die" and "dying" -> "die" where Martin Porter's version gives "di" and "dy"), so ROUGE computed with
// them would not match the scores people report.
//
// Input is a lowercase ASCII word (ROUGE tokens are [a-z0-9]+); any other byte counts as a consonant, as NLTK
// treats every character that is not a vowel. The stemmer never fails and never empties a non-empty word.
#pragma once

#include <string>
#include <string_view>

namespace fitsum::eval {

// Stems one lowercase word. Words of one or two characters come back unchanged; a few irregular forms
// ("dying" -> "die", "skies" -> "sky", "news", "proceed", ...) are looked up before the suffix rules, as NLTK does.
std::string porter_stem(std::string_view word);

}  // namespace fitsum::eval
