// EnumNames: name lookup with its "?" fallback, parse (aliases included), list text.
#include "topologies/enum_names.hpp"

#include <gtest/gtest.h>

namespace hexi {
namespace {

enum class Fruit { kApple, kPear, kPlum, kFig };

constexpr auto kFruits = enum_names<Fruit>({{Fruit::kApple, "apple"},
                                            {Fruit::kPear, "pear"},
                                            {Fruit::kPear, "poire"},  // an alias
                                            {Fruit::kPlum, "plum"}});

TEST(EnumNames, NameIsTheFirstNameOrQuestionMark) {
  static_assert(kFruits.name(Fruit::kApple) == "apple");
  EXPECT_EQ(kFruits.name(Fruit::kPear), "pear");
  EXPECT_EQ(kFruits.name(Fruit::kPlum), "plum");
  EXPECT_EQ(kFruits.name(Fruit::kFig), "?");
}

TEST(EnumNames, ParsesEveryNameAndAliasOnly) {
  static_assert(kFruits.parse("plum") == Fruit::kPlum);
  EXPECT_EQ(kFruits.parse("apple"), Fruit::kApple);
  EXPECT_EQ(kFruits.parse("poire"), Fruit::kPear);
  EXPECT_EQ(kFruits.parse("fig"), std::nullopt);
  EXPECT_EQ(kFruits.parse("Apple"), std::nullopt);
  EXPECT_EQ(kFruits.parse(""), std::nullopt);
}

TEST(EnumNames, ListsTheNamesForErrorMessages) {
  EXPECT_EQ(kFruits.list(), "apple, pear, poire, plum");
  EXPECT_EQ(kFruits.list("\"", " or "), "\"apple\", \"pear\", \"poire\" or \"plum\"");
  EXPECT_EQ(enum_names<Fruit>({{Fruit::kFig, "fig"}}).list("\"", " or "), "\"fig\"");
  EXPECT_EQ(enum_names<Fruit>({{Fruit::kFig, "fig"}, {Fruit::kPlum, "plum"}}).list("\"", " or "),
            "\"fig\" or \"plum\"");
}

}  // namespace
}  // namespace hexi
