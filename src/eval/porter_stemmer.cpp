// Implements include/fitsum/eval/porter_stemmer.h: Porter (1980) step by step, with the departures NLTK makes in
// its default NLTK_EXTENSIONS mode marked "NLTK:". The rule tables keep NLTK's order because the order is part of
// the behaviour: within one step the first rule whose suffix matches decides, and when its condition fails the
// step leaves the word alone instead of trying a shorter suffix ("ization" never falls back to "ation").
#include "fitsum/eval/porter_stemmer.h"
#include "fitsum/util/strings.h"

#include <array>
#include <utility>
#include <vector>

namespace fitsum::eval {

namespace {

bool is_plain_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

// Porter's consonant: not a, e, i, o, u, and not a 'y' that follows a consonant. So 'y' alternates: it is a
// consonant at the start of a word or after a vowel ("toy": t, y) and a vowel after a consonant ("syzygy": s, z, g).
std::vector<bool> consonant_flags(std::string_view word) {
  std::vector<bool> flags(word.size());
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (is_plain_vowel(word[i])) {
      flags[i] = false;
    } else if (word[i] == 'y') {
      flags[i] = (i == 0) || !flags[i - 1];
    } else {
      flags[i] = true;
    }
  }
  return flags;
}

bool is_consonant(std::string_view word, std::size_t i) { return consonant_flags(word.substr(0, i + 1))[i]; }

// The measure m of [C](VC){m}[V]: how many vowel-to-consonant transitions the word has.
int measure(std::string_view stem) {
  const std::vector<bool> consonant = consonant_flags(stem);
  int m = 0;
  for (std::size_t i = 0; i + 1 < stem.size(); ++i) {
    if (!consonant[i] && consonant[i + 1]) {
      ++m;
    }
  }
  return m;
}

bool has_positive_measure(std::string_view stem) { return measure(stem) > 0; }
bool has_measure_above_one(std::string_view stem) { return measure(stem) > 1; }

// *v*: the stem contains a vowel.
bool contains_vowel(std::string_view stem) {
  for (const bool consonant : consonant_flags(stem)) {
    if (!consonant) {
      return true;
    }
  }
  return false;
}

// *d: the word ends with a doubled consonant.
bool ends_double_consonant(std::string_view word) {
  const std::size_t n = word.size();
  return n >= 2 && word[n - 1] == word[n - 2] && is_consonant(word, n - 1);
}

// *o: the word ends consonant-vowel-consonant and the last consonant is not w, x or y.
// NLTK: a two-letter vowel-consonant word also counts, so "used" -> "use" and "owed" -> "owe", and "use" keeps
// its e in step 5a.
bool ends_cvc(std::string_view word) {
  const std::size_t n = word.size();
  const std::vector<bool> consonant = consonant_flags(word);
  if (n >= 3 && consonant[n - 3] && !consonant[n - 2] && consonant[n - 1] && word[n - 1] != 'w' && word[n - 1] != 'x' &&
      word[n - 1] != 'y') {
    return true;
  }
  return n == 2 && !consonant[0] && consonant[1];
}

using util::ends_with;

std::string_view without_suffix(std::string_view word, std::string_view suffix) {
  return word.substr(0, word.size() - suffix.size());
}

using StemCondition = bool (*)(std::string_view stem);

struct SuffixRule {
  std::string_view suffix;
  std::string_view replacement;
  StemCondition condition;  // on the word without the suffix; nullptr: always
};

// The first rule whose suffix matches decides; if its condition fails, the word stays as it is.
template <std::size_t N>
std::string apply_first_matching_rule(const std::string& word, const std::array<SuffixRule, N>& rules) {
  for (const SuffixRule& rule : rules) {
    if (!ends_with(word, rule.suffix)) {
      continue;
    }
    const std::string_view stem = without_suffix(word, rule.suffix);
    if (rule.condition != nullptr && !rule.condition(stem)) {
      return word;
    }
    return std::string(stem) + std::string(rule.replacement);
  }
  return word;
}

// Step 1a: plurals. NLTK: a four-letter "-ies" word keeps its e ("dies" -> "die", "ties" -> "tie").
std::string step1a(const std::string& word) {
  if (word.size() == 4 && ends_with(word, "ies")) {
    return std::string(without_suffix(word, "ies")) + "ie";
  }
  static constexpr std::array<SuffixRule, 4> kRules{{
      {"sses", "ss", nullptr},
      {"ies", "i", nullptr},
      {"ss", "ss", nullptr},
      {"s", "", nullptr},
  }};
  return apply_first_matching_rule(word, kRules);
}

// Step 1b: -eed, -ed, -ing, then repairs of the stem that -ed/-ing left behind.
std::string step1b(const std::string& word) {
  // NLTK: "-ied" becomes "-ie" in four-letter words and "-i" otherwise ("died" -> "die", "spied" -> "spi"), and
  // nothing else happens in this step.
  if (ends_with(word, "ied")) {
    return std::string(without_suffix(word, "ied")) + (word.size() == 4 ? "ie" : "i");
  }
  if (ends_with(word, "eed")) {
    const std::string_view stem = without_suffix(word, "eed");
    return has_positive_measure(stem) ? std::string(stem) + "ee" : word;
  }
  std::string stem;
  if (ends_with(word, "ed") && contains_vowel(without_suffix(word, "ed"))) {
    stem = std::string(without_suffix(word, "ed"));
  } else if (ends_with(word, "ing") && contains_vowel(without_suffix(word, "ing"))) {
    stem = std::string(without_suffix(word, "ing"));
  } else {
    return word;
  }
  // "conflat(ed)" -> "conflate", "troubl(ed)" -> "trouble", "siz(ed)" -> "size".
  if (ends_with(stem, "at") || ends_with(stem, "bl") || ends_with(stem, "iz")) {
    return stem + "e";
  }
  // "hopp(ing)" -> "hop", but "fall(ing)", "hiss(ing)", "fizz(ed)" keep the pair.
  if (ends_double_consonant(stem)) {
    const char last = stem.back();
    if (last != 'l' && last != 's' && last != 'z') {
      stem.pop_back();
    }
    return stem;
  }
  // "fil(ing)" -> "file".
  if (measure(stem) == 1 && ends_cvc(stem)) {
    return stem + "e";
  }
  return stem;
}

// Step 1c. NLTK: y -> i only after a consonant that is not the whole stem ("happy" -> "happi", "enjoy" and "by"
// stay), where the paper asks for any vowel in the stem.
std::string step1c(const std::string& word) {
  if (!ends_with(word, "y")) {
    return word;
  }
  const std::string_view stem = without_suffix(word, "y");
  if (stem.size() > 1 && is_consonant(stem, stem.size() - 1)) {
    return std::string(stem) + "i";
  }
  return word;
}

// NLTK's "logi" -> "log" keeps the 'l' with the stem when measuring, so that short stems like "geo" and "theo"
// are treated like "archaeo" and "philo".
bool logi_stem_condition(std::string_view stem_without_logi) {
  return has_positive_measure(std::string(stem_without_logi) + "l");
}

// Step 2: double suffixes to single ones, when the stem has m > 0.
std::string step2(const std::string& word) {
  // NLTK: "-alli" is tried first and, if it applies, step 2 runs again on the result ("-alli" -> "-al" may then
  // become something shorter).
  if (ends_with(word, "alli") && has_positive_measure(without_suffix(word, "alli"))) {
    return step2(std::string(without_suffix(word, "alli")) + "al");
  }
  static constexpr std::array<SuffixRule, 22> kRules{{
      {"ational", "ate", has_positive_measure},
      {"tional", "tion", has_positive_measure},
      {"enci", "ence", has_positive_measure},
      {"anci", "ance", has_positive_measure},
      {"izer", "ize", has_positive_measure},
      {"bli", "ble", has_positive_measure},  // the paper has "abli" -> "able"; NLTK and Porter's own code use "bli"
      {"alli", "al", has_positive_measure},
      {"entli", "ent", has_positive_measure},
      {"eli", "e", has_positive_measure},
      {"ousli", "ous", has_positive_measure},
      {"ization", "ize", has_positive_measure},
      {"ation", "ate", has_positive_measure},
      {"ator", "ate", has_positive_measure},
      {"alism", "al", has_positive_measure},
      {"iveness", "ive", has_positive_measure},
      {"fulness", "ful", has_positive_measure},
      {"ousness", "ous", has_positive_measure},
      {"aliti", "al", has_positive_measure},
      {"iviti", "ive", has_positive_measure},
      {"biliti", "ble", has_positive_measure},
      {"fulli", "ful", has_positive_measure},  // NLTK
      {"logi", "log", logi_stem_condition},    // NLTK
  }};
  return apply_first_matching_rule(word, kRules);
}

// Step 3: -ic-, -ful, -ness and friends, when the stem has m > 0.
std::string step3(const std::string& word) {
  static constexpr std::array<SuffixRule, 7> kRules{{
      {"icate", "ic", has_positive_measure},
      {"ative", "", has_positive_measure},
      {"alize", "al", has_positive_measure},
      {"iciti", "ic", has_positive_measure},
      {"ical", "ic", has_positive_measure},
      {"ful", "", has_positive_measure},
      {"ness", "", has_positive_measure},
  }};
  return apply_first_matching_rule(word, kRules);
}

// (m > 1 and (*s or *t)) ION ->
bool ion_stem_condition(std::string_view stem) {
  return measure(stem) > 1 && (stem.back() == 's' || stem.back() == 't');
}

// Step 4: drop -ant, -ence, ... when the stem has m > 1.
std::string step4(const std::string& word) {
  static constexpr std::array<SuffixRule, 19> kRules{{
      {"al", "", has_measure_above_one},   {"ance", "", has_measure_above_one}, {"ence", "", has_measure_above_one},
      {"er", "", has_measure_above_one},   {"ic", "", has_measure_above_one},   {"able", "", has_measure_above_one},
      {"ible", "", has_measure_above_one}, {"ant", "", has_measure_above_one},  {"ement", "", has_measure_above_one},
      {"ment", "", has_measure_above_one}, {"ent", "", has_measure_above_one},  {"ion", "", ion_stem_condition},
      {"ou", "", has_measure_above_one},   {"ism", "", has_measure_above_one},  {"ate", "", has_measure_above_one},
      {"iti", "", has_measure_above_one},  {"ous", "", has_measure_above_one},  {"ive", "", has_measure_above_one},
      {"ize", "", has_measure_above_one},
  }};
  return apply_first_matching_rule(word, kRules);
}

// Step 5a: a final e goes when m > 1, or when m = 1 and the stem does not end cvc ("probate" -> "probat",
// "cease" -> "ceas", "rate" stays). Unlike the other steps both conditions are tried.
std::string step5a(const std::string& word) {
  if (!ends_with(word, "e")) {
    return word;
  }
  const std::string_view stem = without_suffix(word, "e");
  const int m = measure(stem);
  if (m > 1 || (m == 1 && !ends_cvc(stem))) {
    return std::string(stem);
  }
  return word;
}

// Step 5b: "-ll" -> "-l" when the word without its last letter has m > 1 ("controll" -> "control", "roll" stays).
std::string step5b(const std::string& word) {
  if (ends_with(word, "ll") && measure(std::string_view(word).substr(0, word.size() - 1)) > 1) {
    return word.substr(0, word.size() - 1);
  }
  return word;
}

// NLTK's irregular forms, looked up before any rule: each form maps to its paradigm.
const std::string* irregular_stem(std::string_view word) {
  static const std::array<std::pair<std::string_view, std::string>, 16> kForms{{
      {"sky", "sky"},
      {"skies", "sky"},
      {"dying", "die"},
      {"lying", "lie"},
      {"tying", "tie"},
      {"news", "news"},
      {"innings", "inning"},
      {"inning", "inning"},
      {"outings", "outing"},
      {"outing", "outing"},
      {"cannings", "canning"},
      {"canning", "canning"},
      {"howe", "howe"},
      {"proceed", "proceed"},
      {"exceed", "exceed"},
      {"succeed", "succeed"},
  }};
  for (const auto& [form, stem] : kForms) {
    if (word == form) {
      return &stem;
    }
  }
  return nullptr;
}

}  // namespace

std::string porter_stem(std::string_view word) {
  if (const std::string* irregular = irregular_stem(word)) {
    return *irregular;
  }
  // NLTK: words of one or two letters are left alone (the paper does not say).
  if (word.size() <= 2) {
    return std::string(word);
  }
  std::string stem(word);
  stem = step1a(stem);
  stem = step1b(stem);
  stem = step1c(stem);
  stem = step2(stem);
  stem = step3(stem);
  stem = step4(stem);
  stem = step5a(stem);
  stem = step5b(stem);
  return stem;
}

}  // namespace fitsum::eval
