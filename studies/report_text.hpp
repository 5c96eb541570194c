#pragma once
// A report's prose kept as data: a Markdown file of named fragments with placeholders
// (scenarios/reproduce/*.md), read here and filled with what the code computed.
//
// The format, exactly:
// - A marker line is a line holding only `<!-- fragment: NAME -->`, NAME made of lowercase
//   letters, digits and . _ -; a fragment runs from the line after its marker to the next
//   marker line or the end of the file. What comes before the first marker is the file's own
//   comment and no fragment. A line starting `<!-- fragment:` that is no well-formed marker,
//   and a name given twice, are errors.
// - A fragment's text is its lines joined by "\n", without the empty lines at its start and
//   end, and without a newline after its last line; everything else is kept byte for byte
//   (a line of spaces is not empty).
// - `{{name}}` (name: lowercase letters, digits, _) is a placeholder; `fill` replaces each with
//   its value, inserted as it is (not scanned again). Every placeholder must be given a value,
//   and every value must have its placeholder.
// Every error names the file and, past loading, the fragment.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

// A placeholder's values: {{"key", value}, ...}.
using Fill = std::vector<std::pair<std::string, std::string>>;

class ReportText {
 public:
  // Reads `relative` (e.g. "scenarios/reproduce/hexiscale.md") under data_root().
  static Result<ReportText> load(const std::string& relative);
  // Parses `text`; `file` names it in errors.
  static Result<ReportText> parse(std::string file, std::string_view text);

  // A fragment without placeholders.
  Result<std::string> fragment(const std::string& name) const { return fill(name, {}); }
  // A fragment with its placeholders filled by `values`.
  Result<std::string> fill(const std::string& name, const Fill& values) const;

  const std::string& file() const { return file_; }
  // The fragments' names, in the file's order.
  std::vector<std::string> names() const;

 private:
  std::string file_;
  std::vector<std::pair<std::string, std::string>> fragments_;  // name, text
};

// Text assembled from a ReportText's fragments and computed pieces (tables, numbers). The first
// error sticks: later calls add nothing and `finish` returns it.
class TextWriter {
 public:
  explicit TextWriter(const ReportText& text) : text_(text) {}
  TextWriter& raw(std::string_view s);
  TextWriter& fragment(const std::string& name) { return fill(name, {}); }
  TextWriter& fill(const std::string& name, const Fill& values);
  // A fragment's text to use elsewhere (a placeholder's value, a figure's caption); "" after
  // an error, which sticks.
  std::string text(const std::string& name, const Fill& values = {});
  const Status& status() const { return status_; }
  Result<std::string> finish() const;

 private:
  const ReportText& text_;
  std::string out_;
  Status status_;
};

}  // namespace studies
}  // namespace hexi
