// The names of an enum's values, written once in a table that both prints a value and parses a name:
//
//   enum class Color { kRed, kBlue };
//   constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kBlue, "blue"}};
//   nameOf(kColorNames, Color::kBlue)   -> "blue"   (a value the table lacks: the fallback, "invalid")
//   valueOf(kColorNames, "red")         -> Color::kRed   (an unknown name: nullopt)
//   choices(kColorNames)                -> "'red', 'blue'"   (for "choose from ..." messages)
//
// Unlike a switch, a table gets no compiler warning for a value it misses: check it next to the table,
//   static_assert(namesEvery(kColorNames, Color::kRed, Color::kBlue));
// (every value from the first to the last has a name; an enum with gaps checks each run).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace hvd {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;
};

template <typename Enum, std::size_t N>
constexpr const char* nameOf(const EnumName<Enum> (&table)[N], Enum value, const char* fallback = "invalid") {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return fallback;
}

// True when every value from first to last (by number) has a name in the table.
template <typename Enum, std::size_t N>
constexpr bool namesEvery(const EnumName<Enum> (&table)[N], Enum first, Enum last) {
  using Number = std::underlying_type_t<Enum>;
  for (auto v = static_cast<Number>(first); v <= static_cast<Number>(last); ++v) {
    bool named = false;
    for (const auto& entry : table) named = named || entry.value == static_cast<Enum>(v);
    if (!named) return false;
  }
  return true;
}

template <typename Enum, std::size_t N>
constexpr std::optional<Enum> valueOf(const EnumName<Enum> (&table)[N], std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
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
