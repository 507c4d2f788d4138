# Sanitizer and fuzzing builds (make test-sanitize, make fuzz; both use build-sanitize/ with clang).
#   FITSUM_SANITIZE  AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer, part of ASan on Linux) on
#                    fitsum's own code: the library, the command and the tests. LibTorch and OpenBLAS stay
#                    uninstrumented (Debian's builds); sanitizers/*.supp name what of theirs is reported and why.
#   FITSUM_FUZZ      the libFuzzer targets in fuzz/ (needs clang; the library gets coverage instrumentation).
# The SentencePiece shim stays uninstrumented: under a sanitizer it is loaded into a link namespace of its own
# (src/tokenizer/sentencepiece.cpp), where the sanitizer runtime of the main program is not visible.
option(FITSUM_SANITIZE "Build with ASan + UBSan + LSan" OFF)
option(FITSUM_FUZZ "Build the libFuzzer targets (clang; implies FITSUM_SANITIZE)" OFF)

if(FITSUM_FUZZ)
  set(FITSUM_SANITIZE ON)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FITSUM_FUZZ needs clang (libFuzzer): configure with CXX=clang++-14")
  endif()
endif()

if(FITSUM_SANITIZE)
  set(FITSUM_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  set(fitsum_compile_flags ${FITSUM_SANITIZE_FLAGS})
  if(FITSUM_FUZZ)
    list(APPEND fitsum_compile_flags -fsanitize=fuzzer-no-link)
  endif()
  # Applies to the targets defined after this file is included (everything but the SentencePiece shim).
  add_compile_options(${fitsum_compile_flags})
  add_link_options(${FITSUM_SANITIZE_FLAGS})
endif()
