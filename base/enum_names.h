// The names of an enum's values, written once in a table that both prints a value and parses a name:
//
//   enum class Color { kRed, kBlue };
//   constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kBlue, "blue"}};
//   nameOf(kColorNames, Color::kBlue)   -> "blue"   (a value the table lacks: the fallback, "invalid")
//   valueOf(kColorNames, "red")         -> Color::kRed   (an unknown name: nullopt)
//   choices(kColorNames)                -> "'red', 'blue'"   (for "choose from ..." messages)
//
// Unlike a switch, a table gets no compiler warning for a value it misses: where the enum's values are
// 0..last, pin the table's size next to it (static_assert(std::size(kColorNames) == size_t(Color::kBlue) +
// 1)).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hvd {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;
};

template <typename Enum, size_t N>
constexpr const char* nameOf(const EnumName<Enum> (&table)[N], Enum value, const char* fallback = "invalid") {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return fallback;
}

template <typename Enum, size_t N>
constexpr std::optional<Enum> valueOf(const EnumName<Enum> (&table)[N], std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

template <typename Enum, size_t N>
std::string choices(const EnumName<Enum> (&table)[N]) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += ", ";
    out += "'";
    out += entry.name;
    out += "'";
  }
  return out;
}

}  // namespace hvd
