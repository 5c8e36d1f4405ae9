# Writes a C++ source file that defines one asset (a text file) as a string constant. Run at build time
# by the custom commands of rendezvous/CMakeLists.txt (hvd_embed_asset), as
#   cmake -DINPUT=<file> -DOUTPUT=<.cc> -DSYMBOL=<name> -DHEADER=<header> -DNAMESPACE=<ns> -P embed_asset.cmake
# The constant is `const char SYMBOL[]` in NAMESPACE, declared in HEADER (included, so that a declaration
# and its definition cannot disagree): the file's bytes without its final newline, as a raw string literal.
# The build fails, naming the file, when the file holds the literal's closing delimiter.

foreach(var INPUT OUTPUT SYMBOL HEADER NAMESPACE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "embed_asset.cmake: -D${var}=... is missing")
  endif()
endforeach()

file(READ "${INPUT}" content)
# Text files end with a newline; the page puts its own line breaks around each asset.
string(REGEX REPLACE "\n$" "" content "${content}")

set(delimiter "hvd_asset")
string(FIND "${content}" ")${delimiter}\"" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains ')${delimiter}\"', which would end the raw string literal that "
                      "embeds it (at byte ${at}); change the delimiter in ${CMAKE_CURRENT_LIST_FILE}")
endif()

file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT} by ${CMAKE_CURRENT_LIST_FILE}: edit that file, not this one.\n"
  "#include \"${HEADER}\"\n"
  "\n"
  "namespace ${NAMESPACE} {\n"
  "\n"
  "const char ${SYMBOL}[] = R\"${delimiter}(${content})${delimiter}\";\n"
  "\n"
  "}  // namespace ${NAMESPACE}\n")
