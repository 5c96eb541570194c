// The reports' text files (studies/report_text.hpp): fragments split exactly at their marker
// lines, placeholders filled, and every error naming the file and the fragment.
#include <gtest/gtest.h>

#include "studies/report_text.hpp"

namespace hexi {
inline namespace studies {
namespace {

// What a report's text file looks like: a comment, then fragments.
const char* const kText =
    "<!--\nThe file's comment: {{not_a_placeholder}}, no fragment.\n-->\n"
    "<!-- fragment: head -->\n"
    "# Title\n"
    "\n"
    "`{{command}}`: {{rows}} points{{failed_note}}.\n"
    "\n"
    "<!-- fragment: head.failed -->\n"
    " ({{failed}} failed)\n"
    "<!-- fragment: two-lines_2 -->\n"
    "\n"
    "\n"
    "- a\n"
    "  \n"
    "\n"
    "- b  \n"
    "\n"
    "\n"
    "<!-- fragment: empty -->\n"
    "<!-- fragment: last -->\n"
    "no newline at the end";

ReportText parsed() {
  auto t = ReportText::parse("text.md", kText);
  EXPECT_TRUE(t) << t.error().message;
  return t ? *t : ReportText::parse("none", "").value();
}

TEST(ReproduceText, FragmentsSplitExactlyAtTheirMarkers) {
  const ReportText t = parsed();
  EXPECT_EQ(t.file(), "text.md");
  EXPECT_EQ(t.names(),
            (std::vector<std::string>{"head", "head.failed", "two-lines_2", "empty", "last"}));
  // Empty lines at a fragment's start and end dropped, and the newline of its last line;
  // everything else kept (a leading space, trailing spaces, a line of spaces).
  EXPECT_EQ(*t.fragment("two-lines_2"), "- a\n  \n\n- b  ");
  EXPECT_EQ(*t.fragment("empty"), "");
  EXPECT_EQ(*t.fragment("last"), "no newline at the end");
  EXPECT_EQ(*t.fill("head.failed", {{"failed", "3"}}), " (3 failed)");
}

TEST(ReproduceText, PlaceholdersFilledAsGiven) {
  const ReportText t = parsed();
  // Values are inserted as they are: a value holding "{{x}}" is not scanned again.
  const auto head =
      t.fill("head", {{"command", "hexisim {{x}}"}, {"rows", "12"}, {"failed_note", ""}});
  ASSERT_TRUE(head) << head.error().message;
  EXPECT_EQ(*head, "# Title\n\n`hexisim {{x}}`: 12 points.");

  TextWriter w(t);
  w.raw("\n").fill(
      "head",
      {{"command", "c"}, {"rows", "1"}, {"failed_note", w.text("head.failed", {{"failed", "1"}})}});
  w.raw("\n").fragment("last");
  const auto out = w.finish();
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, "\n# Title\n\n`c`: 1 points (1 failed).\nno newline at the end");
}

// Each error names the file and the fragment, and is returned, not thrown.
TEST(ReproduceText, ErrorsNameTheFileAndTheFragment) {
  const ReportText t = parsed();
  const auto expect_error = [](const auto& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
  };
  expect_error(t.fragment("nope"), "text.md: fragment \"nope\": no such fragment");
  expect_error(t.fill("head", {{"command", "c"}, {"rows", "1"}}),
               "text.md: fragment \"head\": placeholder {{failed_note}} not filled");
  expect_error(t.fill("last", {{"extra", "1"}}),
               "text.md: fragment \"last\": no placeholder {{extra}} to fill");
  expect_error(ReportText::parse("bad.md", "<!-- fragment: a -->\nx {{oops\n"),
               "bad.md: fragment \"a\": a \"{{\" not closed");
  expect_error(ReportText::parse("bad.md", "<!-- fragment: a -->\n{{Not valid}}\n"),
               "bad.md: fragment \"a\": a \"{{\" not closed");
  expect_error(ReportText::parse("bad.md", "<!-- fragment: a -->\n<!-- fragment: a -->\n"),
               "bad.md:2: fragment \"a\" given twice");
  expect_error(ReportText::parse("bad.md", "<!-- fragment: a -->\nx\n<!-- fragment: B -->\n"),
               "bad.md:3: a marker line is");
  expect_error(ReportText::load("scenarios/reproduce/no-such-paper.md"),
               "scenarios/reproduce/no-such-paper.md: cannot open");

  // The writer keeps the first error and adds nothing after it.
  TextWriter w(t);
  w.fragment("last").fragment("gone").fragment("nope too");
  EXPECT_EQ(w.text("last"), "");
  expect_error(w.finish(), "text.md: fragment \"gone\": no such fragment");
}

}  // namespace
}  // namespace studies
}  // namespace hexi
